package evict

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// podRecorder is a FakeRecorder that also remembers which pod each Event was
// recorded on (FakeRecorder alone only keeps type, reason and message).
type podRecorder struct {
	*record.FakeRecorder
	on []string // "namespace/name reason", in order
}

func (r *podRecorder) Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	if p, ok := obj.(*v1.Pod); ok {
		r.on = append(r.on, p.Namespace+"/"+p.Name+" "+reason)
	}
	r.FakeRecorder.Eventf(obj, eventtype, reason, messageFmt, args...)
}

// drain returns the events the FakeRecorder buffered.
func (r *podRecorder) drain() []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// cluster is a fake API server holding pods. Evicting a pod in refuse gets 429
// (as a PodDisruptionBudget would), one in fail gets 500, one named twice-*
// gets the 500 of a pod two budgets select, one not stored gets 404.
type cluster struct {
	client   *fake.Clientset
	recorder *podRecorder
	evictor  *Evictor
	// saved names the pods evicted as reclaim.Candidate.Saved.
	saved map[string]bool
}

func newCluster(t *testing.T, stored []*v1.Pod, refuse, fail []string) *cluster {
	t.Helper()
	var objs []runtime.Object
	for _, p := range stored {
		objs = append(objs, p.DeepCopy())
	}
	client := fake.NewClientset(objs...)
	refused := map[string]bool{}
	for _, n := range refuse {
		refused[n] = true
	}
	failed := map[string]bool{}
	for _, n := range fail {
		failed[n] = true
	}
	client.PrependReactor("create", "pods/eviction", func(action k8stesting.Action) (bool, runtime.Object, error) {
		ev, ok := action.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		if !ok {
			t.Errorf("eviction action carries %T", action.(k8stesting.CreateAction).GetObject())
			return false, nil, nil
		}
		switch {
		case refused[ev.Name]:
			// As pkg/registry/core/pod/storage/eviction.go answers.
			err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
			err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Type: policyv1.DisruptionBudgetCause,
				Message: "The disruption budget never needs 1 healthy pods and has 1 currently"})
			return true, nil, err
		case strings.HasPrefix(ev.Name, "throttled"):
			// The API server's priority and fairness, or a busy server: no budget.
			return true, nil, apierrors.NewTooManyRequests("Too many requests, please try again later.", 1)
		case failed[ev.Name]:
			return true, nil, apierrors.NewInternalError(errors.New("etcd is sad"))
		case strings.HasPrefix(ev.Name, "twice-"):
			// As pkg/registry/core/pod/storage/eviction.go answers.
			return true, nil, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 500,
				Message: "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."}}
		}
		return false, nil, nil // the default tracker: 404 for a pod it does not hold
	})
	rec := &podRecorder{FakeRecorder: record.NewFakeRecorder(100)}
	return &cluster{client: client, recorder: rec, evictor: &Evictor{Client: client, Recorder: rec}}
}

