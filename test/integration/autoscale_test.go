package integration

import (
	"context"
	"encoding/json"
	"math"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/restmapper"
	"k8s.io/kubernetes/pkg/controller/deployment"
	"k8s.io/kubernetes/pkg/controller/replicaset"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/autoscale"
	"github.com/gleaner-dev/gleaner/pkg/controller"
	"github.com/gleaner-dev/gleaner/pkg/demand"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
	"github.com/gleaner-dev/gleaner/pkg/round"
	"github.com/gleaner-dev/gleaner/pkg/vllm"
)

// startWorkloadControllers runs the stock deployment and replicaset
// controllers in this process, so Deployments scale as in a real cluster.
func startWorkloadControllers(t *testing.T, ctx context.Context, env *harvestEnv) {
	t.Helper()
	factory := informers.NewSharedInformerFactory(env.client, 0)
	dc, err := deployment.NewDeploymentController(ctx, factory.Apps().V1().Deployments(), factory.Apps().V1().ReplicaSets(), factory.Core().V1().Pods(), env.client)
	if err != nil {
		t.Fatalf("deployment controller: %v", err)
	}
	rsc := replicaset.NewReplicaSetController(ctx, factory.Apps().V1().ReplicaSets(), factory.Core().V1().Pods(), env.client, replicaset.BurstReplicas)
	factory.Start(ctx.Done())
	go dc.Run(ctx, 2)
	go rsc.Run(ctx, 2)
}

// startPolicyController runs gleaner-controller with the forecast, hysteresis
// and autoscaler tuned to test time scales.
func (e *harvestEnv) startPolicyController() {
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	e.controller.stop = func() { cancel(); <-done }
	le := controller.DefaultLeaderElection()
	le.LeaseDuration, le.RenewDeadline, le.RetryPeriod = 3*time.Second, 2*time.Second, 500*time.Millisecond
	c, err := controller.New(e.client, controller.Config{
		Metrics: vllm.Options{Interval: scrapeInterval, Timeout: 500 * time.Millisecond, StaleAfter: 3 * time.Second},
		Policy: round.Config{
			OpenAfter: 3 * time.Second,
			Margin:    headroomMargin,
			Autoscale: autoscale.Config{StableWindow: 6 * time.Second, PanicWindow: 2 * time.Second, MaxScaleDown: 1},
		},
	})
	if err != nil {
		e.root.Fatalf("gleaner-controller: %v", err)
	}
	go func() {
		defer close(done)
		if err := controller.RunLeaderElected(ctx, e.client, le, c.Run); err != nil && ctx.Err() == nil {
			e.root.Errorf("gleaner-controller stopped: %v", err)
		}
	}()
}

// headroomMargin is the policy controller's safety margin on forecast load.
const headroomMargin = 0.1

// chatDeployment is an autoscaled vLLM Deployment whose replicas all serve
// metrics from srv (every stand-in pod has IP 127.0.0.1).
func chatDeployment(replicas int32, srv *vllmServer) *appsv1.Deployment {
	labels := map[string]string{api.LabelRole: api.RoleInference, api.LabelService: "chat"}
	// Through gleaner-scheduler, the race-free set-up docs/install.md recommends:
	// its ReclaimPreemption waits for the controller's victims instead of adding more.
	spec := inferencePod("x", "chat", 4, srv, api.SchedulerName).Spec
	grace := int64(1) // scaled-in replicas drain fast, so their GPUs open within the test
	spec.TerminationGracePeriodSeconds = &grace
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "chat", Namespace: servingNS, Annotations: map[string]string{
			api.AnnotationAutoscale:   "true",
			api.AnnotationMinReplicas: "1",
			api.AnnotationMaxReplicas: "4",
			api.AnnotationTargetLoad:  "16",
		}},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{api.AnnotationMetricsPort: srv.port()}},
				Spec:       spec,
			},
		},
	}
}

// chatReplicas counts the chat pods that are bound and not terminating.
func (e *harvestEnv) chatReplicas() (bound, pending int) { return e.replicas("chat") }

// replicas counts service's pods that are bound and not terminating.
func (e *harvestEnv) replicas(service string) (bound, pending int) {
	for _, p := range listPods(e.t, e, servingNS) {
		if p.Labels[api.LabelService] != service || p.DeletionTimestamp != nil {
			continue
		}
		if p.Spec.NodeName != "" {
			bound++
		} else {
			pending++
		}
	}
	return bound, pending
}

// driveLoad keeps every chat replica reporting an equal share of total
// running requests, as a load balancer would spread them, until ctx ends.
func (e *harvestEnv) driveLoad(ctx context.Context, srv *vllmServer, total *int64Value) {
	e.driveServiceLoad(ctx, "chat", srv, total)
}

// driveServiceLoad is driveLoad for service's replicas.
func (e *harvestEnv) driveServiceLoad(ctx context.Context, service string, srv *vllmServer, total *int64Value) {
	go func() {
		for ctx.Err() == nil {
			bound, _ := e.replicas(service)
			per := 0
			if bound > 0 {
				per = (int(total.get()) + bound - 1) / bound
			}
			srv.set(vllmServing, per, 0, 0.1)
			time.Sleep(100 * time.Millisecond)
		}
	}()
}

