package gang

import (
	"context"
	"slices"
	"sort"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/features"
	schedulerapi "k8s.io/kubernetes/pkg/scheduler/apis/config"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/gangscheduling"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	tf "k8s.io/kubernetes/pkg/scheduler/testing/framework"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// These tests run Gang beside the in-tree GangScheduling plugin, as
// gleaner-scheduler's profile has them with the GenericWorkload gate on (the
// gate adds GangScheduling to every profile at PreEnqueue, Permit and the pod
// group cycle), and alone with the gate off, and check that for every kind of
// pod at most one of the two acts on it.

// nativeMember is a best-effort pod of the native PodGroup group.
func nativeMember(name, group string) *v1.Pod {
	p := member(name, "", "")
	p.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: &group}
	return p
}

func nativeGroup(name string, minCount int32) *schedulingv1beta1.PodGroup {
	return &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "research"},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: minCount},
		}},
	}
}

// registerInTreeGang registers GangScheduling where the gate puts it.
func registerInTreeGang(reg *frameworkruntime.Registry, profile *schedulerapi.KubeSchedulerProfile) {
	if err := reg.Register(gangscheduling.Name, func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		return gangscheduling.New(ctx, obj, h, feature.Features{EnableGenericWorkload: true})
	}); err != nil {
		panic(err)
	}
	for _, set := range []*schedulerapi.PluginSet{&profile.Plugins.PreEnqueue, &profile.Plugins.Permit} {
		set.Enabled = append(set.Enabled, schedulerapi.Plugin{Name: gangscheduling.Name})
	}
}

// nativeEnv is a framework with Gang, and GangScheduling when the gate is on,
// over scheduler-plugins PodGroup g (minMember 2) and native PodGroup ng
// (minCount 2), each with two pending members in the API and the scheduler's
// cache, and the pods given.
func nativeEnv(t *testing.T, gate bool, pods ...*v1.Pod) *gangEnv {
	t.Helper()
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.GenericWorkload, gate)
	_, ctx := ktesting.NewTestContext(t)
	apiPods := append([]*v1.Pod{member("g1", "g", ""), member("g2", "g", ""), nativeMember("n1", "ng"), nativeMember("n2", "ng")}, pods...)
	natives := []*schedulingv1beta1.PodGroup{nativeGroup("ng", 2)}
	// The scheduler's cache keeps native group states only with the gate on.
	cache := internalcache.New(ctx, nil, gate, false)
	for _, pg := range natives {
		cache.AddPodGroup(pg)
	}
	for _, p := range apiPods {
		cache.AddPodGroupMember(p)
	}
	var extra []tf.RegisterPluginFunc
	if gate {
		extra = append(extra, registerInTreeGang)
	}
	env := newGangEnvWith(t, []*schedv1alpha1.PodGroup{podGroup("g", 2, 30)}, apiPods, extra,
		internalcache.NewTestSnapshotWithPodGroups(nil, testNodes(), natives),
		frameworkruntime.WithPodGroupManager(cache))
	if env.gang.nativeGangs != gate {
		t.Fatalf("Gang sees GenericWorkload %v, want %v", env.gang.nativeGangs, gate)
	}
	return env
}

// acts is what each gang mechanism did with a pod in one scheduling attempt.
type acts struct {
	preEnqueue *fwk.Status // the framework's PreEnqueue plugins (GangScheduling's)
	preFilter  *fwk.Status // Gang's own answer at PreFilter (Skip is visible only here)
	permit     *fwk.Status
	waitingFor []string // the plugins that tell it to wait at Permit, sorted
}

// attempt runs pod through PreEnqueue, PreFilter and, when both let it on,
// Permit on n1, as a scheduling cycle does.
func (e *gangEnv) attempt(t *testing.T, pod *v1.Pod) acts {
	t.Helper()
	ctx := context.Background()
	var a acts
	for _, pl := range e.fw.PreEnqueuePlugins() {
		if st := pl.PreEnqueue(ctx, pod); !st.IsSuccess() {
			a.preEnqueue = st.WithPlugin(pl.Name())
			return a
		}
	}
	state := framework.NewCycleState()
	_, a.preFilter = e.gang.PreFilter(ctx, state, pod, nil)
	if _, st, _ := e.fw.RunPreFilterPlugins(ctx, state, pod); !st.IsSuccess() {
		return a
	}
	var waits map[string]time.Duration
	waits, a.permit = e.fw.RunPermitPlugins(ctx, state, pod, "n1")
	for name := range waits {
		a.waitingFor = append(a.waitingFor, name)
	}
	sort.Strings(a.waitingFor)
	return a
}

