package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/kubernetes/pkg/features"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/plugins/gang"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
)

// TestNativeGangsPlacedAndReclaimedWhole runs a cluster with the
// GenericWorkload feature gate on in the API server (which then serves native
// PodGroups, scheduling.k8s.io/v1beta1) and in gleaner-scheduler (which then
// runs kube-scheduler's own GangScheduling in its profile, beside Gleaner's
// Gang). A native PodGroup's members are placed whole on lent GPUs by the
// in-tree plugin, none bound while one cannot be, and none holding GPUs
// meanwhile; when inference needs the GPUs under one member, the controller
// evicts the rigid gang whole and sheds an elastic one (minCount 1) only of
// its member in the way. Gleaner's Gang never acts on these pods (its
// decisions counter, which a scheduler-plugins gang moves, does not move;
// none of its reasons appears), and a pod that names both a native and a
// scheduler-plugins PodGroup is refused.
func TestNativeGangsPlacedAndReclaimedWhole(t *testing.T) {
	// gleaner-scheduler runs in this process and reads the process's gate, as
	// the binary does after --feature-gates=GenericWorkload=true.
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.GenericWorkload, true)
	env := startHarvestEnvFlags(t, "--feature-gates=GenericWorkload=true", "--runtime-config=scheduling.k8s.io/v1beta1=true")
	chat0 := env.startChat() // gpu-a lends 4 GPUs, gpu-b 8

	// Gang still places scheduler-plugins gangs with the gate on: its
	// decisions counter moves for their members.
	before := gangDecisions(t)
	env.createPodGroup("plugins", 1, nil)
	member := bestEffortPod("plugins-0", 1)
	member.Labels = map[string]string{api.LabelPodGroup: "plugins"}
	env.create(member)
	env.waitBound(researchNS, "plugins-0", 20*time.Second)
	env.deleteNow(researchNS, "plugins-0")
	gangBefore := gangDecisions(t)
	if gangBefore <= before {
		t.Fatalf("gleaner_scheduler_gang_decisions_total stayed at %v as a scheduler-plugins gang was placed", before)
	}

	env.createNativePodGroup("solo", 1)
	both := nativeGangPod("both", "solo", 1, "")
	both.Labels = map[string]string{api.LabelPodGroup: "solo"}
	env.create(both)

	// gpu-b is taken, so ddp-1 cannot be placed: ddp-0, which fits on gpu-a,
	// must not be bound alone.
	blocker := bestEffortPod("blocker", 8)
	blocker.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "gpu-b"}
	env.create(blocker)
	env.waitBound(researchNS, "blocker", 20*time.Second)
	env.createNativePodGroup("ddp", 2)
	env.create(nativeGangPod("ddp-0", "ddp", 2, "gpu-a"))
	env.create(nativeGangPod("ddp-1", "ddp", 2, "gpu-b"))
	env.waitPodGroupScheduled("ddp", metav1.ConditionFalse, 20*time.Second)
	env.assertStaysPending(researchNS, "ddp-0", 2*time.Second)
	env.assertStaysPending(researchNS, "ddp-1", 200*time.Millisecond)
	// Nor does the waiting gang hold gpu-a: the in-tree plugin tries the group
	// whole in one cycle and keeps no reservation, where Gleaner's Gang holds a
	// member's node at Permit until its group's timeout.
	probe := bestEffortPod("probe", 4)
	probe.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "gpu-a"}
	probeAt := time.Now()
	env.create(probe)
	env.waitBound(researchNS, "probe", 10*time.Second)
	t.Logf("a 4-GPU pod bound on gpu-a %v after creation while the gang waited", time.Since(probeAt).Round(time.Millisecond))
	env.deleteNow(researchNS, "probe")

	// Room for both members: the group binds whole.
	env.deleteNow(researchNS, "blocker")
	roomAt := time.Now()
	first, second := env.waitBoundAt(researchNS, "ddp-0", "ddp-1", 30*time.Second)
	t.Logf("native gang bound whole %v after room appeared (its members %v apart)",
		second.Sub(roomAt).Round(time.Millisecond), second.Sub(first).Round(time.Millisecond))
	env.waitPodGroupScheduled("ddp", metav1.ConditionTrue, 10*time.Second)

	// An elastic gang beside it (minCount 1 of 2), and a lone job filling
	// gpu-b, so the room chat needs can only come from gpu-a.
	env.createNativePodGroup("elastic", 1)
	env.create(nativeGangPod("elastic-0", "elastic", 2, "gpu-a"))
	env.create(nativeGangPod("elastic-1", "elastic", 2, "gpu-b"))
	lone := bestEffortPod("lone", 4)
	lone.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "gpu-b"}
	env.create(lone)
	for _, name := range []string{"elastic-0", "elastic-1", "lone"} {
		env.waitBound(researchNS, name, 20*time.Second)
	}

	// A pod in two gangs is refused, by Gang, saying why.
	refused := env.waitEvent(researchNS, "both", "FailedScheduling", gang.ErrReasonTwoGangs, 20*time.Second)
	t.Logf("both: %s", refused.Message)
	env.assertStaysPending(researchNS, "both", 200*time.Millisecond)

	// Chat needs another replica: gpu-a must return its 4 lent GPUs, ddp-0's
	// and elastic-0's. ddp goes whole, elastic keeps its minCount on gpu-b.
	loadAt := time.Now()
	chat0.set(vllmServing, 16, 5, 0.9)
	for _, name := range []string{"ddp-0", "elastic-0"} {
		env.waitEvent(researchNS, name, reclaim.ReasonReclaimed, "must return 4 GPUs", 20*time.Second)
	}
	env.waitEvent(researchNS, "ddp-1", reclaim.ReasonReclaimed, "", 10*time.Second)
	t.Logf("gpu-a's gang members and ddp-1 evicted %v after the load rose", time.Since(loadAt).Round(time.Millisecond))
	for _, name := range []string{"ddp-0", "ddp-1", "elastic-0"} {
		if grace, deleted := env.kubelet.deletionGrace(researchNS, name); !deleted || grace != graceSeconds {
			t.Fatalf("%s deleted=%v grace=%d: want it evicted with its %ds grace period", name, deleted, grace, graceSeconds)
		}
	}
	time.Sleep(3 * scrapeInterval)
	for _, name := range []string{"elastic-1", "lone"} {
		if _, deleted := env.kubelet.deletionGrace(researchNS, name); deleted {
			t.Fatalf("%s was evicted; want the elastic gang shed down to its minCount on gpu-b and the lone job kept", name)
		}
	}

	// Gleaner's Gang acted on none of these pods.
	if after := gangDecisions(t); after != gangBefore {
		t.Errorf("gleaner_scheduler_gang_decisions_total went from %v to %v: Gang acted on a native gang's pods", gangBefore, after)
	}
	t.Logf("gleaner_scheduler_gang_decisions_total: %v before the scheduler-plugins gang, %v after it and at the end", before, gangBefore)
	gangReasons := []string{gang.ErrReasonNoPodGroup, gang.ErrReasonTooFewPods, gang.ErrReasonBackingOff,
		gang.ErrReasonSiblingLost, gang.ErrReasonNativeGangsOff, "more members of pod group"}
	for _, name := range []string{"ddp-0", "ddp-1", "elastic-0", "elastic-1"} {
		for _, ev := range env.events(researchNS, name) {
			if ev.Reason == "FailedScheduling" {
				t.Logf("%s: %s", name, ev.Message)
			}
			for _, r := range gangReasons {
				if strings.Contains(ev.Message, r) {
					t.Errorf("event on %s carries Gang's reason %q: %s", name, r, ev.Message)
				}
			}
		}
	}
}

