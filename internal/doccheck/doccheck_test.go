package doccheck

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/gleaner-dev/gleaner/internal/cli"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// guides are the documents a user reads; docs/reference/ is written from the
// code (make docs) and checked where it is made.
func guides(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(root, "README.md"))
	out := map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		out[rel] = string(data)
	}
	return out
}

// snippet is a piece of code in a document: one inline code span, or one
// command of a fenced block (with its continuation lines).
type snippet struct {
	file, text string
}

var inlineCode = regexp.MustCompile("`([^`]+)`")

func snippets(file, doc string) []snippet {
	var out []snippet
	var prose strings.Builder
	fenced := false
	var command strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			prose.WriteString(line + "\n")
			continue
		}
		if strings.HasSuffix(line, "\\") {
			command.WriteString(strings.TrimSuffix(line, "\\") + " ")
			continue
		}
		command.WriteString(line)
		out = append(out, snippet{file, command.String()})
		command.Reset()
	}
	for _, m := range inlineCode.FindAllStringSubmatch(prose.String(), -1) {
		out = append(out, snippet{file, strings.ReplaceAll(m[1], "\n", " ")})
	}
	return out
}

// words splits a command line into its words, up to a comment or the end
// of the command (a pipe, ;, &&).
func words(s string) []string {
	var out []string
	for _, w := range strings.Fields(s) {
		if strings.HasPrefix(w, "#") || w == "|" || w == "&&" || w == ";" {
			break
		}
		stop := strings.HasSuffix(w, ";")
		if t := strings.TrimRight(w, ";,.)"); t != "" {
			w = t // a word, not the punctuation after it ("..." stays)
		}
		out = append(out, w)
		if stop {
			break
		}
	}
	return out
}

var flagWord = regexp.MustCompile(`^--?[a-zA-Z][a-zA-Z0-9-]*`)

// checkKubectlGleaner checks one kubectl gleaner command: its subcommand
// exists and takes every flag given. It returns the flags it checked.
func checkKubectlGleaner(t *testing.T, root *cobra.Command, where string, args []string) {
	t.Helper()
	cmd := root
	for i, a := range args {
		if a == "--" {
			return // the job's own command follows
		}
		if !strings.HasPrefix(a, "-") {
			if cmd == root && i == firstPositional(args) {
				sub, _, err := root.Find([]string{a})
				if err != nil || sub == root {
					t.Errorf("%s: `kubectl gleaner %s`: there is no subcommand %q", where, strings.Join(args, " "), a)
					return
				}
				cmd = sub
			}
			continue
		}
		name := flagWord.FindString(a)
		if name == "" || name == "-" {
			continue
		}
		var found bool
		if strings.HasPrefix(name, "--") {
			n := strings.TrimPrefix(name, "--")
			found = cmd.Flags().Lookup(n) != nil || cmd.InheritedFlags().Lookup(n) != nil || cmd.PersistentFlags().Lookup(n) != nil
		} else {
			n := strings.TrimPrefix(name, "-")
			found = len(n) == 1 && (cmd.Flags().ShorthandLookup(n) != nil || cmd.InheritedFlags().ShorthandLookup(n) != nil)
		}
		if !found {
			t.Errorf("%s: `kubectl gleaner %s`: %s takes no flag %s", where, strings.Join(args, " "), cmd.CommandPath(), name)
		}
	}
}

// firstPositional is the index of the first word that is neither a flag nor
// a flag's value (kubectl gleaner -n research status: 2).
func firstPositional(args []string) int {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			return i
		}
		if !strings.Contains(a, "=") && (a == "-n" || a == "--namespace" || a == "--context" || a == "--kubeconfig" || a == "--as") {
			i++ // its value
		}
	}
	return -1
}

var stringLiteral = regexp.MustCompile("\"([^\"\\\\\\n]*)\"|`([^`]*)`")

