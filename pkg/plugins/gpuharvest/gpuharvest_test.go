package gpuharvest

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gleaner-dev/gleaner/internal/testobj"
	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/plugins/pluginargs"
)

var now = time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)

// lease is the controller's heartbeat Lease, renewed renewedAgo; newPlugin's
// scheduler saw that renewal when it happened.
func lease(renewedAgo time.Duration, durationSeconds int32) *coordinationv1.Lease {
	l := testobj.Lease("controller-1", now.Add(-renewedAgo), durationSeconds)
	l.Name = api.HeartbeatLeaseName
	return l
}

// stopped is l with the admin's kill switch set to mode (and reason when not empty).
func stopped(l *coordinationv1.Lease, mode, reason string) *coordinationv1.Lease {
	l.Annotations = map[string]string{api.AnnotationStopLending: mode}
	if reason != "" {
		l.Annotations[api.AnnotationStopLendingReason] = reason
	}
	return l
}

// newPlugin builds the plugin around a lease lister fed from an indexer: the
// real lister code, without an API server.
func newPlugin(t *testing.T, l *coordinationv1.Lease) *GPUHarvest {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if l != nil {
		if err := idx.Add(l); err != nil {
			t.Fatal(err)
		}
	}
	var args Args
	args.Default()
	hb := &heartbeat{ref: args.ControllerLease, lister: coordinationlisters.NewLeaseLister(idx), synced: func() bool { return true }}
	if l != nil && l.Spec.RenewTime != nil {
		// Seen renewed often enough to trust nodes that arrived before (see trust).
		hb.seenAt, hb.renewals = l.Spec.RenewTime.Time, trustAfterRenewals
	}
	return &GPUHarvest{
		args:      args,
		gpu:       api.GPUResource,
		threshold: 0,
		clock:     clocktesting.NewFakePassiveClock(now),
		heartbeat: hb,
		rejected:  newRejectionCounters(),
	}
}

// holds reports whether the cache keeps a slot for the node.
func (c *nodeCache) holds(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.all[name]
	return ok
}

// len is how many nodes the cache holds.
func (c *nodeCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.all)
}

// podInfoOn is p's PodInfo as the scheduler keeps it once p is assumed on n.
func podInfoOn(t *testing.T, p *v1.Pod, n *v1.Node) fwk.PodInfo {
	t.Helper()
	p.Spec.NodeName = n.Name
	pi, err := framework.NewPodInfo(p)
	if err != nil {
		t.Fatal(err)
	}
	return pi
}

func pod(name string, priority int32, gpus int64) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "research", UID: k8stypes.UID("uid-" + name)},
		Spec: v1.PodSpec{
			Priority: &priority,
			Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{
				api.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI),
			}}}},
		},
	}
	return p
}

func bestEffort(name string, gpus int64) *v1.Pod { return pod(name, -1000, gpus) }
func inference(name string, gpus int64) *v1.Pod  { return pod(name, 1000000, gpus) }

// node is a Ready node with the given verdict.
func node(name string, state string, harvestable string) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}, Annotations: map[string]string{}},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}}}
	if state != "" {
		n.Labels[api.LabelHarvest] = state
	}
	if harvestable != "" {
		n.Annotations[api.AnnotationHarvestableGPUs] = harvestable
	}
	return n
}

func notReady(n *v1.Node) *v1.Node {
	n.Status.Conditions[0].Status = v1.ConditionUnknown
	return n
}

func nodeInfo(n *v1.Node, pods ...*v1.Pod) fwk.NodeInfo {
	for _, p := range pods {
		p.Spec.NodeName = n.Name
	}
	ni := framework.NewNodeInfo(pods...)
	ni.SetNode(n)
	return ni
}

