package gang

import (
	"context"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	tf "k8s.io/kubernetes/pkg/scheduler/testing/framework"
	clocktesting "k8s.io/utils/clock/testing"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	pgfake "sigs.k8s.io/scheduler-plugins/pkg/generated/clientset/versioned/fake"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// These tests run Gang inside the scheduler framework (its waiting-pods map,
// Permit and Unreserve plumbing) over fake clients and a scheduler snapshot.
// The only stand-in is the scheduling queue, replaced by a recorder of the pods
// the plugin activates.

func TestMain(m *testing.M) {
	metrics.Register()
	// The PodGroup fake clientset (client-gen of scheduler-plugins v0.35) sends
	// no initial-events bookmark, so a watch-list informer over it never syncs;
	// a real API server does. List and watch, as before watch-list.
	if err := utilfeature.DefaultMutableFeatureGate.Set("WatchListClient=false"); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}

var start = time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)

// member is a best-effort pod of group (none when ""), bound to node when node != "".
func member(name, group, node string) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "research", UID: types.UID("uid-" + name), Labels: map[string]string{}},
		Spec: v1.PodSpec{
			NodeName:   node,
			Priority:   new(int32(-1000)),
			Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{api.GPUResource: resource.MustParse("2")}}}},
		},
	}
	if group != "" {
		p.Labels[api.LabelPodGroup] = group
	}
	return p
}

// unbound is pod as the API server holds it before its binding.
func unbound(p *v1.Pod) *v1.Pod {
	c := p.DeepCopy()
	c.Spec.NodeName = ""
	return c
}

func podGroup(name string, minMember, timeoutSeconds int32) *schedv1alpha1.PodGroup {
	pg := &schedv1alpha1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "research"},
		Spec:       schedv1alpha1.PodGroupSpec{MinMember: minMember},
	}
	if timeoutSeconds > 0 {
		pg.Spec.ScheduleTimeoutSeconds = &timeoutSeconds
	}
	return pg
}

// activations records what the plugin asks the scheduling queue to activate.
type activations struct {
	mu   sync.Mutex
	pods []string
}

func (a *activations) Activate(_ klog.Logger, pods map[string]*v1.Pod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for key := range pods {
		a.pods = append(a.pods, key)
	}
}

func (a *activations) reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pods = nil
}

// waitFor waits until at least n activations are recorded and returns them.
func (a *activations) waitFor(n int) []string {
	deadline := time.Now().Add(5 * time.Second)
	for len(a.get()) < n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	return a.get()
}

func (a *activations) get() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.pods...)
}

type gangEnv struct {
	client    *fake.Clientset
	fw        framework.Framework
	gang      *Gang
	clock     *clocktesting.FakeClock
	activated *activations
}

// newGangEnv builds a framework with Gang at PreFilter, Reserve and Permit.
// apiPods are the pods the API server holds (the plugin counts members there);
// assumed are the pods the scheduler's snapshot has on nodes (bound, or
// assumed while waiting at Permit).
func newGangEnv(t *testing.T, groups []*schedv1alpha1.PodGroup, apiPods, assumed []*v1.Pod) *gangEnv {
	t.Helper()
	return newGangEnvWith(t, groups, apiPods, nil, internalcache.NewSnapshot(assumed, testNodes()))
}