// evictions lists the pods an eviction was requested for, in order.
func (c *cluster) evictions(t *testing.T) []string {
	t.Helper()
	out := []string{}
	for _, a := range c.client.Actions() {
		if a.GetVerb() != "create" || a.GetResource().Resource != "pods" || a.GetSubresource() != "eviction" {
			continue
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		if ev.Namespace != a.GetNamespace() {
			t.Errorf("eviction %s/%s sent to namespace %s", ev.Namespace, ev.Name, a.GetNamespace())
		}
		if ev.DeleteOptions == nil || ev.DeleteOptions.GracePeriodSeconds == nil {
			t.Errorf("eviction of %s carries no grace period: the pod's own would apply, uncapped", ev.Name)
		} else if pod, err := c.client.CoreV1().Pods(ev.Namespace).Get(context.Background(), ev.Name, metav1.GetOptions{}); err == nil {
			want := reclaim.Candidate{Pod: pod, Saved: c.saved[ev.Name]}.EvictionGrace(reclaim.DefaultMaxGrace)
			if *ev.DeleteOptions.GracePeriodSeconds != int64(want/time.Second) {
				t.Errorf("eviction of %s with grace %ds, want %v", ev.Name, *ev.DeleteOptions.GracePeriodSeconds, want)
			}
		}
		out = append(out, ev.Namespace+"/"+ev.Name)
	}
	return out
}

func TestEvict(t *testing.T) {
	stored := pod("job", now, "")
	declared := pod("declared", now, "")
	declared.Annotations = map[string]string{api.AnnotationSaveDuration: "24.2s"}
	declared.Spec.TerminationGracePeriodSeconds = new(int64(120))
	tests := []struct {
		name       string
		pod        *v1.Pod
		saved      bool
		refuse     []string
		fail       []string
		wantErr    func(error) bool // nil: no error
		wantEvents []string         // "type reason" prefixes
		wantSays   string           // in the eviction's Event
	}{
		{
			name:       "evicted",
			pod:        stored,
			wantEvents: []string{"Warning " + reclaim.ReasonReclaimed},
		},
		{
			name:       "saved for its notice: SavedGrace, and the Event says why",
			pod:        stored,
			saved:      true,
			wantEvents: []string{"Warning " + reclaim.ReasonReclaimed},
		},
		{
			name:       "declares how long its saves take: that and 10 s, and the Event says why",
			pod:        declared,
			wantEvents: []string{"Warning " + reclaim.ReasonReclaimed},
			wantSays:   "grace period of 35s (its saves take 24.2s, and 10s to exit)",
		},
		{
			name: "already gone is not an error and records nothing",
			pod:  pod("ghost", now, ""),
		},
		{
			name:       "refused by a disruption budget",
			pod:        stored,
			refuse:     []string{"job"},
			wantErr:    apierrors.IsTooManyRequests,
			wantEvents: []string{"Warning " + reclaim.ReasonReclaimBlocked},
		},
		{
			name:    "other API errors are returned without an Event",
			pod:     stored,
			fail:    []string{"job"},
			wantErr: apierrors.IsInternalError,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t, []*v1.Pod{stored, declared}, tt.refuse, tt.fail)
			c.saved = map[string]bool{tt.pod.Name: tt.saved}
			err := c.evictor.Evict(context.Background(), reclaim.Candidate{Pod: tt.pod, Saved: tt.saved}, "inference needs node-1")
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("Evict() = %v, want nil", err)
			case tt.wantErr != nil && (err == nil || !tt.wantErr(err)):
				t.Fatalf("Evict() = %v, want an error of the right kind", err)
			}
			if got, want := c.evictions(t), []string{tt.pod.Namespace + "/" + tt.pod.Name}; !reflect.DeepEqual(got, want) {
				t.Errorf("evictions = %v, want %v", got, want)
			}
			events := c.recorder.drain()
			if len(events) != len(tt.wantEvents) {
				t.Fatalf("events = %q, want %d", events, len(tt.wantEvents))
			}
			for i, e := range events {
				if !strings.HasPrefix(e, tt.wantEvents[i]+" ") {
					t.Errorf("event %d = %q, want prefix %q", i, e, tt.wantEvents[i])
				}
				if strings.HasPrefix(e, "Warning "+reclaim.ReasonReclaimed+" ") && !strings.Contains(e, "inference needs node-1") {
					t.Errorf("event %q does not say why", e)
				}
				if tt.wantSays != "" && !strings.Contains(e, tt.wantSays) {
					t.Errorf("event %q does not say %q", e, tt.wantSays)
				}
				if saidSaved := strings.Contains(e, "saved for its reclaim notice"); saidSaved != tt.saved {
					t.Errorf("event %q: says it saved for its notice = %v, want %v", e, saidSaved, tt.saved)
				}
			}
		})
	}
}

