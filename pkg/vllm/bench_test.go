package vllm

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// Bucket layouts of vLLM V1 (vllm/v1/metrics/loggers.py).
var (
	latencyBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
	ttftBuckets    = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets     = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	tokenBuckets   = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000}
	iterBuckets    = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}
)

// vllmV1Exposition renders what a vLLM V1 server's /metrics looks like after
// running for secs seconds at 10 requests a second per engine: the Python
// process and GC collectors, HTTP metrics, and every vllm: family with its
// HELP, TYPE and _created lines. It is for benchmarks: about 45 KB for one
// engine, the size that decides parsing cost.
func vllmV1Exposition(engines int, secs float64) []byte {
	var b bytes.Buffer
	const model = "meta-llama/Llama-3.1-8B-Instruct"
	created := 1.7769301736864316e+09
	family := func(name, typ, help string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	for _, g := range []string{"0", "1", "2"} {
		if g == "0" {
			family("python_gc_objects_collected_total", "counter", "Objects collected during gc")
		}
		fmt.Fprintf(&b, "python_gc_objects_collected_total{generation=%q} %g\n", g, 1000*secs)
	}
	family("python_info", "gauge", "Python platform information")
	b.WriteString(`python_info{implementation="CPython",major="3",minor="12",patchlevel="11",version="3.12.11"} 1.0` + "\n")
	for _, p := range [][2]string{{"process_virtual_memory_bytes", "3.2e+10"}, {"process_resident_memory_bytes", "4.1e+09"},
		{"process_start_time_seconds", "1.7769301e+09"}, {"process_cpu_seconds_total", strconv.FormatFloat(secs*1.5, 'g', -1, 64)},
		{"process_open_fds", "87"}, {"process_max_fds", "1.048576e+06"}} {
		family(p[0], "gauge", "Process metric.")
		fmt.Fprintf(&b, "%s %s\n", p[0], p[1])
	}
	family("http_requests_total", "counter", "Total number of requests by method, status and handler.")
	for _, h := range []string{"/v1/chat/completions", "/v1/completions", "/metrics", "/health"} {
		fmt.Fprintf(&b, "http_requests_total{handler=%q,method=\"POST\",status=\"2xx\"} %g\n", h, 10*secs)
	}
	family("http_request_duration_seconds", "histogram", "Latency with only few buckets by handler.")
	for _, h := range []string{"/v1/chat/completions", "/v1/completions", "/metrics", "/health"} {
		for _, le := range []string{"0.1", "0.5", "1.0", "+Inf"} {
			fmt.Fprintf(&b, "http_request_duration_seconds_bucket{handler=%q,le=%q,method=\"POST\"} %g\n", h, le, 10*secs)
		}
		fmt.Fprintf(&b, "http_request_duration_seconds_count{handler=%q,method=\"POST\"} %g\n", h, 10*secs)
		fmt.Fprintf(&b, "http_request_duration_seconds_sum{handler=%q,method=\"POST\"} %g\n", h, secs)
	}

	perEngine := func(name, typ, help string, line func(labels string)) {
		family(name, typ, help)
		for e := range engines {
			line(fmt.Sprintf(`engine="%d",model_name=%q`, e, model))
		}
	}
	gauge := func(name string, v float64) {
		perEngine(name, "gauge", "vLLM gauge.", func(l string) { fmt.Fprintf(&b, "%s{%s} %g\n", name, l, v) })
	}
	counter := func(name string, v float64) {
		perEngine(name+"_total", "counter", "vLLM counter.", func(l string) { fmt.Fprintf(&b, "%s_total{%s} %g\n", name, l, v) })
		perEngine(name+"_created", "gauge", "vLLM counter.", func(l string) { fmt.Fprintf(&b, "%s_created{%s} %g\n", name, l, created) })
	}
	// histogram: n observations spread evenly over the first half of the buckets.
	histogram := func(name string, bounds []float64, n float64) {
		perEngine(name, "histogram", "vLLM histogram.", func(l string) {
			for i, le := range bounds {
				fmt.Fprintf(&b, "%s_bucket{%s,le=\"%g\"} %g\n", name, l, le, math.Min(n, n*float64(i+1)/float64(len(bounds)/2)))
			}
			fmt.Fprintf(&b, "%s_bucket{%s,le=\"+Inf\"} %g\n%s_count{%s} %g\n%s_sum{%s} %g\n", name, l, n, name, l, n, name, l, n*bounds[len(bounds)/4])
		})
		perEngine(name+"_created", "gauge", "vLLM histogram.", func(l string) { fmt.Fprintf(&b, "%s_created{%s} %g\n", name, l, created) })
	}
	requests := 10 * secs
	gauge("vllm:num_requests_running", 12)
	gauge("vllm:num_requests_waiting", 2)
	gauge("vllm:kv_cache_usage_perc", 0.42)
	family("vllm:engine_sleep_state", "gauge", "Engine sleep state.")
	for e := range engines {
		for _, s := range []string{"awake", "weights_offloaded", "discard_all"} {
			v := 0
			if s == "awake" {
				v = 1
			}
			fmt.Fprintf(&b, "vllm:engine_sleep_state{engine=\"%d\",model_name=%q,sleep_state=%q} %d\n", e, model, s, v)
		}
	}
	family("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig.")
	b.WriteString(`vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",gpu_memory_utilization="0.9",num_cpu_blocks="None",num_gpu_blocks="81767",prefix_caching_hash_algo="sha256",swap_space="4"} 1.0` + "\n")
	counter("vllm:prefix_cache_queries", 900*requests)
	counter("vllm:prefix_cache_hits", 300*requests)
	counter("vllm:num_preemptions", requests/100)
	counter("vllm:prompt_tokens", 1000*requests)
	counter("vllm:generation_tokens", 250*requests)
	family("vllm:request_success_total", "counter", "Count of successfully processed requests.")
	for e := range engines {
		for _, r := range []string{"stop", "length", "abort", "error"} {
			fmt.Fprintf(&b, "vllm:request_success_total{engine=\"%d\",finished_reason=%q,model_name=%q} %g\n", e, r, model, requests/4)
		}
	}
	histogram("vllm:iteration_tokens_total", iterBuckets, 20*requests)
	histogram("vllm:request_prompt_tokens", tokenBuckets, requests)
	histogram("vllm:request_generation_tokens", tokenBuckets, requests)
	histogram("vllm:request_max_num_generation_tokens", tokenBuckets, requests)
	histogram("vllm:request_params_n", []float64{1, 2, 5, 10, 20}, requests)
	histogram("vllm:request_params_max_tokens", tokenBuckets, requests)
	histogram("vllm:time_to_first_token_seconds", ttftBuckets, requests)
	histogram("vllm:time_per_output_token_seconds", itlBuckets, 250*requests)
	histogram("vllm:inter_token_latency_seconds", itlBuckets, 250*requests)
	histogram("vllm:e2e_request_latency_seconds", latencyBuckets, requests)
	histogram("vllm:request_queue_time_seconds", latencyBuckets, requests)
	histogram("vllm:request_inference_time_seconds", latencyBuckets, requests)
	histogram("vllm:request_prefill_time_seconds", latencyBuckets, requests)
	histogram("vllm:request_decode_time_seconds", latencyBuckets, requests)
	return b.Bytes()
}

// TestBenchmarkExposition keeps the benchmark honest: its body must parse
// into every signal, so the benchmark measures the full parse path.
func TestBenchmarkExposition(t *testing.T) {
	m, err := Parse(bytes.NewReader(vllmV1Exposition(2, 100)))
	if err != nil {
		t.Fatal(err)
	}
	if m.Running != 24 || m.Waiting != 4 || math.Abs(m.KVCacheUsage-0.42) > 1e-9 || m.Engines != 2 ||
		m.PromptTokensTotal != 2*1e6 || m.PreemptionsTotal != 20 ||
		m.QueueTime.Count != 2000 || m.TimeToFirstToken.Count != 2000 || m.InterTokenLatency.Count != 2*250*1000 {
		t.Errorf("Parse(benchmark exposition) = %+v", m)
	}
}

// BenchmarkParse is the CPU of parsing one vLLM V1 exposition.
func BenchmarkParse(b *testing.B) {
	for _, engines := range []int{1, 4} {
		body := vllmV1Exposition(engines, 3600)
		b.Run(fmt.Sprintf("engines=%d,bytes=%d", engines, len(body)), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(bytes.NewReader(body)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkScrape is one scrape over a kept-alive loopback connection; the
// server runs in this process, so its CPU is included.
func BenchmarkScrape(b *testing.B) {
	body := vllmV1Exposition(1, 3600)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) }))
	defer srv.Close()
	client, err := NewHTTPClient(ClientOptions{})
	if err != nil {
		b.Fatal(err)
	}
	s := &Scraper{Client: client}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Scrape(context.Background(), srv.URL); err != nil {
			b.Fatal(err)
		}
	}
}