// The heartbeat is judged on the scheduler's own clock, from when it saw the
// Lease renewed; the times the controller writes are never compared with it.
func TestHeartbeat(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(now)
	renewal := func(rv string, holder string, renewTime time.Time) *coordinationv1.Lease {
		l := testobj.Lease(holder, renewTime, 15)
		l.ResourceVersion = rv
		return l
	}
	controllerSlow := now.Add(-10 * time.Minute) // the controller's clock, far behind the scheduler's
	tests := []struct {
		name    string
		events  [][2]*coordinationv1.Lease // (old, new) updates seen, in order, at now
		cur     *coordinationv1.Lease
		timeout time.Duration
		after   time.Duration // judged this long after the events
		wantErr string
	}{{
		name:    "first sight is not a renewal: a scheduler starting beside a dead controller lends nothing",
		cur:     renewal("1", "c", now),
		wantErr: "not seen renewed since this scheduler started",
	}, {
		name:   "a renewal seen now is fresh, however far the controller's clock is off",
		events: [][2]*coordinationv1.Lease{{renewal("1", "c", controllerSlow), renewal("2", "c", controllerSlow.Add(5*time.Second))}},
		cur:    renewal("2", "c", controllerSlow.Add(5*time.Second)),
		after:  15 * time.Second,
	}, {
		name:    "stale once the timeout passes on the scheduler's clock",
		events:  [][2]*coordinationv1.Lease{{renewal("1", "c", now), renewal("2", "c", now.Add(time.Hour))}},
		cur:     renewal("2", "c", now.Add(time.Hour)), // a controller clock an hour ahead buys nothing
		after:   16 * time.Second,
		wantErr: "last seen renewed 16s ago (timeout 15s)",
	}, {
		name:    "a configured timeout overrides the Lease's duration",
		events:  [][2]*coordinationv1.Lease{{renewal("1", "c", now), renewal("2", "c", now.Add(time.Second))}},
		cur:     renewal("2", "c", now.Add(time.Second)),
		timeout: 5 * time.Second,
		after:   6 * time.Second,
		wantErr: "timeout 5s",
	}, {
		name:    "a relist that delivers the same object is no renewal",
		events:  [][2]*coordinationv1.Lease{{renewal("1", "c", now), renewal("1", "c", now)}},
		cur:     renewal("1", "c", now),
		wantErr: "not seen renewed",
	}, {
		name:    "a released Lease is stale at once",
		events:  [][2]*coordinationv1.Lease{{renewal("1", "c", now), renewal("2", "c", now.Add(time.Second))}, {renewal("2", "c", now.Add(time.Second)), renewal("3", "", now.Add(2*time.Second))}},
		cur:     renewal("3", "", now.Add(2*time.Second)),
		timeout: time.Hour,
		wantErr: "was released",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk.SetTime(now)
			idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
			if err := idx.Add(tt.cur); err != nil {
				t.Fatal(err)
			}
			hb := &heartbeat{ref: LeaseRef{Namespace: tt.cur.Namespace, Name: tt.cur.Name}, timeout: tt.timeout, clock: clk,
				lister: coordinationlisters.NewLeaseLister(idx), synced: func() bool { return true }}
			for _, e := range tt.events {
				hb.observe(e[0], e[1])
			}
			err := hb.check(now.Add(tt.after))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("check = %v, want fresh", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("check = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}

// A renewal after a stale spell reports that the heartbeat turned fresh (so
// pending pods are activated); one while it is fresh does not.
func TestHeartbeatObserveReportsTurningFresh(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(now)
	hb := &heartbeat{clock: clk}
	l := func(rv string) *coordinationv1.Lease {
		x := testobj.Lease("c", now, 15)
		x.ResourceVersion = rv
		return x
	}
	l1, l2, l3 := l("1"), l("2"), l("3")
	l2.Spec.RenewTime.Time = now.Add(time.Second)
	l3.Spec.RenewTime.Time = now.Add(2 * time.Second)
	if n, fresh := hb.observe(l1, l2); n != 1 || !fresh {
		t.Fatalf("the first renewal: renewal %d, turned fresh %v; want 1, true", n, fresh)
	}
	if n, _ := hb.observe(l2, l2); n != 0 {
		t.Fatalf("the same Lease delivered again counted as renewal %d", n)
	}
	clk.SetTime(now.Add(5 * time.Second))
	if n, fresh := hb.observe(l2, l3); n != 2 || fresh {
		t.Fatalf("a renewal while fresh: renewal %d, turned fresh %v; want 2, false", n, fresh)
	}
	// A controller stops and releases the Lease; its successor renews it soon after.
	released, successor := l("4"), l("5")
	released.Spec.HolderIdentity = new("")
	successor.Spec.HolderIdentity = new("c2")
	clk.SetTime(now.Add(6 * time.Second))
	hb.observe(l3, released)
	clk.SetTime(now.Add(8 * time.Second))
	if _, fresh := hb.observe(released, successor); !fresh {
		t.Fatal("the successor's first renewal after a release did not turn the heartbeat fresh")
	}
	// The admin stops lending and lifts it before the next renewal: lifting
	// it turns the heartbeat fresh at once (pods the stop kept pending go
	// back to the queue); setting it does not.
	paused, resumed := stopped(l("6"), "Hold", ""), l("7")
	paused.Spec, resumed.Spec = successor.Spec, successor.Spec
	if n, _ := hb.observe(successor, paused); n != 0 {
		t.Fatalf("setting the kill switch counted as renewal %d", n)
	}
	if n, fresh := hb.observe(paused, resumed); n == 0 || !fresh {
		t.Fatalf("lifting the kill switch: renewals %d, turned fresh %v; want the count so far, true", n, fresh)
	}
	// Lifted while the heartbeat is stale, it turns nothing fresh.
	clk.SetTime(now.Add(time.Hour))
	if _, fresh := hb.observe(paused, resumed); fresh {
		t.Fatal("lifting the kill switch turned a stale heartbeat fresh")
	}
}

func TestPreFilter(t *testing.T) {
	tests := []struct {
		name     string
		lease    *coordinationv1.Lease
		pod      *v1.Pod
		wantCode fwk.Code
		wantMsg  string
	}{
		{"inference pod is skipped", lease(time.Second, 15), inference("vllm", 4), fwk.Skip, ""},
		{"inference pod is skipped even with a stale heartbeat", lease(time.Hour, 15), inference("vllm", 4), fwk.Skip, ""},
		{"pod without priority is not best-effort", lease(time.Second, 15), func() *v1.Pod { p := bestEffort("p", 1); p.Spec.Priority = nil; return p }(), fwk.Skip, ""},
		{"best-effort pod with a fresh heartbeat", lease(time.Second, 15), bestEffort("train", 4), fwk.Success, ""},
		{"best-effort pod with a stale heartbeat", lease(time.Minute, 15), bestEffort("train", 4), fwk.UnschedulableAndUnresolvable, ErrReasonHeartbeatStale},
		{"best-effort pod without a controller lease", nil, bestEffort("train", 4), fwk.UnschedulableAndUnresolvable, "lease"},
		{"the admin's Hold stops a fresh heartbeat", stopped(lease(time.Second, 15), "Hold", "maintenance"), bestEffort("train", 4), fwk.UnschedulableAndUnresolvable, ErrReasonLendingStopped + ": lending stopped (gleaner.dev/stop-lending=Hold on Lease gleaner-system/gleaner-controller-heartbeat): maintenance"},
		{"a drain stops it too", stopped(lease(time.Second, 15), "HoldAndDrain", ""), bestEffort("train", 4), fwk.UnschedulableAndUnresolvable, "=HoldAndDrain"},
		{"a half-written switch holds", stopped(lease(time.Second, 15), "", ""), bestEffort("train", 4), fwk.UnschedulableAndUnresolvable, `value "" is neither Hold nor HoldAndDrain, so it holds`},
		{"inference pods pass a stop", stopped(lease(time.Second, 15), "HoldAndDrain", ""), inference("vllm", 4), fwk.Skip, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pl := newPlugin(t, tt.lease)
			state := framework.NewCycleState()
			_, st := pl.PreFilter(context.Background(), state, tt.pod, nil)
			if st.Code() != tt.wantCode {
				t.Fatalf("PreFilter code = %v (%s), want %v", st.Code(), st.Message(), tt.wantCode)
			}
			if !strings.Contains(st.Message(), tt.wantMsg) {
				t.Fatalf("PreFilter message %q, want it to contain %q", st.Message(), tt.wantMsg)
			}
			if tt.wantCode == fwk.Success {
				if got := pl.cycle(state, &v1.Pod{}).gpus; got != 4 {
					t.Fatalf("cycle state holds %d GPUs, want the pod's 4", got)
				}
			}
		})
	}
}

func TestFilter(t *testing.T) {
	tests := []struct {
		name     string
		node     *v1.Node
		onNode   []*v1.Pod
		pod      *v1.Pod
		wantCode fwk.Code
		wantMsg  string
	}{
		{"open node with room", node("n", "open", "8"), nil, bestEffort("p", 4), fwk.Success, ""},
		{"exactly the harvestable GPUs", node("n", "open", "4"), nil, bestEffort("p", 4), fwk.Success, ""},
		{"lent GPUs count against harvestable", node("n", "open", "8"), []*v1.Pod{bestEffort("lent", 6)}, bestEffort("p", 4), fwk.Unschedulable, ErrReasonNotEnoughGPUs},
		{"inference pods are not lent GPUs", node("n", "open", "4"), []*v1.Pod{inference("vllm", 4)}, bestEffort("p", 4), fwk.Success, ""},
		{"draining node", node("n", "draining", "0"), nil, bestEffort("p", 1), fwk.UnschedulableAndUnresolvable, ErrReasonNotOpen},
		{"closed node", node("n", "closed", "0"), nil, bestEffort("p", 1), fwk.UnschedulableAndUnresolvable, ErrReasonNotOpen},
		{"node without a verdict", node("n", "", ""), nil, bestEffort("p", 1), fwk.UnschedulableAndUnresolvable, ErrReasonNotOpen},
		{"half-written verdict: no annotation", node("n", "open", ""), nil, bestEffort("p", 1), fwk.UnschedulableAndUnresolvable, ErrReasonBadVerdict},
		{"malformed annotation", node("n", "open", "eight"), nil, bestEffort("p", 1), fwk.UnschedulableAndUnresolvable, ErrReasonBadVerdict},
		{"unknown state", node("n", "ajar", "8"), nil, bestEffort("p", 1), fwk.UnschedulableAndUnresolvable, ErrReasonBadVerdict},
		{"pod without GPUs still needs an open node", node("n", "closed", "0"), nil, bestEffort("cpu-only", 0), fwk.UnschedulableAndUnresolvable, ErrReasonNotOpen},
		{"open but NotReady: closed before the controller says so", notReady(node("n", "open", "8")), nil, bestEffort("p", 1), fwk.UnschedulableAndUnresolvable, ErrReasonNotOpen},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pl := newPlugin(t, lease(time.Second, 15))
			pl.nodes.arrive(tt.node, 0)
			state := framework.NewCycleState()
			if _, st := pl.PreFilter(context.Background(), state, tt.pod, nil); !st.IsSuccess() {
				t.Fatalf("PreFilter: %v", st)
			}
			st := pl.Filter(context.Background(), state, tt.pod, nodeInfo(tt.node, tt.onNode...))
			if st.Code() != tt.wantCode || !strings.Contains(st.Message(), tt.wantMsg) {
				t.Fatalf("Filter = %v %q, want %v %q", st.Code(), st.Message(), tt.wantCode, tt.wantMsg)
			}
		})
	}
}

// The lent GPUs a node's NodeInfo counts are kept for its generation: a pod
// assumed there, or one leaving, changes the count the next Filter reads,
// and a cycle's copy of the NodeInfo reads what the original did.
func TestFilterCountsLentGPUsAfterEveryChange(t *testing.T) {
	pl := newPlugin(t, lease(time.Second, 15))
	n := node("n", "open", "8")
	pl.nodes.arrive(n, 0)
	pod := bestEffort("p", 4)
	filter := func(ni fwk.NodeInfo) *fwk.Status {
		state := framework.NewCycleState()
		if _, st := pl.PreFilter(context.Background(), state, pod, nil); !st.IsSuccess() {
			t.Fatalf("PreFilter: %v", st)
		}
		return pl.Filter(context.Background(), state, pod, ni)
	}
	ni := nodeInfo(n, bestEffort("lent", 2))
	if st := filter(ni); !st.IsSuccess() {
		t.Fatalf("2 of 8 lent: Filter = %v", st)
	}
	if st := filter(ni.Snapshot()); !st.IsSuccess() {
		t.Fatalf("a copy, 2 of 8 lent: Filter = %v", st)
	}
	assumed := bestEffort("assumed", 4)
	ni.AddPodInfo(podInfoOn(t, assumed, n))
	if st := filter(ni); st.Message() != ErrReasonNotEnoughGPUs {
		t.Fatalf("6 of 8 lent after a pod was assumed: Filter = %v %q", st.Code(), st.Message())
	}
	if err := ni.RemovePod(klog.Background(), assumed); err != nil {
		t.Fatal(err)
	}
	if st := filter(ni); !st.IsSuccess() {
		t.Fatalf("2 of 8 lent after it left: Filter = %v", st)
	}
	// A deleted node's count goes with its verdict.
	pl.nodes.forget(cache.DeletedFinalStateUnknown{Key: n.Name, Obj: n})
	if pl.nodes.holds(n.Name) {
		t.Fatal("the lent GPUs of a deleted node are still kept")
	}
}

// A node's verdict is trusted only once trustAfterRenewals renewals were seen
// after its arrival was recorded: one deleted and created again with its old
// "open" labels lends nothing until a round that saw it has published its
// verdict, however the scheduler happens to see it meanwhile, and the
// renewal that trusts it re-activates pending pods.
func TestFilterTrustsNewNodesAfterTwoRenewals(t *testing.T) {
	pl := newPlugin(t, lease(time.Second, 15))
	p := bestEffort("p", 1)
	filter := func(n *v1.Node) *fwk.Status {
		state := framework.NewCycleState()
		if _, st := pl.PreFilter(context.Background(), state, p, nil); !st.IsSuccess() {
			t.Fatalf("PreFilter: %v", st)
		}
		return pl.Filter(context.Background(), state, p, nodeInfo(n))
	}
	isNew := func(when string, st *fwk.Status) {
		t.Helper()
		if st.Code() != fwk.UnschedulableAndUnresolvable || st.Message() != ErrReasonNewNode {
			t.Fatalf("Filter %s = %v %q, want %q", when, st.Code(), st.Message(), ErrReasonNewNode)
		}
	}
	renew := func() {
		pl.heartbeat.renewals++
	}
	n := node("back", "open", "8")
	n.UID = "uid-1"
	// Seen by Filter before this plugin's handler recorded it: new, however
	// often it is seen.
	isNew("on a node not recorded yet", filter(n))
	renew()
	renew()
	isNew("on a node not recorded yet, two renewals on", filter(n))
	pl.nodes.arrive(n, pl.heartbeat.renewals)
	renew()
	if pl.nodes.newlyTrusted(pl.heartbeat.renewals) {
		t.Fatal("one renewal after the node arrived trusted it")
	}
	isNew("after one renewal", filter(n))
	renew()
	if !pl.nodes.newlyTrusted(pl.heartbeat.renewals) {
		t.Fatal("the second renewal did not report the node newly trusted")
	}
	if st := filter(n); !st.IsSuccess() {
		t.Fatalf("Filter after two renewals = %v, want success", st)
	}

	// Deleted, then read by a cycle that still held it, then created again
	// under its name: the stale read must not keep the old arrival.
	pl.nodes.forget(n)
	isNew("on a deleted node a stale cycle still holds", filter(n))
	renew()
	renew()
	again := n.DeepCopy()
	again.UID = "uid-2"
	isNew("on the node created again, before its arrival is recorded", filter(again))
	pl.nodes.arrive(again, pl.heartbeat.renewals)
	isNew("on the node created again", filter(again))

	// Created again without a deletion the plugin saw (a relist reports it
	// as an update): the new UID is a new arrival, and the old node's late
	// deletion leaves the new one's slot alone.
	renew()
	renew()
	if st := filter(again); !st.IsSuccess() {
		t.Fatalf("Filter on the re-created node after two renewals = %v", st)
	}
	third := again.DeepCopy()
	third.UID = "uid-3"
	isNew("on a node replaced under its name, before the update is seen", filter(third))
	pl.nodes.arrive(third, pl.heartbeat.renewals)
	isNew("on a node replaced under its name", filter(third))
	pl.nodes.forget(again)
	if !pl.nodes.holds(third.Name) {
		t.Fatal("the late deletion of the replaced node dropped its successor")
	}

	// A closed node reads closed, not new: the reason says what is wrong first.
	closed := node("closed", "closed", "0")
	if st := filter(closed); st.Message() != ErrReasonNotOpen {
		t.Fatalf("Filter on a new closed node = %q, want %q", st.Message(), ErrReasonNotOpen)
	}
}

func TestScore(t *testing.T) {
	// gpuNode is an open node with 8 allocatable GPUs and the given harvestable ones.
	gpuNode := func(name, harvestable string) *v1.Node {
		n := node(name, "open", harvestable)
		n.Status.Allocatable = v1.ResourceList{api.GPUResource: *resource.NewQuantity(8, resource.DecimalSI)}
		return n
	}
	// lasting is gpuNode with an availability.
	lasting := func(name, harvestable, avail string) *v1.Node {
		n := gpuNode(name, harvestable)
		n.Annotations[api.AnnotationAvailability] = avail
		return n
	}
	p := bestEffort("p", 2)
	short, long := bestEffort("short", 2), bestEffort("long", 2)
	short.Annotations = map[string]string{api.AnnotationCheckpointInterval: "30m"}
	long.Annotations = map[string]string{api.AnnotationCheckpointInterval: "4h"}
	const shortWindow, longWindow = "for=1h15m0s,survive-1h=0.90,survive-4h=0.10", "for>=4h0m0s,survive-1h=0.95,survive-4h=0.90"
	tests := []struct {
		name          string
		packing, idle int32
		pod           *v1.Pod
		ni            fwk.NodeInfo
		want          int64
	}{
		{"packing: half lent already", 1, 0, p, nodeInfo(gpuNode("a", "8"), bestEffort("lent", 4)), 75},
		{"packing: nothing lent", 1, 0, p, nodeInfo(gpuNode("b", "8")), 25},
		{"packing: small hole filled exactly", 1, 0, p, nodeInfo(gpuNode("c", "2")), 100},
		{"packing: inference pods are not lent GPUs", 1, 0, p, nodeInfo(gpuNode("d", "4"), inference("vllm", 4)), 50},
		{"idle window: a node serving no inference", 0, 1, p, nodeInfo(gpuNode("e", "8"), bestEffort("lent", 4)), 100},
		{"idle window: half the node serves inference", 0, 1, p, nodeInfo(gpuNode("f", "4"), inference("vllm", 4)), 50},
		{"both, equal weights", 1, 1, p, nodeInfo(gpuNode("g", "4"), inference("vllm", 4)), 50},
		{"both: packing weighted 3:1", 3, 1, p, nodeInfo(gpuNode("h", "8"), bestEffort("lent", 4)), (3*75 + 100) / 4},
		{"unreadable verdict scores zero", 1, 1, p, nodeInfo(gpuNode("x", "x")), 0},
		// Packing and idle window give 100 on an empty node serving nothing
		// (2 of 2 harvestable); availability joins with weight 1.
		{"availability: a short job on a short window", 1, 1, short, nodeInfo(lasting("s1", "2", shortWindow)), (2*100 + 88) / 3},
		{"availability: a short job on a long window", 1, 1, short, nodeInfo(lasting("s2", "2", longWindow)), (2*100 + 77) / 3},
		{"availability: a long job on a short window", 1, 1, long, nodeInfo(lasting("l1", "2", shortWindow)), (2*100 + 10) / 3},
		{"availability: a long job on a long window", 1, 1, long, nodeInfo(lasting("l2", "2", longWindow)), (2*100 + 90) / 3},
		{"availability unknown: no credit", 1, 1, long, nodeInfo(gpuNode("u", "2")), (2 * 100) / 3},
		{"availability not yet learned: no credit", 1, 1, long, nodeInfo(lasting("nl", "2", "for>=4h0m0s")), (2 * 100) / 3},
		{"availability: a pod that declares nothing is not scored on it", 1, 1, p, nodeInfo(lasting("n", "2", shortWindow)), 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pl := newPlugin(t, lease(time.Second, 15))
			pl.args.ScoreWeights = ScoreWeights{Packing: &tt.packing, IdleWindow: &tt.idle, Availability: new(int32(1))}
			state := framework.NewCycleState()
			if _, st := pl.PreFilter(context.Background(), state, tt.pod, nil); !st.IsSuccess() {
				t.Fatal(st)
			}
			got, st := pl.Score(context.Background(), state, tt.pod, tt.ni)
			if !st.IsSuccess() || got != tt.want {
				t.Fatalf("Score = %d (%v), want %d", got, st, tt.want)
			}
		})
	}
	pl := newPlugin(t, lease(time.Second, 15))
	if st := pl.PreScore(context.Background(), framework.NewCycleState(), inference("vllm", 4), nil); st.Code() != fwk.Skip {
		t.Fatalf("PreScore of an inference pod = %v, want Skip", st)
	}
}

func TestSignPodSeparatesWhatFilterReads(t *testing.T) {
	pl := newPlugin(t, nil)
	sign := func(p *v1.Pod) string {
		frags, st := pl.SignPod(context.Background(), p)
		if !st.IsSuccess() {
			t.Fatal(st)
		}
		var b strings.Builder
		for _, f := range frags {
			b.WriteString(f.Key + "=" + strconv.FormatInt(toInt64(f.Value), 10) + ";")
		}
		return b.String()
	}
	if sign(bestEffort("a", 4)) != sign(bestEffort("b", 4)) {
		t.Error("two best-effort pods with the same request got different signatures")
	}
	if sign(bestEffort("a", 4)) == sign(bestEffort("a", 2)) {
		t.Error("different GPU requests got one signature")
	}
	if sign(bestEffort("a", 4)) == sign(inference("a", 4)) {
		t.Error("best-effort and inference pods got one signature")
	}
}

func toInt64(v any) int64 {
	switch x := v.(type) {
	case int32:
		return int64(x)
	case int64:
		return x
	}
	return -1
}

func TestQueueingHints(t *testing.T) {
	pl := newPlugin(t, lease(time.Second, 15))
	logger := klog.Background()
	tests := []struct {
		name     string
		pod      *v1.Pod
		old, new *v1.Node
		want     fwk.QueueingHint
	}{
		{"node opens with enough GPUs", bestEffort("p", 4), node("n", "closed", "0"), node("n", "open", "4"), fwk.Queue},
		{"node gains harvestable GPUs", bestEffort("p", 4), node("n", "open", "2"), node("n", "open", "6"), fwk.Queue},
		{"new open node", bestEffort("p", 4), nil, node("n", "open", "8"), fwk.Queue},
		{"node opens but too small", bestEffort("p", 4), node("n", "closed", "0"), node("n", "open", "2"), fwk.QueueSkip},
		{"node shrinks", bestEffort("p", 1), node("n", "open", "8"), node("n", "open", "4"), fwk.QueueSkip},
		{"node starts draining", bestEffort("p", 1), node("n", "open", "8"), node("n", "draining", "0"), fwk.QueueSkip},
		{"open node turns Ready", bestEffort("p", 1), notReady(node("n", "open", "8")), node("n", "open", "8"), fwk.Queue},
		{"open node stops being Ready", bestEffort("p", 1), node("n", "open", "8"), notReady(node("n", "open", "8")), fwk.QueueSkip},
		{"inference pods are not this plugin's", inference("v", 1), node("n", "closed", "0"), node("n", "open", "8"), fwk.QueueSkip},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var old interface{}
			if tt.old != nil {
				old = tt.old
			}
			got, err := pl.isSchedulableAfterNodeChange(logger, tt.pod, old, tt.new)
			if err != nil || got != tt.want {
				t.Fatalf("hint = %v (%v), want %v", got, err, tt.want)
			}
		})
	}
	podTests := []struct {
		name string
		gone *v1.Pod
		want fwk.QueueingHint
	}{
		{"lent pod leaves", bestEffort("lent", 4), fwk.Queue},
		{"best-effort pod without GPUs leaves", bestEffort("cpu", 0), fwk.QueueSkip},
		{"inference pod leaves", inference("vllm", 4), fwk.QueueSkip},
	}
	for _, tt := range podTests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := pl.isSchedulableAfterPodDeletion(logger, bestEffort("p", 4), tt.gone, nil)
			if err != nil || got != tt.want {
				t.Fatalf("hint = %v (%v), want %v", got, err, tt.want)
			}
		})
	}
}

