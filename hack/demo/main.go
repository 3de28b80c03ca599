// Command demo runs Gleaner on a local cluster through a compressed day of
// inference traffic (`make demo`); see docs/demo.md and internal/demo.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/gleaner-dev/gleaner/internal/demo"
)

func main() {
	cfg := demo.Config{Out: os.Stdout}
	flag.Float64Var(&cfg.DayMinutes, "minutes", 4, "Real minutes the demo day of 24 hours lasts (1-60).")
	flag.IntVar(&cfg.Nodes, "nodes", 8, "GPU nodes in the pool.")
	flag.Int64Var(&cfg.GPUsPerNode, "gpus-per-node", 8, "GPUs (nvidia.com/gpu) per node.")
	flag.IntVar(&cfg.QueueDepth, "queue", 2, "Best-effort jobs of each kind (eval, sft, train, ddp, sweep) kept waiting for GPUs.")
	flag.Int64Var(&cfg.Seed, "seed", 1, "Seed of the job mix.")
	flag.StringVar(&cfg.RepoDir, "repo", ".", "Repository root (for manifests/).")
	flag.StringVar(&cfg.BinDir, "bin", "bin", "Directory of gleaner, gleaner-scheduler and gleaner-controller (make build).")
	flag.StringVar(&cfg.ToolsDir, "tools", "bin/tools", "Directory of etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (make tools).")
	flag.StringVar(&cfg.LogRoot, "logs", "bin/demo", "The run's log folder is created in this directory.")
	notices := flag.String("notices", "on", "on: gleaner-controller gives reclaim notices, as shipped; off: it gives none, to measure what they save on the same day's traffic.")
	flag.Parse()
	switch *notices {
	case "on":
	case "off":
		cfg.WithoutNotices = true
	default:
		fmt.Fprintf(os.Stderr, "--notices=%q: want on or off\n", *notices)
		os.Exit(2)
	}
	if cfg.Nodes < 1 || cfg.GPUsPerNode < 4 || cfg.QueueDepth < 1 {
		fmt.Fprintln(os.Stderr, "demo: need at least 1 node, 4 GPUs per node (chat replicas take 4) and a queue of 1")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := demo.Run(ctx, cfg)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, demo.ErrChecksFailed):
		os.Exit(1)
	default:
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}
