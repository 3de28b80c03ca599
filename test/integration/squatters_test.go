package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// squatting runs gleaner-controller as a process beside a tenant's namespace,
// not opted in as inference, holding pods labelled as inference: some whose
// /metrics hang until the scrape times out (ten for each scrape slot: enough
// to leave the real replicas stale if they were scraped), and some serving 4
// MiB of 87,000 distinct model names. None of them may be scraped: the real
// replica stays fresh, no verdict moves and the controller's heap stays flat.
func squatting(t *testing.T, env *harvestEnv, restartController func()) {
	t.Helper() // its lines are the fault scenario's: make test-faults shows them
	const (
		ns          = "squatters"
		concurrency = 16
		hanging     = 10 * concurrency
		cardinal    = 20
	)
	bin := buildCommands(t, "gleaner-controller")
	kubeconfig := filepath.Join(t.TempDir(), "admin.kubeconfig")
	writeKubeconfig(t, env.cp.config, kubeconfig)
	port := freePort(t)
	env.stopController()
	defer restartController()
	ctrl := startControllerProcess(t, bin, "gleaner-controller-squatters", kubeconfig, 2*time.Second, []string{"GOGC=25"},
		"--secure-port="+strconv.Itoa(port), "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
		"--scrape-concurrency="+strconv.Itoa(concurrency))
	defer ctrl.stop(t)
	waitFor(t, "the controller serving /metrics", 60*time.Second, func() bool { _, err := readMetric(port, "go_memstats_heap_inuse_bytes"); return err == nil })
	waitFor(t, "chat-0 scraped by the new controller", 30*time.Second, func() bool {
		fresh, err := readMetric(port, `gleaner_vllm_scrape_endpoints{state="fresh"}`)
		return err == nil && fresh == 1
	})
	env.waitVerdict("gpu-a", open(4), 20*time.Second)
	env.waitVerdict("gpu-b", open(8), 20*time.Second)
	lowestHeap := func() float64 {
		low := metricValue(t, port, "go_memstats_heap_inuse_bytes")
		for range 10 {
			time.Sleep(300 * time.Millisecond)
			low = min(low, metricValue(t, port, "go_memstats_heap_inuse_bytes"))
		}
		return low
	}
	heapBefore := lowestHeap()

	var scrapes atomic.Int64
	serve := func(h http.HandlerFunc) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { scrapes.Add(1); h(w, r) }))
		t.Cleanup(srv.Close)
		return strconv.Itoa(srv.Listener.Addr().(*net.TCPAddr).Port)
	}
	hangPort := serve(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	huge := manyModelsExposition(87_000)
	hugePort := serve(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(huge) })

	createNamespace(t, env.client, ns)
	createGPUNode(t, env.client, ns, 0, nil) // their own node: pod slots elsewhere stay free
	defer func() {
		zero := int64(0)
		if err := env.client.CoreV1().Pods(ns).DeleteCollection(env.ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
			t.Error(err)
		}
		waitFor(t, "the squatters gone", 60*time.Second, func() bool { return len(listPods(t, env, ns)) == 0 })
		deleteNamespaceNow(t, env, ns)
		_ = env.client.CoreV1().Nodes().Delete(env.ctx, ns, metav1.DeleteOptions{})
	}()
	var names []string
	for i := range hanging {
		names = append(names, fmt.Sprintf("hanging-%03d", i))
	}
	for i := range cardinal {
		names = append(names, fmt.Sprintf("cardinal-%02d", i))
	}
	start := time.Now()
	work := make(chan string)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for name := range work {
				metricsPort := hangPort
				if strings.HasPrefix(name, "cardinal-") {
					metricsPort = hugePort
				}
				_, err := env.client.CoreV1().Pods(ns).Create(context.Background(), &v1.Pod{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
						Labels:      map[string]string{api.LabelRole: api.RoleInference},
						Annotations: map[string]string{api.AnnotationMetricsPort: metricsPort}},
					Spec: v1.PodSpec{NodeName: ns, Containers: []v1.Container{{Name: "vllm", Image: "vllm/vllm-openai"}}},
				}, metav1.CreateOptions{})
				if err != nil {
					t.Errorf("creating %s: %v", name, err)
				}
			}
		})
	}
	for _, name := range names {
		work <- name
	}
	close(work)
	wg.Wait()
	waitFor(t, "every squatter Running and Ready", 120*time.Second, func() bool {
		ready := 0
		for _, p := range listPods(t, env, ns) {
			if p.Status.Phase == v1.PodRunning && p.Status.PodIP != "" {
				ready++
			}
		}
		return ready == len(names)
	})
	t.Logf("%d squatters created and running in %v", len(names), time.Since(start).Round(time.Millisecond))

	// Eight planning rounds' worth of looks: chat-0 stays the one endpoint,
	// fresh, and the verdicts stay put.
	const looks = 16
	freshLooks, openLooks := 0, 0
	var worst []string
	for range looks {
		time.Sleep(500 * time.Millisecond)
		if fresh, err := readMetric(port, `gleaner_vllm_scrape_endpoints{state="fresh"}`); err == nil && fresh == 1 {
			freshLooks++
		}
		a, b := env.verdict("gpu-a"), env.verdict("gpu-b")
		if a == open(4) && b == open(8) {
			openLooks++
		} else {
			worst = append(worst, fmt.Sprintf("gpu-a %s/%d gpu-b %s/%d", a.State, a.HarvestableGPUs, b.State, b.HarvestableGPUs))
		}
	}
	tracked := 0.0
	for _, state := range []string{"fresh", "failing", "stale", "pending", "not_ready"} {
		v, _ := readMetric(port, `gleaner_vllm_scrape_endpoints{state="`+state+`"}`)
		tracked += v
	}
	heapAfter := lowestHeap()
	t.Logf("fault: %d pods labelled inference in a namespace not opted in (%d hanging, 10 per scrape slot; %d serving 4 MiB of 87,000 model names): %d scrapes of them, %v endpoints tracked; chat-0 fresh at %d/%d looks, gpu-a and gpu-b open as before at %d/%d; controller heap in use %.1f MiB before, %.1f MiB after",
		len(names), hanging, cardinal, scrapes.Load(), tracked, freshLooks, looks, openLooks, looks, heapBefore/(1<<20), heapAfter/(1<<20))
	if n := scrapes.Load(); n != 0 {
		t.Errorf("the tenant's pods were scraped %d times", n)
	}
	if tracked != 1 {
		t.Errorf("the controller tracks %v endpoints, want chat-0's alone", tracked)
	}
	if freshLooks != looks {
		t.Errorf("chat-0 read fresh at %d of %d looks", freshLooks, looks)
	}
	if openLooks != looks {
		t.Errorf("verdicts moved: %v", worst)
	}
	if heapAfter > heapBefore*1.25+4<<20 {
		t.Errorf("the controller's heap grew from %.1f to %.1f MiB", heapBefore/(1<<20), heapAfter/(1<<20))
	}
}

// manyModelsExposition is vllm:num_requests_running with n distinct
// model_name values, one series each: 87,000 fill 4 MiB.
func manyModelsExposition(n int) []byte {
	var b strings.Builder
	b.WriteString("# TYPE vllm:num_requests_running gauge\n")
	for i := range n {
		fmt.Fprintf(&b, "vllm:num_requests_running{model_name=\"%05d\"} 0\n", i)
	}
	return []byte(b.String())
}

// metricValue reads one sample from a component's /metrics.
func metricValue(t *testing.T, port int, series string) float64 {
	t.Helper()
	v, err := readMetric(port, series)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
