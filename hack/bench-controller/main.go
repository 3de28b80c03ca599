// Command bench-controller measures gleaner-controller at fleet scale (`make
// bench-controller`): the real binary against a real etcd and kube-apiserver
// (hack/localcluster's parts, each a process), with Node and Pod objects only.
// No kubelet runs: nodes are created Ready with nvidia.com/gpu, pods are
// created bound (spec.nodeName) and their status set Running and Ready
// through the status subresource. Every inference pod has a loopback IP that
// one `gleaner vllm-sim` answers on.
//
// Each node has 8 GPUs: one 2-GPU inference replica, up to 4 best-effort pods
// of 1 GPU (the rest of the best-effort pods wait unbound), 2 GPUs free. Per
// size, with a fresh cluster, the scenarios run in this order on one
// controller, then its successor:
//
//   - window: the controller starts with a harvest window that opens at the
//     next minute, before any best-effort pod is bound (outside the window
//     they would be reclaimed); every node opens at once; then the lent pods
//     are created bound, as gleaner-scheduler would place them;
//   - steady: a minute of unchanged load;
//   - restart: the controller is stopped (SIGTERM) and a new one takes over;
//   - loadstep: every service's load steps up so that every node's verdict
//     changes and GPUs are owed on OWED nodes (2,000 at 5,000 nodes and up);
//   - ceiling: the controller is stopped and the API server alone takes back
//     10,000 fresh pods, 2,000 each way a reclaimer could (ceiling.go), so
//     the load step's eviction rate can be read against what this
//     machine's API server and etcd allow.
//
// It reports, per scenario: rounds, round wall time, the observe+plan CPU of
// the round's thread (gleaner_controller_plan_cpu_seconds, from the
// controller's V(2) log), the controller process's CPU, API writes per round
// by kind and the API server's requests by verb (apiserver_request_total),
// the controller's peak RSS and Go heap, and for the load step the time from
// the step to the deciding round, the first eviction and the last.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/gleaner-dev/gleaner/internal/memlimit"
	"github.com/gleaner-dev/gleaner/internal/vllmsim"
	"github.com/gleaner-dev/gleaner/pkg/api"
)

type config struct {
	bin, tools, out string
	sizes           []size
	services        int
	owed            int
	steady          time.Duration
	scenarios       map[string]bool
	extraFlags      []string
	profiles        bool
	memoryLimit     int64
}

type size struct{ nodes, pods int }