// benchServeEnv makes this test binary serve endpoints instead of testing (see TestMain).
const benchServeEnv = "GLEANER_BENCH_SERVE_ENDPOINTS"

func TestMain(m *testing.M) {
	if n := os.Getenv(benchServeEnv); n != "" {
		serveBenchEndpoints(n)
		return
	}
	os.Exit(m.Run())
}

// serveBenchEndpoints listens on n loopback ports, prints them one per line,
// then "ready", and serves until stdin closes. All endpoints serve the same
// body, re-rendered every 100 ms so counters and histograms keep growing.
func serveBenchEndpoints(n string) {
	count, err := strconv.Atoi(n)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	start := time.Now()
	var body atomic.Pointer[[]byte]
	render := func() {
		b := vllmV1Exposition(1, 3600+time.Since(start).Seconds())
		body.Store(&b)
	}
	render()
	go func() {
		for range time.Tick(100 * time.Millisecond) {
			render()
		}
	}()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := *body.Load()
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
	})}
	out := bufio.NewWriter(os.Stdout)
	for range count {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, "listening:", err)
			os.Exit(2)
		}
		go srv.Serve(l)
		fmt.Fprintln(out, l.Addr().(*net.TCPAddr).Port)
	}
	fmt.Fprintln(out, "ready")
	out.Flush()
	buf := make([]byte, 1)
	os.Stdin.Read(buf) // returns when the parent closes stdin or exits
}

