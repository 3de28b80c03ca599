// Package python_test runs the Python trainer's own tests (test_train.py)
// with a Python that has PyTorch, so that go test ./... covers them.
package python_test

import (
	"os/exec"
	"testing"

	"github.com/gleaner-dev/gleaner/internal/torchtest"
)

func TestTrainer(t *testing.T) {
	py := torchtest.Python(t)
	cmd := exec.Command(py, "-m", "unittest", "-v", "test_train")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s -m unittest test_train: %v\n%s", py, err, out)
	}
	t.Logf("%s", out)
}