func TestArgs(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		wantErr string
		check   func(t *testing.T, a Args)
	}{
		{name: "defaults", raw: "", check: func(t *testing.T, a Args) {
			if a.Threshold() != 0 || a.Resource() != api.GPUResource || a.ControllerLease != (LeaseRef{api.SystemNamespace, api.HeartbeatLeaseName}) {
				t.Fatalf("defaults = %+v", a)
			}
		}},
		{name: "explicit values", raw: `{"bestEffortPriorityThreshold":-10,"gpuResourceName":"amd.com/gpu","controllerLease":{"namespace":"ops","name":"harvester"}}`, check: func(t *testing.T, a Args) {
			if a.Threshold() != -10 || a.Resource() != "amd.com/gpu" || a.ControllerLease.Name != "harvester" || a.ControllerLease.Namespace != "ops" {
				t.Fatalf("args = %+v", a)
			}
		}},
		{name: "cpu is not a GPU", raw: `{"gpuResourceName":"cpu"}`, wantErr: "pluginConfig[GPUHarvest].args.gpuResourceName"},
		{name: "invalid resource name", raw: `{"gpuResourceName":"nvidia.com/gpu/x"}`, wantErr: "gpuResourceName"},
		{name: "invalid lease namespace", raw: `{"controllerLease":{"namespace":"Not_A_Namespace"}}`, wantErr: "controllerLease.namespace"},
		{name: "zero heartbeat timeout", raw: `{"heartbeatTimeoutSeconds":0}`, wantErr: "heartbeatTimeoutSeconds"},
		{name: "negative weight", raw: `{"scoreWeights":{"packing":-1}}`, wantErr: "scoreWeights.packing"},
		{name: "all weights zero", raw: `{"scoreWeights":{"packing":0,"idleWindow":0}}`, wantErr: "at least one weight"},
		{name: "weights and timeout", raw: `{"heartbeatTimeoutSeconds":30,"scoreWeights":{"packing":3,"idleWindow":0}}`, check: func(t *testing.T, a Args) {
			if *a.HeartbeatTimeoutSeconds != 30 || *a.ScoreWeights.Packing != 3 || *a.ScoreWeights.IdleWindow != 0 {
				t.Fatalf("args = %+v", a)
			}
		}},
		{name: "unknown field type", raw: `{"bestEffortPriorityThreshold":"low"}`, wantErr: "decoding GPUHarvest args"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var obj runtime.Object
			if tt.raw != "" {
				obj = &runtime.Unknown{Raw: []byte(tt.raw), ContentType: runtime.ContentTypeJSON}
			}
			var a Args
			err := pluginargs.Decode(Name, obj, &a)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, a)
		})
	}
}