// TestTake takes GPUs back on one node of lone pods: the API's answers (refused,
// failed, gone) through the real Evictor.
func TestTake(t *testing.T) {
	// c builds a candidate on node-1; reclaim.LostWork is given directly so the order is explicit.
	c := func(name string, gpus int64, lost float64) reclaim.Candidate {
		p := pod(name, now, "")
		p.Spec.NodeName = "node-1"
		return reclaim.Candidate{Pod: p, GPUs: gpus, LostWork: lost}
	}
	terminating := func(name string, gpus int64) reclaim.Candidate {
		cd := c(name, gpus, 0)
		ts := metav1.NewTime(now)
		cd.Pod.DeletionTimestamp = &ts
		return cd
	}

	tests := []struct {
		name       string
		candidates []reclaim.Candidate
		missing    []string // candidates the API server no longer holds
		refuse     []string
		fail       []string
		gpus       int64

		wantAttempts []string // evictions requested, in order
		wantEvicted  []string
		wantOwed     int64
		wantErrs     int
		wantEvents   []string // "ns/name reason", in order
	}{
		{
			name:         "evicts in order until enough GPUs are freed",
			candidates:   []reclaim.Candidate{c("a", 2, 100), c("b", 4, 50), c("c", 1, 200), c("d", 4, 300)},
			gpus:         5,
			wantAttempts: []string{"ml/b", "ml/a"},
			wantEvicted:  []string{"ml/b", "ml/a"},
			wantEvents:   []string{"ml/b " + reclaim.ReasonReclaimed, "ml/a " + reclaim.ReasonReclaimed},
		},
		{
			name:         "ties in lost work go to the pod with more GPUs",
			candidates:   []reclaim.Candidate{c("a", 1, 0), c("b", 1, 0), c("big", 4, 0)},
			gpus:         4,
			wantAttempts: []string{"ml/big"},
			wantEvicted:  []string{"ml/big"},
			wantEvents:   []string{"ml/big " + reclaim.ReasonReclaimed},
		},
		{
			name:         "already-terminating pods count toward the goal and are not evicted again",
			candidates:   []reclaim.Candidate{terminating("t", 4), c("a", 2, 10), c("b", 2, 20)},
			gpus:         5,
			wantAttempts: []string{"ml/a"},
			wantEvicted:  []string{"ml/a"},
			wantEvents:   []string{"ml/a " + reclaim.ReasonReclaimed},
		},
		{
			name:         "terminating pods alone cover the goal",
			candidates:   []reclaim.Candidate{terminating("t", 4), c("a", 2, 10)},
			gpus:         4,
			wantAttempts: []string{},
		},
		{
			name:         "nothing owed evicts nothing",
			candidates:   []reclaim.Candidate{c("a", 2, 10)},
			gpus:         0,
			wantAttempts: []string{},
		},
		{
			name:         "a refused pod is skipped and the next tried",
			candidates:   []reclaim.Candidate{c("pdb", 4, 10), c("b", 4, 20), c("c", 4, 30)},
			refuse:       []string{"pdb"},
			gpus:         4,
			wantAttempts: []string{"ml/pdb", "ml/b"},
			wantEvicted:  []string{"ml/b"},
			wantErrs:     1,
			wantEvents:   []string{"ml/pdb " + reclaim.ReasonReclaimBlocked, "ml/b " + reclaim.ReasonReclaimed},
		},
		{
			name:         "a failed eviction is skipped and the next tried, without an Event",
			candidates:   []reclaim.Candidate{c("sad", 4, 10), c("b", 4, 20)},
			fail:         []string{"sad"},
			gpus:         4,
			wantAttempts: []string{"ml/sad", "ml/b"},
			wantEvicted:  []string{"ml/b"},
			wantErrs:     1,
			wantEvents:   []string{"ml/b " + reclaim.ReasonReclaimed},
		},
		{
			name:         "a pod already gone counts as freed",
			candidates:   []reclaim.Candidate{c("ghost", 4, 10), c("b", 4, 20)},
			missing:      []string{"ghost"},
			gpus:         4,
			wantAttempts: []string{"ml/ghost"},
			wantEvicted:  []string{"ml/ghost"},
		},
		{
			name:         "not enough candidates: the rest is owed",
			candidates:   []reclaim.Candidate{c("a", 2, 10), c("pdb", 4, 5)},
			refuse:       []string{"pdb"},
			gpus:         5,
			wantAttempts: []string{"ml/pdb", "ml/a"},
			wantEvicted:  []string{"ml/a"},
			wantOwed:     3,
			wantErrs:     1,
			wantEvents:   []string{"ml/pdb " + reclaim.ReasonReclaimBlocked, "ml/a " + reclaim.ReasonReclaimed},
		},
		{
			name:         "owed never goes negative",
			candidates:   []reclaim.Candidate{c("big", 8, 10)},
			gpus:         2,
			wantAttempts: []string{"ml/big"},
			wantEvicted:  []string{"ml/big"},
			wantEvents:   []string{"ml/big " + reclaim.ReasonReclaimed},
		},
		{
			name:         "no candidates",
			gpus:         3,
			wantAttempts: []string{},
			wantOwed:     3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			missing := map[string]bool{}
			for _, n := range tt.missing {
				missing[n] = true
			}
			var stored []*v1.Pod
			for _, cd := range tt.candidates {
				if !missing[cd.Pod.Name] {
					stored = append(stored, cd.Pod)
				}
			}
			cl := newCluster(t, stored, tt.refuse, tt.fail)

			owe := []reclaim.Owed{{Node: "node-1", GPUs: tt.gpus, Why: "node-1 must return GPUs"}}
			evicted, stillOwed, errs := reclaim.Take(owe, tt.candidates, func(c reclaim.Candidate, o reclaim.Owed) error {
				return cl.evictor.Evict(context.Background(), c, o.Why)
			})
			var owed int64
			for _, o := range stillOwed {
				owed += o.GPUs
			}

			if got := cl.evictions(t); !reflect.DeepEqual(got, tt.wantAttempts) {
				t.Errorf("evictions requested = %v, want %v", got, tt.wantAttempts)
			}
			gotEvicted := []string{}
			for _, p := range evicted {
				gotEvicted = append(gotEvicted, p.Pod.Namespace+"/"+p.Pod.Name)
			}
			if want := append([]string{}, tt.wantEvicted...); !reflect.DeepEqual(gotEvicted, want) {
				t.Errorf("evicted = %v, want %v", gotEvicted, want)
			}
			if owed != tt.wantOwed {
				t.Errorf("owed = %d, want %d", owed, tt.wantOwed)
			}
			if len(errs) != tt.wantErrs {
				t.Errorf("errs = %v, want %d", errs, tt.wantErrs)
			}
			for _, err := range errs {
				if !strings.Contains(err.Error(), "ml/") {
					t.Errorf("error %q does not name the pod", err)
				}
			}
			gotEvents := cl.recorder.on
			if gotEvents == nil {
				gotEvents = []string{}
			}
			if want := append([]string{}, tt.wantEvents...); !reflect.DeepEqual(gotEvents, want) {
				t.Errorf("events = %v, want %v", gotEvents, want)
			}
			if n := len(cl.recorder.drain()); n != len(tt.wantEvents) {
				t.Errorf("FakeRecorder buffered %d events, want %d", n, len(tt.wantEvents))
			}
		})
	}
}

