package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/api/v1alpha1"
	"github.com/gleaner-dev/gleaner/pkg/availability"
	"github.com/gleaner-dev/gleaner/pkg/controller"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
	"github.com/gleaner-dev/gleaner/pkg/plugins/reclaimpreemption"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
	"github.com/gleaner-dev/gleaner/pkg/vllm"
)

const (
	servingNS  = "serving"
	researchNS = "research"

	scrapeInterval = time.Second
	graceSeconds   = 3
)

// harvestEnv is one running cluster with every Gleaner component.
type harvestEnv struct {
	// t is the (sub)test that helpers fail; root owns everything that outlives a subtest.
	t, root *testing.T
	cp      *controlPlane
	client  kubernetes.Interface
	kubelet *standInKubelet
	ctx     context.Context
	// controller stops the gleaner-controller without releasing its Lease.
	controller *struct{ stop context.CancelFunc }
	// scheduler stops the in-process gleaner-scheduler.
	scheduler *struct{ stop func() }
}

// in returns the environment with helpers failing t, for use inside a subtest.
func (e *harvestEnv) in(t *testing.T) *harvestEnv {
	c := *e
	c.t = t
	return &c
}

func (e *harvestEnv) stopController() { e.controller.stop() }

// startScheduler runs gleaner-scheduler in this process; stopScheduler stops it.
func (e *harvestEnv) startScheduler() { e.scheduler.stop = startGleanerScheduler(e.root, e.ctx, e.cp) }
func (e *harvestEnv) stopScheduler()  { e.scheduler.stop() }

// vllm starts a metrics server that lives as long as the whole test.
func (e *harvestEnv) vllm(model string) *vllmServer { return startVLLMServer(e.root, model) }

func startHarvestEnv(t *testing.T) *harvestEnv { return startHarvestEnvFlags(t) }

// startHarvestEnvFlags is startHarvestEnv with these kube-apiserver flags.
func startHarvestEnvFlags(t *testing.T, apiserverFlags ...string) *harvestEnv {
	cp := startControlPlane(t, apiserverFlags...)
	// Registered after the control plane's clean-up, so it runs before it: the
	// components stop while the apiserver is still up.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	env := &harvestEnv{t: t, root: t, cp: cp, client: cp.client, ctx: ctx, controller: &struct{ stop context.CancelFunc }{}, scheduler: &struct{ stop func() }{}}
	for _, ns := range []string{api.SystemNamespace, servingNS, researchNS} {
		createNamespace(t, cp.client, ns)
	}
	env.installPriorityClasses()
	// Before the scheduler starts, as the shipped manifests do: a PodGroup informer
	// started before its CRD exists retries with a growing backoff.
	installPodGroupCRD(t, cp)
	installCRD(t, cp, "charts/gleaner/crds/gleaner.dev_gpupools.yaml")
	installCRD(t, cp, "charts/gleaner/crds/gleaner.dev_harvestreports.yaml")
	for _, name := range []string{"gpu-a", "gpu-b"} {
		createGPUNode(t, cp.client, name, 8, map[string]string{api.LabelPool: api.PoolInference})
	}
	env.kubelet = startStandInKubelet(ctx, t, cp.client)
	startDefaultScheduler(t, ctx, cp)
	env.startScheduler()
	env.startController()
	return env
}

// installPriorityClasses creates the PriorityClasses exactly as shipped in manifests/.
func (e *harvestEnv) installPriorityClasses() {
	n := 0
	for _, obj := range readRepoObjects(e.t, "manifests/shared/priorityclasses.yaml") {
		var pc schedulingv1.PriorityClass
		fromUnstructured(e.t, obj, &pc)
		if _, err := e.client.SchedulingV1().PriorityClasses().Create(context.Background(), &pc, metav1.CreateOptions{}); err != nil {
			e.t.Fatalf("creating PriorityClass %s: %v", pc.Name, err)
		}
		n++
	}
	if n != 2 {
		e.t.Fatalf("manifests/shared/priorityclasses.yaml holds %d PriorityClasses, want 2", n)
	}
}

func (e *harvestEnv) startController() { e.startControllerWith(nil) }