func TestNodeCacheFollowsNodeUpdates(t *testing.T) {
	var c nodeCache
	counted := 0
	count := func(ni fwk.NodeInfo) nodeGPUs { counted++; return nodeGPUs{lent: int64(len(ni.GetPods()))} }
	n := node("n", "open", "8")
	c.arrive(n, 0)
	ni := framework.NewNodeInfo()
	ni.SetNode(n)
	if seen, _ := c.read(ni, 0, count); seen.err != nil || seen.verdict.HarvestableGPUs != 8 || counted != 1 {
		t.Fatalf("first read = %+v, counted %d times", seen, counted)
	}
	if seen, _ := c.read(ni, 0, count); seen.verdict.HarvestableGPUs != 8 || counted != 1 {
		t.Fatalf("second read of the same generation = %+v, counted %d times, want once", seen, counted)
	}
	// The informer delivers an update as a new object: the cache must not serve the old verdict.
	updated := n.DeepCopy()
	updated.Labels[api.LabelHarvest] = "draining"
	updated.Annotations[api.AnnotationHarvestableGPUs] = "0"
	ni.SetNode(updated)
	// An update is no arrival: the node keeps the renewal count it arrived at.
	c.arrive(updated, 5)
	if seen, arrived := c.read(ni, 5, count); seen.err != nil || seen.verdict.State != api.HarvestDraining || arrived != 0 {
		t.Fatalf("read after update = %+v, arrived %d; want draining, arrived 0", seen, arrived)
	}
	// A pod assumed on the node is a new generation: counted again, verdict kept.
	ni.AddPod(bestEffort("assumed", 2))
	if seen, _ := c.read(ni, 5, count); seen.gpus.lent != 1 || seen.verdict.State != api.HarvestDraining || counted != 3 {
		t.Fatalf("read after a pod was assumed = %+v, counted %d times", seen, counted)
	}
	broken := updated.DeepCopy()
	broken.Annotations[api.AnnotationHarvestableGPUs] = "many"
	ni.SetNode(broken)
	if seen, _ := c.read(ni, 0, count); seen.err == nil {
		t.Fatal("a malformed verdict read without error")
	}
	ni.AddPod(bestEffort("another", 2))
	if seen, _ := c.read(ni, 0, count); seen.err == nil || seen.gpus.lent != 2 {
		t.Fatalf("a cached malformed verdict lost its error in a new generation: %+v", seen)
	}
}