// A reclaim gives a pod its own grace period to checkpoint, but never more
// than the cap: a tenant's hour-long grace period cannot make inference wait.
func TestEvictCapsTheGracePeriod(t *testing.T) {
	for _, tt := range []struct {
		grace *int64
		want  int64
	}{{nil, 30}, {ptr.To(int64(10)), 10}, {ptr.To(int64(3600)), 120}, {ptr.To(int64(0)), 0}} {
		p := pod("job", now, "")
		p.Spec.TerminationGracePeriodSeconds = tt.grace
		c := newCluster(t, []*v1.Pod{p}, nil, nil)
		if err := c.evictor.Evict(context.Background(), reclaim.Candidate{Pod: p}, "test"); err != nil {
			t.Fatal(err)
		}
		ev := c.client.Actions()[0].(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		if got := *ev.DeleteOptions.GracePeriodSeconds; got != tt.want {
			t.Errorf("grace %v: evicted with %ds, want %ds", tt.grace, got, tt.want)
		}
	}
}

// A PodDisruptionBudget that never allows a disruption, or two that select
// the same pod (which the API server refuses for ever), shields its pod only
// for PDBWait: the refusal is reported once, and then the pod is deleted with
// its capped grace, without the budget's check, and an Event says so.
func TestEvictDeletesPastTheBudgetAfterTheWait(t *testing.T) {
	for _, name := range []string{"shielded", "twice-shielded"} {
		t.Run(name, func(t *testing.T) {
			p := pod(name, now, "")
			p.UID = types.UID("uid-" + name)
			p.Spec.TerminationGracePeriodSeconds = ptr.To(int64(3600))
			c := newCluster(t, []*v1.Pod{p}, []string{"shielded"}, nil)
			clk := clocktesting.NewFakePassiveClock(now)
			c.evictor.Clock, c.evictor.PDBWait = clk, 2*time.Minute
			for i := range 3 {
				clk.SetTime(now.Add(time.Duration(i) * 30 * time.Second))
				if err := c.evictor.Evict(context.Background(), reclaim.Candidate{Pod: p}, "test"); !RefusedByBudget(err) {
					t.Fatalf("attempt %d: %v, want refused", i, err)
				}
			}
			if got := c.recorder.on; !reflect.DeepEqual(got, []string{"ml/" + name + " " + reclaim.ReasonReclaimBlocked}) {
				t.Fatalf("events %v: the refusal is reported once", got)
			}
			clk.SetTime(now.Add(2 * time.Minute))
			if err := c.evictor.Evict(context.Background(), reclaim.Candidate{Pod: p}, "inference needs node-1"); err != nil {
				t.Fatal(err)
			}
			var deleted *int64
			for _, a := range c.client.Actions() {
				if d, ok := a.(k8stesting.DeleteAction); ok && d.GetName() == name {
					deleted = d.GetDeleteOptions().GracePeriodSeconds
				}
			}
			if deleted == nil || *deleted != 120 {
				t.Fatalf("deleted with grace %v, want the capped 120 s", deleted)
			}
			if got := c.recorder.on[len(c.recorder.on)-1]; got != "ml/"+name+" "+reclaim.ReasonReclaimForced {
				t.Fatalf("last event %q, want %s", got, reclaim.ReasonReclaimForced)
			}
		})
	}
}

// The wait is the pod's, once: refusals that stop for a while (others were
// taken in the pod's place, or nothing was owed) do not start it again, or a
// budget that never allows a disruption would shield its pod for ever while
// other tenants' pods went instead.
func TestEvictBoundsTheWaitAcrossBreaks(t *testing.T) {
	p := pod("shielded", now, "")
	p.UID = "uid-shielded"
	c := newCluster(t, []*v1.Pod{p}, []string{"shielded"}, nil)
	clk := clocktesting.NewFakePassiveClock(now)
	c.evictor.Clock, c.evictor.PDBWait = clk, 2*time.Minute
	if err := c.evictor.Evict(context.Background(), reclaim.Candidate{Pod: p}, "test"); !RefusedByBudget(err) {
		t.Fatalf("%v, want refused", err)
	}
	clk.SetTime(now.Add(10 * time.Minute))
	if err := c.evictor.Evict(context.Background(), reclaim.Candidate{Pod: p}, "test"); err != nil {
		t.Fatalf("10 minutes after the first refusal: %v, want the pod deleted", err)
	}
	if got := c.recorder.on; !reflect.DeepEqual(got, []string{"ml/shielded " + reclaim.ReasonReclaimBlocked, "ml/shielded " + reclaim.ReasonReclaimForced}) {
		t.Fatalf("events %v", got)
	}
}

// The first refusal is kept on the pod: a controller that restarts (a new
// Evictor) counts from it, and deletes the pod once PDBWait has passed since
// then, not PDBWait after its own first look. A record the controller could
// not have written (in the future, before the pod was created, not True)
// starts the wait afresh.
func TestEvictKeepsTheWaitAcrossRestarts(t *testing.T) {
	p := pod("shielded", now, "")
	p.UID = "uid-shielded"
	p.CreationTimestamp = metav1.NewTime(now.Add(-time.Hour))
	c := newCluster(t, []*v1.Pod{p}, []string{"shielded"}, nil)
	clk := clocktesting.NewFakePassiveClock(now)
	c.evictor.Clock, c.evictor.PDBWait = clk, 2*time.Minute
	if err := c.evictor.Evict(context.Background(), reclaim.Candidate{Pod: p}, "test"); !RefusedByBudget(err) {
		t.Fatalf("%v, want refused", err)
	}
	stored, err := c.client.CoreV1().Pods("ml").Get(context.Background(), "shielded", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if at, ok := RefusedSince(stored, now); !ok || !at.Equal(now) {
		t.Fatalf("kept refusal %v %v, want %v", at, ok, now)
	}
	restarted := func() *Evictor {
		return &Evictor{Client: c.client, Recorder: c.recorder, Clock: clk, PDBWait: 2 * time.Minute}
	}
	clk.SetTime(now.Add(2 * time.Minute))
	if err := restarted().Evict(context.Background(), reclaim.Candidate{Pod: stored}, "test"); err != nil {
		t.Fatalf("a restarted controller, 2 minutes after the first refusal: %v, want the pod deleted", err)
	}
	for name, cond := range map[string]v1.PodCondition{
		"in the future":          {Type: api.ConditionEvictionRefused, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(time.Hour))},
		"before the pod existed": {Type: api.ConditionEvictionRefused, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-2 * time.Hour))},
		"not true":               {Type: api.ConditionEvictionRefused, Status: v1.ConditionFalse, LastTransitionTime: metav1.NewTime(now.Add(-time.Minute))},
	} {
		forged := stored.DeepCopy()
		forged.Status.Conditions = []v1.PodCondition{cond}
		if _, ok := RefusedSince(forged, now.Add(2*time.Minute)); ok {
			t.Errorf("a refusal %s is trusted", name)
		}
	}
}

