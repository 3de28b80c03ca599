// Package demo runs Gleaner on a local cluster through a compressed day of
// inference traffic: etcd, kube-apiserver, the Deployment and ReplicaSet
// controllers, the default scheduler, KWOK (GPU nodes), gleaner-scheduler,
// gleaner-controller and `gleaner vllm-sim`, each a process of its own, driven by this package, which
// plays the users: it sends the inference traffic, queues best-effort jobs and
// retries the evicted ones, then reports what Gleaner harvested and checks
// that it worked.
package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/gleaner-dev/gleaner/internal/manifests"
)

// Config is one demo run.
type Config struct {
	DayMinutes  float64 // real minutes the demo day lasts
	Nodes       int     // GPU nodes
	GPUsPerNode int64
	QueueDepth  int    // best-effort jobs of each kind kept waiting
	RepoDir     string // repository root, for manifests/
	BinDir      string // gleaner, gleaner-scheduler, gleaner-controller
	ToolsDir    string // localcluster: etcd, kube-apiserver, the Deployment and ReplicaSet controllers, KWOK
	LogRoot     string // the run's folder is created in it
	Out         io.Writer
	Seed        int64
	// WithoutNotices runs gleaner-controller without reclaim notices, to
	// measure what they save on the same day's traffic.
	WithoutNotices bool
}

// ErrChecksFailed: the run finished but Gleaner visibly did not work.
var ErrChecksFailed = errors.New("the demo's self-checks failed")

// Run runs the demo; every process it starts is stopped before it returns.
func Run(ctx context.Context, cfg Config) (err error) {
	t, err := newTiming(cfg.DayMinutes)
	if err != nil {
		return err
	}
	t.withoutNotices = cfg.WithoutNotices
	t.profileOrigin = time.Now()
	for _, b := range []string{filepath.Join(cfg.BinDir, "gleaner"), filepath.Join(cfg.BinDir, "gleaner-scheduler"), filepath.Join(cfg.BinDir, "gleaner-controller"),
		filepath.Join(cfg.ToolsDir, "localcluster")} {
		if _, err := os.Stat(b); err != nil {
			return missingBinary(b)
		}
	}
	rendered, err := manifests.RenderInstall(filepath.Join(cfg.RepoDir, "manifests"))
	if err != nil {
		return err
	}
	objs, err := decodeYAML(rendered)
	if err != nil {
		return err
	}
	dir := filepath.Join(cfg.LogRoot, time.Now().Format("20060102-150405"))
	if err := os.MkdirAll(filepath.Join(dir, "state"), 0o755); err != nil {
		return err
	}
	out := cfg.Out
	fmt.Fprintf(out, "Gleaner demo: logs in %s/ (one file per process)\n", dir)
	c := &cluster{sup: newSupervisor(dir), dir: filepath.Join(dir, "state"), procs: map[string]*proc{}}
	defer func() {
		killed := c.sup.stopAll(10 * time.Second)
		if len(killed) > 0 {
			fmt.Fprintf(out, "warning: killed %v after they ignored SIGTERM for 10s\n", killed)
		}
		fmt.Fprintf(out, "Stopped every process the demo started. Logs: %s/\n", dir)
	}()

	start := time.Now()
	fmt.Fprintf(out, "Starting etcd and kube-apiserver ...\n")
	if err := c.startControlPlane(ctx, cfg.ToolsDir); err != nil {
		return err
	}
	if err := installGleanerAPIs(ctx, c, objs); err != nil {
		return err
	}
	fmt.Fprintf(out, "Starting the Deployment and ReplicaSet controllers, kube-scheduler, KWOK, vllm-sim, gleaner-scheduler, gleaner-controller ...\n")
	if err := c.startComponents(ctx, cfg, t, objs); err != nil {
		return err
	}
	fmt.Fprintf(out, "Cluster up in %v: kubectl --kubeconfig %s get nodes -L %s\n", time.Since(start).Round(100*time.Millisecond), c.kubeconfig, "gleaner.dev/harvest")
	plugin := filepath.Join(cfg.BinDir, "kubectl-gleaner")
	fmt.Fprintf(out, "Watch it as the research team: %s --kubeconfig %s -n %s console (a web page; or jobs --watch, status)\n", plugin, c.kubeconfig, researchNS)
	fmt.Fprint(out, t.describe())
	// The demo's own watches end before the apiserver is stopped, so it shuts down at once.
	scenarioCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := newScenario(scenarioCtx, c, cfg, t)
	if err != nil {
		return err
	}
	rep, err := s.run(scenarioCtx)
	if err != nil {
		return err
	}
	rep.published = readPublished(scenarioCtx, c)
	rep.published.consoleErr = tryConsole(scenarioCtx, c.kubeconfig)
	rep.print(out)
	var saved bytes.Buffer
	rep.print(&saved)
	_ = os.WriteFile(filepath.Join(dir, "report.txt"), saved.Bytes(), 0o644)
	if failures := rep.check(); len(failures) > 0 {
		fmt.Fprintf(out, "\nSELF-CHECK FAILED: Gleaner did not visibly work:\n")
		for _, f := range failures {
			fmt.Fprintf(out, "  - %s\n", f)
		}
		fmt.Fprintf(out, "Logs: %s/\n", dir)
		return ErrChecksFailed
	}
	fmt.Fprintf(out, "\nSelf-checks passed: %s\n", rep.passed())
	return nil
}