// The scheduler filters nodes from many goroutines while the informer
// delivers updates and deletions: every read answers for the Node object and
// the NodeInfo it was given, whether the lookup was answered by the fast map
// or behind the lock. (Run with -race to check the publication too.)
func TestNodeCacheReadsConcurrently(t *testing.T) {
	var c nodeCache
	count := func(ni fwk.NodeInfo) nodeGPUs { return nodeGPUs{lent: int64(len(ni.GetPods()))} }
	// Each node's current object and NodeInfo; version v of node i has v
	// harvestable GPUs and v%3 pods, so a read answered for another object
	// or generation shows.
	const nodes = 8
	var current [nodes]atomic.Pointer[framework.NodeInfo]
	publish := func(i, v int) {
		n := node("n"+strconv.Itoa(i), "open", strconv.Itoa(v))
		ni := framework.NewNodeInfo()
		ni.SetNode(n)
		for range v % 3 {
			ni.AddPod(bestEffort("p", 1))
		}
		c.arrive(n, 0)
		current[i].Store(ni)
	}
	for i := range nodes {
		publish(i, 1)
	}
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Go(func() {
			for i := range 3000 {
				ni := current[(g+i)%nodes].Load()
				seen, _ := c.read(ni, 0, count)
				want, _ := strconv.Atoi(ni.Node().Annotations[api.AnnotationHarvestableGPUs])
				if seen.node != ni.Node() || seen.verdict.HarvestableGPUs != int64(want) || seen.gpus.lent != int64(want%3) {
					t.Errorf("read of version %d answered %+v", want, seen)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for v := 2; v < 200; v++ {
			i := v % nodes
			if v%7 == 0 {
				c.forget(current[i].Load().Node())
			}
			publish(i, v)
		}
	})
	wg.Wait()
}

// The cache finds a node by the Node object the scheduler holds, and an
// update is a new object: it is read afresh, and the old object is let go
// at the next promotion.
func TestNodeCacheLetsGoOfReplacedNodeObjects(t *testing.T) {
	var c nodeCache
	count := func(fwk.NodeInfo) nodeGPUs { return nodeGPUs{} }
	var infos []fwk.NodeInfo
	for i := range 4 {
		n := node("n"+strconv.Itoa(i), "open", "8")
		c.arrive(n, 0)
		infos = append(infos, nodeInfo(n))
	}
	for _, ni := range infos { // four misses: promoted
		c.read(ni, 0, count)
	}
	old := infos[0].Node()
	if _, held := (*c.fast.Load())[old]; !held {
		t.Fatal("the first promotion did not take the node")
	}
	updated := old.DeepCopy()
	updated.Annotations[api.AnnotationHarvestableGPUs] = "2"
	infos[0].SetNode(updated)
	if seen, _ := c.read(infos[0], 0, count); seen.verdict.HarvestableGPUs != 2 {
		t.Fatalf("read after an update = %+v, want 2 harvestable", seen.verdict)
	}
	for range 3 { // four misses again
		c.read(infos[0], 0, count)
	}
	fast := *c.fast.Load()
	if _, held := fast[old]; held {
		t.Fatal("the fast map still holds the replaced Node object after a promotion")
	}
	if _, held := fast[updated]; !held {
		t.Fatal("the promotion did not take the updated Node object")
	}
}

// A deleted node is forgotten, tombstone or not, and a cycle that still
// holds it afterwards does not bring it back: nodes that come and go do not
// grow the scheduler's memory.
func TestNodeCacheForgetsDeletedNodes(t *testing.T) {
	var c nodeCache
	a, b := node("a", "open", "4"), node("b", "open", "4")
	none := func(fwk.NodeInfo) nodeGPUs { return nodeGPUs{} }
	for _, n := range []*v1.Node{a, b} {
		c.arrive(n, 0)
		if seen, _ := c.read(nodeInfo(n), 0, none); seen.err != nil {
			t.Fatal(seen.err)
		}
	}
	c.forget(a)
	c.forget(cache.DeletedFinalStateUnknown{Key: "b", Obj: b})
	for _, n := range []*v1.Node{a, b} {
		if _, arrived := c.read(nodeInfo(n), 7, none); arrived != 7 {
			t.Fatalf("a deleted node read by a stale cycle arrived at %d, want now (7)", arrived)
		}
	}
	if n := c.len(); n != 0 {
		t.Fatalf("cache holds %d nodes after both were deleted", n)
	}
}

// In a pod group's scheduling cycle the scheduler assumes members in the
// snapshot and puts the NodeInfo's generation back: Filter must count what
// is on the node, not what was kept for the generation.
func TestFilterCountsAgainInPodGroupCycles(t *testing.T) {
	pl := newPlugin(t, lease(time.Second, 15))
	n := node("n", "open", "8")
	pl.nodes.arrive(n, 0)
	pod := bestEffort("p", 4)
	ni := framework.NewNodeInfo(bestEffort("lent", 2))
	ni.SetNode(n)
	filter := func(group bool) *fwk.Status {
		state := framework.NewCycleState()
		if group {
			state.SetPodGroupSchedulingCycle(framework.NewCycleState())
		}
		if _, st := pl.PreFilter(context.Background(), state, pod, nil); !st.IsSuccess() {
			t.Fatalf("PreFilter: %v", st)
		}
		return pl.Filter(context.Background(), state, pod, ni)
	}
	if st := filter(true); !st.IsSuccess() {
		t.Fatalf("2 of 8 lent: Filter = %v", st)
	}
	generation := ni.Generation
	ni.AddPodInfo(podInfoOn(t, bestEffort("member", 4), n))
	ni.Generation = generation
	if st := filter(true); st.Message() != ErrReasonNotEnoughGPUs {
		t.Fatalf("6 of 8 lent after a member was assumed in the group's cycle: Filter = %v %q", st.Code(), st.Message())
	}
}

// BenchmarkFilterAndScore is one scheduling cycle's work for this plugin at
// 5,000 nodes: Filter on every node, Score on those that pass. Between cycles
// nothing changes, as between most pods of a burst, so it measures the
// per-node lookups the scheduler pays for every pod.
func BenchmarkFilterAndScore(b *testing.B) {
	pl := newPlugin(&testing.T{}, lease(time.Second, 15))
	nodes := make([]fwk.NodeInfo, 5000)
	for i := range nodes {
		state, harvestable := "open", "8"
		if i%4 == 3 {
			state, harvestable = "closed", "0"
		}
		n := node("node-"+strconv.Itoa(i), state, harvestable)
		n.Status.Allocatable = v1.ResourceList{api.GPUResource: *resource.NewQuantity(8, resource.DecimalSI)}
		pl.nodes.arrive(n, 0)
		var pods []*v1.Pod
		for j := range i % 3 {
			pods = append(pods, bestEffort("lent-"+strconv.Itoa(i)+"-"+strconv.Itoa(j), 2))
		}
		nodes[i] = nodeInfo(n, pods...)
	}
	p := bestEffort("p", 1)
	ctx := context.Background()
	for b.Loop() {
		state := framework.NewCycleState()
		if _, st := pl.PreFilter(ctx, state, p, nil); !st.IsSuccess() {
			b.Fatal(st)
		}
		for _, ni := range nodes {
			if pl.Filter(ctx, state, p, ni).IsSuccess() {
				if _, st := pl.Score(ctx, state, p, ni); !st.IsSuccess() {
					b.Fatal(st)
				}
			}
		}
	}
}