func main() {
	var cfg config
	var sizes, scenarios, extra string
	flag.StringVar(&cfg.bin, "bin", "bin", "Directory of gleaner-controller and gleaner (make build).")
	flag.StringVar(&cfg.tools, "tools", "bin/tools", "Directory of localcluster (make tools).")
	flag.StringVar(&cfg.out, "out", "bin/bench-controller-runs", "Directory for logs and results.")
	flag.StringVar(&sizes, "sizes", "1000:20000,5000:20000,10000:50000", "NODES:BEST_EFFORT_PODS, comma-separated; each a fresh cluster.")
	flag.IntVar(&cfg.services, "services", 1000, "Inference services (at most one per node).")
	flag.IntVar(&cfg.owed, "owed-nodes", 2000, "Nodes the load step makes owe GPUs (at most 2/5 of the nodes).")
	flag.DurationVar(&cfg.steady, "steady", time.Minute, "Length of the steady-state window.")
	flag.StringVar(&scenarios, "scenarios", "window,steady,restart,loadstep,ceiling", "Scenarios to report (all run in order when later ones are asked for).")
	flag.StringVar(&extra, "controller-flags", "", "Extra gleaner-controller flags, space-separated.")
	flag.Int64Var(&cfg.memoryLimit, "controller-memory-limit", 0, "Run the controller as in a container with this memory limit in bytes: GOMEMLIMIT at the fraction of it the controller sets itself (internal/memlimit). 0: no limit.")
	flag.BoolVar(&cfg.profiles, "profiles", false, "Run the controller with --profiling and keep a CPU profile of the steady window and a heap profile at its end (steady-cpu.pprof, steady-heap.pprof).")
	flag.Parse()
	for _, s := range strings.Split(sizes, ",") {
		n, p, ok := strings.Cut(s, ":")
		nodes, err1 := strconv.Atoi(n)
		pods, err2 := strconv.Atoi(p)
		if !ok || err1 != nil || err2 != nil || nodes < 10 || pods < 0 {
			fail(fmt.Errorf("-sizes %q: want NODES:PODS pairs such as 5000:20000", sizes))
		}
		cfg.sizes = append(cfg.sizes, size{nodes, pods})
	}
	cfg.scenarios = map[string]bool{}
	for _, s := range strings.Split(scenarios, ",") {
		cfg.scenarios[s] = true
	}
	cfg.extraFlags = strings.Fields(extra)
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	report, err := os.Create(filepath.Join(cfg.out, "results.md"))
	if err != nil {
		fail(err)
	}
	defer report.Close()
	w := io.MultiWriter(os.Stdout, report)
	fmt.Fprintf(w, "# gleaner-controller at fleet scale\n\nMachine: %s\nCommand: %s\nDate: %s\n\n",
		machine(), strings.Join(os.Args, " "), time.Now().UTC().Format(time.RFC3339))
	failed := false
	for _, sz := range cfg.sizes {
		rows, err := runSize(ctx, cfg, sz, w)
		for _, r := range rows {
			fmt.Fprintln(w, r)
		}
		if err != nil {
			fmt.Fprintf(w, "\n%d nodes: FAILED: %v\n", sz.nodes, err)
			failed = true
			if ctx.Err() != nil {
				break
			}
		}
		fmt.Fprintln(w)
	}
	if failed {
		os.Exit(1)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench-controller:", err)
	os.Exit(1)
}

// bench is one size's run: the cluster, the simulator and the controller.
type bench struct {
	cfg      config
	size     size
	dir      string
	cluster  *cluster
	fleet    *fleet
	sim      *proc
	simURL   string
	ctrl     *proc
	ctrlPort int
	rss      *sampler
	w        io.Writer
}

func runSize(parent context.Context, cfg config, sz size, w io.Writer) (rows []string, err error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	b := &bench{cfg: cfg, size: sz, w: w, rss: &sampler{}, dir: filepath.Join(cfg.out, fmt.Sprintf("%d-nodes", sz.nodes))}
	_ = os.RemoveAll(b.dir)
	if err := os.MkdirAll(b.dir, 0o755); err != nil {
		return nil, err
	}
	go b.rss.run(ctx)
	defer func() {
		if b.ctrl != nil {
			b.ctrl.stop(10 * time.Second)
		}
		b.sim.stop(5 * time.Second)
		b.cluster.stop()
	}()
	services := min(cfg.services, sz.nodes)
	owed := min(cfg.owed, sz.nodes*2/5)
	fmt.Fprintf(w, "## %d nodes (%d GPUs), %d inference services, %d best-effort pods (%d bound)\n\n",
		sz.nodes, sz.nodes*nodeGPUs, services, sz.pods, min(sz.pods, sz.nodes*lentPerNode))

	var flags []string
	t0 := time.Now()
	if b.cluster, err = startCluster(ctx, b.dir, cfg.tools); err != nil {
		return nil, err
	}
	simPort, err := freePort()
	if err != nil {
		return nil, err
	}
	if b.sim, err = start(b.dir, "vllm-sim", filepath.Join(cfg.bin, "gleaner"), "vllm-sim", fmt.Sprintf("--listen=0.0.0.0:%d", simPort)); err != nil {
		return nil, err
	}
	b.simURL = fmt.Sprintf("http://127.0.0.1:%d/sim/loads", simPort)
	if err := waitHTTP(ctx, b.sim, b.simURL, "", 30*time.Second); err != nil {
		return nil, err
	}
	b.fleet = newFleet(sz.nodes, services, sz.pods, simPort)
	if err := installCRDs(ctx, b.cluster); err != nil {
		return nil, err
	}
	if err := b.setLoads(ctx, 0); err != nil {
		return nil, err
	}
	if err := b.fleet.create(ctx, b.cluster.client); err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "Set-up: %s (cluster, %d nodes, %d pods).\n\n", time.Since(t0).Round(time.Second), sz.nodes, sz.nodes+sz.pods)
	rows = append(rows, header())

	if cfg.scenarios["window"] {
		var r []string
		if flags, r, err = b.window(ctx); err != nil {
			return append(rows, r...), err
		}
		rows = append(rows, r...)
	} else {
		if err := b.fleet.createBestEffort(ctx, b.cluster.client, true); err != nil {
			return rows, err
		}
		if err := b.startController(ctx, "controller-1", nil); err != nil {
			return rows, err
		}
		if err := b.waitRound(ctx, time.Now().Add(3*time.Minute)); err != nil {
			return rows, err
		}
		if err := b.waitOpen(ctx, sz.nodes, time.Now().Add(time.Minute)); err != nil {
			return rows, err
		}
	}

	// steady
	m := b.begin("steady")
	profiled := b.profileSteady(ctx)
	if err := sleep(ctx, cfg.steady); err != nil {
		return rows, err
	}
	if err := <-profiled; err != nil {
		fmt.Fprintf(w, "Profiles: %v\n\n", err)
	}
	r := b.end(ctx, m)
	rows = append(rows, r.row())
	if r.rounds == 0 {
		return rows, fmt.Errorf("no round in %s of steady state; see %s", cfg.steady, b.ctrl.log)
	}

	if !cfg.scenarios["restart"] && !cfg.scenarios["loadstep"] && !cfg.scenarios["ceiling"] {
		return rows, nil
	}
	// restart: the successor campaigns once the first has released the Lease.
	m = b.begin("restart")
	stopped := time.Now()
	b.ctrl.stop(15 * time.Second)
	if err := b.startController(ctx, "controller-2", flags); err != nil {
		return rows, err
	}
	if err := b.waitRound(ctx, time.Now().Add(3*time.Minute)); err != nil {
		return rows, err
	}
	firstRound := time.Now()
	if err := sleep(ctx, 30*time.Second); err != nil {
		return rows, err
	}
	r = b.end(ctx, m)
	r.extra = fmt.Sprintf("first round of the new process %.1f s after the old one was stopped", firstRound.Sub(stopped).Seconds())
	rows = append(rows, r.row())

	// loadstep
	m = b.begin("loadstep")
	extra := b.fleet.extraReplicas(owed)
	step := time.Now()
	if err := b.setLoads(ctx, extra); err != nil {
		return rows, err
	}
	evictions, err := b.waitEvictions(ctx, step)
	if err != nil {
		return rows, err
	}
	r = b.end(ctx, m)
	r.extra = evictions
	rows = append(rows, r.row())
	if cfg.scenarios["ceiling"] {
		line, err := b.ceiling(ctx)
		if err != nil {
			return rows, err
		}
		rows = append(rows, "\nEviction ceiling after the load step, "+line+".")
	}
	return rows, nil
}

