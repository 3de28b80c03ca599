// Package release makes a release's artefacts from the built images: the
// chart packaged with its images pinned by digest, the same as kubectl
// manifests, and checksums.
package release

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"sigs.k8s.io/yaml"

	"github.com/gleaner-dev/gleaner/internal/chart"
)

// Version is a release version: vMAJOR.MINOR.PATCH with an optional
// pre-release.
var Version = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// Components are the chart's components with their own image: values key to
// image name. Component KEY runs as the Deployment gleaner-KEY.
var Components = map[string]string{"scheduler": "gleaner-scheduler", "controller": "gleaner-controller", "console": "kubectl-gleaner"}

// PinValues rewrites the chart's values.yaml text so that registry, tag and
// each component's digest are set, keeping its comments. digests maps image
// names to sha256:... digests. It fails unless every line it sets is found
// once, so a reshaped values.yaml cannot silently ship unpinned.
func PinValues(values []byte, registry, tag string, digests map[string]string) ([]byte, error) {
	s := string(values)
	set := func(pattern, replacement, what string) error {
		re := regexp.MustCompile(pattern)
		if n := len(re.FindAllStringIndex(s, -1)); n != 1 {
			return fmt.Errorf("values.yaml: %s found %d times, want once", what, n)
		}
		s = re.ReplaceAllLiteralString(s, replacement)
		return nil
	}
	if err := set(`(?m)^  registry: .*$`, "  registry: "+registry, "image.registry"); err != nil {
		return nil, err
	}
	if err := set(`(?m)^  tag: .*$`, `  tag: "`+tag+`"`, "image.tag"); err != nil {
		return nil, err
	}
	for _, key := range slices.Sorted(maps.Keys(Components)) {
		name := Components[key]
		d, ok := digests[name]
		if !ok {
			return nil, fmt.Errorf("no digest for image %s", name)
		}
		// The component's image block: name, then (comments and) digest.
		pattern := `(?m)^(` + key + `:\n  image:\n    name: ` + regexp.QuoteMeta(name) + `\n(?:    #.*\n)*)    digest: .*$`
		re := regexp.MustCompile(pattern)
		if n := len(re.FindAllStringIndex(s, -1)); n != 1 {
			return nil, fmt.Errorf("values.yaml: %s.image.digest found %d times, want once", key, n)
		}
		s = re.ReplaceAllString(s, "${1}    digest: "+d)
	}
	return []byte(s), nil
}

// PackageChart writes the chart in chartDir as outDir/gleaner-X.Y.Z.tgz with
// version (vX.Y.Z) as its version and appVersion, and its images pinned.
func PackageChart(chartDir, outDir, version, registry string, digests map[string]string) (string, error) {
	if !Version.MatchString(version) {
		return "", fmt.Errorf("version %q: want vMAJOR.MINOR.PATCH", version)
	}
	ch, err := chart.LoadChart(chartDir)
	if err != nil {
		return "", err
	}
	ch.Metadata.Version = strings.TrimPrefix(version, "v")
	ch.Metadata.AppVersion = version
	found := false
	for _, f := range ch.Raw {
		if f.Name != chartutil.ValuesfileName {
			continue
		}
		if f.Data, err = PinValues(f.Data, registry, version, digests); err != nil {
			return "", err
		}
		found = true
	}
	if !found {
		return "", fmt.Errorf("chart %s has no %s", chartDir, chartutil.ValuesfileName)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", err
	}
	return chartutil.Save(ch, outDir)
}

// Manifests renders the packaged chart with its own (pinned) values into
// what kubectl applies: shared.yaml (CRDs, PriorityClasses) and install.yaml
// (the Namespace and Gleaner itself).
func Manifests(chartPath string) (shared, install []byte, err error) {
	c, err := chart.RenderChart(chartPath, nil, chart.Namespace)
	if err != nil {
		return nil, nil, err
	}
	shared, own := c.Split()
	return shared, append([]byte("---\n"+chart.NamespaceYAML), own...), nil
}

// Checksums writes dir/checksums.txt: the SHA-256 of each file, as
// sha256sum prints them (`sha256sum -c checksums.txt` checks them).
func Checksums(dir string, files []string) error {
	var b strings.Builder
	for _, name := range slices.Sorted(slices.Values(files)) {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(h.Sum(nil)), name)
	}
	return os.WriteFile(filepath.Join(dir, "checksums.txt"), []byte(b.String()), 0o644)
}