// A 429 without a DisruptionBudget cause is the API server throttling: it
// is an error, but no budget's refusal, and does not count toward the wait.
func TestEvictThrottlingIsNoRefusal(t *testing.T) {
	p := pod("throttled", now, "")
	p.UID = "uid-throttled"
	c := newCluster(t, []*v1.Pod{p}, nil, nil)
	clk := clocktesting.NewFakePassiveClock(now)
	c.evictor.Clock, c.evictor.PDBWait = clk, 2*time.Minute
	for _, at := range []time.Duration{0, 3 * time.Minute} {
		clk.SetTime(now.Add(at))
		err := c.evictor.Evict(context.Background(), reclaim.Candidate{Pod: p}, "test")
		if err == nil || RefusedByBudget(err) {
			t.Fatalf("at %v: %v, want an error that is no budget's refusal", at, err)
		}
	}
	if got := c.recorder.on; len(got) != 0 {
		t.Fatalf("events %v for throttling", got)
	}
	for _, a := range c.client.Actions() {
		if a.GetVerb() == "delete" || a.GetSubresource() == "status" {
			t.Fatalf("%s %s/%s after throttling: no budget refused anything", a.GetVerb(), a.GetResource().Resource, a.GetSubresource())
		}
	}
}

var now = time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)

// pod is a best-effort pod in namespace ml, started at start.
func pod(name string, start time.Time, _ string) *v1.Pod {
	st := metav1.NewTime(start)
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml"}, Status: v1.PodStatus{StartTime: &st}}
}

