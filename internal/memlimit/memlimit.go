// Package memlimit gives the Go runtime a soft memory limit below the
// container's, so that the collector works harder as the heap nears the
// limit instead of the kernel killing the process: Go does not read the
// cgroup's limit on its own.
package memlimit

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"

	"k8s.io/klog/v2"
)

// Fraction of the container's limit given to the runtime: the rest is for
// what the collector does not count (stacks, the runtime's own, cgo, the
// page cache charged to the cgroup).
const Fraction = 0.9

// Files are where the container's memory limit is read, cgroup v2's first.
var Files = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// Read returns the first limit one of files holds: 0 when none exists or the
// limit is "max" (cgroup v2) or at least 2^62 (cgroup v1's "no limit").
func Read(files []string) (int64, error) {
	for _, f := range files {
		raw, err := os.ReadFile(filepath.Clean(f))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		s := strings.TrimSpace(string(raw))
		if s == "max" {
			return 0, nil
		}
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q is not a memory limit", f, s)
		}
		if n >= 1<<62 {
			return 0, nil
		}
		return int64(n), nil
	}
	return 0, nil
}

// Apply sets the runtime's soft limit to Fraction of the container's, unless
// GOMEMLIMIT is set (the admin's word wins) or the container has no limit.
// It returns the limit set, 0 when it set none.
func Apply(files []string) (int64, error) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return 0, nil
	}
	limit, err := Read(files)
	if err != nil || limit == 0 {
		return 0, err
	}
	soft := Soft(limit)
	debug.SetMemoryLimit(soft)
	return soft, nil
}

// Soft is the runtime's limit under a container limit of limit bytes.
func Soft(limit int64) int64 { return int64(math.Floor(float64(limit) * Fraction)) }

// Set is Apply on the container's own files, logging what it did.
func Set() {
	if soft, err := Apply(Files); err != nil {
		klog.ErrorS(err, "Reading the container's memory limit; the Go runtime keeps none")
	} else if soft > 0 {
		klog.InfoS("Go runtime memory limit set below the container's", "bytes", soft)
	}
}