// startControllerWith starts gleaner-controller with the test's scrape timing,
// after tweak (when not nil) changed its configuration.
func (e *harvestEnv) startControllerWith(tweak func(*controller.Config)) {
	// A client of its own: the test's polling must not use up its rate limit.
	e.startControllerOn(kubernetes.NewForConfigOrDie(rest.CopyConfig(e.cp.config)), tweak)
}

// startControllerOn is startControllerWith over client (e.g. one whose
// transport injects faults).
func (e *harvestEnv) startControllerOn(client kubernetes.Interface, tweak func(*controller.Config)) {
	ctx, cancel := context.WithCancel(e.ctx)
	e.controller.stop = cancel
	le := controller.DefaultLeaderElection()
	le.LeaseDuration, le.RenewDeadline, le.RetryPeriod = 3*time.Second, 2*time.Second, 500*time.Millisecond
	cfg := controller.Config{
		Metrics:   vllm.Options{Interval: scrapeInterval, Timeout: 500 * time.Millisecond, StaleAfter: 3 * time.Second},
		PodGroups: podGroupClient(e.cp),
		Status: controller.StatusConfig{Client: dynamic.NewForConfigOrDie(rest.CopyConfig(e.cp.config)), Interval: time.Second,
			Price: &v1alpha1.Price{PerGPUHour: "3.60", Currency: "USD"}},
	}
	if tweak != nil {
		tweak(&cfg)
	}
	c, err := controller.New(client, cfg)
	if err != nil {
		e.root.Fatalf("gleaner-controller: %v", err)
	}
	go func() {
		if err := controller.RunLeaderElected(ctx, client, le, c.Run); err != nil && ctx.Err() == nil {
			e.root.Errorf("gleaner-controller stopped: %v", err)
		}
	}()
}

// startChat runs one 4-GPU replica of service "chat" on gpu-a, scheduled by
// the default scheduler, and waits until the idle fleet is lent: everything
// inference does not use. It returns the replica's metrics server.
func (e *harvestEnv) startChat() *vllmServer {
	e.t.Helper()
	chat0 := e.vllm("llama-chat")
	e.createChatReplica("chat-0", chat0)
	e.waitVerdict("gpu-a", open(4), 30*time.Second)
	e.waitVerdict("gpu-b", open(8), 10*time.Second)
	return chat0
}

// createChatReplica creates a 4-GPU replica of chat on gpu-a, as its
// autoscaler would, and waits until it is bound there.
func (e *harvestEnv) createChatReplica(name string, srv *vllmServer) {
	e.t.Helper()
	pod := inferencePod(name, "chat", 4, srv, v1.DefaultSchedulerName)
	pod.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "gpu-a"}
	e.create(pod)
	if node := e.waitBound(servingNS, name, 30*time.Second); node != "gpu-a" {
		e.t.Fatalf("%s bound to %s, want gpu-a", name, node)
	}
}

func gpus(n int64) v1.ResourceList {
	return v1.ResourceList{api.GPUResource: *resource.NewQuantity(n, resource.DecimalSI)}
}

// inferencePod is a vLLM replica of service, its metrics served by srv.
func inferencePod(name, service string, n int64, srv *vllmServer, schedulerName string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: servingNS,
			Labels:      map[string]string{api.LabelRole: api.RoleInference, api.LabelService: service},
			Annotations: map[string]string{api.AnnotationMetricsPort: srv.port()},
		},
		Spec: v1.PodSpec{
			SchedulerName:     schedulerName,
			PriorityClassName: api.PriorityClassInference,
			Containers: []v1.Container{{
				Name: "vllm", Image: "vllm/vllm-openai",
				Resources: v1.ResourceRequirements{Requests: gpus(n), Limits: gpus(n)},
			}},
		},
	}
}

// bestEffortPod is a training pod that asks gleaner-scheduler for n lent GPUs.
func bestEffortPod(name string, n int64) *v1.Pod {
	grace := int64(graceSeconds)
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: researchNS},
		Spec: v1.PodSpec{
			SchedulerName:                 api.SchedulerName,
			PriorityClassName:             api.PriorityClassBestEffort,
			TerminationGracePeriodSeconds: &grace,
			Containers: []v1.Container{{
				Name: "train", Image: "example.com/train",
				Resources: v1.ResourceRequirements{Requests: gpus(n), Limits: gpus(n)},
			}},
		},
	}
}