// A PodDisruptionBudget refuses the cheapest pod: Take goes on to the next
// cheapest unit, a whole gang, not the pricey pod.
func TestTakeEvictsGangsWholeAndSkipsBlocked(t *testing.T) {
	cands := []reclaim.Candidate{
		member("blocked", "n1", "", 4, time.Minute),    // cheapest, but a PDB refuses
		member("g-0", "n1", "train", 2, 3*time.Minute), // gang: 2 x 2 x 180 = 720
		member("g-1", "n2", "train", 2, 3*time.Minute),
		member("pricey", "n1", "", 4, time.Hour),
	}
	var pods []*v1.Pod
	for _, c := range cands {
		pods = append(pods, c.Pod)
	}
	c := newCluster(t, pods, []string{"blocked"}, nil)
	evicted, stillOwed, errs := reclaim.Take([]reclaim.Owed{{Node: "n1", GPUs: 2, Why: "test"}}, cands, func(m reclaim.Candidate, o reclaim.Owed) error {
		return c.evictor.Evict(context.Background(), m, o.Why)
	})
	owed := int64(len(stillOwed))
	if got, want := c.evictions(t), []string{"ml/blocked", "ml/g-0", "ml/g-1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("evictions %v, want %v: after the refusal the whole gang, not the pricey pod", got, want)
	}
	if owed != 0 || len(evicted) != 2 || len(errs) != 1 || !strings.Contains(errs[0].Error(), "refused") {
		t.Fatalf("evicted %v, owed %d, errs %v", names(evicted), owed, errs)
	}
	if !reflect.DeepEqual(c.recorder.on, []string{"ml/blocked " + reclaim.ReasonReclaimBlocked, "ml/g-0 " + reclaim.ReasonReclaimed, "ml/g-1 " + reclaim.ReasonReclaimed}) {
		t.Fatalf("events %v", c.recorder.on)
	}
}

