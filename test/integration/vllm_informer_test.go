package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"

	"github.com/gleaner-dev/gleaner/internal/vllmsim"
	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/vllm"
)

// informerEndpoint is a real HTTP server on 127.0.0.1 standing in for one
// vLLM pod's /metrics, behaving as its handler says. hits counts requests.
type informerEndpoint struct {
	srv  *httptest.Server
	hits atomic.Int64
}

func (e *informerEndpoint) port(t *testing.T) string {
	u, err := url.Parse(e.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

// simExposition renders one vllm-sim endpoint (model llama, KV-cache 0.125)
// with running requests; its counters grow with the load between renders.
func simExposition() func(running float64) []byte {
	e := vllmsim.NewEndpoint(time.Now())
	return func(running float64) []byte {
		return e.Render(vllmsim.Load{Model: "llama", Running: running, KVCache: 0.125}, time.Now())
	}
}

func startInformerEndpoint(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, hit int64)) *informerEndpoint {
	e := &informerEndpoint{}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handle(w, r, e.hits.Add(1))
	}))
	t.Cleanup(e.srv.Close)
	return e
}

// createScrapablePod creates an inference pod whose metrics are at port on
// 127.0.0.1 and, when ready, marks it Running and Ready the way a kubelet would.
func createScrapablePod(t *testing.T, client kubernetes.Interface, ns, name, port string, ready bool, podLabels map[string]string) *v1.Pod {
	t.Helper()
	ctx := context.Background()
	if podLabels == nil {
		podLabels = map[string]string{api.LabelRole: api.RoleInference}
	}
	pod, err := client.CoreV1().Pods(ns).Create(ctx, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: podLabels,
			Annotations: map[string]string{api.AnnotationMetricsPort: port}},
		Spec: v1.PodSpec{
			NodeName:   "gpu-node-1",
			Containers: []v1.Container{{Name: "vllm", Image: "vllm/vllm-openai"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s/%s: %v", ns, name, err)
	}
	return setPodReady(t, client, pod, ready)
}

func setPodReady(t *testing.T, client kubernetes.Interface, pod *v1.Pod, ready bool) *v1.Pod {
	t.Helper()
	status := v1.ConditionFalse
	if ready {
		status = v1.ConditionTrue
	}
	p := pod.DeepCopy()
	p.Status = v1.PodStatus{
		Phase:      v1.PodRunning,
		PodIP:      "127.0.0.1",
		PodIPs:     []v1.PodIP{{IP: "127.0.0.1"}},
		Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: status, LastTransitionTime: metav1.Now()}},
	}
	p, err := client.CoreV1().Pods(p.Namespace).UpdateStatus(context.Background(), p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("setting pod %s/%s Ready=%v: %v", pod.Namespace, pod.Name, ready, err)
	}
	return p
}

func scrapeReason(err error) string {
	var se *vllm.ScrapeError
	if errors.As(err, &se) {
		return se.Reason
	}
	return ""
}

