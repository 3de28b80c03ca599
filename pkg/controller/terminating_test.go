package controller

import (
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gleaner-dev/gleaner/internal/testobj"
	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
	"github.com/gleaner-dev/gleaner/pkg/round"
	"github.com/gleaner-dev/gleaner/pkg/vllm"
)

// A best-effort pod its owner deleted with a day's grace period is asked
// again, once, to stop within the cap; one deleted within the cap is left
// alone, and nothing else is evicted while the first returns its GPUs.
func TestSyncCapsATenantsOwnDeletionGrace(t *testing.T) {
	tc := newTestCluster(t, Config{Policy: round.Config{ReclaimLead: 15 * time.Minute, Margin: -1}})
	deleted := func(name string, grace int64) *v1.Pod {
		p := testobj.BestEffort("research", name, "a", 4, t0.Add(-time.Hour))
		p.DeletionTimestamp = &metav1.Time{Time: t0.Add(time.Duration(grace) * time.Second)}
		p.DeletionGracePeriodSeconds = &grace
		return p
	}
	long, short := deleted("long", 24*3600), deleted("short", 60)
	objs := []runtime.Object{
		testobj.Node("a", 16),
		testobj.Inference("serving", "chat-0", "chat", "a", 4),
		long, short,
		testobj.BestEffort("research", "other", "a", 4, t0.Add(-time.Hour)),
		chat(1, nil),
	}
	tc.set(t, objs...)
	tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", 16, 4, 4)} // waiting: one more replica
	writes, err := tc.sync(t, t0)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"create pods/eviction long"}; !reflect.DeepEqual(only(writes, "pods/eviction"), want) {
		t.Fatalf("evictions %v, want %v: long asked again, nothing else while it returns", only(writes, "pods/eviction"), want)
	}
	capped := false
	for len(tc.recorder.Events) > 0 {
		if e := <-tc.recorder.Events; strings.Contains(e, reclaim.ReasonGraceCapped) && strings.Contains(e, "within 30s: it was asked with 86400s") {
			capped = true
		}
	}
	if !capped {
		t.Errorf("no %s Event naming both grace periods", reclaim.ReasonGraceCapped)
	}
	// The API server shortened it to its own 30 s (within the cap), counted
	// from when it was first asked.
	long.DeletionTimestamp = &metav1.Time{Time: t0.Add(30 * time.Second)}
	long.DeletionGracePeriodSeconds = new(int64(30))
	for _, at := range []time.Duration{time.Second, 20 * time.Second} {
		tc.set(t, objs...)
		writes, _ := tc.sync(t, t0.Add(at))
		if got := only(writes, "pods/eviction"); len(got) != 0 {
			t.Fatalf("%v later: evictions %v, want none: long was asked once and is returning", at, got)
		}
	}
}

// A replica already leaving (scaled in, terminating within its grace period)
// gives its GPUs back without an eviction: room for the service's next
// replica is kept there, and no lent pod is evicted for it. One granted more
// than the cap, terminating past its grace period, or in a namespace the
// admin did not opt in, still holds its GPUs, and the lent pod goes.
func TestSyncKeepsRoomWhereAReplicaIsLeaving(t *testing.T) {
	for _, tt := range []struct {
		name       string
		namespace  string        // the leaving replica's
		grace      int64         // its grace period, seconds
		at         time.Duration // the round, after it was asked to stop at t0
		wantEvicts []string
	}{
		{name: "leaving within its grace", namespace: "serving", grace: 30, at: time.Second, wantEvicts: []string{}},
		{name: "granted more than the cap", namespace: "serving", grace: 24 * 3600, at: time.Second, wantEvicts: []string{"create pods/eviction job"}},
		{name: "past its grace", namespace: "serving", grace: 30, at: 5 * time.Minute, wantEvicts: []string{"create pods/eviction job"}},
		{name: "in a namespace not opted in", namespace: "research", grace: 30, at: time.Second, wantEvicts: []string{"create pods/eviction job"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc := newTestCluster(t, Config{Policy: round.Config{ReclaimLead: 15 * time.Minute, Margin: -1}})
			leaving := testobj.Inference(tt.namespace, "chat-1", "chat", "a", 4)
			leaving.DeletionTimestamp = &metav1.Time{Time: t0.Add(time.Duration(tt.grace) * time.Second)}
			leaving.DeletionGracePeriodSeconds = &tt.grace
			tc.set(t,
				testobj.Node("a", 8), testobj.Node("b", 8),
				testobj.Inference("serving", "chat-0", "chat", "a", 4),
				leaving,
				testobj.BestEffort("research", "job", "b", 8, t0.Add(-time.Hour)),
				chat(1, nil),
			)
			tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", 16, 4, 4)} // waiting: one more replica
			writes, err := tc.sync(t, t0.Add(tt.at))
			if err != nil {
				t.Fatal(err)
			}
			if got := only(writes, "pods/eviction"); !reflect.DeepEqual(got, tt.wantEvicts) {
				t.Errorf("evictions %v, want %v", got, tt.wantEvicts)
			}
		})
	}
}