// TestAutoscaledServiceLendsAndReclaims: an autoscaled vLLM Deployment scales
// in as its load falls and its GPUs are lent; when load returns, the forecast
// frees GPUs by evicting just enough best-effort pods with their grace period,
// and the new replicas bind within scrape interval + grace period + 5 s. A
// controller restart keeps the plan and the learned profile.
func TestAutoscaledServiceLendsAndReclaims(t *testing.T) {
	env := startHarvestEnvWith(t, func(e *harvestEnv) { e.startPolicyController() })
	startWorkloadControllers(t, env.ctx, env)
	srv := env.vllm("llama-chat")
	total := &int64Value{}
	total.set(56) // 3.5 replicas' worth at target 16: four replicas fill the pool
	env.driveLoad(env.ctx, srv, total)
	if _, err := env.client.AppsV1().Deployments(servingNS).Create(context.Background(), chatDeployment(4, srv), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "four chat replicas to run", func(context.Context) (bool, error) {
		bound, _ := env.chatReplicas()
		return bound == 4, nil
	})

	// Night: load falls to one replica's worth; the autoscaler scales in and the GPUs open.
	total.set(8)
	eventually(t, 90*time.Second, "chat to scale in to one replica and 12 GPUs to open", func(context.Context) (bool, error) {
		bound, _ := env.chatReplicas()
		open := env.verdict("gpu-a").HarvestableGPUs + env.verdict("gpu-b").HarvestableGPUs
		return bound == 1 && open == 12, nil
	})
	var lent []string
	for i := range 3 {
		name := "night-" + strconv.Itoa(i)
		env.create(bestEffortPod(name, 4))
		env.waitBound(researchNS, name, 20*time.Second)
		lent = append(lent, name)
	}

	t.Run("restart keeps the plan and the learned profile", func(t *testing.T) {
		env := env.in(t)
		before := map[string]harvest.Verdict{"gpu-a": env.verdict("gpu-a"), "gpu-b": env.verdict("gpu-b")}
		env.stopController()
		profile := env.profile()
		env.startPolicyController()
		// The slot is still in progress: what was learned of it is its peak so far.
		if profile.SlotPeak < 8 {
			t.Fatalf("stored profile %+v lost this slot's load", profile)
		}
		for i := 0; i < 8; i++ {
			time.Sleep(time.Second)
			for node, want := range before {
				if got := env.verdict(node); got != want {
					t.Fatalf("after the restart %s is %+v, was %+v", node, got, want)
				}
			}
		}
		// Unless a quarter-hour ended meanwhile (and was learned), the restarted
		// controller holds the profile it read back.
		after := env.profile()
		sameSlot := after.Slot.Equal(profile.Slot)
		if sameSlot && (after.SlotPeak != profile.SlotPeak || after.Learned() != profile.Learned()) || after.Learned() < profile.Learned() {
			t.Fatalf("profile after the restart %+v, before %+v", after, profile)
		}
	})

	t.Run("returning load evicts just enough, gracefully, in time", func(t *testing.T) {
		env := env.in(t)
		// At least what the load now or this hour's learned peak asks for (56 if
		// the controller saw the day's load, less if not), plus the margin, in
		// 4-GPU replicas beyond the one running; each takes one 4-GPU lent pod.
		// At most what the controller's own forecast asked for while the load
		// rose: its trend may add a replica, and evicting for it is the policy.
		const newLoad = 40
		replicasFor := func(load float64) int {
			return min(int(math.Ceil(load*(1+headroomMargin)/demand.DefaultTargetLoad))-1, len(lent))
		}
		peak := math.Max(newLoad, env.profile().SlotPeak)
		wantEvicted := replicasFor(peak)
		controller.RegisterMetrics()  // unregistered metrics record nothing
		var forecastMax atomic.Uint64 // float64 bits of the highest forecast seen
		watchCtx, stopWatching := context.WithCancel(env.ctx)
		defer stopWatching()
		go func() {
			for watchCtx.Err() == nil {
				if v, err := gathered("gleaner_demand_forecast_load", map[string]string{"namespace": servingNS, "service": "chat"}); err == nil && v > math.Float64frombits(forecastMax.Load()) {
					forecastMax.Store(math.Float64bits(v))
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
		start := time.Now()
		total.set(newLoad) // three replicas' worth: two more replicas, 8 of the 12 lent GPUs
		eventually(t, 30*time.Second, "three chat replicas bound", func(context.Context) (bool, error) {
			bound, _ := env.chatReplicas()
			return bound >= 3, nil
		})
		took := time.Since(start)
		budget := scrapeInterval + graceSeconds*time.Second + 5*time.Second
		t.Logf("two new chat replicas bound %v after the load rose (budget %v)", took.Round(time.Millisecond), budget)
		if took > budget {
			t.Fatalf("inference waited %v for lent GPUs; budget is scrape interval + grace period + 5s = %v", took, budget)
		}
		time.Sleep(3 * time.Second) // any further eviction by the controller would show by now
		var reclaimed, preempted []string
		for _, name := range lent {
			key := researchNS + "/" + name
			grace, deleted := env.kubelet.deleted()[key]
			if !deleted {
				continue
			}
			if grace != graceSeconds {
				t.Errorf("%s deleted with grace %ds, want %ds", key, grace, graceSeconds)
			}
			byGleaner := false
			for _, ev := range env.events(researchNS, name) {
				byGleaner = byGleaner || ev.Reason == reclaim.ReasonReclaimed
			}
			if byGleaner {
				reclaimed = append(reclaimed, name)
			} else {
				preempted = append(preempted, name)
			}
		}
		stopWatching()
		forecast := math.Float64frombits(forecastMax.Load())
		mostEvicted := max(wantEvicted, replicasFor(forecast))
		t.Logf("gleaner-controller evicted %v: the load and learned peak (%.0f) need %d 4-GPU pods, its highest forecast (%.1f) %d", reclaimed, peak, wantEvicted, forecast, mostEvicted)
		if len(reclaimed) < wantEvicted || len(reclaimed) > mostEvicted {
			t.Fatalf("gleaner-controller evicted %d pods %v, want %d to %d", len(reclaimed), reclaimed, wantEvicted, mostEvicted)
		}
		if len(preempted) > 0 {
			t.Fatalf("%v preempted by the scheduler although gleaner-controller's victims were already returning enough GPUs", preempted)
		}
	})
}

// profile reads chat's learned profile from its Deployment.
func (e *harvestEnv) profile() demand.Profile {
	e.t.Helper()
	d, err := e.client.AppsV1().Deployments(servingNS).Get(context.Background(), "chat", metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var p demand.Profile
	raw, ok := d.Annotations[api.AnnotationDemandProfile]
	if !ok {
		e.t.Fatalf("deployment chat carries no %s annotation", api.AnnotationDemandProfile)
	}
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		e.t.Fatalf("stored profile %s: %v", raw, err)
	}
	return p
}

// startHarvestEnvWith is startHarvestEnv with the controller started by start.
func startHarvestEnvWith(t *testing.T, start func(*harvestEnv)) *harvestEnv {
	cp := startControlPlane(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	env := &harvestEnv{t: t, root: t, cp: cp, client: cp.client, ctx: ctx, controller: &struct{ stop context.CancelFunc }{}}
	for _, ns := range []string{api.SystemNamespace, servingNS, researchNS} {
		createNamespace(t, cp.client, ns)
	}
	env.installPriorityClasses()
	for _, name := range []string{"gpu-a", "gpu-b"} {
		createGPUNode(t, cp.client, name, 8, map[string]string{api.LabelPool: api.PoolInference})
	}
	env.kubelet = startStandInKubelet(ctx, t, cp.client)
	startDefaultScheduler(t, ctx, cp)
	startGleanerScheduler(t, ctx, cp)
	start(env)
	return env
}

// int64Value is a number the test changes while goroutines read it.
type int64Value struct{ v atomic.Int64 }

func (i *int64Value) set(n int64) { i.v.Store(n) }
func (i *int64Value) get() int64  { return i.v.Load() }

// TestExampleInferenceDeployment: examples/inference/vllm-deployment.yaml,
// applied as shipped with strict field validation, is read by the controller
// as docs/inference.md says: no annotation refused, and the Deployment scaled
// by Gleaner on running plus waiting requests at 16 per replica, between its
// min-replicas and max-replicas. The one change is the metrics port: the
// test's vLLM server stands in for port 8000 of every replica.
func TestExampleInferenceDeployment(t *testing.T) {
	env := startHarvestEnvWith(t, func(e *harvestEnv) { e.startPolicyController() })
	startWorkloadControllers(t, env.ctx, env)
	srv := env.vllm("llama-chat")
	total := &int64Value{}
	total.set(40) // 44 with the margin: three replicas at 16
	env.driveServiceLoad(env.ctx, "llama-chat", srv, total)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(env.client.Discovery()))
	for _, obj := range readRepoObjects(t, "examples/inference/vllm-deployment.yaml") {
		if obj.GetKind() == "Deployment" {
			if err := unstructured.SetNestedField(obj.Object, srv.port(), "spec", "template", "metadata", "annotations", api.AnnotationMetricsPort); err != nil {
				t.Fatal(err)
			}
		}
		if err := applyStrict(env.ctx, env.cp, mapper, obj); err != nil {
			t.Fatal(err)
		}
	}
	scaledTo := func(want int32) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			d, err := env.client.AppsV1().Deployments(servingNS).Get(ctx, "llama-chat", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			bound, _ := env.replicas("llama-chat")
			return *d.Spec.Replicas == want && bound == int(want), nil
		}
	}
	eventually(t, 60*time.Second, "llama-chat scaled from 2 to 3 replicas for 40 requests", scaledTo(3))
	total.set(0)
	eventually(t, 60*time.Second, "llama-chat scaled in to its min-replicas, 1", scaledTo(1))
	for _, e := range env.events(servingNS, "llama-chat") {
		if e.Reason == controller.ReasonInvalidAnnotation {
			t.Fatalf("the example's annotations were refused: %s", e.Message)
		}
	}
}