func TestFrameworkNativeAndSchedulerPluginsGangsNeverShareAPod(t *testing.T) {
	both := nativeMember("both", "ng")
	both.Labels[api.LabelPodGroup] = "g"
	tests := []struct {
		name string
		gate bool
		pod  *v1.Pod
		// gangActs: Gang runs its gang for the pod (PreFilter neither skips nor
		// refuses it, and it waits for Gang at Permit); inTreeActs: the pod
		// waits for GangScheduling at Permit.
		gangActs, inTreeActs bool
		// refused: Gang refuses the pod at PreFilter with this reason.
		refused string
	}{
		{name: "gate on: a scheduler-plugins member is Gang's alone", gate: true, pod: member("g1", "g", ""), gangActs: true},
		{name: "gate on: a native member is GangScheduling's alone", gate: true, pod: nativeMember("n1", "ng"), inTreeActs: true},
		{name: "gate on: a pod naming both groups is refused", gate: true, pod: both, refused: ErrReasonTwoGangs},
		{name: "gate on: a pod in no group is neither's", gate: true, pod: member("solo", "", "")},
		{name: "gate off: a scheduler-plugins member is Gang's", pod: member("g1", "g", ""), gangActs: true},
		{name: "gate off: a native member is refused, as nothing would place its group whole", pod: nativeMember("n1", "ng"), refused: ErrReasonNativeGangsOff},
		{name: "gate off: a pod naming both groups is refused", pod: both, refused: ErrReasonTwoGangs},
		{name: "gate off: a pod in no group is neither's", pod: member("solo", "", "")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := nativeEnv(t, tt.gate, both, member("solo", "", ""))
			a := env.attempt(t, tt.pod)
			if a.preEnqueue != nil {
				t.Fatalf("PreEnqueue refused the pod: %v (both native members exist, so GangScheduling should let it on)", a.preEnqueue)
			}
			if tt.refused != "" {
				if a.preFilter.Code() != fwk.UnschedulableAndUnresolvable || a.preFilter.Message() != tt.refused {
					t.Fatalf("Gang's PreFilter = %v %q, want UnschedulableAndUnresolvable %q", a.preFilter.Code(), a.preFilter.Message(), tt.refused)
				}
				if a.permit != nil {
					t.Fatalf("a refused pod reached Permit: %v", a.permit)
				}
				return
			}
			wantPreFilter := fwk.Skip
			if tt.gangActs {
				wantPreFilter = fwk.Success
			}
			if a.preFilter.Code() != wantPreFilter {
				t.Fatalf("Gang's PreFilter = %v %q, want %v", a.preFilter.Code(), a.preFilter.Message(), wantPreFilter)
			}
			// Each group has two members and none is placed yet, so a gang
			// that acts holds its member at Permit.
			var want []string
			if tt.gangActs {
				want = append(want, Name)
			}
			if tt.inTreeActs {
				want = append(want, gangscheduling.Name)
			}
			if !slices.Equal(a.waitingFor, want) {
				t.Fatalf("at Permit the pod waits for %v (%v), want %v", a.waitingFor, a.permit, want)
			}
			if len(want) == 0 && !a.permit.IsSuccess() {
				t.Fatalf("Permit = %v, want Success", a.permit)
			}
		})
	}
}

func TestLabelRemovedRequeuesAPodRefusedForTwoGroups(t *testing.T) {
	both := nativeMember("both", "ng")
	both.Labels[api.LabelPodGroup] = "g"
	onlyNative := nativeMember("both", "ng")
	other := nativeMember("other", "ng")
	otherBoth := other.DeepCopy()
	otherBoth.Labels[api.LabelPodGroup] = "g"
	tests := []struct {
		name     string
		old, new *v1.Pod
		want     fwk.QueueingHint
	}{
		{"its label taken off", both, onlyNative, fwk.Queue},
		{"another pod's label taken off", otherBoth, other, fwk.QueueSkip},
		{"the label put on", onlyNative, both, fwk.QueueSkip},
	}
	// The hint is registered where the queue sends a pending pod's changes to
	// itself: TargetPod (UnscheduledPod is every other pending pod's).
	events, err := (&Gang{}).EventsToRegister(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	registered := false
	for _, e := range events {
		if e.Event.ActionType&fwk.UpdatePodLabel != 0 {
			registered = e.Event.Resource == fwk.TargetPod
		}
	}
	if !registered {
		t.Errorf("the label hint is not registered for %s label updates: %+v", fwk.TargetPod, events)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := isSchedulableAfterLabelRemoved(klog.Background(), both, tt.old, tt.new)
			if err != nil || got != tt.want {
				t.Fatalf("hint = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}