// extraReplicas is how many replicas each service needs beyond its own in the
// load step: every node's 2 free GPUs take one (no eviction), and each owing
// node takes two more, evicting its 4 lent GPUs.
func (f *fleet) extraReplicas(owed int) int {
	headroom := f.nodes + 2*owed
	return (headroom + f.services - 1) / f.services
}

// setLoads sets every inference pod's load: half the default target load per
// replica, or with extra, enough for extra more replicas per service.
func (b *bench) setLoads(ctx context.Context, extra int) error {
	replicas := make([]int, b.fleet.services)
	for i := range b.fleet.nodes {
		replicas[b.fleet.serviceOf(i)]++
	}
	loads := map[string]vllmsim.Load{}
	for i, ip := range b.fleet.podIPs {
		per := 8.0 // half of demand.DefaultTargetLoad (16)
		if extra > 0 {
			r := float64(replicas[b.fleet.serviceOf(i)])
			per = 16 * (r + float64(extra)) / r
		}
		loads[ip] = vllmsim.Load{Model: "llama", Running: per, KVCache: 0.5}
	}
	body, err := json.Marshal(loads)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, b.simURL, strings.NewReader(string(body)))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("PUT %s: %s", b.simURL, resp.Status)
	}
	return nil
}

func (b *bench) startController(ctx context.Context, name string, flags []string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	args := []string{
		"--kubeconfig=" + b.cluster.kubeconfig,
		fmt.Sprintf("--secure-port=%d", port), "--bind-address=127.0.0.1", "--cert-dir=" + filepath.Join(b.dir, name+"-certs"),
		"--inference-namespaces=" + inferenceNS,
		// Nodes open in the round their GPUs are spare: the window's writes
		// all fall in one round, the worst case for a burst.
		"--open-after=0",
		"--v=2",
	}
	if b.cfg.profiles {
		args = append(args, "--profiling")
	}
	args = append(append(args, flags...), b.cfg.extraFlags...)
	var env []string
	if b.cfg.memoryLimit > 0 {
		soft := memlimit.Soft(b.cfg.memoryLimit)
		env = []string{fmt.Sprintf("GOMEMLIMIT=%d", soft)}
		fmt.Fprintf(b.w, "%s: GOMEMLIMIT %d bytes, as under a %d MiB container limit.\n\n", name, soft, b.cfg.memoryLimit>>20)
	}
	if b.ctrl, err = startEnv(b.dir, name, filepath.Join(b.cfg.bin, "gleaner-controller"), env, args...); err != nil {
		return err
	}
	b.ctrlPort = port
	b.rss.reset(b.ctrl.pid())
	return waitHTTP(ctx, b.ctrl, fmt.Sprintf("https://127.0.0.1:%d/healthz", port), "", 60*time.Second)
}