// cpuTime is this process's user+system CPU time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rssBytes is this process's resident set size.
func rssBytes(b *testing.B) float64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb * 1024
		}
	}
	b.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// procCPU is the user+system CPU time of process pid, from /proc/pid/stat.
func procCPU(b *testing.B, pid int) time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	const clockTicks = 100 // USER_HZ on Linux
	return time.Duration((utime + stime) / clockTicks * float64(time.Second))
}

// machineBusy is the CPU time all processes on the machine have used, from /proc/stat.
func machineBusy(b *testing.B) time.Duration {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		b.Fatal(err)
	}
	line, _, _ := strings.Cut(string(stat), "\n")
	fields := strings.Fields(line)[1:] // user nice system idle iowait irq softirq steal ...
	var busy float64
	for i, f := range fields {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		v, _ := strconv.ParseFloat(f, 64)
		busy += v
	}
	return time.Duration(busy / 100 * float64(time.Second))
}

func loadAverage() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func scrapeCount() float64 {
	vec, err := testutil.GetHistogramVecFromGatherer(legacyregistry.DefaultGatherer, "gleaner_vllm_scrape_duration_seconds", nil)
	if err != nil {
		return 0
	}
	return float64(vec.GetAggregatedSampleCount())
}

// BenchmarkInformer2000Endpoints runs the Informer against 2,000 vLLM
// endpoints served over loopback by a child process (so their CPU is not
// counted) at the default 5 s interval, and measures this process for b.N
// intervals: run it with -benchtime=6x for 30 s. It reports the CPU of the
// whole process (informer, client-go, the fake API, GC) per scrape and in
// cores, and its peak resident memory.
func BenchmarkInformer2000Endpoints(b *testing.B) {
	const endpoints = 2000
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), benchServeEnv+"="+strconv.Itoa(endpoints))
	child.Stderr = os.Stderr
	stdin, err := child.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := child.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		stdin.Close()
		child.Wait()
	}()
	var ports []string
	lines := bufio.NewScanner(stdout)
	for lines.Scan() && lines.Text() != "ready" {
		ports = append(ports, lines.Text())
	}
	if len(ports) != endpoints {
		b.Fatalf("child served %d endpoints, want %d", len(ports), endpoints)
	}

	// The simple clientset: the field-managing one spends seconds per
	// thousand pods building REST mappers, and its managed fields would only
	// be stripped by the informer anyway.
	client := fake.NewSimpleClientset() //nolint:staticcheck // see above
	for n, port := range ports {
		pod := inferencePod(fmt.Sprintf("vllm-%04d", n), withAnnotation(api.AnnotationMetricsPort, port))
		if err := client.Tracker().Add(pod); err != nil {
			b.Fatal(err)
		}
	}
	inf := NewInformer(client, Options{Interval: DefaultInterval})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	freshCount := func() int {
		fresh := 0
		for _, p := range inf.Snapshot() {
			if p.Fresh {
				fresh++
			}
		}
		return fresh
	}
	// Warm up: every endpoint scraped, connections open, rates flowing.
	deadline := time.Now().Add(4 * DefaultInterval)
	for freshCount() < endpoints {
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d endpoints fresh after %v", freshCount(), endpoints, 4*DefaultInterval)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(DefaultInterval)
	runtime.GC()

	b.ResetTimer()
	load := loadAverage()
	cpu0, wall0, scrapes0, server0, machine0 := cpuTime(b), time.Now(), scrapeCount(), procCPU(b, child.Process.Pid), machineBusy(b)
	var peakRSS float64
	var mem runtime.MemStats
	var peakHeap uint64
	for range b.N {
		// The controller reads a Snapshot every interval; so does this loop.
		for tick := range 5 {
			time.Sleep(DefaultInterval / 5)
			peakRSS = max(peakRSS, rssBytes(b))
			runtime.ReadMemStats(&mem)
			peakHeap = max(peakHeap, mem.HeapInuse)
			if tick == 4 {
				inf.Snapshot()
			}
		}
	}
	cpu, wall, scrapes, server, machine := cpuTime(b)-cpu0, time.Since(wall0), scrapeCount()-scrapes0, procCPU(b, child.Process.Pid)-server0, machineBusy(b)-machine0
	b.StopTimer()

	fresh := freshCount()
	b.ReportMetric(cpu.Seconds()/wall.Seconds(), "cores")
	b.ReportMetric(float64(cpu.Microseconds())/scrapes, "cpu-µs/scrape")
	b.ReportMetric(scrapes/wall.Seconds(), "scrapes/s")
	b.ReportMetric(peakRSS/(1<<20), "peak-rss-MiB")
	b.ReportMetric(float64(peakHeap)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(fresh), "fresh-endpoints")
	b.Logf("%d endpoints, %d bytes each, %v: %.0f scrapes, CPU %v (%.3f cores, %.0f µs/scrape), peak RSS %.1f MiB, peak heap %.1f MiB, %d fresh at the end; "+
		"the serving child used %.3f cores, everything else on the machine %.3f; load average before: %s",
		endpoints, len(vllmV1Exposition(1, 3600)), wall.Round(time.Millisecond), scrapes, cpu.Round(time.Millisecond),
		cpu.Seconds()/wall.Seconds(), float64(cpu.Microseconds())/scrapes, peakRSS/(1<<20), float64(peakHeap)/(1<<20), fresh,
		server.Seconds()/wall.Seconds(), (machine-cpu-server).Seconds()/wall.Seconds(), load)
	if fresh != endpoints {
		b.Errorf("%d of %d endpoints fresh at the end", fresh, endpoints)
	}
}
