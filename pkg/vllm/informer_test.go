package vllm

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// vllmServer serves smallExposition(running, 0, kv) or, when failing, HTTP 500.
type vllmServer struct {
	*httptest.Server
	running atomic.Int64
	failing atomic.Bool
}

func newVLLMServer(t *testing.T) *vllmServer {
	s := &vllmServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		if s.failing.Load() {
			http.Error(w, "engine dead", http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, smallExposition(float64(s.running.Load()), 3, 0.5))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *vllmServer) port(t *testing.T) string {
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

type podOption func(*corev1.Pod)

// inferencePod is a Running, Ready vLLM pod at 127.0.0.1 requesting 4 GPUs.
func inferencePod(name string, opts ...podOption) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "serving", Name: name, UID: types.UID("uid-" + name),
			Labels: map[string]string{api.LabelRole: api.RoleInference},
		},
		Spec: corev1.PodSpec{
			NodeName: "gpu-node-1",
			Containers: []corev1.Container{{
				Name: "vllm",
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{api.GPUResource: resource.MustParse("4")},
					Limits:   corev1.ResourceList{api.GPUResource: resource.MustParse("4")},
				},
			}},
		},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			PodIP:      "127.0.0.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
	for _, o := range opts {
		o(pod)
	}
	return pod
}

func withAnnotation(k, v string) podOption {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
}

func withLabel(k, v string) podOption { return func(p *corev1.Pod) { p.Labels[k] = v } }

func ownedBy(kind, name string) podOption {
	return func(p *corev1.Pod) {
		p.OwnerReferences = append(p.OwnerReferences, metav1.OwnerReference{
			APIVersion: "apps/v1", Kind: kind, Name: name, UID: "owner-uid", Controller: ptr.To(true)})
	}
}

func notReady(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }

// startInformer runs an Informer until the test ends and waits for its cache.
func startInformer(t *testing.T, client *fake.Clientset, clk *testingclock.FakeClock) *Informer {
	t.Helper()
	inf := NewInformer(client, Options{Interval: 20 * time.Millisecond, Timeout: time.Second, StaleAfter: time.Minute, Clock: clk})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	waitFor(t, "informer sync", func() bool { return inf.HasSynced() })
	return inf
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// only returns the single PodLoad in a snapshot.
func only(t *testing.T, snap []PodLoad) PodLoad {
	t.Helper()
	if len(snap) != 1 {
		t.Fatalf("Snapshot has %d pods, want 1: %+v", len(snap), snap)
	}
	return snap[0]
}

func TestInformerScrapesFailsAndGoesStale(t *testing.T) {
	srv := newVLLMServer(t)
	srv.running.Store(7)
	pod := inferencePod("chat-7d9f8b6c5-x2k4p",
		withAnnotation(api.AnnotationMetricsPort, srv.port(t)),
		withLabel("pod-template-hash", "7d9f8b6c5"),
		ownedBy("ReplicaSet", "chat-7d9f8b6c5"))
	client := fake.NewClientset(pod)
	clk := testingclock.NewFakeClock(time.Date(2026, 3, 1, 21, 0, 0, 0, time.UTC))
	start := clk.Now()

	inf := NewInformer(client, Options{Interval: 20 * time.Millisecond, Timeout: time.Second, StaleAfter: time.Minute, Clock: clk})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()

	waitFor(t, "a fresh scrape", func() bool { s := inf.Snapshot(); return len(s) == 1 && s[0].Fresh })
	got := only(t, inf.Snapshot())
	want := PodLoad{
		Namespace: "serving", Name: "chat-7d9f8b6c5-x2k4p", Service: "chat", NodeName: "gpu-node-1", GPUs: 4,
		Metrics: Metrics{Running: 7, Waiting: 3, KVCacheUsage: 0.5, Engines: 1, Models: []string{"llama"},
			PromptTokensTotal: 1200, GenerationTokensTotal: 3400},
		ScrapedAt: start, Fresh: true,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after a good scrape:\n got %+v\nwant %+v", got, want)
	}

	// A failing endpoint is not fresh at once; the last good sample stays visible.
	srv.failing.Store(true)
	waitFor(t, "the scrape error", func() bool { return only(t, inf.Snapshot()).LastError != nil })
	got = only(t, inf.Snapshot())
	if got.Fresh || !strings.Contains(got.LastError.Error(), "HTTP status 500") {
		t.Errorf("after a failed scrape: Fresh=%v LastError=%v, want not Fresh and an HTTP 500 error", got.Fresh, got.LastError)
	}
	if got.Metrics.Running != 7 || !got.ScrapedAt.Equal(start) {
		t.Errorf("after a failed scrape: Running=%v ScrapedAt=%v, want the last good sample (7 at %v)", got.Metrics.Running, got.ScrapedAt, start)
	}

	// Recovery, then no more scrapes: the sample ages out.
	srv.failing.Store(false)
	srv.running.Store(1)
	waitFor(t, "recovery", func() bool { p := only(t, inf.Snapshot()); return p.Fresh && p.Metrics.Running == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	clk.Step(time.Minute)
	if p := only(t, inf.Snapshot()); !p.Fresh {
		t.Errorf("exactly StaleAfter after the scrape: not Fresh, want Fresh")
	}
	clk.Step(time.Second)
	if p := only(t, inf.Snapshot()); p.Fresh || p.LastError != nil {
		t.Errorf("past StaleAfter: Fresh=%v LastError=%v, want not Fresh with no error", p.Fresh, p.LastError)
	}
}

func TestInformerDropsDeletedPods(t *testing.T) {
	srv := newVLLMServer(t)
	a := inferencePod("a", withAnnotation(api.AnnotationMetricsPort, srv.port(t)))
	b := inferencePod("b", withAnnotation(api.AnnotationMetricsPort, srv.port(t)))
	client := fake.NewClientset(b, a)
	inf := startInformer(t, client, testingclock.NewFakeClock(time.Now()))

	waitFor(t, "both pods fresh", func() bool {
		s := inf.Snapshot()
		return len(s) == 2 && s[0].Fresh && s[1].Fresh
	})
	if s := inf.Snapshot(); s[0].Name != "a" || s[1].Name != "b" {
		t.Fatalf("Snapshot order = %s, %s; want a, b", s[0].Name, s[1].Name)
	}
	if err := client.CoreV1().Pods("serving").Delete(context.Background(), "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deleted pod to disappear", func() bool { return len(inf.Snapshot()) == 1 })
	if p := only(t, inf.Snapshot()); p.Name != "b" || !p.Fresh {
		t.Errorf("after deleting a: %+v, want b, Fresh", p)
	}
	waitFor(t, "the deleted pod's result to be forgotten", func() bool {
		inf.mu.Lock()
		defer inf.mu.Unlock()
		_, ok := inf.endpoints[a.UID]
		return !ok
	})
}

func TestInformerPodsNotScraped(t *testing.T) {
	srv := newVLLMServer(t)
	port := withAnnotation(api.AnnotationMetricsPort, srv.port(t))
	tests := []struct {
		name    string
		pod     *corev1.Pod
		wantErr string // LastError substring; empty: never scraped, LastError nil
	}{
		{name: "not ready", pod: inferencePod("not-ready", port, notReady)},
		{name: "pending, no pod IP", pod: inferencePod("pending", port, func(p *corev1.Pod) {
			p.Status = corev1.PodStatus{Phase: corev1.PodPending}
		})},
		{name: "invalid port annotation", pod: inferencePod("bad-port", withAnnotation(api.AnnotationMetricsPort, "http")),
			wantErr: `annotation gleaner.dev/metrics-port="http" is not a port number`},
		{name: "port out of range", pod: inferencePod("big-port", withAnnotation(api.AnnotationMetricsPort, "70000")),
			wantErr: "is not a port number (1-65535)"},
		{name: "relative path annotation", pod: inferencePod("bad-path", port, withAnnotation(api.AnnotationMetricsPath, "metrics")),
			wantErr: `annotation gleaner.dev/metrics-path="metrics" must be an absolute path`},
		{name: "wrong path", pod: inferencePod("wrong-path", port, withAnnotation(api.AnnotationMetricsPath, "/stats")),
			wantErr: "HTTP status 404"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// A fresh pod alongside proves at least one scrape round has run.
			client := fake.NewClientset(tc.pod, inferencePod("zz-ok", port))
			inf := startInformer(t, client, testingclock.NewFakeClock(time.Now()))
			waitFor(t, "a scrape round", func() bool {
				s := inf.Snapshot()
				return len(s) == 2 && s[1].Fresh && (tc.wantErr == "" || s[0].LastError != nil)
			})
			p := inf.Snapshot()[0]
			if p.Fresh || p.GPUs != 4 || p.Name != tc.pod.Name {
				t.Errorf("got %s Fresh=%v GPUs=%d, want %s kept in the store, not Fresh, 4 GPUs", p.Name, p.Fresh, p.GPUs, tc.pod.Name)
			}
			switch {
			case tc.wantErr == "" && p.LastError != nil:
				t.Errorf("LastError = %v, want nil (never scraped)", p.LastError)
			case tc.wantErr != "" && (p.LastError == nil || !strings.Contains(p.LastError.Error(), tc.wantErr)):
				t.Errorf("LastError = %v, want one containing %q", p.LastError, tc.wantErr)
			}
			if !p.ScrapedAt.IsZero() {
				t.Errorf("ScrapedAt = %v, want zero", p.ScrapedAt)
			}
		})
	}
}

func TestInformerIgnoresOtherPods(t *testing.T) {
	srv := newVLLMServer(t)
	other := inferencePod("trainer", withAnnotation(api.AnnotationMetricsPort, srv.port(t)))
	other.Labels = map[string]string{"app": "trainer"}
	inf := startInformer(t, fake.NewClientset(other, inferencePod("vllm", withAnnotation(api.AnnotationMetricsPort, srv.port(t)))),
		testingclock.NewFakeClock(time.Now()))
	waitFor(t, "the inference pod", func() bool { return len(inf.Snapshot()) > 0 })
	if p := only(t, inf.Snapshot()); p.Name != "vllm" {
		t.Errorf("Snapshot has %s, want only the inference pod", p.Name)
	}
}

func TestInformerRejectsBadOptions(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{name: "selector", opts: Options{LabelSelector: "a in (b"}, wantErr: `invalid LabelSelector "a in (b"`},
		{name: "stale before next scrape", opts: Options{Interval: time.Minute, StaleAfter: time.Second}, wantErr: "StaleAfter (1s) is shorter than Interval (1m0s)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := NewInformer(fake.NewClientset(), tc.opts).Run(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Run error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestServiceName(t *testing.T) {
	tests := []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"label wins", inferencePod("p", withLabel(api.LabelService, "chat-prod"), ownedBy("ReplicaSet", "chat-5f6d")), "chat-prod"},
		{"deployment from replicaset and pod-template-hash", inferencePod("p", withLabel("pod-template-hash", "5f6d"), ownedBy("ReplicaSet", "chat-5f6d")), "chat"},
		{"hyphenated deployment name", inferencePod("p", withLabel("pod-template-hash", "5f6d"), ownedBy("ReplicaSet", "llama-3-8b-5f6d")), "llama-3-8b"},
		{"replicaset without the hash label", inferencePod("p", ownedBy("ReplicaSet", "chat-5f6d")), "chat-5f6d"},
		{"hash not a suffix of the owner", inferencePod("p", withLabel("pod-template-hash", "zzzz"), ownedBy("ReplicaSet", "chat-5f6d")), "chat-5f6d"},
		{"statefulset owner", inferencePod("big-0", ownedBy("StatefulSet", "big")), "big"},
		{"bare pod", inferencePod("solo"), "solo"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := api.ServiceName(tc.pod); got != tc.want {
				t.Errorf("serviceName = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestMetricsURL(t *testing.T) {
	tests := []struct {
		name    string
		pod     *corev1.Pod
		want    string
		wantErr string
	}{
		{name: "defaults", pod: inferencePod("p"), want: "http://127.0.0.1:8000/metrics"},
		{name: "annotations", pod: inferencePod("p", withAnnotation(api.AnnotationMetricsPort, "9090"), withAnnotation(api.AnnotationMetricsPath, "/v1/metrics")),
			want: "http://127.0.0.1:9090/v1/metrics"},
		{name: "IPv6", pod: inferencePod("p", func(p *corev1.Pod) { p.Status.PodIP = "fd00::7" }), want: "http://[fd00::7]:8000/metrics"},
		{name: "port zero", pod: inferencePod("p", withAnnotation(api.AnnotationMetricsPort, "0")), wantErr: "serving/p: annotation gleaner.dev/metrics-port=\"0\""},
		{name: "control character in path", pod: inferencePod("p", withAnnotation(api.AnnotationMetricsPath, "/me\ntrics")), wantErr: "is not a valid URL path"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := metricsURL(tc.pod, "http")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("metricsURL error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("metricsURL = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// runInformer runs an Informer with opts until the test ends and waits for its cache.
func runInformer(t *testing.T, client *fake.Clientset, opts Options) *Informer {
	t.Helper()
	inf := NewInformer(client, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	waitFor(t, "informer sync", inf.HasSynced)
	return inf
}

func TestInformerRates(t *testing.T) {
	// prompt tokens grow at 1000/s of real time; every request had a TTFT of
	// 0.1 s or less, 10 requests a second.
	var prompt atomic.Int64
	start := time.Now()
	var restarted atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secs := time.Since(start).Seconds()
		p := 1000 * secs
		if restarted.Load() {
			p = 5 // a new process: counters start over
		}
		prompt.Store(int64(p))
		fmt.Fprintf(w, `vllm:num_requests_running{engine="0"} 1
vllm:prompt_tokens_total{engine="0"} %g
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1"} %g
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf"} %g
vllm:time_to_first_token_seconds_sum{engine="0"} %g
`, p, 10*secs, 10*secs, 0.5*secs)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	client := fake.NewClientset(inferencePod("p", withAnnotation(api.AnnotationMetricsPort, u.Port())))
	inf := runInformer(t, client, Options{Interval: 100 * time.Millisecond, Timeout: time.Second})

	waitFor(t, "rates from two scrapes", func() bool { return only(t, inf.Snapshot()).Rates.Window > 0 })
	r := only(t, inf.Snapshot()).Rates
	if r.Restarted || r.Window < 50*time.Millisecond || r.Window > time.Second {
		t.Errorf("Rates window %v restarted %v, want about the 100ms interval and no restart", r.Window, r.Restarted)
	}
	// Server and informer clocks differ by the request latency; allow 30%.
	if r.PromptTokensPerSecond < 700 || r.PromptTokensPerSecond > 1300 {
		t.Errorf("PromptTokensPerSecond = %v, want about 1000", r.PromptTokensPerSecond)
	}
	if ttft := r.TimeToFirstToken; ttft.Observations <= 0 || ttft.P50 <= 0 || ttft.P99 > 0.1 || math.Abs(ttft.Mean-0.05) > 0.02 {
		t.Errorf("TimeToFirstToken = %+v, want observations, quantiles within (0, 0.1] and a mean near 0.05", ttft)
	}

	restarted.Store(true)
	waitFor(t, "the restart to be seen", func() bool { return only(t, inf.Snapshot()).Rates.Restarted })
	if r := only(t, inf.Snapshot()).Rates; r.PromptTokensPerSecond < 0 || r.PromptTokensPerSecond > 5/r.Window.Seconds()+1e-9 {
		t.Errorf("after a restart PromptTokensPerSecond = %v, want 5 tokens over the window (%v), never negative", r.PromptTokensPerSecond, r.Window)
	}
}

// TestInformerReadinessFlap: a sample taken before a pod lost readiness does
// not make it fresh again once it is Ready; only a new scrape does.
func TestInformerReadinessFlap(t *testing.T) {
	// While hang is set, requests wait; once it is cleared they are answered.
	var hang atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for hang.Load() {
			select {
			case <-time.After(5 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprint(w, smallExposition(0, 0, 0))
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	pod := inferencePod("p", withAnnotation(api.AnnotationMetricsPort, u.Port()))
	client := fake.NewClientset(pod)
	clk := testingclock.NewFakeClock(time.Now())
	inf := runInformer(t, client, Options{Interval: 20 * time.Millisecond, Timeout: 10 * time.Second, StaleAfter: time.Hour, Clock: clk})
	waitFor(t, "fresh", func() bool { return only(t, inf.Snapshot()).Fresh })

	setReady := func(ready corev1.ConditionStatus) {
		p := pod.DeepCopy()
		p.Status.Conditions[0].Status = ready
		if _, err := client.CoreV1().Pods(p.Namespace).UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the informer to see Ready="+string(ready), func() bool {
			inf.mu.Lock()
			defer inf.mu.Unlock()
			return inf.endpoints[pod.UID].pod.Status.Conditions[0].Status == ready
		})
	}
	hang.Store(true)
	setReady(corev1.ConditionFalse)
	if p := only(t, inf.Snapshot()); p.Fresh {
		t.Fatalf("not Ready: Fresh, want not")
	}
	setReady(corev1.ConditionTrue)
	if p := only(t, inf.Snapshot()); p.Fresh || p.LastError != nil || p.ScrapedAt.IsZero() {
		t.Errorf("Ready again, next scrape hanging: Fresh=%v LastError=%v ScrapedAt=%v; want not Fresh, no error, the old sample kept",
			p.Fresh, p.LastError, p.ScrapedAt)
	}
	hang.Store(false)
	waitFor(t, "fresh after a new scrape", func() bool { return only(t, inf.Snapshot()).Fresh })
}

func TestInformerNamespaces(t *testing.T) {
	srv := newVLLMServer(t)
	port := withAnnotation(api.AnnotationMetricsPort, srv.port(t))
	inNS := func(ns, name string) *corev1.Pod {
		p := inferencePod(name, port)
		p.Namespace, p.UID = ns, types.UID("uid-"+ns+"-"+name)
		return p
	}
	tests := []struct {
		name string
		opts Options
		want []string
	}{
		{name: "all", opts: Options{}, want: []string{"a/p", "b/p", "c/p"}},
		{name: "one", opts: Options{Namespace: "b"}, want: []string{"b/p"}},
		{name: "several", opts: Options{Namespaces: []string{"c", "a"}}, want: []string{"a/p", "c/p"}},
		{name: "Namespace and Namespaces together", opts: Options{Namespace: "b", Namespaces: []string{"a"}}, want: []string{"a/p", "b/p"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(inNS("a", "p"), inNS("b", "p"), inNS("c", "p"))
			tc.opts.Interval, tc.opts.Timeout = 20*time.Millisecond, time.Second
			inf := runInformer(t, client, tc.opts)
			waitFor(t, "every pod fresh", func() bool {
				s := inf.Snapshot()
				for _, p := range s {
					if !p.Fresh {
						return false
					}
				}
				return len(s) == len(tc.want)
			})
			var got []string
			for _, p := range inf.Snapshot() {
				got = append(got, p.Namespace+"/"+p.Name)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("pods = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestInformerScrapesOnlyOptedInNamespaces: watching every namespace with a
// NamespaceSelector, the pods of a namespace it does not match are never
// scraped nor listed, however they are labelled; labelling the namespace
// takes them in, and unlabelling it lets them go.
func TestInformerScrapesOnlyOptedInNamespaces(t *testing.T) {
	opted, tenant := newVLLMServer(t), newVLLMServer(t)
	var tenantScrapes atomic.Int64
	tenantHandler := tenant.Config.Handler
	tenant.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenantScrapes.Add(1)
		tenantHandler.ServeHTTP(w, r)
	})
	inNS := func(ns string, srv *vllmServer) *corev1.Pod {
		p := inferencePod("p", withAnnotation(api.AnnotationMetricsPort, srv.port(t)))
		p.Namespace, p.UID = ns, types.UID("uid-"+ns)
		return p
	}
	namespace := func(name string, optedIn bool) *corev1.Namespace {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if optedIn {
			ns.Labels = map[string]string{api.LabelInferenceNamespace: "true"}
		}
		return ns
	}
	client := fake.NewClientset(namespace("serving", true), namespace("tenant", false), inNS("serving", opted), inNS("tenant", tenant))
	selector := labels.SelectorFromSet(labels.Set{api.LabelInferenceNamespace: "true"})
	inf := runInformer(t, client, Options{Interval: 20 * time.Millisecond, Timeout: time.Second, NamespaceSelector: selector})
	listed := func() (names []string) {
		for _, p := range inf.Snapshot() {
			if p.Fresh {
				names = append(names, p.Namespace)
			}
		}
		return names
	}
	waitFor(t, "serving's pod fresh", func() bool { return reflect.DeepEqual(listed(), []string{"serving"}) })
	time.Sleep(100 * time.Millisecond) // five intervals
	if n := tenantScrapes.Load(); n != 0 || len(inf.Snapshot()) != 1 {
		t.Fatalf("the tenant namespace's pod was scraped %d times, and listed: %+v", n, inf.Snapshot())
	}

	relabel := func(name string, optedIn bool) {
		if _, err := client.CoreV1().Namespaces().Update(context.Background(), namespace(name, optedIn), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	relabel("tenant", true)
	waitFor(t, "the tenant's pod fresh once its namespace is opted in", func() bool {
		return reflect.DeepEqual(listed(), []string{"serving", "tenant"})
	})
	relabel("serving", false)
	waitFor(t, "serving's pod let go once its namespace is opted out", func() bool {
		s := inf.Snapshot()
		return len(s) == 1 && s[0].Namespace == "tenant"
	})
}

func TestInformerHTTPS(t *testing.T) {
	srv, caFile := tlsServer(t, "s3cret")
	u, _ := url.Parse(srv.URL)
	client := fake.NewClientset(inferencePod("p", withAnnotation(api.AnnotationMetricsPort, u.Port())))
	inf := runInformer(t, client, Options{
		Interval: 20 * time.Millisecond, Timeout: time.Second, Scheme: "https",
		// httptest's certificate names example.com.
		ClientOptions: ClientOptions{CAFile: caFile, TLSServerName: "example.com", BearerTokenFile: writeFile(t, "token", "s3cret")},
	})
	waitFor(t, "a fresh scrape over HTTPS", func() bool { return only(t, inf.Snapshot()).Fresh })
	if p := only(t, inf.Snapshot()); p.Metrics.Running != 1 {
		t.Errorf("Running = %v, want 1", p.Metrics.Running)
	}
}

// Any pod that carries the inference label is scraped, so the bearer token
// goes only where TLS proves who is listening.
func TestInformerRefusesToSendATokenUnverified(t *testing.T) {
	token := writeFile(t, "token", "s3cret")
	for _, opts := range []Options{
		{ClientOptions: ClientOptions{BearerTokenFile: token}},
		{Scheme: "https", ClientOptions: ClientOptions{BearerTokenFile: token}},
		{Scheme: "https", ClientOptions: ClientOptions{BearerTokenFile: token, TLSServerName: "vllm", InsecureSkipTLSVerify: true}},
	} {
		err := NewInformer(fake.NewClientset(), opts).Err()
		if err == nil || !strings.Contains(err.Error(), "BearerTokenFile is sent only over https with a verified TLSServerName") {
			t.Errorf("%+v: %v, want the token refused", opts, err)
		}
	}
}

// TestInformerScheduleIsPerEndpoint: a slow endpoint delays nobody else.
func TestInformerScheduleIsPerEndpoint(t *testing.T) {
	var fastHits, slowHits atomic.Int64
	serve := func(hits *atomic.Int64, delay time.Duration) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			time.Sleep(delay)
			fmt.Fprint(w, smallExposition(0, 0, 0))
		}))
		t.Cleanup(srv.Close)
		u, _ := url.Parse(srv.URL)
		return u.Port()
	}
	client := fake.NewClientset(
		inferencePod("fast", withAnnotation(api.AnnotationMetricsPort, serve(&fastHits, 0))),
		inferencePod("slow", withAnnotation(api.AnnotationMetricsPort, serve(&slowHits, 400*time.Millisecond))))
	runInformer(t, client, Options{Interval: 50 * time.Millisecond, Timeout: 2 * time.Second})
	time.Sleep(1200 * time.Millisecond)
	// About 24 scrapes of the fast endpoint fit in 1.2 s; scraped in rounds
	// with the slow one it would get 3.
	if fast, slow := fastHits.Load(), slowHits.Load(); fast < 12 || slow > 4 {
		t.Errorf("in 1.2s: fast endpoint scraped %d times, slow %d; want at least 12 and at most 4", fast, slow)
	}
}

func TestInformerMetrics(t *testing.T) {
	good, bad := newVLLMServer(t), newVLLMServer(t)
	bad.failing.Store(true)
	client := fake.NewClientset(
		inferencePod("good", withAnnotation(api.AnnotationMetricsPort, good.port(t))),
		inferencePod("bad", withAnnotation(api.AnnotationMetricsPort, bad.port(t))),
		inferencePod("not-ready", notReady))
	errorsBefore, _ := testutil.GetCounterMetricValue(scrapeErrors.WithLabelValues(ReasonHTTPStatus))
	durations := func() uint64 {
		vec, err := testutil.GetHistogramVecFromGatherer(legacyregistry.DefaultGatherer, "gleaner_vllm_scrape_duration_seconds", nil)
		if err != nil {
			return 0 // nothing observed yet
		}
		return vec.GetAggregatedSampleCount()
	}
	durationsBefore := durations()

	inf := NewInformer(client, Options{Interval: 20 * time.Millisecond, Timeout: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()

	gauge := func(state string) float64 {
		v, err := testutil.GetGaugeMetricValue(endpointsGauge.WithLabelValues(state))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	waitFor(t, "endpoints by state", func() bool {
		return gauge(StateFresh) == 1 && gauge(StateFailing) == 1 && gauge(StateNotReady) == 1 &&
			gauge(StatePending) == 0 && gauge(StateStale) == 0
	})
	errorsAfter, _ := testutil.GetCounterMetricValue(scrapeErrors.WithLabelValues(ReasonHTTPStatus))
	durationsAfter := durations()
	if errorsAfter-errorsBefore < 1 || durationsAfter-durationsBefore < 2 {
		t.Errorf("http_status errors +%v, scrape durations +%v; want at least 1 and 2", errorsAfter-errorsBefore, durationsAfter-durationsBefore)
	}
	// Served under the names an operator would look up.
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range families {
		names[mf.GetName()] = true
	}
	for _, name := range []string{"gleaner_vllm_scrape_duration_seconds", "gleaner_vllm_scrape_errors_total", "gleaner_vllm_scrape_endpoints"} {
		if !names[name] {
			t.Errorf("metric %s is not served by the legacy registry", name)
		}
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, s := range endpointStates {
		if v := gauge(s); v != 0 {
			t.Errorf("after Run returned, endpoints{state=%q} = %v, want 0", s, v)
		}
	}
}

// TestSnapshotDoesNotWaitForScrapes: with every worker stuck on hanging
// endpoints, Snapshot still answers at once.
func TestSnapshotDoesNotWaitForScrapes(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	u, _ := url.Parse(srv.URL)
	var pods []runtime.Object
	for n := range 4 {
		pods = append(pods, inferencePod(fmt.Sprintf("hang-%d", n), withAnnotation(api.AnnotationMetricsPort, u.Port())))
	}
	inf := runInformer(t, fake.NewClientset(pods...), Options{Interval: 10 * time.Millisecond, Timeout: 30 * time.Second, Concurrency: 2})
	time.Sleep(100 * time.Millisecond) // let both workers block
	for range 20 {
		start := time.Now()
		snap := inf.Snapshot()
		if d := time.Since(start); d > 50*time.Millisecond {
			t.Fatalf("Snapshot took %v with scrapes hanging", d)
		}
		for _, p := range snap {
			if p.Fresh {
				t.Fatalf("%s is Fresh without ever answering", p.Name)
			}
		}
	}
}

func TestInformerRejectsBadClientOptions(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{name: "scheme", opts: Options{Scheme: "ftp"}, wantErr: `Scheme "ftp" is neither http nor https`},
		{name: "TLS over http", opts: Options{ClientOptions: ClientOptions{CAFile: "ca.crt"}}, wantErr: "TLS settings are given but Scheme is http"},
		{name: "CA file missing", opts: Options{Scheme: "https", ClientOptions: ClientOptions{CAFile: dir + "/ca.crt"}}, wantErr: "reading the CA file"},
		{name: "token file missing", opts: Options{ClientOptions: ClientOptions{BearerTokenFile: dir + "/token"}}, wantErr: "reading the bearer-token file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := NewInformer(fake.NewClientset(), tc.opts).Run(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Run error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestSlimPodKeepsWhatTheInformerReads: whatever the Informer derives from a
// pod is the same from its slimmed copy.
func TestSlimPodKeepsWhatTheInformerReads(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	pod := inferencePod("chat-7d9f8b6c5-x2k4p",
		withLabel("pod-template-hash", "7d9f8b6c5"), ownedBy("ReplicaSet", "chat-7d9f8b6c5"),
		withAnnotation(api.AnnotationMetricsPort, "9090"), withAnnotation(api.AnnotationMetricsPath, "/v1/metrics"),
		withAnnotation("kubectl.kubernetes.io/last-applied-configuration", strings.Repeat("x", 4096)),
		func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "HF_HOME", Value: "/models"}}
			p.Spec.Containers[0].Args = []string{"--model", "meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size", "4"}
			p.Spec.Volumes = []corev1.Volume{{Name: "shm"}}
			p.Spec.InitContainers = []corev1.Container{
				{Name: "sidecar", RestartPolicy: &always, Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{api.GPUResource: resource.MustParse("1")}}},
				{Name: "warm-up", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{api.GPUResource: resource.MustParse("8")}}},
			}
			p.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
			p.Status.Conditions = append([]corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}, p.Status.Conditions...)
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "vllm", Image: "vllm/vllm-openai:v0.11.0", Ready: true}}
		})
	obj, err := slimPod(pod.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	slim := obj.(*corev1.Pod)
	if got, want := api.PodGPUs(slim, api.GPUResource), api.PodGPUs(pod, api.GPUResource); got != want || want != 9 {
		t.Errorf("GPUs: slim %d, full %d; want both 9 (the sidecar's 1 beside the warm-up's 8 exceed 4+1)", got, want)
	}
	gotURL, _ := metricsURL(slim, "http")
	wantURL, _ := metricsURL(pod, "http")
	if gotURL != wantURL || api.ServiceName(slim) != api.ServiceName(pod) || scrapable(slim) != scrapable(pod) || !scrapable(slim) {
		t.Errorf("slim: %s %s %v; full: %s %s %v", gotURL, api.ServiceName(slim), scrapable(slim), wantURL, api.ServiceName(pod), scrapable(pod))
	}
	if len(slim.Annotations) != 2 || slim.Spec.Volumes != nil || slim.Spec.Containers[0].Env != nil || slim.Status.ContainerStatuses != nil {
		t.Errorf("slim pod kept what the Informer never reads: %+v", slim)
	}
	notReadyPod := pod.DeepCopy()
	notReadyPod.Status.Conditions[1].Status = corev1.ConditionFalse
	if obj, _ := slimPod(notReadyPod); scrapable(obj.(*corev1.Pod)) {
		t.Errorf("a pod that is not Ready is scrapable once slimmed")
	}
}