// profileSteady, with -profiles, takes a CPU profile of the steady window
// but its last 5 s, then a heap profile after a collection, into the size's
// directory. The channel gets nil at once without -profiles.
func (b *bench) profileSteady(ctx context.Context) <-chan error {
	done := make(chan error, 1)
	if !b.cfg.profiles {
		done <- nil
		return done
	}
	base := fmt.Sprintf("https://127.0.0.1:%d/debug/pprof/", b.ctrlPort)
	secs := max(1, int((b.cfg.steady-5*time.Second)/time.Second))
	client := &http.Client{Timeout: time.Duration(secs+60) * time.Second, Transport: insecureHTTP.Transport}
	go func() {
		var errs []error
		for _, p := range []struct{ path, file string }{
			{fmt.Sprintf("profile?seconds=%d", secs), "steady-cpu.pprof"},
			{"heap?gc=1", "steady-heap.pprof"},
		} {
			body, err := getWith(ctx, client, base+p.path, b.cluster.token)
			if err == nil {
				err = os.WriteFile(filepath.Join(b.dir, p.file), body, 0o644)
			}
			errs = append(errs, err)
		}
		done <- errors.Join(errs...)
	}()
	return done
}

func (b *bench) controllerMetrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	return scrape(ctx, fmt.Sprintf("https://127.0.0.1:%d/metrics", b.ctrlPort), b.cluster.token)
}