// nativeGangPod is a best-effort pod of the native PodGroup group asking for n
// GPUs, on node when not "".
func nativeGangPod(name, group string, n int64, node string) *v1.Pod {
	p := bestEffortPod(name, n)
	p.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: &group}
	if node != "" {
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	}
	return p
}

// createNativePodGroup creates a native PodGroup with the gang policy in the
// research namespace. It names the best-effort PriorityClass, as its members
// do: kube-scheduler refuses a group whose members' priority is not the
// group's own (0 without a class).
func (e *harvestEnv) createNativePodGroup(name string, minCount int32) {
	e.t.Helper()
	pg := &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: researchNS},
		Spec: schedulingv1beta1.PodGroupSpec{
			PriorityClassName: api.PriorityClassBestEffort,
			SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
				Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: minCount},
			},
		},
	}
	if _, err := e.client.SchedulingV1beta1().PodGroups(researchNS).Create(context.Background(), pg, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("creating native PodGroup %s: %v", name, err)
	}
}

// waitPodGroupScheduled waits until kube-scheduler's gang cycle has reported on
// the native PodGroup: its PodGroupInitiallyScheduled condition has status.
func (e *harvestEnv) waitPodGroupScheduled(name string, status metav1.ConditionStatus, timeout time.Duration) {
	e.t.Helper()
	var last *metav1.Condition
	eventually(e.t, timeout, "native PodGroup "+name+" to be "+schedulingv1beta1.PodGroupInitiallyScheduled+"="+string(status), func(ctx context.Context) (bool, error) {
		pg, err := e.client.SchedulingV1beta1().PodGroups(researchNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = meta.FindStatusCondition(pg.Status.Conditions, schedulingv1beta1.PodGroupInitiallyScheduled)
		return last != nil && last.Status == status, nil
	})
	e.t.Logf("PodGroup %s: %s=%s (%s): %s", name, last.Type, last.Status, last.Reason, last.Message)
}

// waitBoundAt waits until both pods are bound, and returns when each was first
// seen bound.
func (e *harvestEnv) waitBoundAt(ns, a, b string, timeout time.Duration) (first, second time.Time) {
	e.t.Helper()
	seen := map[string]time.Time{}
	eventually(e.t, timeout, "pods "+a+" and "+b+" to be bound", func(ctx context.Context) (bool, error) {
		for _, name := range []string{a, b} {
			if _, ok := seen[name]; ok {
				continue
			}
			p, err := e.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if p.Spec.NodeName != "" {
				seen[name] = time.Now()
			}
		}
		return len(seen) == 2, nil
	})
	first, second = seen[a], seen[b]
	if second.Before(first) {
		first, second = second, first
	}
	return first, second
}

// gangDecisions sums gleaner_scheduler_gang_decisions_total over its results
// in this process's registry: 0 before Gang has decided anything.
func gangDecisions(t *testing.T) float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, mf := range families {
		if mf.GetName() == "gleaner_scheduler_gang_decisions_total" {
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}
