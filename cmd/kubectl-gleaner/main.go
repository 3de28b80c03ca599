// Command kubectl-gleaner is the kubectl plugin `kubectl gleaner`: the
// researcher's view of Gleaner (internal/cli). Put it on PATH and run
// `kubectl gleaner --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/gleaner-dev/gleaner/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Execute(ctx, os.Args[1:], genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}, time.Now)
	stop()
	os.Exit(code)
}
