package memlimit

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

func TestReadAndApply(t *testing.T) {
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v2 := file("memory.max", "1073741824\n")
	unlimited := file("unlimited", "max\n")
	v1None := file("limit_in_bytes", "9223372036854771712\n")
	bad := file("bad", "lots\n")
	missing := filepath.Join(dir, "missing")
	for _, c := range []struct {
		name  string
		files []string
		want  int64
		err   bool
	}{
		{"cgroup v2 limit", []string{v2}, 1 << 30, false},
		{"the first file that exists", []string{missing, v2}, 1 << 30, false},
		{"cgroup v2 without a limit", []string{unlimited, v2}, 0, false},
		{"cgroup v1 without a limit", []string{v1None}, 0, false},
		{"no cgroup files", []string{missing}, 0, false},
		{"garbage", []string{bad}, 0, true},
	} {
		got, err := Read(c.files)
		if got != c.want || (err != nil) != c.err {
			t.Errorf("%s: Read = %d, %v; want %d, error %v", c.name, got, err, c.want, c.err)
		}
	}

	before := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(before)
	t.Setenv("GOMEMLIMIT", "")
	const want = 966367641 // 0.9 GiB
	soft, err := Apply([]string{v2})
	if err != nil || soft != want || debug.SetMemoryLimit(-1) != soft {
		t.Errorf("Apply under a 1 GiB limit = %d, %v; runtime limit %d; want %d", soft, err, debug.SetMemoryLimit(-1), want)
	}
	debug.SetMemoryLimit(before)
	t.Setenv("GOMEMLIMIT", "500MiB")
	if soft, err := Apply([]string{v2}); soft != 0 || err != nil || debug.SetMemoryLimit(-1) != before {
		t.Errorf("with GOMEMLIMIT set Apply = %d, %v and moved the runtime's limit to %d", soft, err, debug.SetMemoryLimit(-1))
	}
}