func testNodes() []*v1.Node {
	var nodes []*v1.Node
	for _, n := range []string{"n1", "n2", "n3"} {
		nodes = append(nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	return nodes
}

// newGangEnvWith is newGangEnv with more plugins registered beside Gang, more
// framework options, and the scheduler's snapshot given.
func newGangEnvWith(t *testing.T, groups []*schedv1alpha1.PodGroup, apiPods []*v1.Pod, extra []tf.RegisterPluginFunc, snapshot *internalcache.Snapshot, opts ...frameworkruntime.Option) *gangEnv {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var objs []runtime.Object
	for _, p := range apiPods {
		objs = append(objs, p)
	}
	client := fake.NewClientset(objs...)
	informerFactory := informers.NewSharedInformerFactory(client, 0)
	informerFactory.Core().V1().Pods().Informer() // the plugin lists members from it
	// As in a running scheduler, pods are known before the plugin's PodGroup
	// informer delivers its first events (which wake the groups' pending members).
	informerFactory.Start(ctx.Done())
	informerFactory.WaitForCacheSync(ctx.Done())
	var pgObjs []runtime.Object
	for _, pg := range groups {
		pgObjs = append(pgObjs, pg)
	}
	env := &gangEnv{client: client, clock: clocktesting.NewFakeClock(start), activated: &activations{}}
	factory := func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		var args Args
		args.Default()
		g, err := newWithClient(ctx, args, h, pgfake.NewClientset(pgObjs...), env.clock)
		env.gang = g
		return g, err
	}
	fw, err := tf.NewFramework(ctx, append([]tf.RegisterPluginFunc{
		tf.RegisterQueueSortPlugin(queuesort.Name, queuesort.New),
		tf.RegisterBindPlugin(defaultbinder.Name, defaultbinder.New),
		tf.RegisterPluginAsExtensions(Name, factory, "PreFilter", "Reserve", "Permit"),
	}, extra...), "gleaner-scheduler",
		append([]frameworkruntime.Option{
			frameworkruntime.WithClientSet(client),
			frameworkruntime.WithInformerFactory(informerFactory),
			frameworkruntime.WithSnapshotSharedLister(snapshot),
			frameworkruntime.WithWaitingPods(frameworkruntime.NewWaitingPodsMap()),
			frameworkruntime.WithPodActivator(env.activated),
		}, opts...)...,
	)
	if err != nil {
		t.Fatal(err)
	}
	env.fw = fw
	deadline := time.Now().Add(10 * time.Second)
	for _, pg := range groups {
		for {
			if _, err := env.gang.groups.PodGroups(pg.Namespace).Get(pg.Name); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the plugin never saw PodGroup %s", pg.Name)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return env
}

// permit runs Permit as the scheduling cycle does: a pod told to wait is
// added to the framework's waiting pods.
func (e *gangEnv) permit(pod *v1.Pod, node string) (map[string]time.Duration, *fwk.Status) {
	waits, st := e.fw.RunPermitPlugins(context.Background(), framework.NewCycleState(), pod, node)
	if st.IsWait() {
		e.fw.AddWaitingPod(pod, waits)
	}
	return waits, st
}

func TestFrameworkPreFilter(t *testing.T) {
	terminating := member("m2", "g", "")
	terminating.DeletionTimestamp = &metav1.Time{Time: start}
	tests := []struct {
		name     string
		groups   []*schedv1alpha1.PodGroup
		apiPods  []*v1.Pod
		pod      *v1.Pod
		wantCode fwk.Code
		wantMsg  string
	}{
		{"a pod outside any group is not the plugin's business", nil, nil, member("solo", "", ""), fwk.Success, ""},
		{"a member whose PodGroup does not exist", nil, []*v1.Pod{member("m1", "g", "")}, member("m1", "g", ""), fwk.UnschedulableAndUnresolvable, ErrReasonNoPodGroup + ": research/g"},
		{"fewer members than minMember", []*schedv1alpha1.PodGroup{podGroup("g", 3, 0)}, []*v1.Pod{member("m1", "g", ""), member("m2", "g", "")}, member("m1", "g", ""), fwk.UnschedulableAndUnresolvable, ErrReasonTooFewPods + ": 2 of 3"},
		{"a terminating member does not count", []*schedv1alpha1.PodGroup{podGroup("g", 2, 0)}, []*v1.Pod{member("m1", "g", ""), terminating}, member("m1", "g", ""), fwk.UnschedulableAndUnresolvable, ErrReasonTooFewPods + ": 1 of 2"},
		{"members of another group do not count", []*schedv1alpha1.PodGroup{podGroup("g", 2, 0)}, []*v1.Pod{member("m1", "g", ""), member("x1", "other", "")}, member("m1", "g", ""), fwk.UnschedulableAndUnresolvable, ErrReasonTooFewPods + ": 1 of 2"},
		{"a complete group may be scheduled", []*schedv1alpha1.PodGroup{podGroup("g", 2, 0)}, []*v1.Pod{member("m1", "g", ""), member("m2", "g", "")}, member("m1", "g", ""), fwk.Success, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newGangEnv(t, tt.groups, tt.apiPods, nil)
			_, st, _ := env.fw.RunPreFilterPlugins(context.Background(), framework.NewCycleState(), tt.pod)
			if st.Code() != tt.wantCode || !strings.Contains(st.Message(), tt.wantMsg) {
				t.Fatalf("PreFilter = %v %q, want %v %q", st.Code(), st.Message(), tt.wantCode, tt.wantMsg)
			}
		})
	}
}

func TestFrameworkPermitReleasesTheGroupTogether(t *testing.T) {
	m1, m2, m3 := member("m1", "g", "n1"), member("m2", "g", "n2"), member("m3", "g", "")
	// m1 is bound, m2 is assumed on n2 and reaches Permit first, then m3.
	env := newGangEnv(t, []*schedv1alpha1.PodGroup{podGroup("g", 3, 30)}, []*v1.Pod{m1, unbound(m2), m3}, []*v1.Pod{m1, m2})
	ctx := context.Background()

	_, st := env.permit(m2, "n2")
	if st.Code() != fwk.Wait {
		t.Fatalf("Permit for the second of three members = %v, want Wait", st)
	}
	wp := env.fw.GetWaitingPod(m2.UID)
	if wp == nil {
		t.Fatal("m2 is not waiting at Permit")
	}
	if got := wp.GetPendingPlugins(); len(got) != 1 || got[0] != Name {
		t.Fatalf("m2 waits for %v, want [%s]", got, Name)
	}

	_, st = env.permit(m3, "n3")
	if !st.IsSuccess() {
		t.Fatalf("Permit for the member completing the group = %v, want Success", st)
	}
	done := make(chan *fwk.Status, 1)
	go func() { done <- env.fw.WaitOnPermit(ctx, m2) }()
	select {
	case st := <-done:
		if !st.IsSuccess() {
			t.Fatalf("the waiting member was not allowed: %v", st)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting member is still waiting after the group completed")
	}
}

// Permit finds the members earlier cycles assumed on the nodes they were
// assumed on (not by scanning every pod of the cluster), and forgets each
// once it is seen bound.
func TestFrameworkPermitCountsMembersWhereTheyWereAssumed(t *testing.T) {
	m1, m2, m3 := member("m1", "g", "n1"), member("m2", "g", "n2"), member("m3", "g", "")
	others := []*v1.Pod{member("x1", "other", "n1"), member("x2", "other", "n2"), member("solo", "", "n3")}
	env := newGangEnv(t, []*schedv1alpha1.PodGroup{podGroup("g", 3, 30), podGroup("other", 3, 30)},
		append([]*v1.Pod{unbound(m1), unbound(m2), m3}, others...), append([]*v1.Pod{m1, m2}, others...))
	ctx := context.Background()
	for _, p := range []*v1.Pod{m1, m2} {
		if _, st := env.permit(p, p.Spec.NodeName); st.Code() != fwk.Wait {
			t.Fatalf("Permit for %s = %v, want Wait", p.Name, st)
		}
	}
	if _, st := env.permit(m3, "n3"); !st.IsSuccess() {
		t.Fatalf("Permit for the third member = %v, want Success: m1 and m2 are assumed", st)
	}
	if _, err := env.client.CoreV1().Pods("research").Update(ctx, m1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, still := env.gang.assumedOn.Load(m1.UID); still; _, still = env.gang.assumedOn.Load(m1.UID) {
		if time.Now().After(deadline) {
			t.Fatal("m1 is remembered as assumed after it was seen bound")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, ok := env.gang.assumedOn.Load(m2.UID); !ok {
		t.Error("m2, assumed and not yet bound, was forgotten")
	}
	env.fw.RunReservePluginsUnreserve(ctx, framework.NewCycleState(), m2, "n2")
	if _, ok := env.gang.assumedOn.Load(m2.UID); ok {
		t.Error("m2 is remembered as assumed after Unreserve")
	}
}

func TestFrameworkPermitTimesOutWithTheGroupsTimeout(t *testing.T) {
	m1, m2 := member("m1", "g", "n1"), member("m2", "g", "")
	env := newGangEnv(t, []*schedv1alpha1.PodGroup{podGroup("g", 3, 1)}, []*v1.Pod{m1, m2, member("m3", "g", "")}, []*v1.Pod{m1})
	ctx := context.Background()
	waitTimes, st := env.permit(m1, "n1")
	if st.Code() != fwk.Wait || waitTimes[Name] != time.Second {
		t.Fatalf("Permit = %v with wait %v, want Wait for the PodGroup's 1s", st, waitTimes)
	}
	began := time.Now()
	st = env.fw.WaitOnPermit(ctx, m1)
	if st.Code() != fwk.Unschedulable || !strings.Contains(st.Message(), "timeout") {
		t.Fatalf("WaitOnPermit = %v, want a rejection for timeout", st)
	}
	if waited := time.Since(began); waited > 5*time.Second {
		t.Fatalf("the member held its place for %v, past the group's timeout", waited)
	}
}

func TestFrameworkUnreserveReleasesSiblingsAndBacksOff(t *testing.T) {
	m1, m2, m3 := member("m1", "g", "n1"), member("m2", "g", "n2"), member("m3", "g", "")
	solo := member("solo", "", "")
	// m1 and m2 are assumed on nodes, not yet bound.
	env := newGangEnv(t, []*schedv1alpha1.PodGroup{podGroup("g", 3, 30)}, []*v1.Pod{unbound(m1), unbound(m2), m3, solo}, []*v1.Pod{m1, m2})
	ctx := context.Background()
	// The PodGroup appearing woke its pending members once.
	if got := env.activated.waitFor(3); len(got) != 3 {
		t.Fatalf("activated %v when the PodGroup appeared, want its three pending members", got)
	}
	env.activated.reset()

	if _, st := env.permit(m2, "n2"); st.Code() != fwk.Wait {
		t.Fatalf("Permit for m2 = %v, want Wait", st)
	}
	// m1's binding fails: the framework unreserves it.
	env.fw.RunReservePluginsUnreserve(ctx, framework.NewCycleState(), m1, "n1")

	st := env.fw.WaitOnPermit(ctx, m2)
	if st.Code() != fwk.Unschedulable || !strings.Contains(st.Message(), ErrReasonSiblingLost) {
		t.Fatalf("waiting sibling: %v, want rejected with %q", st, ErrReasonSiblingLost)
	}

	_, st, _ = env.fw.RunPreFilterPlugins(ctx, framework.NewCycleState(), m3)
	if st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), ErrReasonBackingOff) {
		t.Fatalf("PreFilter during the backoff = %v, want %q", st, ErrReasonBackingOff)
	}
	if _, st, _ := env.fw.RunPreFilterPlugins(ctx, framework.NewCycleState(), solo); !st.IsSuccess() {
		t.Fatalf("a pod outside the group is held back by its backoff: %v", st)
	}
	if got := env.activated.get(); len(got) != 0 {
		t.Fatalf("activated %v before the backoff ended", got)
	}

	env.clock.Step(30 * time.Second)
	// Every member still pending in the API server is woken, and only those.
	got := env.activated.waitFor(3)
	want := map[string]bool{"research/m1": true, "research/m2": true, "research/m3": true}
	if len(got) != len(want) {
		t.Fatalf("activated %v after the backoff, want the group's pending members %v", got, want)
	}
	for _, k := range got {
		if !want[k] {
			t.Fatalf("activated %v after the backoff, want the group's pending members %v", got, want)
		}
	}
	// The backoff is forgotten when it ends, whether or not a member comes back.
	env.gang.mu.Lock()
	left := len(env.gang.backoff)
	env.gang.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d backoffs remembered after they ended", left)
	}
	if _, st, _ := env.fw.RunPreFilterPlugins(ctx, framework.NewCycleState(), m3); !st.IsSuccess() {
		t.Fatalf("PreFilter after the backoff = %v, want Success", st)
	}
}

// A tenant's scheduleTimeoutSeconds of 68 years backs its group off for
// maxTimeout at most: each backoff holds a timer and an entry until it ends.
func TestFrameworkBackoffIsBounded(t *testing.T) {
	m1, m2 := member("m1", "g", "n1"), member("m2", "g", "")
	env := newGangEnv(t, []*schedv1alpha1.PodGroup{podGroup("g", 2, math.MaxInt32)}, []*v1.Pod{unbound(m1), m2}, []*v1.Pod{m1})
	ctx := context.Background()
	env.activated.waitFor(2)
	env.fw.RunReservePluginsUnreserve(ctx, framework.NewCycleState(), m1, "n1")
	if _, st, _ := env.fw.RunPreFilterPlugins(ctx, framework.NewCycleState(), m2); !strings.Contains(st.Message(), ErrReasonBackingOff) {
		t.Fatalf("PreFilter during the backoff = %v, want %q", st, ErrReasonBackingOff)
	}
	env.clock.Step(maxTimeout)
	deadline := time.Now().Add(5 * time.Second)
	for {
		env.gang.mu.Lock()
		left := len(env.gang.backoff)
		env.gang.mu.Unlock()
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d backoffs remembered %v after the release", left, maxTimeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, st, _ := env.fw.RunPreFilterPlugins(ctx, framework.NewCycleState(), m2); !st.IsSuccess() {
		t.Fatalf("PreFilter after %v = %v, want Success", maxTimeout, st)
	}
}
