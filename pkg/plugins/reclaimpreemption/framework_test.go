package reclaimpreemption

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/features"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	internalqueue "k8s.io/kubernetes/pkg/scheduler/backend/queue"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	tf "k8s.io/kubernetes/pkg/scheduler/testing/framework"
	clocktesting "k8s.io/utils/clock/testing"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	pgfake "sigs.k8s.io/scheduler-plugins/pkg/generated/clientset/versioned/fake"

	"github.com/gleaner-dev/gleaner/internal/plugintest"
	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/plugins/pluginargs"
)

// These tests run ReclaimPreemption's PostFilter inside the scheduler
// framework, after NodeResourcesFit has rejected every node, with the upstream
// Evaluator and executor deleting victims through a fake clientset.

func TestMain(m *testing.M) {
	metrics.Register()
	// The PodGroup fake clientset sends no initial-events bookmark, so a
	// watch-list informer over it never syncs (see the gang plugin's tests).
	if err := utilfeature.DefaultMutableFeatureGate.Set("WatchListClient=false"); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}

// gpuNode has 8 GPUs.
func gpuNode(name string) *v1.Node {
	alloc := v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse("64"),
		v1.ResourceMemory: resource.MustParse("512Gi"),
		v1.ResourcePods:   resource.MustParse("110"),
		api.GPUResource:   resource.MustParse("8"),
	}
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: v1.NodeStatus{Capacity: alloc, Allocatable: alloc}}
}

// bound places p on node, running, with a UID.
func bound(p *v1.Pod, node string) *v1.Pod {
	p.UID = types.UID("uid-" + p.Name)
	p.Spec.NodeName = node
	p.Status.Phase = v1.PodRunning
	return p
}

func inGang(p *v1.Pod, group string) *v1.Pod {
	p.Labels = map[string]string{api.LabelPodGroup: group}
	return p
}

// inNativeGang makes p a member of the native PodGroup group.
func inNativeGang(p *v1.Pod, group string) *v1.Pod {
	p.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: &group}
	return p
}

func leaving(p *v1.Pod) *v1.Pod {
	p.DeletionTimestamp = &metav1.Time{Time: now}
	return p
}

// stuck has been terminating for ten minutes past its 30 s grace period.
func stuck(p *v1.Pod) *v1.Pod {
	p.DeletionTimestamp = &metav1.Time{Time: now.Add(-10 * time.Minute)}
	p.DeletionGracePeriodSeconds = new(int64(30))
	return p
}

func withGrace(p *v1.Pod, seconds int64) *v1.Pod {
	p.Spec.TerminationGracePeriodSeconds = &seconds
	return p
}

func withSave(p *v1.Pod, took string) *v1.Pod {
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[api.AnnotationSaveDuration] = took
	return p
}

func pending(p *v1.Pod) *v1.Pod {
	p.UID = types.UID("uid-" + p.Name)
	return p
}

type postFilterResult struct {
	nominated string
	code      fwk.Code
	reason    string
	deleted   []string
	// regraced: pods deleted again with a shorter grace period, as "name=seconds".
	regraced []string
}

func runPostFilter(t *testing.T, pod *v1.Pod, nodes []*v1.Node, pods []*v1.Pod, wantDeleted int) postFilterResult {
	t.Helper()
	return runPostFilterWithGroups(t, pod, nodes, pods, nil, wantDeleted)
}

// runPostFilterWithGroups is runPostFilter with these PodGroups.
func runPostFilterWithGroups(t *testing.T, pod *v1.Pod, nodes []*v1.Node, pods []*v1.Pod, groups []runtime.Object, wantDeleted int) postFilterResult {
	t.Helper()
	return runPostFilterAfter(t, pod, nodes, pods, groups, wantDeleted, nil)
}

