package vllm

import (
	"context"
	"fmt"
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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// vllmServer serves exposition(running, 0, kv) or, when failing, HTTP 500.
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
		fmt.Fprint(w, exposition(float64(s.running.Load()), 3, 0.5))
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
		_, ok := inf.results[a.UID]
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
			if got := serviceName(tc.pod); got != tc.want {
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
			got, err := metricsURL(tc.pod)
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
