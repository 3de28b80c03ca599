package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
	gleanerscheduler "github.com/gleaner-dev/gleaner/pkg/scheduler"
)

// TestSchedulerThroughput is a scheduler_perf-style benchmark: one scheduler in
// this process runs the shipped gleaner-scheduler profile and a profile with
// only the default plugins; the same harness creates BENCH_NODES open pool
// nodes with 8 GPUs each, then BENCH_PODS best-effort pods for each profile in
// turn, and reports pods bound per second. A second case fills every node with
// best-effort pods and measures how long BENCH_RECLAIM_PODS inference pods take
// to bind through each profile's preemption (ReclaimPreemption against
// DefaultPreemption). Run it with `make bench-scheduler NODES=n PODS=m`.
func TestSchedulerThroughput(t *testing.T) {
	nodes, pods := envInt(t, "BENCH_NODES"), envInt(t, "BENCH_PODS")
	if nodes == 0 || pods == 0 {
		t.Skip("benchmark: set BENCH_NODES and BENCH_PODS, e.g. make bench-scheduler NODES=500 PODS=1000")
	}
	reclaimPods := envInt(t, "BENCH_RECLAIM_PODS")
	if reclaimPods == 0 {
		reclaimPods = min(nodes, 500)
	}
	cp := startControlPlane(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for _, ns := range []string{api.SystemNamespace, "bench"} {
		createNamespace(t, cp.client, ns)
	}
	env := &harvestEnv{t: t, root: t, cp: cp, client: cp.client, ctx: ctx}
	env.installPriorityClasses()
	go keepLeaseFresh(ctx, t, cp.client)

	start := time.Now()
	createOpenNodes(t, cp.client, nodes)
	t.Logf("created %d open pool nodes with 8 GPUs each in %v", nodes, time.Since(start).Round(time.Millisecond))
	startTwoProfileScheduler(t, ctx, cp)
	bound := watchBound(t, ctx, cp.client)

	// ABBA order, so warm-up and background load fall on both profiles alike.
	elapsed := map[string]time.Duration{}
	for _, profile := range []string{api.SchedulerName, v1.DefaultSchedulerName, v1.DefaultSchedulerName, api.SchedulerName} {
		took, created := runPods(t, cp.client, bound, benchPod(profile, api.PriorityClassBestEffort, 1), pods)
		elapsed[profile] += took
		t.Logf("%s: %d pods bound in %v (%.1f pods/s; creating them took %v)", profile, pods, took.Round(time.Millisecond), float64(pods)/took.Seconds(), created.Round(time.Millisecond))
		deleteAllPods(t, cp.client, bound)
	}
	throughput := map[string]float64{}
	for profile, d := range elapsed {
		throughput[profile] = float64(2*pods) / d.Seconds()
	}

	reclaim := map[string]time.Duration{}
	for _, profile := range []string{api.SchedulerName, v1.DefaultSchedulerName} {
		// Two 4-GPU best-effort pods fill each node; each inference pod needs one's GPUs.
		_, _ = runPods(t, cp.client, bound, benchPod(api.SchedulerName, api.PriorityClassBestEffort, 4), 2*nodes)
		took, _ := runPods(t, cp.client, bound, benchPod(profile, api.PriorityClassInference, 4), reclaimPods)
		reclaim[profile] = took
		t.Logf("reclaim through %s: %d inference pods bound in %v (%.1f pods/s)", profile, reclaimPods, took.Round(time.Millisecond), float64(reclaimPods)/took.Seconds())
		deleteAllPods(t, cp.client, bound)
	}

	fmt.Printf("reclaim gleaner/default = %.2f (gleaner %v, default %v, %d inference pods, %d nodes)\n",
		reclaim[api.SchedulerName].Seconds()/reclaim[v1.DefaultSchedulerName].Seconds(),
		reclaim[api.SchedulerName].Round(time.Millisecond), reclaim[v1.DefaultSchedulerName].Round(time.Millisecond), reclaimPods, nodes)
	fmt.Printf("throughput gleaner/default = %.2f (gleaner %.1f pods/s, default %.1f pods/s, %d nodes, %d pods)\n",
		throughput[api.SchedulerName]/throughput[v1.DefaultSchedulerName], throughput[api.SchedulerName], throughput[v1.DefaultSchedulerName], nodes, pods)
}

func envInt(t *testing.T, name string) int {
	t.Helper()
	raw := os.Getenv(name)
	if raw == "" {
		return 0
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a non-negative integer", name, raw)
	}
	return n
}

// keepLeaseFresh plays the controller's heartbeat: the benchmark measures the
// scheduler alone, with every node open.
func keepLeaseFresh(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	duration := int32(15)
	for {
		now := metav1.NewMicroTime(time.Now())
		lease := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: api.HeartbeatLeaseName, Namespace: api.SystemNamespace},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: new("bench"), LeaseDurationSeconds: &duration, RenewTime: &now},
		}
		leases := client.CoordinationV1().Leases(api.SystemNamespace)
		if cur, err := leases.Get(ctx, lease.Name, metav1.GetOptions{}); err == nil {
			cur.Spec = lease.Spec
			_, err = leases.Update(ctx, cur, metav1.UpdateOptions{})
		} else {
			_, _ = leases.Create(ctx, lease, metav1.CreateOptions{})
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
}