// codeLiterals are the string literals of the Go code that ships (tests
// left out): flag names, annotation keys.
func codeLiterals(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, dir := range []string{"cmd", "internal", "pkg", "hack"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range stringLiteral.FindAllStringSubmatch(string(data), -1) {
				out[m[1]+m[2]] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// controllerFlags are gleaner-controller's flags, from docs/reference (which
// TestReference in cmd/gleaner-controller writes from its FlagSet).
func controllerFlags(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "docs", "reference", "gleaner-controller.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)`").FindAllStringSubmatch(string(data), -1) {
		out[m[1]] = true
	}
	if len(out) < 50 {
		t.Fatalf("docs/reference/gleaner-controller.md lists %d flags: is its table's form changed?", len(out))
	}
	return out
}

// pythonFlags are examples/python/train.py's options.
func pythonFlags(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "examples", "python", "train.py"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`add_argument\("--([a-z0-9-]+)"`).FindAllStringSubmatch(string(data), -1) {
		out[m[1]] = true
	}
	return out
}

// otherPrograms are the commands whose flags are not Gleaner's to check.
var otherPrograms = map[string]bool{
	"kubectl": true, "helm": true, "argo": true, "make": true, "go": true, "git": true, "kustomize": true,
	"sha256sum": true, "curl": true, "docker": true, "export": true, "CI=true": true, "PATH": true, "torchrun": true,
}

// otherFlags are flags the guides name in prose that belong to other
// programs, with whose they are.
var otherFlags = map[string]string{
	"server-side": "kubectl apply", "field-selector": "kubectl get", "set": "helm", "reuse-values": "helm",
	"create-namespace": "helm", "skip-crds": "helm", "manifest": "kubectl krew install",
	"from": "argo submit", "max-restarts": "torchrun", "enable-sleep-mode": "vllm serve", "set-json": "helm",
	"oidc-issuer-url": "kube-apiserver", "reset-then-reuse-values": "helm", "runtime-config": "kube-apiserver",
}

// TestGuidesNameWhatExists: every kubectl gleaner subcommand and flag the
// guides show exists with that name; every other flag they name is one of
// Gleaner's programs' (gleaner-controller's, gleaner's, the trainers') or
// another program's they say; every gleaner.dev/ label, annotation and
// condition they name is one the code reads or writes.
func TestGuidesNameWhatExists(t *testing.T) {
	root := cli.NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}}, time.Now)
	literals := codeLiterals(t)
	controller := controllerFlags(t)
	python := pythonFlags(t)
	gleanerCommands := 0
	for file, doc := range guides(t) {
		for _, s := range snippets(file, doc) {
			w := words(s.text)
			for i := 0; i < len(w); i++ {
				program := filepath.Base(w[i])
				switch {
				case program == "kubectl" && i+1 < len(w) && w[i+1] == "gleaner":
					checkKubectlGleaner(t, root, file, w[i+2:])
					gleanerCommands++
					i = len(w)
				case program == "kubectl-gleaner":
					checkKubectlGleaner(t, root, file, w[i+1:])
					gleanerCommands++
					i = len(w)
				case program == "gleaner-controller":
					for _, a := range w[i+1:] {
						if n := strings.TrimPrefix(flagWord.FindString(a), "--"); strings.HasPrefix(a, "--") && !controller[n] {
							t.Errorf("%s: `%s`: gleaner-controller has no flag --%s", file, s.text, n)
						}
					}
					i = len(w)
				case i == 0 && otherPrograms[program]:
					i = len(w)
				case strings.HasPrefix(w[i], "--"):
					n := strings.TrimPrefix(flagWord.FindString(w[i]), "--")
					if n == "" || controller[n] || python[n] || literals[n] || otherFlags[n] != "" || root.PersistentFlags().Lookup(n) != nil {
						continue
					}
					t.Errorf("%s: `%s`: no program of Gleaner's has a flag --%s (add it to otherFlags if it is another program's)", file, s.text, n)
				}
			}
		}
	}
	if gleanerCommands < 20 {
		t.Errorf("found %d kubectl gleaner commands in the guides: is the search broken?", gleanerCommands)
	}

	key := regexp.MustCompile(`gleaner\.dev/[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9]`)
	for file, doc := range guides(t) {
		for _, k := range key.FindAllString(doc, -1) {
			if !literals[k] && !strings.HasPrefix(k, "gleaner.dev/v1") {
				t.Errorf("%s names %s, which no code reads or writes", file, k)
			}
		}
	}
}

var countWords = map[string]int{"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}

// TestInstallCountsThePoliciesThatShip: docs/install.md says how many
// admission policies the install adds; the chart's rendering holds that many.
func TestInstallCountsThePoliciesThatShip(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)adds\s+(\w+)\s+ValidatingAdmissionPolicies`).FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/install.md no longer says how many ValidatingAdmissionPolicies the install adds")
	}
	rendered, err := os.ReadFile(filepath.Join(root, "manifests", "base", "admission", "policies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	shipped := len(regexp.MustCompile(`(?m)^kind: ValidatingAdmissionPolicy$`).FindAll(rendered, -1))
	if said := countWords[string(m[1])]; said != shipped {
		t.Errorf("docs/install.md says the install adds %s ValidatingAdmissionPolicies; manifests/base/admission/policies.yaml has %d", m[1], shipped)
	}
	section := doc[bytes.Index(doc, []byte("### Admission policies"))+1:]
	if end := bytes.Index(section, []byte("\n#")); end >= 0 {
		section = section[:end]
	}
	table := regexp.MustCompile("(?m)^\\| `gleaner-[a-z-]+` \\|").FindAll(section, -1)
	if len(table) != shipped {
		t.Errorf("docs/install.md's table of admission policies has %d rows; %d ship", len(table), shipped)
	}
}
