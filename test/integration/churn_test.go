package integration

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	pgclientset "sigs.k8s.io/scheduler-plugins/pkg/generated/clientset/versioned"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// churn runs gleaner-scheduler and gleaner-controller as processes through
// rounds of nodes, namespaces and pod groups created and deleted, and checks
// that neither heap grows with the rounds: every cache, index and metric
// series keyed by a node, namespace or group forgets it once it is gone.
func churn(t *testing.T, env *harvestEnv, restartController func()) {
	const (
		rounds       = 12
		nodesPerRnd  = 10
		groupsPerRnd = 4
	)
	bin := buildCommands(t, "gleaner-scheduler", "gleaner-controller")
	kubeconfig := filepath.Join(t.TempDir(), "admin.kubeconfig")
	writeKubeconfig(t, env.cp.config, kubeconfig)
	// /metrics without credentials, for this test alone; GOGC=25 so that
	// the heap in use follows the live heap closely.
	metricsFlags := "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics"
	gogc := []string{"GOGC=25"}
	schedPort, ctrlPort := freePort(t), freePort(t)
	env.stopScheduler()
	defer env.startScheduler()
	env.stopController()
	defer restartController()
	sched := startSchedulerProcess(t, bin, "gleaner-scheduler", kubeconfig, false, gogc, "--secure-port="+strconv.Itoa(schedPort), metricsFlags)
	ctrl := startControllerProcess(t, bin, "gleaner-controller", kubeconfig, 2*time.Second, gogc, "--secure-port="+strconv.Itoa(ctrlPort), metricsFlags)
	defer ctrl.stop(t)
	defer sched.stop(t)
	heap := func(port int) float64 { return heapInUse(t, port) }
	waitFor(t, "both components serving /metrics", 60*time.Second, func() bool {
		_, errS := readHeapInUse(schedPort)
		_, errC := readHeapInUse(ctrlPort)
		return errS == nil && errC == nil
	})

	cfg := rest.CopyConfig(env.cp.config)
	cfg.ContentType = "application/json"
	groups := pgclientset.NewForConfigOrDie(cfg).SchedulingV1alpha1()
	round := func(r int) {
		var nodes []string
		for i := range nodesPerRnd {
			name := fmt.Sprintf("churn-%d-%d", r, i)
			nodes = append(nodes, name)
			if err := registerGPUNode(env.ctx, env.client, name, 8, map[string]string{api.LabelPool: api.PoolInference}, nil); err != nil {
				t.Fatal(err)
			}
		}
		var namespaces []string
		for g := range groupsPerRnd {
			ns := fmt.Sprintf("churn-%d-%d", r, g)
			namespaces = append(namespaces, ns)
			createNamespace(t, env.client, ns)
			if _, err := groups.PodGroups(ns).Create(env.ctx, &schedv1alpha1.PodGroup{
				ObjectMeta: metav1.ObjectMeta{Name: "ddp", Namespace: ns},
				Spec:       schedv1alpha1.PodGroupSpec{MinMember: 2},
			}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			for m := range 2 {
				p := bestEffortPod(fmt.Sprintf("ddp-%d", m), 8)
				p.Namespace = ns
				p.Labels = map[string]string{api.LabelPodGroup: "ddp"}
				p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": nodes[2*g+m]}
				env.create(p)
			}
		}
		for _, ns := range namespaces {
			for m := range 2 {
				env.waitBound(ns, fmt.Sprintf("ddp-%d", m), 60*time.Second)
			}
		}
		// Everything goes: pods, groups, namespaces (finalized as the
		// namespace controller would), nodes.
		for _, ns := range namespaces {
			for m := range 2 {
				env.deleteNow(ns, fmt.Sprintf("ddp-%d", m))
			}
			if err := groups.PodGroups(ns).Delete(env.ctx, "ddp", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			deleteNamespaceNow(t, env, ns)
		}
		for _, n := range nodes {
			if err := env.client.CoreV1().Nodes().Delete(env.ctx, n, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Heap in use at its lowest over a few seconds: close to the live heap.
	settle := func() (schedHeap, ctrlHeap float64) {
		schedHeap, ctrlHeap = heap(schedPort), heap(ctrlPort)
		for range 10 {
			time.Sleep(300 * time.Millisecond)
			schedHeap, ctrlHeap = min(schedHeap, heap(schedPort)), min(ctrlHeap, heap(ctrlPort))
		}
		return schedHeap, ctrlHeap
	}
	var schedHeaps, ctrlHeaps []float64
	for r := range rounds {
		round(r)
		if r%3 == 2 { // after a warm-up round, every third
			s, c := settle()
			schedHeaps, ctrlHeaps = append(schedHeaps, s), append(ctrlHeaps, c)
		}
	}
	mib := func(xs []float64) string {
		out := make([]string, len(xs))
		for i, x := range xs {
			out[i] = fmt.Sprintf("%.1f", x/(1<<20))
		}
		return strings.Join(out, ", ")
	}
	t.Logf("fault: churn, %d rounds of %d nodes, %d namespaces and %d pod groups created and deleted: heap in use (MiB, every third round) scheduler %s; controller %s",
		rounds, nodesPerRnd, groupsPerRnd, groupsPerRnd, mib(schedHeaps), mib(ctrlHeaps))
	// Flat: the last reading within a quarter (and 4 MiB) of the first. A
	// cache that kept every deleted node, group or namespace would grow with
	// each round.
	for _, c := range []struct {
		name  string
		heaps []float64
	}{{"gleaner-scheduler", schedHeaps}, {"gleaner-controller", ctrlHeaps}} {
		first, last := c.heaps[0], c.heaps[len(c.heaps)-1]
		if last > first*1.25+4<<20 {
			t.Errorf("%s heap grew from %.1f to %.1f MiB over the churn", c.name, first/(1<<20), last/(1<<20))
		}
	}
}

// deleteNamespaceNow deletes an empty namespace and finalizes it, as the
// namespace controller (not running here) would.
func deleteNamespaceNow(t *testing.T, env *harvestEnv, name string) {
	t.Helper()
	if err := env.client.CoreV1().Namespaces().Delete(env.ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ns, err := env.client.CoreV1().Namespaces().Get(env.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	ns.Spec.Finalizers = slices.DeleteFunc(ns.Spec.Finalizers, func(f v1.FinalizerName) bool { return f == v1.FinalizerKubernetes })
	if _, err := env.client.CoreV1().Namespaces().Finalize(env.ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// heapInUse reads go_memstats_heap_inuse_bytes from a component's /metrics.
func heapInUse(t *testing.T, port int) float64 {
	t.Helper()
	v, err := readHeapInUse(port)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func readHeapInUse(port int) (float64, error) {
	return readMetric(port, "go_memstats_heap_inuse_bytes")
}

// readMetric reads one sample (name and labels as exposed, e.g.
// `x{state="fresh"}`) from a component's /metrics, served without
// credentials.
func readMetric(port int, series string) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/metrics", port), nil)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // self-signed serving certificate
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("no %s on port %d", series, port)
}
