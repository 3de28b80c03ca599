// Command minors builds each older Kubernetes minor's tools (the tool lines
// of hack/minors/MINOR/go.mod: gleaner-scheduler, and the oldest's
// kube-apiserver) for this machine into OUT/MINOR/, as the minors' images
// are built (release.BuildMinor):
//
//	go run ./hack/minors --out bin/minors --ldflags '...' 1.35 1.36
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/gleaner-dev/gleaner/internal/release"
)

func main() {
	out := flag.String("out", "bin/minors", "directory of one directory per minor")
	ldflags := flag.String("ldflags", "", "go build -ldflags (the minor's Kubernetes version is stamped over its own)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: minors [--out DIR] [--ldflags FLAGS] MINOR...")
		os.Exit(2)
	}
	for _, minor := range flag.Args() {
		start := time.Now()
		dir := filepath.Join(*out, minor)
		if err := release.BuildMinor(dir, runtime.GOOS, runtime.GOARCH, *ldflags, minor); err != nil {
			fmt.Fprintln(os.Stderr, "minors:", err)
			os.Exit(1)
		}
		fmt.Printf("built Kubernetes %s's tools into %s in %v\n", minor, dir, time.Since(start).Round(time.Second))
	}
}