// runPostFilterAfter is runPostFilterWithGroups with after run once the
// plugin's informers have synced, before the scheduling cycle. groups may
// hold native PodGroups (scheduling.k8s.io) beside scheduler-plugins ones.
func runPostFilterAfter(t *testing.T, pod *v1.Pod, nodes []*v1.Node, pods []*v1.Pod, groups []runtime.Object, wantDeleted int,
	after func(context.Context, *fake.Clientset, *ReclaimPreemption)) postFilterResult {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	objs := []runtime.Object{pod}
	for _, p := range pods {
		objs = append(objs, p)
	}
	var pluginsGroups []runtime.Object
	var natives []*schedulingv1beta1.PodGroup
	for _, g := range groups {
		if pg, native := g.(*schedulingv1beta1.PodGroup); native {
			objs = append(objs, g)
			natives = append(natives, pg)
		} else {
			pluginsGroups = append(pluginsGroups, g)
		}
	}
	groups = pluginsGroups
	client := fake.NewClientset(objs...)
	informerFactory := informers.NewSharedInformerFactory(client, 0)
	informerFactory.Core().V1().Pods().Informer()
	informerFactory.Policy().V1().PodDisruptionBudgets().Informer()
	var pl *ReclaimPreemption
	factory := func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		var args Args
		if err := pluginargs.Decode(Name, obj, &args); err != nil {
			return nil, err
		}
		p, err := newWithPodGroups(ctx, args, h, pgfake.NewClientset(groups...))
		if err != nil {
			return nil, err
		}
		pl = p
		return p, nil
	}
	snapshot := internalcache.NewSnapshot(pods, nodes)
	var withGroups []frameworkruntime.Option
	if utilfeature.DefaultFeatureGate.Enabled(features.GenericWorkload) {
		// As the scheduler has them with the gate on: the native groups'
		// states in its cache and snapshot, which DefaultPreemption reads.
		snapshot = internalcache.NewTestSnapshotWithPodGroups(pods, nodes, natives)
		podGroups := internalcache.New(ctx, nil, true, false)
		for _, pg := range natives {
			podGroups.AddPodGroup(pg)
		}
		for _, p := range pods {
			podGroups.AddPodGroupMember(p)
		}
		withGroups = append(withGroups, frameworkruntime.WithPodGroupManager(podGroups))
	}
	fw, err := tf.NewFramework(ctx, append(plugintest.Upstream(),
		tf.RegisterPluginAsExtensions(Name, factory, "PostFilter"),
	), "gleaner-scheduler", append(withGroups,
		frameworkruntime.WithClientSet(client),
		frameworkruntime.WithEventRecorder(events.NewFakeRecorder(100)),
		frameworkruntime.WithInformerFactory(informerFactory),
		frameworkruntime.WithPodNominator(internalqueue.NewTestQueue(ctx, nil)),
		frameworkruntime.WithSnapshotSharedLister(snapshot),
		frameworkruntime.WithMutableSnapshotLister(snapshot),
		frameworkruntime.WithWaitingPods(frameworkruntime.NewWaitingPodsMap()),
		frameworkruntime.WithPodsInPreBind(frameworkruntime.NewPodsInPreBindMap()),
	)...)
	if err != nil {
		t.Fatal(err)
	}
	pl.clock = clocktesting.NewFakePassiveClock(now) // lost work as of the pods' fixed times
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if seen, _ := pl.groups.List(labels.Everything()); len(seen) == len(groups) {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the plugin saw %d of %d PodGroups", len(seen), len(groups))
		}
	}
	informerFactory.Start(ctx.Done())
	informerFactory.WaitForCacheSync(ctx.Done())
	if after != nil {
		after(ctx, client, pl)
	}

	// The scheduling cycle up to PostFilter: PreFilter, then Filter on every node.
	state := framework.NewCycleState()
	if _, st, _ := fw.RunPreFilterPlugins(ctx, state, pod); !st.IsSuccess() {
		t.Fatalf("PreFilter: %v", st)
	}
	statuses := framework.NewDefaultNodeToStatus()
	infos, err := fw.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		t.Fatal(err)
	}
	for _, ni := range infos {
		st := fw.RunFilterPlugins(ctx, state, pod, ni)
		if st.IsSuccess() {
			t.Fatalf("test set-up: %s fits on %s without preemption", pod.Name, ni.Node().Name)
		}
		statuses.Set(ni.Node().Name, st)
	}
	result, st := fw.RunPostFilterPlugins(ctx, state, pod, statuses)

	var out postFilterResult
	if result != nil && result.NominatingInfo != nil {
		out.nominated = result.NominatedNodeName
	}
	out.code = st.Code()
	if st != nil {
		out.reason = st.Message()
	}
	// Victims are deleted asynchronously: wait for the deletions expected, then
	// a little longer for any that are not.
	deletedPods := func() sets.Set[string] {
		deleted := sets.New[string]()
		for _, a := range client.Actions() {
			if d, ok := a.(clienttesting.DeleteAction); ok && a.GetResource().Resource == "pods" {
				deleted.Insert(d.GetName())
			}
		}
		return deleted
	}
	for deadline := time.Now().Add(10 * time.Second); deletedPods().Len() < wantDeleted && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	deleted := deletedPods()
	out.deleted = sets.List(deleted)
	for _, a := range client.Actions() {
		if d, ok := a.(clienttesting.DeleteAction); ok && a.GetResource().Resource == "pods" && d.GetDeleteOptions().GracePeriodSeconds != nil {
			regraced := fmt.Sprintf("%s=%d", d.GetName(), *d.GetDeleteOptions().GracePeriodSeconds)
			// Only the victim itself, not a pod recreated under its name.
			if pre := d.GetDeleteOptions().Preconditions; pre == nil || pre.UID == nil || *pre.UID == "" {
				regraced += " without the victim's UID as a precondition"
			}
			out.regraced = append(out.regraced, regraced)
		}
	}
	return out
}