// While a replica waits for GPUs, the room it needs is taken, of two nodes
// otherwise alike, from the one whose lent pods leave sooner (here a pod
// that declares a 5 s save, so it gets 15 s, against one that gets its whole
// 120 s); at other times the node's name decides, so the room kept, and the
// notices given for it, stay put. A gang member waiting at Permit is not
// bound and goes at once, whatever its grace; a pod holding no GPU gives
// none back, so its grace says nothing of the node.
func TestSyncTakesRoomWherePodsLeaveSoonestWhileAReplicaWaits(t *testing.T) {
	for _, tt := range []struct {
		name      string
		pending   bool
		permit    bool // a's pod is a gang member waiting at Permit: not bound, it goes at once
		wantEvict string
	}{
		{name: "a replica waits", pending: true, wantEvict: "job-b"},
		{name: "load waits, no replica yet", pending: false, wantEvict: "job-a"},
		{name: "a replica waits, a's pod waits at Permit", pending: true, permit: true, wantEvict: "job-a"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc := newTestCluster(t, Config{Policy: round.Config{ReclaimLead: 15 * time.Minute, Margin: -1}})
			grace := int64(120)
			slow := testobj.BestEffort("research", "job-a", "a", 8, t0.Add(-time.Hour))
			if tt.permit {
				slow = testobj.BestEffort("research", "job-a", "", 8, time.Time{})
				slow.Labels = map[string]string{api.LabelPodGroup: "train"}
				slow.Status = v1.PodStatus{Phase: v1.PodPending, NominatedNodeName: "a"}
			}
			quick := testobj.BestEffort("research", "job-b", "b", 8, t0.Add(-time.Hour))
			quick.Annotations = map[string]string{api.AnnotationSaveDuration: "5s"}
			// A pod holding no GPU gives none back: its grace does not count.
			cpuOnly := testobj.BestEffort("research", "prep", "b", 0, t0.Add(-time.Hour))
			slow.Spec.TerminationGracePeriodSeconds, quick.Spec.TerminationGracePeriodSeconds = &grace, &grace
			cpuOnly.Spec.TerminationGracePeriodSeconds = &grace
			tc.set(t, testobj.Node("a", 8), testobj.Node("b", 8), testobj.Node("c", 4),
				testobj.Inference("serving", "chat-0", "chat", "c", 4), slow, quick, cpuOnly, chat(2, nil))
			serving := fresh("serving", "chat", 4, 0, 4)
			serving.NodeName = "c"
			tc.load.loads = []vllm.PodLoad{serving,
				{Namespace: "serving", Service: "chat", Name: "chat-1", GPUs: 4, Created: t0}} // pending: no node yet
			if !tt.pending {
				tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", 16, 4, 4)} // waiting: one more replica
				tc.load.loads[0].NodeName = "c"
			}
			writes, err := tc.sync(t, t0)
			if err != nil {
				t.Fatal(err)
			}
			got := only(writes, "pods/eviction")
			if len(got) != 1 || !strings.HasSuffix(got[0], " "+tt.wantEvict) {
				t.Errorf("evictions %v, want %s's", got, tt.wantEvict)
			}
		})
	}
}
