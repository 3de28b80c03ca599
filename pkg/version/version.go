// Package version reports the build's version, stamped by the Makefile with
// -ldflags "-X github.com/gleaner-dev/gleaner/pkg/version.Version=...".
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is the release or git description of this build.
var Version = "dev"

// Commit is the commit built, stamped by the Makefile; when empty, the one
// the Go toolchain recorded (absent with -buildvcs=false).
var Commit = ""

// String is one line naming the version, the commit and the Go runtime.
func String() string {
	commit := Commit
	if info, ok := debug.ReadBuildInfo(); ok && commit == "" {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				commit = s.Value
			}
		}
	}
	if commit == "" {
		commit = "unknown"
	}
	return fmt.Sprintf("gleaner %s (commit %s, %s %s/%s)", Version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
