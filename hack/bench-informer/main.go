// Command bench-informer measures the vLLM metrics informer beside the tool a
// cluster already runs for the same job (`make bench-informer`): Prometheus
// and a vllm.Informer, each a process of its own, scrape the same endpoints
// of one `gleaner vllm-sim` (each endpoint a loopback address 127.77.x.y) at
// the same interval, at the same time. After a warm-up it reads, over a
// measured window, each process's CPU time from /proc/<pid>/stat (utime +
// stime, the same way for both) and the scrapes each completed, and samples
// their resident memory. Each round starts every process afresh; the report
// gives every round and the medians.
//
// It checks that the figures measure what they claim: every endpoint up in
// both before the window, and each scraper completing its scrapes (endpoints
// times window over interval, at least 95% of them) with at most 1% failed,
// by its own count; Prometheus's is also read back from its TSDB (`up`). It
// exits non-zero when a check fails. It also reports how long a scrape took
// in each, and how many of the informer's were in flight on average, to show
// whether its concurrency bound was reached.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	osexec "os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type config struct {
	gleaner, prometheus string
	endpoints           int
	interval, timeout   time.Duration
	warmup, measure     time.Duration
	rounds              int
	out                 string
	promName            string // "Prometheus <version>"
	profile             bool
}

func main() {
	var (
		cfg          config
		informerMode bool
		port         int
	)
	flag.StringVar(&cfg.gleaner, "gleaner", "bin/gleaner", "The gleaner binary, whose vllm-sim serves the endpoints.")
	flag.StringVar(&cfg.prometheus, "prometheus", "/usr/bin/prometheus", "The prometheus binary (hack/ensure-prometheus.sh).")
	flag.IntVar(&cfg.endpoints, "endpoints", 2000, "vLLM endpoints, each a loopback address 127.77.x.y (at most 64,000).")
	flag.DurationVar(&cfg.interval, "interval", 5*time.Second, "Scrape interval of both scrapers.")
	flag.DurationVar(&cfg.timeout, "timeout", 2*time.Second, "Scrape timeout of both (the informer's default).")
	flag.DurationVar(&cfg.warmup, "warmup", 30*time.Second, "Time from start to the measured window (at least 3 intervals).")
	flag.DurationVar(&cfg.measure, "measure", 2*time.Minute, "The measured window (at least 6 intervals).")
	flag.IntVar(&cfg.rounds, "rounds", 3, "Rounds, each with fresh processes (1-9).")
	flag.StringVar(&cfg.out, "out", "bin/bench-informer-runs", "Directory for each process's log and results.json.")
	flag.BoolVar(&cfg.profile, "profile", false, "Also write CPU profiles of both over the window into -out (the profiler costs CPU: not for figures).")
	flag.BoolVar(&informerMode, "informer", false, "Be the informer process (started by this program).")
	flag.IntVar(&port, "port", 0, "With -informer: the simulator's port.")
	flag.Parse()

	if informerMode {
		if err := runInformer(cfg.endpoints, port, cfg.interval); err != nil {
			fmt.Fprintln(os.Stderr, "bench-informer (informer process):", err)
			os.Exit(1)
		}
		return
	}
	switch {
	case cfg.endpoints < 1 || cfg.endpoints > 64000:
		fail(fmt.Errorf("-endpoints %d: want 1 to 64,000", cfg.endpoints))
	case cfg.interval < time.Second || cfg.timeout <= 0 || cfg.timeout > cfg.interval:
		fail(fmt.Errorf("-interval %s, -timeout %s: want an interval of at least 1s and a timeout within it", cfg.interval, cfg.timeout))
	case cfg.warmup < 3*cfg.interval || cfg.measure < 6*cfg.interval:
		fail(fmt.Errorf("-warmup %s, -measure %s: want at least 3 and 6 intervals", cfg.warmup, cfg.measure))
	case cfg.rounds < 1 || cfg.rounds > 9:
		fail(fmt.Errorf("-rounds %d: want 1 to 9", cfg.rounds))
	}
	for _, bin := range []string{cfg.gleaner, cfg.prometheus} {
		if _, err := os.Stat(bin); err != nil {
			fail(fmt.Errorf("%w (make bench-informer builds bin/gleaner and installs prometheus)", err))
		}
	}
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		fail(err)
	}
	cfg.promName = "Prometheus"
	if v, err := osexec.Command(cfg.prometheus, "--version").CombinedOutput(); err == nil {
		// "prometheus, version 2.42.0+ds (branch: ..."
		if f := strings.Fields(string(v)); len(f) > 2 && f[1] == "version" {
			cfg.promName += " " + f[2]
		}
	}
	// Everything ends by itself: each round within its warm-up, window and 3 minutes.
	limit := time.Duration(cfg.rounds) * (cfg.warmup + cfg.measure + 3*time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	fmt.Printf("# the informer and %s, %d endpoints every %s, %d rounds of %s after %s of warm-up; %s\n",
		cfg.promName, cfg.endpoints, cfg.interval, cfg.rounds, cfg.measure, cfg.warmup, machine())
	var results []result
	for n := 1; n <= cfg.rounds; n++ {
		r, err := runRound(ctx, cfg, n)
		if err != nil {
			fail(fmt.Errorf("round %d: %w", n, err))
		}
		fmt.Println(r.line())
		results = append(results, r)
	}
	report(os.Stdout, cfg, results)
	b, _ := json.MarshalIndent(results, "", "  ")
	if err := os.WriteFile(filepath.Join(cfg.out, "results.json"), b, 0o644); err != nil {
		fail(err)
	}
	var problems []string
	for _, r := range results {
		problems = append(problems, r.Problems...)
	}
	if len(problems) > 0 {
		fail(errors.New("the figures above do not measure what they claim: " + strings.Join(problems, "; ")))
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench-informer:", err)
	os.Exit(1)
}

// side is one scraper's figures over a round's window.
type side struct {
	CPUSeconds float64 // user+system, /proc/<pid>/stat
	Scrapes    float64 // completed, by the scraper's own count
	Failures   float64
	Seconds    float64 // mean duration of a scrape
	PeakRSS    float64 // bytes, sampled every second
	HeapInuse  float64 // bytes, Go heap in use at the end
}

func (s side) perScrape() float64 { return s.CPUSeconds / s.Scrapes }

type result struct {
	Round                 int
	Window                float64 // seconds
	Informer, Prometheus  side
	SimCPU, BenchCPU      float64 // the simulator's and this program's CPU seconds
	MachineCPU            float64 // every process's
	LoadBefore, LoadAfter string
	// Prometheus's scrapes as its TSDB has them: samples of up, and of up == 0.
	TSDBScrapes, TSDBFailures float64
	Problems                  []string
}

func (r result) ratio() float64 { return r.Informer.perScrape() / r.Prometheus.perScrape() }

// inFlight is the informer's mean scrapes in flight (Little's law), to set
// beside its concurrency bound.
func (r result) inFlight() float64 { return r.Informer.Scrapes / r.Window * r.Informer.Seconds }

// rest is the CPU the rest of the machine used, in cores.
func (r result) rest() float64 {
	return (r.MachineCPU - r.Informer.CPUSeconds - r.Prometheus.CPUSeconds - r.SimCPU - r.BenchCPU) / r.Window
}

func (r result) line() string {
	return fmt.Sprintf("round %d (%.0f s): informer %.0f µs/scrape (%.0f scrapes, %.0f failed, %.0f ms each, %.1f in flight; %.3f cores, peak RSS %.0f MiB); "+
		"prometheus %.0f µs/scrape (%.0f scrapes, TSDB %.0f, %.0f failed, %.0f ms each; %.3f cores, peak RSS %.0f MiB); ratio %.2f; "+
		"vllm-sim %.3f cores, the rest of the machine %.3f; load %s -> %s",
		r.Round, r.Window, 1e6*r.Informer.perScrape(), r.Informer.Scrapes, r.Informer.Failures, 1e3*r.Informer.Seconds, r.inFlight(),
		r.Informer.CPUSeconds/r.Window, r.Informer.PeakRSS/(1<<20),
		1e6*r.Prometheus.perScrape(), r.Prometheus.Scrapes, r.TSDBScrapes, r.TSDBFailures, 1e3*r.Prometheus.Seconds,
		r.Prometheus.CPUSeconds/r.Window, r.Prometheus.PeakRSS/(1<<20), r.ratio(),
		r.SimCPU/r.Window, r.rest(), r.LoadBefore, r.LoadAfter)
}

func runRound(parent context.Context, cfg config, n int) (result, error) {
	r := result{Round: n}
	ctx, cancel := context.WithTimeout(parent, cfg.warmup+cfg.measure+3*time.Minute)
	defer cancel()
	// Stop every process, then close their logs and remove what they wrote outside -out.
	var waits []func() error
	var logs []*os.File
	var temporary []string
	defer func() {
		cancel()
		for _, wait := range waits {
			_ = wait()
		}
		for _, f := range logs {
			f.Close()
		}
		for _, dir := range temporary {
			os.RemoveAll(dir)
		}
	}()
	logFile := func(name string) (*os.File, error) {
		f, err := os.Create(filepath.Join(cfg.out, fmt.Sprintf("round%d-%s.log", n, name)))
		if err == nil {
			logs = append(logs, f)
		}
		return f, err
	}

	// The simulator: every address without a load of its own serves this one.
	simLog, err := logFile("vllm-sim")
	if err != nil {
		return r, err
	}
	sim := command(ctx, simLog, cfg.gleaner, "vllm-sim", "--listen", "0.0.0.0:0",
		"--model", "meta-llama/Llama-3.1-8B-Instruct", "--running", "12", "--waiting", "2", "--kv-cache", "0.42")
	simOut, err := sim.StdoutPipe()
	if err != nil {
		return r, err
	}
	if err := sim.Start(); err != nil {
		return r, fmt.Errorf("starting %s vllm-sim: %w", cfg.gleaner, err)
	}
	waits = append(waits, sim.Wait)
	lines := bufio.NewScanner(simOut)
	if !lines.Scan() {
		return r, fmt.Errorf("vllm-sim said nothing; see %s", simLog.Name())
	}
	// "vllm-sim: serving vLLM metrics on 0.0.0.0:PORT"
	fields := strings.Fields(lines.Text())
	_, portText, err := net.SplitHostPort(fields[len(fields)-1])
	if err != nil {
		return r, fmt.Errorf("vllm-sim: %q names no port", lines.Text())
	}
	port, _ := strconv.Atoi(portText)
	go io.Copy(simLog, simOut)
	client := &http.Client{Timeout: 5 * time.Second}
	for _, a := range []string{address(0), address(cfg.endpoints - 1)} {
		if err := poll(ctx, 10*time.Second, func() bool {
			resp, err := client.Get(fmt.Sprintf("http://%s:%d/metrics", a, port))
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}); err != nil {
			return r, fmt.Errorf("vllm-sim does not serve %s:%d: %w", a, port, err)
		}
	}

	// The informer, in a process of its own.
	self, err := os.Executable()
	if err != nil {
		return r, err
	}
	infLog, err := logFile("informer")
	if err != nil {
		return r, err
	}
	infCmd := command(ctx, infLog, self, "-informer", "-endpoints", strconv.Itoa(cfg.endpoints),
		"-port", strconv.Itoa(port), "-interval", cfg.interval.String())
	infIn, err := infCmd.StdinPipe()
	if err != nil {
		return r, err
	}
	infOut, err := infCmd.StdoutPipe()
	if err != nil {
		return r, err
	}
	if err := infCmd.Start(); err != nil {
		return r, err
	}
	waits = append(waits, infCmd.Wait)
	inf := &informerProc{in: infIn, out: bufio.NewScanner(infOut)}
	if !inf.out.Scan() || inf.out.Text() != "ready" {
		return r, fmt.Errorf("the informer process did not start; see %s", infLog.Name())
	}

	// Prometheus, with a config and a TSDB of its own.
	tsdb, err := os.MkdirTemp("", "bench-informer-tsdb-")
	if err != nil {
		return r, err
	}
	temporary = append(temporary, tsdb)
	promPort, err := freePort()
	if err != nil {
		return r, err
	}
	promConfig := filepath.Join(cfg.out, fmt.Sprintf("round%d-prometheus.yml", n))
	if err := writePrometheusConfig(promConfig, cfg.endpoints, port, cfg.interval, cfg.timeout); err != nil {
		return r, err
	}
	promLog, err := logFile("prometheus")
	if err != nil {
		return r, err
	}
	promCmd := command(ctx, promLog, cfg.prometheus, "--config.file="+promConfig, "--storage.tsdb.path="+tsdb,
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", promPort))
	if err := promCmd.Start(); err != nil {
		return r, err
	}
	waits = append(waits, promCmd.Wait)
	prom := &promClient{base: fmt.Sprintf("http://127.0.0.1:%d", promPort), http: &http.Client{}}
	if err := poll(ctx, time.Minute, func() bool { return prom.ready(ctx) }); err != nil {
		return r, fmt.Errorf("prometheus not ready (see %s): %w", promLog.Name(), err)
	}

	// Warm-up, until every endpoint is up in both.
	if err := sleep(ctx, cfg.warmup); err != nil {
		return r, err
	}
	if err := poll(ctx, 4*cfg.interval, func() bool {
		s, err := inf.status()
		up, err2 := prom.query(ctx, `count(up{job="vllm"} == 1)`, time.Now())
		return err == nil && err2 == nil && s.Fresh == cfg.endpoints && int(up) == cfg.endpoints
	}); err != nil {
		return r, fmt.Errorf("not every endpoint up in both after the warm-up: %w", err)
	}

	// The window. Each scraper's count is read just outside its CPU reading,
	// so the queries' own cost is not in it.
	pids := []int{infCmd.Process.Pid, promCmd.Process.Pid, sim.Process.Pid}
	cpu := func() ([]float64, error) {
		var out []float64
		for _, pid := range pids {
			s, err := cpuSeconds(pid)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		return out, nil
	}
	inf0, err := inf.status()
	if err != nil {
		return r, err
	}
	prom0, err := prom.self(ctx, cfg.interval)
	if err != nil {
		return r, err
	}
	r.LoadBefore = loadAverage()
	machine0, err := machineBusy()
	if err != nil {
		return r, err
	}
	self0 := selfCPU()
	cpu0, err := cpu()
	if err != nil {
		return r, err
	}
	start := time.Now()
	profiled := make(chan error, 1)
	if cfg.profile {
		if _, err := inf.ask("profile " + filepath.Join(cfg.out, fmt.Sprintf("round%d-informer.pprof", n))); err != nil {
			return r, err
		}
		go func() {
			secs := int(cfg.measure.Seconds())
			b, err := prom.get(ctx, fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), time.Duration(secs+30)*time.Second)
			if err == nil {
				err = os.WriteFile(filepath.Join(cfg.out, fmt.Sprintf("round%d-prometheus.pprof", n)), b, 0o644)
			}
			profiled <- err
		}()
	} else {
		profiled <- nil
	}
	for end := start.Add(cfg.measure); time.Now().Before(end); {
		for i, p := range []*side{&r.Informer, &r.Prometheus} {
			if rss, err := rssBytes(pids[i]); err == nil {
				p.PeakRSS = max(p.PeakRSS, rss)
			}
		}
		if err := sleep(ctx, min(time.Second, time.Until(end))); err != nil {
			return r, err
		}
	}
	cpu1, err := cpu()
	if err != nil {
		return r, err
	}
	end := time.Now()
	self1 := selfCPU()
	machine1, err := machineBusy()
	if err != nil {
		return r, err
	}
	r.LoadAfter = loadAverage()
	if cfg.profile {
		if _, err := inf.ask("profile-stop"); err != nil {
			return r, err
		}
	}
	if err := <-profiled; err != nil {
		return r, fmt.Errorf("profiling prometheus: %w", err)
	}
	inf1, err := inf.status()
	if err != nil {
		return r, err
	}
	prom1, err := prom.self(ctx, cfg.interval)
	if err != nil {
		return r, err
	}

	r.Window = end.Sub(start).Seconds()
	r.Informer.CPUSeconds, r.Prometheus.CPUSeconds, r.SimCPU = cpu1[0]-cpu0[0], cpu1[1]-cpu0[1], cpu1[2]-cpu0[2]
	r.BenchCPU, r.MachineCPU = self1-self0, machine1-machine0
	r.Informer.Scrapes = inf1.Scrapes - inf0.Scrapes
	r.Informer.Failures = inf1.Failures - inf0.Failures
	r.Informer.Seconds = (inf1.Seconds - inf0.Seconds) / r.Informer.Scrapes
	r.Informer.HeapInuse = float64(inf1.HeapInuse)
	r.Prometheus.Scrapes = prom1.Scrapes - prom0.Scrapes
	r.Prometheus.HeapInuse = prom1.HeapInuse
	// The TSDB's word on the same window: one sample of up per scrape, 0 when
	// it failed. A scrape is stored when it ends, with the time it started: the
	// scrapes started in the window are all in once the timeout has passed.
	if err := sleep(ctx, cfg.timeout+time.Second); err != nil {
		return r, err
	}
	window := fmt.Sprintf(`{job="vllm"}[%dms]`, end.Sub(start).Milliseconds())
	for _, q := range []struct {
		expr string
		into *float64
	}{
		{`sum(count_over_time(up` + window + `))`, &r.TSDBScrapes},
		{`sum(count_over_time(up` + window + `) - sum_over_time(up` + window + `))`, &r.TSDBFailures},
		{`avg(avg_over_time(scrape_duration_seconds` + window + `))`, &r.Prometheus.Seconds},
	} {
		if *q.into, err = prom.query(ctx, q.expr, end); err != nil {
			return r, err
		}
	}
	r.Prometheus.Failures = r.TSDBFailures

	want := float64(cfg.endpoints) * r.Window / cfg.interval.Seconds()
	check := func(ok bool, format string, args ...any) {
		if !ok {
			r.Problems = append(r.Problems, fmt.Sprintf("round %d: ", n)+fmt.Sprintf(format, args...))
		}
	}
	completed := func(got float64) bool { return got >= 0.95*want && got <= 1.03*want }
	check(completed(r.Informer.Scrapes), "the informer scraped %.0f times, want %.0f", r.Informer.Scrapes, want)
	check(completed(r.Prometheus.Scrapes), "prometheus scraped %.0f times, want %.0f", r.Prometheus.Scrapes, want)
	check(completed(r.TSDBScrapes), "prometheus's TSDB has %.0f scrapes, want %.0f", r.TSDBScrapes, want)
	check(r.Informer.Failures <= 0.01*r.Informer.Scrapes, "%.0f of the informer's scrapes failed", r.Informer.Failures)
	check(r.Prometheus.Failures <= 0.01*r.TSDBScrapes, "%.0f of prometheus's scrapes failed", r.Prometheus.Failures)
	check(inf1.Fresh == cfg.endpoints, "%d of %d endpoints fresh in the informer at the end", inf1.Fresh, cfg.endpoints)
	return r, nil
}

// poll calls ok every 200 ms until it holds, for at most d.
func poll(ctx context.Context, d time.Duration, ok func() bool) error {
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", d)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func machine() string {
	model := "?"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	mem := "?"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				mem = fmt.Sprintf("%.1f GiB", kb/(1<<20))
			}
		}
	}
	return fmt.Sprintf("%d cores (%s), %s, %s", runtime.NumCPU(), model, mem, runtime.Version())
}

