// Command kubectl-gleaner is the kubectl plugin `kubectl gleaner`: the
// researcher's view of Gleaner (internal/cli). Put it on PATH and run
// `kubectl gleaner --help`.
package main

import (
	"os"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/gleaner-dev/gleaner/internal/cli"
)

func main() {
	os.Exit(cli.Execute(os.Args[1:], genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}, time.Now))
}