func createOpenNodes(t *testing.T, client kubernetes.Interface, n int) {
	t.Helper()
	parallel(t, n, func(i int) error {
		meta := &v1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{api.LabelPool: api.PoolInference}}}
		harvest.Verdict{State: api.HarvestOpen, HarvestableGPUs: 8}.SetOn(meta)
		return registerGPUNode(context.Background(), client, fmt.Sprintf("node-%05d", i), 8, meta.Labels, meta.Annotations)
	})
}

// startTwoProfileScheduler runs one scheduler with the shipped gleaner-scheduler
// profile and the default profile, so both are measured on the same process.
func startTwoProfileScheduler(t *testing.T, ctx context.Context, cp *controlPlane) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "manifests", "base", "scheduler", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	doc["profiles"] = append(doc["profiles"].([]any), map[string]any{"schedulerName": v1.DefaultSchedulerName})
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	cc, sched := setupScheduler(t, ctx, cp, out, gleanerscheduler.Plugins()...)
	runScheduler(t, ctx, cc, sched)
}

// boundCounter counts, per batch (the pods' "batch" label), pods that have been
// bound, and how many benchmark pods exist.
type boundCounter struct {
	mu    sync.Mutex
	seen  map[string]bool
	batch map[string]int
	total atomic.Int64
}

func (b *boundCounter) boundIn(batch string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.batch[batch]
}

func watchBound(t *testing.T, ctx context.Context, client kubernetes.Interface) *boundCounter {
	t.Helper()
	b := &boundCounter{seen: map[string]bool{}, batch: map[string]int{}}
	factory := informers.NewSharedInformerFactory(client, 0)
	inf := factory.Core().V1().Pods().Informer()
	update := func(obj interface{}) {
		p, ok := obj.(*v1.Pod)
		if !ok {
			return
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		key := p.Namespace + "/" + p.Name
		if p.Spec.NodeName != "" && !b.seen[key] {
			b.seen[key] = true
			b.batch[p.Labels["batch"]]++
		}
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { b.total.Add(1); update(obj) },
		UpdateFunc: func(_, obj interface{}) { update(obj) },
		DeleteFunc: func(interface{}) { b.total.Add(-1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	return b
}

var benchPodSeq, benchBatch atomic.Int64

func benchPod(schedulerName, priorityClass string, n int64) *v1.Pod {
	zero := int64(0)
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "bench"},
		Spec: v1.PodSpec{
			SchedulerName:                 schedulerName,
			PriorityClassName:             priorityClass,
			TerminationGracePeriodSeconds: &zero,
			Containers: []v1.Container{{
				Name: "c", Image: "registry.k8s.io/pause:3.10",
				Resources: v1.ResourceRequirements{Requests: gpus(n), Limits: gpus(n)},
			}},
		},
	}
}

// runPods creates n copies of template and waits until all of them are bound.
// It returns the time from the first create to the last bind, and the time creating took.
func runPods(t *testing.T, client kubernetes.Interface, bound *boundCounter, template *v1.Pod, n int) (took, creating time.Duration) {
	t.Helper()
	batch := fmt.Sprintf("b%d", benchBatch.Add(1))
	start := time.Now()
	parallel(t, n, func(int) error {
		p := template.DeepCopy()
		p.Name = fmt.Sprintf("p-%07d", benchPodSeq.Add(1))
		p.Labels = map[string]string{"batch": batch}
		_, err := client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{})
		return err
	})
	creating = time.Since(start)
	deadline := time.Now().Add(30 * time.Minute)
	for bound.boundIn(batch) < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d %s pods bound after 30 minutes", bound.boundIn(batch), n, template.Spec.SchedulerName)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start), creating
}

func deleteAllPods(t *testing.T, client kubernetes.Interface, bound *boundCounter) {
	t.Helper()
	zero := int64(0)
	if err := client.CoreV1().Pods("bench").DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Minute, "all benchmark pods to be gone", func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Pods("bench").List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return false, err
		}
		return len(list.Items) == 0 && bound.total.Load() == 0, nil
	})
}

// parallel runs f(0..n-1) on 32 workers and fails the test on the first error.
func parallel(t *testing.T, n int, f func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	var firstErr atomic.Value
	next := atomic.Int64{}
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		t.Fatal(err)
	}
}
