// Package torchtest finds a Python with PyTorch for the tests that run the
// Python trainer in examples/python.
package torchtest

import (
	"os"
	"os/exec"
	"testing"
)

// Python returns a Python that imports torch: $PYTHON, else /usr/bin/python3
// (Debian's python3-torch), else python3 on PATH. Without one the test is
// skipped, saying how to get it, unless GLEANER_REQUIRE_TORCH is set (as make
// test sets it, after hack/ensure-torch.sh installed it): then it fails.
func Python(t testing.TB) string {
	t.Helper()
	candidates := []string{os.Getenv("PYTHON"), "/usr/bin/python3"}
	if p, err := exec.LookPath("python3"); err == nil {
		candidates = append(candidates, p)
	}
	for _, py := range candidates {
		if py == "" {
			continue
		}
		if err := exec.Command(py, "-c", "import torch").Run(); err == nil {
			return py
		}
	}
	const why = "no Python with PyTorch (tried $PYTHON, /usr/bin/python3, python3): hack/ensure-torch.sh installs Debian's python3-torch"
	if os.Getenv("GLEANER_REQUIRE_TORCH") != "" {
		t.Fatal(why)
	}
	t.Skip(why)
	return ""
}