// TestVLLMInformerAroundBadEndpoints runs the metrics informer against a real
// apiserver and real HTTP servers, some slow, failing, hanging, oversized,
// garbled or flapping. It keeps the healthy ones fresh, marks the bad ones
// unknown (not Fresh) with the reason, and Snapshot never waits for a scrape.
func TestVLLMInformerAroundBadEndpoints(t *testing.T) {
	cp := startControlPlane(t)
	for _, ns := range []string{"vi-serving", "vi-batch", "vi-elsewhere"} {
		createNamespace(t, cp.client, ns)
	}
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })

	healthy := func(running float64) func(http.ResponseWriter, *http.Request, int64) {
		render := simExposition()
		return func(w http.ResponseWriter, r *http.Request, hit int64) { _, _ = w.Write(render(running)) }
	}
	slow, oversized, flapping := simExposition(), simExposition(), simExposition()
	ep := map[string]*informerEndpoint{
		"healthy-a": startInformerEndpoint(t, healthy(3)),
		"healthy-b": startInformerEndpoint(t, healthy(5)),
		// Slower than the interval, within the timeout.
		"slow": startInformerEndpoint(t, func(w http.ResponseWriter, r *http.Request, hit int64) {
			time.Sleep(500 * time.Millisecond)
			_, _ = w.Write(slow(1))
		}),
		"hanging": startInformerEndpoint(t, func(w http.ResponseWriter, r *http.Request, hit int64) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}),
		"failing": startInformerEndpoint(t, func(w http.ResponseWriter, r *http.Request, hit int64) {
			http.Error(w, "engine dead", http.StatusInternalServerError)
		}),
		// Valid text, but a megabyte of it: over the 256 KiB cap below.
		"oversized": startInformerEndpoint(t, func(w http.ResponseWriter, r *http.Request, hit int64) {
			_, _ = w.Write(oversized(0))
			fmt.Fprint(w, strings.Repeat("# padding padding padding padding padding padding padding padding\n", 16<<10))
		}),
		"garbage": startInformerEndpoint(t, func(w http.ResponseWriter, r *http.Request, hit int64) {
			fmt.Fprint(w, "<html><body>502 Bad Gateway</body></html>\n")
		}),
		// Every other answer fails.
		"flapping": startInformerEndpoint(t, func(w http.ResponseWriter, r *http.Request, hit int64) {
			if hit%2 == 0 {
				http.Error(w, "overloaded", http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write(flapping(2))
		}),
		"late":        startInformerEndpoint(t, healthy(4)),
		"other-ns":    startInformerEndpoint(t, healthy(9)),
		"unlabelled":  startInformerEndpoint(t, healthy(9)),
		"in-batch-ns": startInformerEndpoint(t, healthy(6)),
		"goes-away":   startInformerEndpoint(t, healthy(7)),
		"loses-ready": startInformerEndpoint(t, healthy(8)),
		"never-ready": startInformerEndpoint(t, healthy(9)),
	}
	pods := map[string]*v1.Pod{}
	for _, name := range []string{"healthy-a", "healthy-b", "slow", "hanging", "failing", "oversized", "garbage", "flapping", "goes-away", "loses-ready"} {
		pods[name] = createScrapablePod(t, cp.client, "vi-serving", name, ep[name].port(t), true, nil)
	}
	pods["in-batch-ns"] = createScrapablePod(t, cp.client, "vi-batch", "in-batch-ns", ep["in-batch-ns"].port(t), true, nil)
	pods["late"] = createScrapablePod(t, cp.client, "vi-serving", "late", ep["late"].port(t), false, nil)
	pods["never-ready"] = createScrapablePod(t, cp.client, "vi-serving", "never-ready", ep["never-ready"].port(t), false, nil)
	createScrapablePod(t, cp.client, "vi-elsewhere", "other-ns", ep["other-ns"].port(t), true, nil)
	createScrapablePod(t, cp.client, "vi-serving", "unlabelled", ep["unlabelled"].port(t), true, map[string]string{"app": "vllm"})

	gauge := func(state string) float64 {
		families, err := legacyregistry.DefaultGatherer.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range families {
			if mf.GetName() != "gleaner_vllm_scrape_endpoints" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if testutil.LabelsMatch(m, map[string]string{"state": state}) {
					return m.GetGauge().GetValue()
				}
			}
		}
		return 0 // not set yet
	}
	errorCount := func(reason string) float64 {
		v, err := testutil.GetCounterValuesFromGatherer(legacyregistry.DefaultGatherer, "gleaner_vllm_scrape_errors_total", nil, "reason")
		if err != nil {
			return 0 // no error counted yet
		}
		return v[reason]
	}
	vllm.RegisterMetrics()
	gaugeBefore := map[string]float64{}
	for _, s := range []string{vllm.StateFresh, vllm.StateFailing, vllm.StateNotReady} {
		gaugeBefore[s] = gauge(s)
	}
	errorsBefore := map[string]float64{}
	for _, r := range []string{vllm.ReasonTimeout, vllm.ReasonHTTPStatus, vllm.ReasonBodyTooLarge, vllm.ReasonParse} {
		errorsBefore[r] = errorCount(r)
	}

	const interval = 200 * time.Millisecond
	inf := vllm.NewInformer(cp.client, vllm.Options{
		Namespaces:   []string{"vi-serving", "vi-batch"},
		Interval:     interval,
		Timeout:      time.Second,
		StaleAfter:   2 * time.Second,
		Concurrency:  4,
		MaxBodyBytes: 256 << 10,
	})
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- inf.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-runDone:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return within 10s of its context ending")
		}
	})

	// The caller: Snapshot in a loop the whole time, never waiting long.
	type sample struct {
		at   time.Time
		pods map[string]vllm.PodLoad
	}
	var (
		mu       sync.Mutex
		samples  []sample
		slowest  time.Duration
		stopPoll = make(chan struct{})
		polled   = make(chan struct{})
	)
	go func() {
		defer close(polled)
		for {
			select {
			case <-stopPoll:
				return
			case <-time.After(10 * time.Millisecond):
			}
			start := time.Now()
			snap := inf.Snapshot()
			took := time.Since(start)
			s := sample{at: start, pods: map[string]vllm.PodLoad{}}
			for _, p := range snap {
				s.pods[p.Name] = p
			}
			mu.Lock()
			samples = append(samples, s)
			slowest = max(slowest, took)
			mu.Unlock()
		}
	}()
	latest := func() map[string]vllm.PodLoad {
		mu.Lock()
		defer mu.Unlock()
		if len(samples) == 0 {
			return nil
		}
		return samples[len(samples)-1].pods
	}

	eventually(t, 30*time.Second, "the healthy and slow pods to be fresh and every bad one to have failed", func(context.Context) (bool, error) {
		s := latest()
		for _, name := range []string{"healthy-a", "healthy-b", "slow", "in-batch-ns", "goes-away", "loses-ready"} {
			if !s[name].Fresh {
				return false, nil
			}
		}
		for _, name := range []string{"hanging", "failing", "oversized", "garbage"} {
			if s[name].LastError == nil {
				return false, nil
			}
		}
		return true, nil
	})

	// Watch for 3 s with everything running.
	watchFrom := time.Now()
	hitsBefore := ep["healthy-a"].hits.Load()
	time.Sleep(3 * time.Second)
	hitsDuring := ep["healthy-a"].hits.Load() - hitsBefore

	mu.Lock()
	watched := []sample{}
	for _, s := range samples {
		if s.at.After(watchFrom) {
			watched = append(watched, s)
		}
	}
	mu.Unlock()
	if len(watched) < 50 {
		t.Fatalf("only %d snapshots in 3s; the caller was held up", len(watched))
	}
	var flapFresh, flapFailing int
	for _, s := range watched {
		for _, name := range []string{"healthy-a", "healthy-b", "in-batch-ns", "slow"} {
			if p := s.pods[name]; !p.Fresh {
				t.Errorf("%s: %s not Fresh (LastError %v) while it answered every scrape", s.at.Format("15:04:05.000"), name, p.LastError)
			}
		}
		for _, name := range []string{"hanging", "failing", "oversized", "garbage", "late", "never-ready"} {
			if p := s.pods[name]; p.Fresh {
				t.Errorf("%s: %s is Fresh; a pod without a good sample must read as unknown", s.at.Format("15:04:05.000"), name)
			}
		}
		for _, name := range []string{"other-ns", "unlabelled"} {
			if _, ok := s.pods[name]; ok {
				t.Errorf("%s is in the Snapshot; it is outside the watched namespaces or selector", name)
			}
		}
		switch p := s.pods["flapping"]; {
		case p.Fresh && p.LastError == nil:
			flapFresh++
		case !p.Fresh && scrapeReason(p.LastError) == vllm.ReasonHTTPStatus:
			flapFailing++
		default:
			t.Errorf("flapping: Fresh=%v LastError=%v; want Fresh without error, or not Fresh with an HTTP status error", p.Fresh, p.LastError)
		}
	}
	if flapFresh == 0 || flapFailing == 0 {
		t.Errorf("flapping endpoint seen fresh %d times and failing %d times; want both, as it alternates", flapFresh, flapFailing)
	}
	// 3 s at a 200 ms interval is 15 scrapes; the hanging and slow endpoints
	// must not hold the healthy one back.
	if hitsDuring < 10 {
		t.Errorf("healthy-a scraped %d times in 3s at a %v interval, want at least 10: slow endpoints are holding it back", hitsDuring, interval)
	}
	if ep["never-ready"].hits.Load() != 0 || ep["late"].hits.Load() != 0 {
		t.Errorf("pods that are not Ready were scraped (%d, %d times)", ep["never-ready"].hits.Load(), ep["late"].hits.Load())
	}

	s := latest()
	for name, reason := range map[string]string{
		"hanging":   vllm.ReasonTimeout,
		"failing":   vllm.ReasonHTTPStatus,
		"oversized": vllm.ReasonBodyTooLarge,
		"garbage":   vllm.ReasonParse,
	} {
		p := s[name]
		if got := scrapeReason(p.LastError); got != reason {
			t.Errorf("%s: LastError %v (reason %q), want reason %q", name, p.LastError, got, reason)
		}
		if p.LastError != nil && !strings.Contains(p.LastError.Error(), ep[name].srv.URL[len("http://"):]) {
			t.Errorf("%s: LastError %q does not name the endpoint", name, p.LastError)
		}
		if p.Metrics.Running != 0 || !p.ScrapedAt.IsZero() {
			t.Errorf("%s: %+v, want no sample at all", name, p)
		}
		if delta := errorCount(reason) - errorsBefore[reason]; delta < 1 {
			t.Errorf("gleaner_vllm_scrape_errors_total{reason=%q} rose by %v, want at least 1", reason, delta)
		}
	}
	if p := s["healthy-a"]; p.Metrics.Running != 3 || p.Metrics.KVCacheUsage != 0.125 || p.Service != "healthy-a" ||
		p.Rates.Window <= 0 || p.Rates.PromptTokensPerSecond <= 0 {
		t.Errorf("healthy-a = %+v, want Running 3, KV 0.125, service healthy-a and a prompt-token rate", p)
	}
	if d := gauge(vllm.StateFailing) - gaugeBefore[vllm.StateFailing]; d < 4 {
		t.Errorf("gleaner_vllm_scrape_endpoints{state=failing} rose by %v, want at least 4 (hanging, failing, oversized, garbage)", d)
	}
	if d := gauge(vllm.StateNotReady) - gaugeBefore[vllm.StateNotReady]; d != 2 {
		t.Errorf("gleaner_vllm_scrape_endpoints{state=not_ready} rose by %v, want 2 (late, never-ready)", d)
	}

	// Changes through the API: a pod becomes Ready, one loses readiness, one goes away.
	setPodReady(t, cp.client, pods["late"], true)
	setPodReady(t, cp.client, pods["loses-ready"], false)
	if err := cp.client.CoreV1().Pods("vi-serving").Delete(context.Background(), "goes-away", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "late fresh, loses-ready not fresh, goes-away gone", func(context.Context) (bool, error) {
		s := latest()
		_, present := s["goes-away"]
		return s["late"].Fresh && !s["loses-ready"].Fresh && !present, nil
	})
	if p := latest()["loses-ready"]; p.LastError != nil || p.ScrapedAt.IsZero() {
		t.Errorf("loses-ready: LastError %v ScrapedAt %v; want its last good sample kept and no error", p.LastError, p.ScrapedAt)
	}

	close(stopPoll)
	<-polled
	mu.Lock()
	defer mu.Unlock()
	if slowest > 100*time.Millisecond {
		t.Errorf("the slowest Snapshot took %v while endpoints hung; it must not wait for scrapes", slowest)
	}
	t.Logf("%d snapshots, slowest %v; healthy-a scraped %d times in 3s", len(samples), slowest, hitsDuring)
}
