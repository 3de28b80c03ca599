package controller

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gleaner-dev/gleaner/internal/testobj"
	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/round"
	"github.com/gleaner-dev/gleaner/pkg/vllm"
)

// A forecast that needs lent GPUs beyond the reclaim lead gives their pod a
// notice (annotation, condition, Event) with the expected eviction time,
// writes nothing more while that time holds, and withdraws the notice when
// the forecast recedes.
func TestSyncGivesAndWithdrawsReclaimNotices(t *testing.T) {
	tc := newTestCluster(t, Config{Policy: round.Config{Horizon: 15 * time.Minute, ReclaimLead: 5 * time.Minute, Margin: -1}})
	objs := []runtime.Object{
		testobj.Node("a", 8),
		testobj.Inference("serving", "chat-0", "chat", "a", 4),
		testobj.BestEffort("research", "train", "a", 4, t0.Add(-time.Hour)),
		chat(1, nil),
	}
	tc.set(t, objs...)
	// The lister sees what the controller wrote on the pod, as its informer would.
	refresh := func() *v1.Pod {
		t.Helper()
		p, err := tc.client.CoreV1().Pods("research").Get(context.Background(), "train", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := tc.pods.Update(p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	condition := func(p *v1.Pod) *v1.PodCondition {
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == api.ConditionReclaimNotice {
				return &p.Status.Conditions[i]
			}
		}
		return nil
	}
	var writes []string
	// Half a request more every minute: one replica's 16 is passed within
	// the horizon, not within the lead, until 4 minutes after the last round.
	for i, load := range []float64{10, 10.5, 11, 11.5, 12} {
		tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", load, 0, 4)}
		var err error
		if writes, err = tc.sync(t, t0.Add(time.Duration(i)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"patch pods train", "patch pods/status train"}; !reflect.DeepEqual(only(writes, "pods", "pods/status", "pods/eviction"), want) {
		t.Fatalf("writes %v, want the notice on train and no eviction", writes)
	}
	p := refresh()
	if got, want := p.Annotations[api.AnnotationReclaimNotice], t0.Add(8*time.Minute).Format(time.RFC3339); got != want {
		t.Fatalf("notice %q, want %q", got, want)
	}
	if c := condition(p); c == nil || c.Status != v1.ConditionTrue || c.Reason != ReasonReclaimNotice || !strings.Contains(c.Message, "serving/chat") {
		t.Fatalf("condition %+v, want True naming serving/chat", c)
	}
	select {
	case e := <-tc.recorder.Events:
		if !strings.HasPrefix(e, "Normal "+ReasonReclaimNotice+" Expected to be evicted at "+t0.Add(8*time.Minute).Format(time.RFC3339)) {
			t.Fatalf("event %q", e)
		}
	default:
		t.Fatal("no Event for the notice")
	}

	// The same forecast a little later: the notice stands, nothing is written.
	writes, _ = tc.sync(t, t0.Add(4*time.Minute+10*time.Second))
	if got := only(writes, "pods", "pods/status"); len(got) != 0 {
		t.Fatalf("writes %v for a notice that did not move", got)
	}

	// The load falls back: the horizon needs nothing, the notice is withdrawn.
	for i := range 6 {
		tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", 4, 0, 4)}
		writes, _ = tc.sync(t, t0.Add(time.Duration(5+i)*time.Minute))
		if len(only(writes, "pods")) > 0 {
			break
		}
	}
	if want := []string{"patch pods train", "patch pods/status train"}; !reflect.DeepEqual(only(writes, "pods", "pods/status", "pods/eviction"), want) {
		t.Fatalf("writes %v, want the notice withdrawn", writes)
	}
	p = refresh()
	if got, ok := p.Annotations[api.AnnotationReclaimNotice]; ok {
		t.Fatalf("notice %q still on the pod", got)
	}
	if c := condition(p); c == nil || c.Status != v1.ConditionFalse || c.Reason != ReasonReclaimNoticeWithdrawn {
		t.Fatalf("condition %+v, want False, withdrawn", c)
	}
}

// A tenant's own reclaim-notice annotation moves nothing: only the notices
// the controller gave hold an eviction. A pod that keeps claiming a notice
// for 2099 has it withdrawn while nothing needs its GPUs, and is evicted
// when the controller's own notice says, though the load now never needs it.
func TestForgedReclaimNoticeHoldsNothing(t *testing.T) {
	tc := newTestCluster(t, Config{Policy: round.Config{Horizon: 15 * time.Minute, ReclaimLead: 5 * time.Minute, Margin: -1}})
	forged := testobj.BestEffort("research", "train", "a", 4, t0.Add(-time.Hour))
	forged.Annotations = map[string]string{api.AnnotationReclaimNotice: "2099-01-01T00:00:00Z"}
	objs := []runtime.Object{testobj.Node("a", 8), testobj.Inference("serving", "chat-0", "chat", "a", 4), forged, chat(1, nil)}
	tc.set(t, objs...)
	tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", 4, 0, 4)}
	writes, err := tc.sync(t, t0)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"patch pods train", "patch pods/status train"}; !reflect.DeepEqual(only(writes, "pods", "pods/status", "pods/eviction"), want) {
		t.Fatalf("writes %v, want the forged notice withdrawn", writes)
	}
	// Half a request more every minute (never 16, so inference never waits):
	// the controller's notice says 4 minutes after the fifth round; the pod
	// writes its 2099 back before every round.
	var evictedAt time.Time
	for i, load := range []float64{10, 10.5, 11, 11.5, 12, 12.5, 13, 13.5, 14, 14.5} {
		tc.set(t, objs...)
		tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", load, 0, 4)}
		now := t0.Add(time.Duration(i+1) * time.Minute)
		writes, _ = tc.sync(t, now)
		if len(only(writes, "pods/eviction")) > 0 {
			evictedAt = now
			break
		}
	}
	if evictedAt.IsZero() || evictedAt.After(t0.Add(9*time.Minute)) {
		t.Fatalf("train evicted at %v, want by %v as the controller's notice said, its own 2099 notwithstanding", evictedAt, t0.Add(9*time.Minute))
	}
}

// A notice the controller did not give is withdrawn once, not after every
// round the tenant writes it back: each withdrawal costs two writes and an
// Event, and the annotation moves nothing. One the controller gives later,
// and withdraws, is its own again.
func TestForgedReclaimNoticeIsWithdrawnOnce(t *testing.T) {
	tc := newTestCluster(t, Config{Policy: round.Config{Horizon: 15 * time.Minute, ReclaimLead: 5 * time.Minute, Margin: -1}})
	forged := testobj.BestEffort("research", "train", "a", 4, t0.Add(-time.Hour))
	forged.Annotations = map[string]string{api.AnnotationReclaimNotice: "2099-01-01T00:00:00Z"}
	objs := []runtime.Object{testobj.Node("a", 8), testobj.Inference("serving", "chat-0", "chat", "a", 4), forged, chat(1, nil)}
	var withdrawals []int // the rounds that wrote to the pod
	for i := range 6 {
		tc.set(t, objs...) // the tenant writes its notice back before every round
		tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", 4, 0, 4)}
		writes, err := tc.sync(t, t0.Add(time.Duration(i)*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if len(only(writes, "pods", "pods/status")) > 0 {
			withdrawals = append(withdrawals, i)
		}
	}
	if !reflect.DeepEqual(withdrawals, []int{0}) {
		t.Fatalf("rounds that withdrew the forged notice: %v, want only the first", withdrawals)
	}
	// Half a request more every minute: the controller gives its own notice
	// (as in TestSyncGivesAndWithdrawsReclaimNotices), and withdraws it when
	// the load falls back, though it once withdrew the pod's.
	at := t0.Add(6 * time.Minute)
	noticed := false
	for _, load := range []float64{10, 10.5, 11, 11.5, 12} {
		tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", load, 0, 4)}
		writes, _ := tc.sync(t, at)
		noticed = noticed || len(only(writes, "pods")) > 0
		at = at.Add(time.Minute)
	}
	if !noticed {
		t.Fatal("no notice given as the load rose")
	}
	withdrawn := false
	for range 6 {
		tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", 4, 0, 4)}
		writes, _ := tc.sync(t, at)
		if withdrawn = len(only(writes, "pods")) > 0; withdrawn {
			break
		}
		at = at.Add(time.Minute)
	}
	if !withdrawn {
		t.Fatal("the controller's own notice was not withdrawn when the load fell back")
	}
}