// member is a best-effort pod of gpus GPUs on node, started an hour before
// now, that last checkpointed ago before now, in the gang (PodGroup) when
// gang is not empty.
func member(name, node, gang string, gpus int64, ago time.Duration) reclaim.Candidate {
	p := pod(name, now.Add(-time.Hour), "")
	p.Spec.NodeName = node
	p.Annotations = map[string]string{api.AnnotationLastCheckpoint: api.FormatTime(now.Add(-ago))}
	if gang != "" {
		p.Labels = map[string]string{api.LabelPodGroup: gang}
	}
	return reclaim.Candidate{Pod: p, GPUs: gpus, LostWork: reclaim.LostWork(p, gpus, now)}
}

func names(cs []reclaim.Candidate) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.Pod.Name)
	}
	return out
}

// Prune forgets the refusals of pods no longer live and keeps the others'.
func TestPruneForgetsGonePods(t *testing.T) {
	e := &Evictor{}
	e.Prune(nil) // nothing refused: nothing to read
	live, gone := pod("live", now, ""), pod("gone", now, "")
	live.UID, gone.UID = "u-live", "u-gone"
	e.refused(live)
	e.refused(gone)
	e.Prune([]*v1.Pod{live, pod("other", now, "")})
	if _, ok := e.refusals["u-live"]; !ok {
		t.Error("the live pod's refusal was forgotten")
	}
	if _, ok := e.refusals["u-gone"]; ok {
		t.Error("the gone pod's refusal was kept")
	}
}

// Only an eviction the API server did not judge is undecided: a budget's
// refusal, a pod gone and any other answer are decided.
func TestUndecided(t *testing.T) {
	refused := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)
	refused.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: policyv1.DisruptionBudgetCause}}
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"none", nil, false},
		{"a budget's refusal", refused, false},
		{"gone", apierrors.NewNotFound(v1.Resource("pods"), "p"), false},
		{"forbidden", apierrors.NewForbidden(v1.Resource("pods"), "p", errors.New("denied")), false},
		{"an internal error", apierrors.NewInternalError(errors.New("boom")), false},
		{"throttled", apierrors.NewTooManyRequests("slow down", 1), true},
		{"the call's timeout", fmt.Errorf("evicting r/p: %w", context.DeadlineExceeded), true},
		{"the server's timeout", apierrors.NewServerTimeout(policyv1.Resource("evictions"), "create", 1), true},
		{"unavailable", apierrors.NewServiceUnavailable("shutting down"), true},
	} {
		if got := Undecided(tt.err); got != tt.want {
			t.Errorf("%s: Undecided = %v, want %v", tt.name, got, tt.want)
		}
	}
}