func (e *harvestEnv) create(pod *v1.Pod) {
	e.t.Helper()
	if _, err := e.client.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("creating pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
}

func (e *harvestEnv) pod(ns, name string) *v1.Pod {
	e.t.Helper()
	p, err := e.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("getting pod %s/%s: %v", ns, name, err)
	}
	return p
}

// waitBound waits until the pod is bound and returns its node.
func (e *harvestEnv) waitBound(ns, name string, timeout time.Duration) string {
	e.t.Helper()
	var node string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := e.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		node = p.Spec.NodeName
		return node != "", nil
	})
	if err != nil {
		for _, ev := range e.events(ns, name) {
			e.t.Logf("event on %s/%s: %s %s: %s", ns, name, ev.Type, ev.Reason, ev.Message)
		}
		e.t.Fatalf("waiting %s for pod %s/%s to be bound: %v", timeout, ns, name, err)
	}
	return node
}

// waitGone waits until the pod no longer exists.
func (e *harvestEnv) waitGone(ns, name string, timeout time.Duration) {
	e.t.Helper()
	eventually(e.t, timeout, "pod "+ns+"/"+name+" to be gone", func(ctx context.Context) (bool, error) {
		_, err := e.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// deleteNow removes a pod without a grace period (test clean-up between steps).
func (e *harvestEnv) deleteNow(ns, name string) {
	e.t.Helper()
	zero := int64(0)
	if err := e.client.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
		e.t.Fatalf("deleting %s/%s: %v", ns, name, err)
	}
	e.waitGone(ns, name, 10*time.Second)
}

func (e *harvestEnv) verdict(node string) harvest.Verdict {
	e.t.Helper()
	n, err := e.client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	v, err := harvest.ReadNode(n)
	if err != nil {
		e.t.Fatalf("node %s carries an unreadable verdict: %v", node, err)
	}
	return v
}

// waitVerdict waits until the node carries the given verdict.
func (e *harvestEnv) waitVerdict(node string, want harvest.Verdict, timeout time.Duration) {
	e.t.Helper()
	eventually(e.t, timeout, "node "+node+" to be "+string(want.State)+" with "+itoa(want.HarvestableGPUs)+" harvestable GPUs", func(ctx context.Context) (bool, error) {
		n, err := e.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got, err := harvest.ReadNode(n)
		return err == nil && got == want, nil
	})
}

// events lists the Events about a pod: while it exists, only those about it,
// not about an earlier pod of the same name.
func (e *harvestEnv) events(ns, name string) []v1.Event {
	e.t.Helper()
	selector := fields.Set{"involvedObject.name": name}
	if p, err := e.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{}); err == nil {
		selector["involvedObject.uid"] = string(p.UID)
	}
	list, err := e.client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: selector.AsSelector().String(),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return list.Items
}

// waitEvent waits for an Event about the pod with the reason and a message containing substr.
func (e *harvestEnv) waitEvent(ns, name, reason, substr string, timeout time.Duration) v1.Event {
	e.t.Helper()
	var found v1.Event
	eventually(e.t, timeout, "a "+reason+" event on "+ns+"/"+name, func(context.Context) (bool, error) {
		for _, ev := range e.events(ns, name) {
			if ev.Reason == reason && strings.Contains(ev.Message, substr) {
				found = ev
				return true, nil
			}
		}
		return false, nil
	})
	return found
}

// assertStaysPending checks for the whole period that the pod is not bound.
func (e *harvestEnv) assertStaysPending(ns, name string, period time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(period)
	for time.Now().Before(deadline) {
		if node := e.pod(ns, name).Spec.NodeName; node != "" {
			e.t.Fatalf("pod %s/%s was bound to %s; want it pending", ns, name, node)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitBoundWithinBudget waits for an inference replica to be bound to node,
// and fails the test if that took longer than the reclaim budget from start
// (when its load rose): scrape interval + grace period + 5 s.
func (e *harvestEnv) waitBoundWithinBudget(ns, name, node string, start time.Time) {
	e.t.Helper()
	got := e.waitBound(ns, name, 30*time.Second)
	took := time.Since(start)
	budget := scrapeInterval + graceSeconds*time.Second + 5*time.Second
	e.t.Logf("%s bound to %s %v after waiting requests rose (budget %v)", name, got, took.Round(time.Millisecond), budget)
	if got != node {
		e.t.Fatalf("%s bound to %s; want %s", name, got, node)
	}
	if took > budget {
		e.t.Fatalf("inference waited %v for lent GPUs; budget is scrape interval + grace period + 5s = %v", took, budget)
	}
}

func itoa(n int64) string { return resource.NewQuantity(n, resource.DecimalSI).String() }

func open(n int64) harvest.Verdict {
	return harvest.Verdict{State: api.HarvestOpen, HarvestableGPUs: n}
}

// TestHarvestLendsIdleGPUsAndGivesThemBack drives the first end-to-end slice:
// best-effort pods run only on GPUs the planner opened, lent GPUs come back when
// a vLLM service's waiting requests rise, a stale or unreachable endpoint keeps
// its service's GPUs closed, inference always wins, and a stale controller
// heartbeat stops all lending.
func TestHarvestLendsIdleGPUsAndGivesThemBack(t *testing.T) {
	controller.RegisterMetrics() // as the binary does: the owner's metrics are read below
	env := startHarvestEnv(t)
	chat0 := env.startChat()

	t.Run("open nodes carry the availability of their lendable GPUs", func(t *testing.T) {
		// chat has no profile yet and a flat load: nothing is forecast to need
		// gpu-b within four hours, and no forecast is judged yet, so no chances.
		want := harvest.Availability{For: availability.Horizon, AtLeast: true, Survive1h: harvest.NotLearned, Survive4h: harvest.NotLearned}
		eventually(t, 10*time.Second, "gpu-b's availability", func(ctx context.Context) (bool, error) {
			n, err := env.client.CoreV1().Nodes().Get(ctx, "gpu-b", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			a, ok := harvest.ReadAvailability(n)
			return ok && a == want, nil
		})
	})

	t.Run("unknown endpoint keeps its service's GPUs", func(t *testing.T) {
		env := env.in(t)
		for _, mode := range []struct {
			name string
			mode vllmMode
		}{{"unreachable", vllmUnreachable}, {"timing out", vllmHanging}} {
			chat0.set(mode.mode, 0, 0, 0)
			// One more 4-GPU replica of chat must fit: gpu-a, which already hosts chat, keeps it.
			env.waitVerdict("gpu-a", harvest.Verdict{State: api.HarvestClosed}, 15*time.Second)
			if got := env.verdict("gpu-b"); got != open(8) {
				t.Fatalf("%s endpoint: gpu-b verdict %+v, want open with 8", mode.name, got)
			}
			chat0.set(vllmServing, 0, 0, 0)
			env.waitVerdict("gpu-a", open(4), 15*time.Second)
		}
	})

	t.Run("best-effort pods land only on open nodes, packed", func(t *testing.T) {
		env := env.in(t)
		chat0.set(vllmUnreachable, 0, 0, 0)
		env.waitVerdict("gpu-a", harvest.Verdict{State: api.HarvestClosed}, 15*time.Second)
		env.create(bestEffortPod("be-1", 4))
		if node := env.waitBound(researchNS, "be-1", 20*time.Second); node != "gpu-b" {
			t.Fatalf("be-1 bound to %s while gpu-a was closed; want gpu-b", node)
		}
		chat0.set(vllmServing, 0, 0, 0)
		env.waitVerdict("gpu-a", open(4), 15*time.Second)

		// gpu-b already hosts lent GPUs: a 2-GPU pod packs there, not onto idle gpu-a.
		env.create(bestEffortPod("be-2", 2))
		if node := env.waitBound(researchNS, "be-2", 20*time.Second); node != "gpu-b" {
			t.Fatalf("be-2 bound to %s; want gpu-b, where GPUs are already lent", node)
		}
		// gpu-b has 2 harvestable GPUs left, so a 4-GPU pod goes to gpu-a.
		env.create(bestEffortPod("be-3", 4))
		if node := env.waitBound(researchNS, "be-3", 20*time.Second); node != "gpu-a" {
			t.Fatalf("be-3 bound to %s; want gpu-a", node)
		}
	})

	t.Run("best-effort pods never displace inference", func(t *testing.T) {
		env := env.in(t)
		// No node has 6 GPUs free, and best-effort pods never preempt.
		env.create(bestEffortPod("be-big", 6))
		env.waitEvent(researchNS, "be-big", "FailedScheduling", reclaimpreemption.ErrReasonBestEffort, 20*time.Second)
		env.assertStaysPending(researchNS, "be-big", 3*time.Second)
		if p := env.pod(servingNS, "chat-0"); p.DeletionTimestamp != nil || p.Spec.NodeName != "gpu-a" {
			t.Fatalf("inference pod chat-0 was disturbed: node %q, deleting %v", p.Spec.NodeName, p.DeletionTimestamp)
		}
		env.deleteNow(researchNS, "be-big")
	})

	t.Run("waiting requests reclaim lent GPUs for inference", func(t *testing.T) {
		env := env.in(t)
		start := time.Now()
		chat0.set(vllmServing, 16, 5, 0.9)
		// The planner keeps one more chat replica on gpu-a, where be-3 holds 4 lent GPUs.
		env.waitVerdict("gpu-a", harvest.Verdict{State: api.HarvestDraining}, 10*time.Second)
		env.waitEvent(researchNS, "be-3", reclaim.ReasonReclaimed, "must return 4 GPUs", 10*time.Second)
		if grace, deleted := env.kubelet.deletionGrace(researchNS, "be-3"); !deleted || grace != graceSeconds {
			t.Fatalf("be-3 deleted=%v with grace %ds; want an eviction with its %ds grace period", deleted, grace, graceSeconds)
		}
		// The replica the autoscaler would add.
		chat1 := env.vllm("llama-chat")
		chat1.set(vllmServing, 0, 0, 0)
		chat1Pod := inferencePod("chat-1", "chat", 4, chat1, v1.DefaultSchedulerName)
		chat1Pod.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "gpu-a"}
		env.create(chat1Pod)
		env.waitBoundWithinBudget(servingNS, "chat-1", "gpu-a", start)
		chat0.set(vllmServing, 4, 0, 0.3)
	})

	t.Run("the controller publishes the pool and each namespace's harvest", func(t *testing.T) {
		pool := waitGPUPool(t, env.cp, func(st v1alpha1.GPUPoolStatus) bool { return st.Planning && st.GPUs.Total == 16 && st.GPUs.Lent > 0 })
		st := pool.Status
		if len(st.NodeStates) != 2 || st.Nodes.Open+st.Nodes.Draining+st.Nodes.Closed != 2 {
			t.Errorf("nodes %+v, node states %+v: want gpu-a and gpu-b", st.Nodes, st.NodeStates)
		}
		for _, n := range st.NodeStates {
			if n.Serving+n.Lent+n.Headroom+n.Idle != n.Total || n.Total != 8 {
				t.Errorf("%s: %+v does not count its 8 GPUs once each", n.Name, n.GPUCounts)
			}
		}
		if len(st.Outlook) != int(controller.OutlookSpan/controller.OutlookStep) || len(st.History) == 0 || st.Price == nil {
			t.Errorf("%d outlook points, %d history samples, price %v", len(st.Outlook), len(st.History), st.Price)
		}

		// be-3 was evicted for chat: its job's timeline says so, and be-1 runs on.
		reports := dynamic.NewForConfigOrDie(env.cp.config).Resource(v1alpha1.HarvestReportResource).Namespace(researchNS)
		report := waitPublished(t, reports, v1alpha1.HarvestReportName, "research's HarvestReport to record be-3's eviction", 15*time.Second,
			func(r *v1alpha1.HarvestReport) bool {
				be3 := jobNamed(*r, "be-3")
				return be3 != nil && be3.Evictions == 1
			})
		be3 := jobNamed(report, "be-3")
		var kinds []string
		for _, e := range be3.Timeline {
			kinds = append(kinds, string(e.Type))
			if e.Type == v1alpha1.EventEvicted && (e.Node != "gpu-a" || !strings.Contains(e.Message, "chat")) {
				t.Errorf("be-3's eviction: %+v, want on gpu-a, for chat", e)
			}
		}
		if strings.Join(kinds, " ") != "Submitted Placed Evicted" {
			t.Errorf("be-3's timeline: %v", kinds)
		}
		be1 := jobNamed(report, "be-1")
		if be1 == nil || be1.State != v1alpha1.JobRunning || be1.HarvestedGPUSeconds <= 0 || be1.GPUs != 4 {
			t.Errorf("be-1: %+v, want running with 4 GPUs and some harvest", be1)
		}
		if report.Status.HarvestedGPUSeconds <= 0 || !strings.HasSuffix(report.Status.Value, " USD") {
			t.Errorf("research harvested %d GPU-seconds worth %q", report.Status.HarvestedGPUSeconds, report.Status.Value)
		}

		// kubectl gleaner reads the same, as a researcher would.
		code, stdout, stderr := kubectlGleaner(t, env.cp, "describe", "be-3", "-n", researchNS)
		if code != 0 || !strings.Contains(stdout, "evicted: the GPUs of node gpu-a are needed by") {
			t.Errorf("kubectl gleaner describe be-3: exit %d\n%s%s", code, stdout, stderr)
		}

		// serving is opted in as inference: its report holds chat's waits to
		// be scheduled, within the budget, and its owner reads them with
		// kubectl gleaner service; the controller's metrics say the same.
		served := dynamic.NewForConfigOrDie(env.cp.config).Resource(v1alpha1.HarvestReportResource).Namespace(servingNS)
		owner := waitPublished(t, served, v1alpha1.HarvestReportName, "serving's HarvestReport to count chat-1's wait", 15*time.Second,
			func(r *v1alpha1.HarvestReport) bool {
				chat := serviceNamed(*r, "chat")
				return chat != nil && chat.Waits.Scheduled >= 1
			})
		budget := scrapeInterval + reclaim.DefaultMaxGrace + controller.ReclaimBudgetSlack
		// Waits are counted in whole seconds, as the API server keeps times.
		testBudget := scrapeInterval + graceSeconds*time.Second + 5*time.Second + time.Second
		chat := serviceNamed(owner, "chat")
		t.Logf("serving's report: chat's %d replicas scheduled waited at most %d ms (%s), %d over the %v budget",
			chat.Waits.Scheduled, chat.Waits.LongestMilliseconds, chat.Waits.LongestPod, chat.Waits.OverBudget, budget)
		if owner.Status.ReclaimBudgetMilliseconds != budget.Milliseconds() || chat.Waits.OverBudget != 0 || chat.Waits.LongestPod == "" ||
			chat.Waits.LongestMilliseconds > testBudget.Milliseconds() || len(chat.Daily) != 1 || chat.Daily[0].Scheduled != chat.Waits.Scheduled || chat.Replicas != 2 {
			t.Errorf("serving's report: budget %d ms, chat %+v; want a budget of %v and chat's 2 replicas, none over it", owner.Status.ReclaimBudgetMilliseconds, chat, budget)
		}
		code, stdout, stderr = kubectlGleaner(t, env.cp, "service", "chat", "-n", servingNS)
		if code != 0 || !strings.Contains(stdout, "Reclaim budget 2m6s") || !strings.Contains(stdout, "none over the reclaim budget") {
			t.Errorf("kubectl gleaner service chat: exit %d\n%s%s", code, stdout, stderr)
		}
		overBudget, err := gathered("gleaner_service_scheduling_waits_over_budget_total", map[string]string{"namespace": servingNS, "service": "chat"})
		if err != nil || overBudget != 0 || gatheredValue(t, "gleaner_reclaim_budget_seconds", nil) != budget.Seconds() {
			t.Errorf("chat's waits over budget %v (%v), budget %v s; want 0 of %v", overBudget, err, gatheredValue(t, "gleaner_reclaim_budget_seconds", nil), budget.Seconds())
		}

		// kubectl get gpupools prints the pool's columns.
		table := getTable(t, env.cp, "/apis/gleaner.dev/v1alpha1/gpupools")
		var columns []string
		for _, c := range table.ColumnDefinitions {
			columns = append(columns, c.Name)
		}
		if want := "Name Planning Open GPUs Serving Lent Headroom Idle Observed Stopped"; strings.Join(columns, " ") != want || len(table.Rows) != 1 {
			t.Errorf("kubectl get gpupools: columns %v and %d rows, want %s and one row", columns, len(table.Rows), want)
		} else if cells := table.Rows[0].Cells; cells[0] != api.PoolInference || cells[3] != int64(16) && cells[3] != float64(16) {
			t.Errorf("kubectl get gpupools: row %v", cells)
		}
	})

	t.Run("default-scheduled inference reclaims by priority alone", func(t *testing.T) {
		env := env.in(t)
		// Load is low, so the controller reclaims nothing; fill gpu-b with lent
		// pods once the controller lends all of it again (chat's waiting
		// requests had it keep room there).
		env.waitVerdict("gpu-b", open(8), 15*time.Second)
		fillLent(env, "gpu-b", "fill-b")
		before := env.kubelet.deleted()
		summarize := env.vllm("qwen-summarize")
		env.create(inferencePod("summarize-0", "summarize", 4, summarize, v1.DefaultSchedulerName))
		if node := env.waitBound(servingNS, "summarize-0", 30*time.Second); node != "gpu-b" {
			t.Fatalf("summarize-0 bound to %s; want gpu-b", node)
		}
		evictedWithGrace(t, env, before)
	})

	t.Run("gleaner-scheduler inference reclaims least lost work first", func(t *testing.T) {
		env := env.in(t)
		env.deleteNow(servingNS, "summarize-0")
		for _, p := range listPods(t, env, researchNS) {
			env.deleteNow(researchNS, p.Name)
		}
		env.waitVerdict("gpu-b", open(8), 15*time.Second)
		// Two 4-GPU jobs on gpu-b. old-ckpt runs without a checkpoint; new-ckpt
		// checkpoints after a few seconds, so it has the least work to lose.
		env.create(bestEffortPod("old-ckpt", 4))
		env.waitBound(researchNS, "old-ckpt", 20*time.Second)
		env.create(bestEffortPod("new-ckpt", 4))
		env.waitBound(researchNS, "new-ckpt", 20*time.Second)
		time.Sleep(3 * time.Second)
		patch := []byte(`{"metadata":{"annotations":{"` + api.AnnotationLastCheckpoint + `":"` + time.Now().UTC().Format(time.RFC3339) + `"}}}`)
		if _, err := env.client.CoreV1().Pods(researchNS).Patch(context.Background(), "new-ckpt", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		summarize := env.vllm("qwen-summarize")
		env.create(inferencePod("summarize-1", "summarize", 4, summarize, api.SchedulerName))
		if node := env.waitBound(servingNS, "summarize-1", 30*time.Second); node != "gpu-b" {
			t.Fatalf("summarize-1 bound to %s; want gpu-b", node)
		}
		if _, deleted := env.kubelet.deletionGrace(researchNS, "new-ckpt"); !deleted {
			t.Fatalf("new-ckpt (least lost work) was not preempted")
		}
		if _, deleted := env.kubelet.deletionGrace(researchNS, "old-ckpt"); deleted {
			t.Fatalf("old-ckpt (an hour of lost work) was preempted; new-ckpt should have gone instead")
		}
	})

	t.Run("stale controller heartbeat stops all lending", func(t *testing.T) {
		env := env.in(t)
		for _, p := range listPods(t, env, researchNS) {
			env.deleteNow(researchNS, p.Name)
		}
		env.waitVerdict("gpu-b", open(4), 15*time.Second)
		env.stopController()
		// A stopping controller releases its heartbeat: from then on nothing may
		// be placed, whatever the nodes say.
		time.Sleep(2 * time.Second)
		env.create(bestEffortPod("be-late", 1))
		env.waitEvent(researchNS, "be-late", "FailedScheduling", "heartbeat is stale", 10*time.Second)
		env.assertStaysPending(researchNS, "be-late", 3*time.Second)
		// gleaner-scheduler's metrics say so too (read from this process's
		// registry: not when an older minor's scheduler runs as a process).
		if minorBin() == "" {
			if v := gatheredValue(t, "gleaner_scheduler_controller_heartbeat_fresh", nil); v != 0 {
				t.Errorf("gleaner_scheduler_controller_heartbeat_fresh = %v while the Lease is stale, want 0", v)
			}
			if v := gatheredValue(t, "gleaner_scheduler_harvest_rejections_total", map[string]string{"reason": "heartbeat_stale"}); v < 1 {
				t.Errorf("gleaner_scheduler_harvest_rejections_total{reason=heartbeat_stale} = %v, want at least 1", v)
			}
		}
		// A new controller renews the Lease; the pending pod is retried without waiting for a timer.
		env.startController()
		if node := env.waitBound(researchNS, "be-late", 30*time.Second); node == "" {
			t.Fatal("be-late never bound after the heartbeat returned")
		}
	})

	t.Run("a rejected pod is retried as soon as a node gains harvestable GPUs", func(t *testing.T) {
		env := env.in(t)
		// gpu-a serves chat fully; gpu-b lends 4 (summarize-1 serves the rest), 1 of them to be-late.
		env.create(bestEffortPod("be-wide", 7))
		env.waitEvent(researchNS, "be-wide", "FailedScheduling", "", 20*time.Second)
		env.assertStaysPending(researchNS, "be-wide", 2*time.Second)
		// summarize goes away: gpu-b can lend all 8 GPUs. The verdict's update is a
		// Node event GPUHarvest's queueing hint accepts, so the pod is retried
		// within the scheduler's backoff (at most 10s), not at its 5-minute flush.
		env.deleteNow(servingNS, "summarize-1")
		env.waitVerdict("gpu-b", open(8), 15*time.Second)
		opened := time.Now()
		if node := env.waitBound(researchNS, "be-wide", 10*time.Second); node != "gpu-b" {
			t.Fatalf("be-wide bound to %s; want gpu-b", node)
		}
		t.Logf("be-wide bound %v after gpu-b opened for 8 GPUs", time.Since(opened).Round(time.Millisecond))
	})
}

// serviceNamed is the report's inference service of that name, or nil.
func serviceNamed(r v1alpha1.HarvestReport, name string) *v1alpha1.ServiceWaits {
	for i := range r.Status.Services {
		if r.Status.Services[i].Name == name {
			return &r.Status.Services[i]
		}
	}
	return nil
}

// jobNamed is the report's job of that name, or nil.
func jobNamed(r v1alpha1.HarvestReport, name string) *v1alpha1.Job {
	for i := range r.Status.Jobs {
		if r.Status.Jobs[i].Name == name {
			return &r.Status.Jobs[i]
		}
	}
	return nil
}

// getTable reads path as kubectl get does: a Table of the printer columns.
func getTable(t *testing.T, cp *controlPlane, path string) metav1.Table {
	t.Helper()
	client, err := rest.HTTPClientFor(cp.config)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, cp.config.Host+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var table metav1.Table
	if err := json.NewDecoder(resp.Body).Decode(&table); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s as a Table: %s, %v", path, resp.Status, err)
	}
	return table
}

// fillLent creates best-effort pods until every harvestable GPU of node is lent.
func fillLent(env *harvestEnv, node, prefix string) {
	env.t.Helper()
	for i := 0; ; i++ {
		v := env.verdict(node)
		var lent int64
		for _, p := range listPods(env.t, env, researchNS) {
			if p.Spec.NodeName == node && p.DeletionTimestamp == nil {
				lent += api.PodGPUs(&p, api.GPUResource)
			}
		}
		free := v.HarvestableGPUs - lent
		if v.State != api.HarvestOpen || free <= 0 {
			return
		}
		pod := bestEffortPod(prefix+"-"+itoa(int64(i)), free)
		pod.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		env.create(pod)
		env.waitBound(researchNS, pod.Name, 20*time.Second)
	}
}

func listPods(t *testing.T, env *harvestEnv, ns string) []v1.Pod {
	t.Helper()
	list, err := env.client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// evictedWithGrace asserts that since before at least one best-effort pod was
// deleted, each with its full grace period, and no inference pod was.
func evictedWithGrace(t *testing.T, env *harvestEnv, before map[string]int64) {
	t.Helper()
	victims := 0
	for key, grace := range env.kubelet.deleted() {
		if _, seen := before[key]; seen {
			continue
		}
		if strings.HasPrefix(key, servingNS+"/") {
			t.Fatalf("inference pod %s was deleted", key)
		}
		victims++
		if grace != graceSeconds {
			t.Fatalf("%s deleted with grace %ds; want %ds", key, grace, graceSeconds)
		}
	}
	if victims == 0 {
		t.Fatal("no best-effort pod was preempted, yet the inference pod was bound")
	}
}

// gatheredValue reads a counter or gauge sample with the given labels from the
// in-process metrics registry that gleaner-scheduler serves.
func gatheredValue(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	v, err := gathered(name, labels)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// gathered reads a counter or gauge from the process's metrics registry.
func gathered(name string, labels map[string]string) (float64, error) {
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue metric
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue(), nil
			}
			return m.GetGauge().GetValue(), nil
		}
	}
	return 0, fmt.Errorf("metric %s%v not found in the registry", name, labels)
}