// waitRound waits for the controller's first completed round (its heartbeat).
func (b *bench) waitRound(ctx context.Context, deadline time.Time) error {
	for {
		if mfs, err := b.controllerMetrics(ctx); err == nil && gauge(mfs, "gleaner_controller_last_round_timestamp_seconds") > 0 {
			return nil
		}
		if b.ctrl.exited() {
			return fmt.Errorf("%s exited; its log ends:\n%s", b.ctrl.name, b.ctrl.tail(15))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s completed no round by %s; see %s", b.ctrl.name, deadline.Format(time.TimeOnly), b.ctrl.log)
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
}

// waitOpen waits until the controller counts n nodes open.
func (b *bench) waitOpen(ctx context.Context, n int, deadline time.Time) error {
	for {
		if mfs, err := b.controllerMetrics(ctx); err == nil {
			if mf := mfs["gleaner_nodes"]; mf != nil {
				for _, m := range mf.Metric {
					if label(m, "state") == string(api.HarvestOpen) && int(m.Gauge.GetValue()) == n {
						return nil
					}
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not every node opened by %s; see %s", deadline.Format(time.TimeOnly), b.ctrl.log)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// waitEvictions waits until the controller has made no eviction for 15 s
// (at most 2 minutes, within the evicted pods' grace) and reports when they
// came, from its log, and how many pods the API server saw evicted.
func (b *bench) waitEvictions(ctx context.Context, step time.Time) (string, error) {
	deadline := step.Add(110 * time.Second)
	var evicted []logLine
	for time.Now().Before(deadline) {
		if err := sleep(ctx, time.Second); err != nil {
			return "", err
		}
		lines, err := readLog(b.ctrl.log, "Reclaimed GPUs")
		if err != nil {
			return "", err
		}
		evicted = within(lines, step, time.Now().Add(time.Minute))
		if len(evicted) > 0 && time.Since(evicted[len(evicted)-1].at) > 15*time.Second {
			break
		}
	}
	if len(evicted) == 0 {
		return "", fmt.Errorf("no eviction within %s of the load step; see %s", deadline.Sub(step), b.ctrl.log)
	}
	rounds, err := readLog(b.ctrl.log, "Planned round")
	if err != nil {
		return "", err
	}
	// The deciding round is the first to owe GPUs; its evictions are those
	// logged before the next round planned (a round acts before the next).
	var decided, next time.Time
	owedNodes := 0
	for _, r := range within(rounds, step, time.Now()) {
		if decided.IsZero() && r.float("reclaims") > 0 {
			decided, owedNodes = r.at, int(r.float("reclaims"))
		} else if !decided.IsZero() {
			next = r.at
			break
		}
	}
	if decided.IsZero() {
		return "", fmt.Errorf("no round owed GPUs after the load step; see %s", b.ctrl.log)
	}
	if next.IsZero() {
		next = time.Now()
	}
	byDecider := within(evicted, decided, next)
	nodes := map[string]bool{}
	for _, e := range byDecider {
		nodes[e.kv["node"]] = true
	}
	allNodes := map[string]bool{}
	for _, e := range evicted {
		allNodes[e.kv["node"]] = true
	}
	first, last := evicted[0].at, evicted[len(evicted)-1].at
	rate := float64(len(evicted)) / max(last.Sub(first).Seconds(), 0.001)
	s := fmt.Sprintf("load step -> deciding round %.1f s (%d nodes owe); its round made %d evictions on %d of them, the first %.2f s and the last %.1f s after it decided; "+
		"in all %d evictions on %d nodes, the first %.1f s and the last %.1f s after the step, %.1f evictions/s",
		decided.Sub(step).Seconds(), owedNodes, len(byDecider), len(nodes), first.Sub(decided).Seconds(), lastOf(byDecider, decided).Sub(decided).Seconds(),
		len(evicted), len(allNodes), first.Sub(step).Seconds(), last.Sub(step).Seconds(), rate)
	if time.Now().After(deadline) {
		s += fmt.Sprintf("; still evicting when the window closed at %.0f s", deadline.Sub(step).Seconds())
	}
	return s, nil
}

func lastOf(lines []logLine, or time.Time) time.Time {
	if len(lines) == 0 {
		return or
	}
	return lines[len(lines)-1].at
}

// window starts the first controller with a harvest window that opens at the
// next minute but one, measures every node opening, then binds the lent pods.
func (b *bench) window(ctx context.Context) ([]string, []string, error) {
	sz, w := b.size, b.w
	var rows []string
	// window: the controller starts before a window that opens at a minute boundary.
	opens := time.Now().Add(50 * time.Second).Truncate(time.Minute).Add(time.Minute)
	windows := fmt.Sprintf("%s-%s", opens.UTC().Format("15:04"), opens.Add(6*time.Hour).UTC().Format("15:04"))
	flags := []string{"--harvest-windows=" + windows, "--harvest-time-zone=UTC"}
	if err := b.startController(ctx, "controller-1", flags); err != nil {
		return nil, rows, err
	}
	if err := b.waitRound(ctx, time.Now().Add(3*time.Minute)); err != nil {
		return nil, rows, err
	}
	if time.Now().After(opens.Add(-2 * time.Second)) {
		return nil, rows, fmt.Errorf("the controller's first round came after the window opened at %s: not measured", opens.Format(time.TimeOnly))
	}
	if err := sleep(ctx, time.Until(opens.Add(-time.Second))); err != nil {
		return nil, rows, err
	}
	m := b.begin("window")
	if err := b.waitOpen(ctx, sz.nodes, opens.Add(90*time.Second)); err != nil {
		return nil, rows, err
	}
	openAt := time.Now()
	if err := sleep(ctx, 10*time.Second); err != nil {
		return nil, rows, err
	}
	r := b.end(ctx, m)
	r.extra = fmt.Sprintf("all %d nodes seen open %.1f s after the window opened; %s", sz.nodes, openAt.Sub(opens).Seconds(), b.roundsApart(opens, time.Now()))
	rows = append(rows, r.row())
	// What gleaner-scheduler would place once the nodes are open: bound
	// before the window, the pods would be reclaimed (nothing is lent outside it).
	t1 := time.Now()
	if err := b.fleet.createBestEffort(ctx, b.cluster.client, true); err != nil {
		return nil, rows, err
	}
	fmt.Fprintf(w, "Bound %d best-effort pods in %s after the window opened.\n\n", min(sz.pods, sz.nodes*lentPerNode), time.Since(t1).Round(time.Second))
	if err := sleep(ctx, 15*time.Second); err != nil {
		return nil, rows, err
	}

	return flags, rows, nil
}

// roundsApart says how far apart the controller's rounds planned from from to
// to, and how many of them left verdicts that lend more to the next: while a
// window's openings are written, a node that comes to owe GPUs is reclaimed
// by the next round, first in its order (pkg/controller/writes.go), so the
// gap between rounds is the most the openings can delay its evictions.
func (b *bench) roundsApart(from, to time.Time) string {
	lines, err := readLog(b.ctrl.log, "Planned round", "Left verdicts that lend more for the next round")
	if err != nil {
		return err.Error()
	}
	var last time.Time
	var gap time.Duration
	rounds, leaving, left := 0, 0, 0
	for _, l := range within(lines, from, to) {
		if l.msg != "Planned round" {
			leaving++
			left = max(left, int(l.float("nodes")))
			continue
		}
		if !last.IsZero() {
			gap = max(gap, l.at.Sub(last))
		}
		last = l.at
		rounds++
	}
	return fmt.Sprintf("from the window's opening to this row's end, %d rounds planned at most %.1f s apart, %d of them leaving openings to the next (at most %d nodes)",
		rounds, gap.Seconds(), leaving, left)
}