const be, inf = -1000, 1000000

// threeMemberGang: gang "job" has a member on n1, beside a pod with eight
// hours to lose, and two on n2, where the rest serves inference (so n2
// cannot make room for a 4-GPU pod).
func threeMemberGang() []*v1.Pod {
	return []*v1.Pod{
		bound(inGang(runningPod("gang-0", be, 4, time.Minute, 0), "job"), "n1"),
		bound(runningPod("solo", be, 4, 8*time.Hour, 0), "n1"),
		bound(inGang(runningPod("gang-1", be, 1, time.Minute, 0), "job"), "n2"),
		bound(inGang(runningPod("gang-2", be, 1, time.Minute, 0), "job"), "n2"),
		bound(runningPod("serving", inf, 6, time.Hour, 0), "n2"),
	}
}

func TestFrameworkPostFilter(t *testing.T) {
	tests := []struct {
		name  string
		pod   *v1.Pod
		nodes []*v1.Node
		pods  []*v1.Pod
		// quorum gives gang "job" a PodGroup with this minMember.
		quorum int32
		want   postFilterResult
	}{{
		name:  "inference evicts the best-effort pod with the least work to lose",
		pod:   pending(runningPod("vllm", inf, 4, 0, 0)),
		nodes: []*v1.Node{gpuNode("n1")},
		pods: []*v1.Pod{
			bound(runningPod("long-run", be, 4, 3*time.Hour, 0), "n1"),
			bound(runningPod("just-checkpointed", be, 4, 5*time.Hour, time.Minute), "n1"),
		},
		want: postFilterResult{nominated: "n1", code: fwk.Success, deleted: []string{"just-checkpointed"}},
	}, {
		name:  "least lost work decides, even when more pods go",
		pod:   pending(runningPod("vllm", inf, 4, 0, 0)),
		nodes: []*v1.Node{gpuNode("n1")},
		pods: []*v1.Pod{
			bound(runningPod("big", be, 4, 2*time.Hour, 0), "n1"),
			bound(runningPod("small-a", be, 2, 10*time.Minute, 0), "n1"),
			bound(runningPod("small-b", be, 2, 10*time.Minute, 0), "n1"),
		},
		// big would lose 8 GPU-hours, the two smalls 40 GPU-minutes together: the smalls go.
		want: postFilterResult{nominated: "n1", code: fwk.Success, deleted: []string{"small-a", "small-b"}},
	}, {
		name:  "a gang member is evicted with the rest of its gang, wherever they run",
		pod:   pending(runningPod("vllm", inf, 4, 0, 0)),
		nodes: []*v1.Node{gpuNode("n1"), gpuNode("n2")},
		pods: []*v1.Pod{
			bound(inGang(runningPod("gang-0", be, 4, time.Minute, 0), "job"), "n1"),
			bound(runningPod("solo", be, 4, 8*time.Hour, 0), "n1"),
			// n2 cannot make room: its other GPUs serve inference.
			bound(inGang(runningPod("gang-1", be, 2, time.Minute, 0), "job"), "n2"),
			bound(runningPod("serving", inf, 6, time.Hour, 0), "n2"),
		},
		want: postFilterResult{nominated: "n1", code: fwk.Success, deleted: []string{"gang-0", "gang-1"}},
	}, {
		name:   "an elastic gang that keeps its quorum loses only the member in the way",
		pod:    pending(runningPod("vllm", inf, 4, 0, 0)),
		nodes:  []*v1.Node{gpuNode("n1"), gpuNode("n2")},
		pods:   threeMemberGang(),
		quorum: 2,
		want:   postFilterResult{nominated: "n1", code: fwk.Success, deleted: []string{"gang-0"}},
	}, {
		name:   "an elastic gang that would fall below its quorum goes whole",
		pod:    pending(runningPod("vllm", inf, 4, 0, 0)),
		nodes:  []*v1.Node{gpuNode("n1"), gpuNode("n2")},
		pods:   threeMemberGang(),
		quorum: 3,
		want:   postFilterResult{nominated: "n1", code: fwk.Success, deleted: []string{"gang-0", "gang-1", "gang-2"}},
	}, {
		name:  "pods already terminating will make room: wait for them, evict nothing",
		pod:   pending(runningPod("vllm", inf, 4, 0, 0)),
		nodes: []*v1.Node{gpuNode("n1")},
		pods: []*v1.Pod{
			leaving(bound(runningPod("evicted-earlier", be, 4, time.Hour, 0), "n1")),
			bound(runningPod("staying", be, 4, time.Minute, 0), "n1"),
		},
		want: postFilterResult{nominated: "n1", code: fwk.Success},
	}, {
		name:  "a pod terminating past its capped grace period is not waited for",
		pod:   pending(runningPod("vllm", inf, 4, 0, 0)),
		nodes: []*v1.Node{gpuNode("n1")},
		pods: []*v1.Pod{
			stuck(bound(runningPod("finalizer-held", be, 4, time.Hour, 0), "n1")),
			bound(runningPod("staying", be, 4, time.Minute, 0), "n1"),
		},
		want: postFilterResult{nominated: "n1", code: fwk.Success, deleted: []string{"staying"}},
	}, {
		name:  "a victim asking for an hour's grace is deleted again with the cap",
		pod:   pending(runningPod("vllm", inf, 4, 0, 0)),
		nodes: []*v1.Node{gpuNode("n1")},
		pods: []*v1.Pod{
			withGrace(bound(runningPod("slow-to-stop", be, 8, time.Minute, 0), "n1"), 3600),
		},
		want: postFilterResult{nominated: "n1", code: fwk.Success, deleted: []string{"slow-to-stop"}, regraced: []string{"slow-to-stop=120"}},
	}, {
		name:  "a victim that declares its saves take 20 s is deleted again with 30 s",
		pod:   pending(runningPod("vllm", inf, 4, 0, 0)),
		nodes: []*v1.Node{gpuNode("n1")},
		pods: []*v1.Pod{
			withSave(withGrace(bound(runningPod("quick-to-save", be, 8, time.Minute, 0), "n1"), 120), "20s"),
		},
		want: postFilterResult{nominated: "n1", code: fwk.Success, deleted: []string{"quick-to-save"}, regraced: []string{"quick-to-save=30"}},
	}, {
		name:  "inference never preempts pods that are not best-effort",
		pod:   pending(runningPod("vllm", inf, 4, 0, 0)),
		nodes: []*v1.Node{gpuNode("n1")},
		pods: []*v1.Pod{
			bound(runningPod("other-inference", 1000, 4, time.Hour, 0), "n1"),
			bound(runningPod("batch", 0, 4, time.Hour, 0), "n1"),
		},
		want: postFilterResult{code: fwk.Unschedulable, reason: "preemption: "},
	}, {
		name:  "a best-effort pod never preempts",
		pod:   pending(runningPod("train", be, 4, 0, 0)),
		nodes: []*v1.Node{gpuNode("n1")},
		pods: []*v1.Pod{
			bound(runningPod("lower", be-1, 8, time.Hour, 0), "n1"),
		},
		want: postFilterResult{code: fwk.Unschedulable, reason: ErrReasonBestEffort},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var groups []runtime.Object
			if tt.quorum > 0 {
				groups = append(groups, &schedv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: tt.pods[0].Namespace},
					Spec: schedv1alpha1.PodGroupSpec{MinMember: tt.quorum}})
			}
			got := runPostFilterWithGroups(t, tt.pod, tt.nodes, tt.pods, groups, len(tt.want.deleted))
			sort.Strings(tt.want.deleted)
			if got.nominated != tt.want.nominated || got.code != tt.want.code || !strings.Contains(got.reason, tt.want.reason) ||
				strings.Join(got.deleted, ",") != strings.Join(tt.want.deleted, ",") || strings.Join(got.regraced, ",") != strings.Join(tt.want.regraced, ",") {
				t.Fatalf("PostFilter = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// A pod seen to start terminating counts from that moment on the scheduler's
// clock, though the API server's clock (10 minutes behind) says it was asked
// long past its 30 s grace: the pending replica waits for its GPUs, and
// nothing else is evicted.
func TestFrameworkTerminationOnTheSchedulersClock(t *testing.T) {
	evicted := bound(runningPod("evicted-now", be, 4, time.Hour, 0), "n1")
	got := runPostFilterAfter(t, pending(runningPod("vllm", inf, 4, 0, 0)), []*v1.Node{gpuNode("n1")},
		[]*v1.Pod{evicted, bound(runningPod("staying", be, 4, time.Minute, 0), "n1")}, nil, 0,
		func(ctx context.Context, client *fake.Clientset, pl *ReclaimPreemption) {
			p := stuck(evicted.DeepCopy())
			if _, err := client.CoreV1().Pods(p.Namespace).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(10 * time.Second); !pl.terms.AskedToStop(p).Equal(now); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the plugin has %v as when %s was asked to stop, want now (%v)", pl.terms.AskedToStop(p), p.Name, now)
				}
			}
		})
	if got.nominated != "n1" || got.code != fwk.Success || len(got.deleted) != 0 {
		t.Fatalf("PostFilter = %+v, want n1 nominated and nothing deleted: evicted-now is returning its GPUs", got)
	}
}

// With the GenericWorkload gate on, members of a native PodGroup
// (spec.schedulingGroup) are a gang like a scheduler-plugins PodGroup's: taken
// whole, or shed down to the group's minCount. Upstream's Evaluator groups
// them only when the PodGroup asks for disruptionMode All; without it, each
// member would be a victim of its own, and the rest of the gang would run on
// without it.
func TestFrameworkPostFilterNativeGangs(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.GenericWorkload, true)
	// As threeMemberGang, the gang named by a native PodGroup instead.
	native := func() []*v1.Pod {
		return []*v1.Pod{
			bound(inNativeGang(runningPod("gang-0", be, 4, time.Minute, 0), "job"), "n1"),
			bound(runningPod("solo", be, 4, 8*time.Hour, 0), "n1"),
			bound(inNativeGang(runningPod("gang-1", be, 1, time.Minute, 0), "job"), "n2"),
			bound(inNativeGang(runningPod("gang-2", be, 1, time.Minute, 0), "job"), "n2"),
			bound(runningPod("serving", inf, 6, time.Hour, 0), "n2"),
		}
	}
	group := func(minCount int32) *schedulingv1beta1.PodGroup {
		return &schedulingv1beta1.PodGroup{
			ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: "research"},
			Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
				Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: minCount},
			}},
		}
	}
	tests := []struct {
		name   string
		groups []runtime.Object
		want   []string
	}{
		{"a rigid native gang is evicted whole, wherever its members run", []runtime.Object{group(3)}, []string{"gang-0", "gang-1", "gang-2"}},
		{"a native gang whose PodGroup is not seen goes whole", nil, []string{"gang-0", "gang-1", "gang-2"}},
		{"an elastic native gang that keeps its minCount loses only the member in the way", []runtime.Object{group(2)}, []string{"gang-0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := runPostFilterWithGroups(t, pending(runningPod("vllm", inf, 4, 0, 0)), []*v1.Node{gpuNode("n1"), gpuNode("n2")}, native(), tt.groups, len(tt.want))
			if got.nominated != "n1" || got.code != fwk.Success || strings.Join(got.deleted, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("PostFilter = %+v, want n1 nominated and %v deleted", got, tt.want)
			}
		})
	}
}