// Build compiles the commands named (directories under cmd/) for goos/goarch
// into dir, as every release binary and image is built: static
// (CGO_ENABLED=0), without local paths (-trimpath), with ldflags.
func Build(dir, goos, goarch, ldflags string, commands ...string) error {
	pkgs := make([]string, len(commands))
	for i, c := range commands {
		pkgs[i] = "./cmd/" + c
	}
	return goBuild(".", dir, goos, goarch, []string{"-ldflags", ldflags}, pkgs, strings.Join(commands, ", "))
}

// kubeReplace is the k8s.io/kubernetes version a minor's module builds with.
var kubeReplace = regexp.MustCompile(`(?m)^\s*k8s\.io/kubernetes => k8s\.io/kubernetes (v1\.([0-9]+)\.[0-9]+)\s*$`)

// BuildMinor builds for an older Kubernetes minor (1.35): pkgs (import
// paths; the module's tools when none) from that minor's module in
// hack/minors, with its build tag (kube1.35) and its Kubernetes version
// stamped over the one ldflags stamps. `make minors` and the minors' images
// both build this way.
func BuildMinor(dir, goos, goarch, ldflags, minor string, pkgs ...string) error {
	mod := filepath.Join("hack", "minors", minor)
	gomod, err := os.ReadFile(filepath.Join(mod, "go.mod"))
	if err != nil {
		return fmt.Errorf("Kubernetes %s: %w", minor, err)
	}
	m := kubeReplace.FindSubmatch(gomod)
	if m == nil {
		return fmt.Errorf("%s/go.mod replaces no k8s.io/kubernetes with a version", mod)
	}
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		ldflags += fmt.Sprintf(" -X %[1]s.gitVersion=%[2]s -X %[1]s.gitMinor=%[3]s", pkg, m[1], m[2])
	}
	out, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	what := "Kubernetes " + string(m[1]) + "'s tools"
	if len(pkgs) == 0 {
		pkgs = []string{"tool"}
	} else {
		what = strings.Join(pkgs, ", ") + " for Kubernetes " + string(m[1])
	}
	return goBuild(mod, out, goos, goarch, []string{"-tags", "kube" + minor, "-ldflags", ldflags}, pkgs, what)
}

// goBuild runs go build in module directory mod with flags, writing pkgs'
// binaries into dir; what names them in errors.
func goBuild(mod, dir, goos, goarch string, flags, pkgs []string, what string) error {
	args := append(append([]string{"build", "-trimpath"}, flags...), "-o", dir+string(filepath.Separator))
	cmd := exec.Command("go", append(args, pkgs...)...)
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building %s for %s/%s: %w", what, goos, goarch, err)
	}
	return nil
}

// KrewArchive is one platform's archive of the kubectl plugin.
type KrewArchive struct {
	OS, Arch string
	// URI is where the release publishes it; SHA256 its checksum.
	URI, SHA256 string
}

// KrewManifest is the krew plugin manifest of kubectl gleaner at version
// (vX.Y.Z), for the archives given: `kubectl krew install --manifest=gleaner.yaml`
// installs it, and a krew index takes it as it is.
func KrewManifest(version string, archives []KrewArchive) ([]byte, error) {
	if !Version.MatchString(version) {
		return nil, fmt.Errorf("version %q: want vMAJOR.MINOR.PATCH", version)
	}
	type platform struct {
		Selector map[string]map[string]string `json:"selector"`
		URI      string                       `json:"uri"`
		SHA256   string                       `json:"sha256"`
		Bin      string                       `json:"bin"`
	}
	var platforms []platform
	for _, a := range archives {
		if a.OS == "" || a.Arch == "" || a.URI == "" || len(a.SHA256) != 64 {
			return nil, fmt.Errorf("archive %+v: want an OS, an arch, a URI and a SHA-256", a)
		}
		platforms = append(platforms, platform{
			Selector: map[string]map[string]string{"matchLabels": {"os": a.OS, "arch": a.Arch}},
			URI:      a.URI, SHA256: a.SHA256, Bin: "kubectl-gleaner",
		})
	}
	if len(platforms) == 0 {
		return nil, errors.New("no archive for the krew manifest")
	}
	manifest := map[string]any{
		"apiVersion": "krew.googlecontainertools.github.com/v1alpha2",
		"kind":       "Plugin",
		"metadata":   map[string]any{"name": "gleaner"},
		"spec": map[string]any{
			"version":          version,
			"homepage":         "https://github.com/gleaner-dev/gleaner",
			"shortDescription": "Follow best-effort jobs on the GPUs Gleaner lends",
			"description": "kubectl gleaner shows the pool of inference GPUs Gleaner lends, your best-effort\n" +
				"jobs in its words (waiting, running on lent GPUs, checkpointing before a reclaim,\n" +
				"evicted and waiting to resume, done) and each job's timeline.\n",
			"platforms": platforms,
		},
	}
	return yaml.Marshal(manifest)
}
