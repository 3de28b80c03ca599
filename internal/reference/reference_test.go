package reference

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// Args walks embedded structs inline and nested ones as dotted paths, skips
// json:"-" fields, takes defaults from the defaulted value and keeps table
// cells intact.
func TestArgs(t *testing.T) {
	root, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	threshold := int32(7)
	defaulted := map[string]any{"threshold": threshold, "lease": map[string]any{"name": "hb"}, "names": []string{"a"}}
	got, err := Args("example.com/m", root, filepath.Join(root, "args"), "Args", defaulted)
	if err != nil {
		t.Fatal(err)
	}
	want := "| arg | type | default | meaning |\n|---|---|---|---|\n" +
		"| `threshold` | integer | `7` | Threshold is shared by several plugins. |\n" +
		"| `lease` | object | none | Lease names a Lease. |\n" +
		"| `lease.name` | string | `hb` | Name of the object. |\n" +
		"| `names` | list of string | `[\"a\"]` | Names are \\| piped. |\n" +
		"| `weight` | number | none | Weight has no default. |\n"
	if got != want {
		t.Fatalf("Args =\n%s\nwant\n%s", got, want)
	}
	if _, err := Args("example.com/m", root, filepath.Join(root, "args"), "Missing", defaulted); err == nil {
		t.Fatal("a missing type gave no error")
	}
}

func TestFlags(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.Duration("wait", 0, "How long | to wait.")
	fs.String("name", "n", "Its name.")
	fs.String("hidden", "", "")
	_ = fs.MarkHidden("hidden")
	got := Flags(fs)
	for _, want := range []string{"| `--name` | string | `n` | Its name. |", "| `--wait` | duration | `0s` | How long \\| to wait. |"} {
		if !strings.Contains(got, want) {
			t.Errorf("Flags lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "hidden") {
		t.Errorf("Flags lists a hidden flag:\n%s", got)
	}
}
