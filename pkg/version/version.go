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

// String is one line naming the version, the commit and the Go runtime.
func String() string {
	commit := "unknown"
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				commit = s.Value
			}
		}
	}
	return fmt.Sprintf("gleaner %s (commit %s, %s %s/%s)", Version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