// report prints the medians over rounds as a Markdown table.
func report(w io.Writer, cfg config, results []result) {
	median := func(f func(result) float64) float64 {
		v := make([]float64, len(results))
		for i, r := range results {
			v[i] = f(r)
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	fmt.Fprintf(w, "\nMedians of %d rounds (%d endpoints, %s interval, %s windows):\n\n", len(results), cfg.endpoints, cfg.interval, cfg.measure)
	fmt.Fprintln(w, "| | CPU per scrape | CPU (% of a core) | scrapes/s | failed | peak RSS | Go heap in use at the end |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, s := range []struct {
		name string
		get  func(result) side
	}{{"informer", func(r result) side { return r.Informer }}, {cfg.promName, func(r result) side { return r.Prometheus }}} {
		fmt.Fprintf(w, "| %s | %.0f µs | %.1f%% | %.0f | %.0f | %.0f MiB | %.0f MiB |\n", s.name,
			median(func(r result) float64 { return 1e6 * s.get(r).perScrape() }),
			median(func(r result) float64 { return 100 * s.get(r).CPUSeconds / r.Window }),
			median(func(r result) float64 { return s.get(r).Scrapes / r.Window }),
			median(func(r result) float64 { return s.get(r).Failures }),
			median(func(r result) float64 { return s.get(r).PeakRSS / (1 << 20) }),
			median(func(r result) float64 { return s.get(r).HeapInuse / (1 << 20) }))
	}
	fmt.Fprintf(w, "\nInformer / Prometheus CPU per scrape: %.2f (median of the rounds' ratios; rounds: ", median(result.ratio))
	for i, r := range results {
		if i > 0 {
			fmt.Fprint(w, ", ")
		}
		fmt.Fprintf(w, "%.2f", r.ratio())
	}
	fmt.Fprintf(w, "). A scrape took %.0f ms in the informer (%.1f in flight on average) and %.0f ms in Prometheus; "+
		"vllm-sim used %.2f cores, the rest of the machine %.2f.\n",
		median(func(r result) float64 { return 1e3 * r.Informer.Seconds }), median(result.inFlight),
		median(func(r result) float64 { return 1e3 * r.Prometheus.Seconds }),
		median(func(r result) float64 { return r.SimCPU / r.Window }), median(result.rest))
}
