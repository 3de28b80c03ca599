package round

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/autoscale"
	"github.com/gleaner-dev/gleaner/pkg/availability"
	"github.com/gleaner-dev/gleaner/pkg/demand"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
)

var t0 = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

// replicas are n known replicas of 4 GPUs, each carrying running and waiting requests.
func replicas(n int, running, waiting float64) []demand.Replica {
	out := make([]demand.Replica, n)
	for i := range out {
		out[i] = demand.Replica{Known: true, Running: running, Waiting: waiting, GPUs: 4}
	}
	return out
}

// job is a lone best-effort pod of gpus GPUs on node, started ago before t0.
func job(name, node string, gpus int64, ago time.Duration) reclaim.Candidate {
	start := metav1.NewTime(t0.Add(-ago))
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "research", Name: name, UID: types.UID(name)},
		Spec: v1.PodSpec{NodeName: node}, Status: v1.PodStatus{Phase: v1.PodRunning, StartTime: &start}}
	return reclaim.Candidate{Pod: p, GPUs: gpus, LostWork: reclaim.LostWork(p, gpus, t0)}
}

func names(cs []reclaim.Candidate) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.Pod.Name)
	}
	return out
}

// Two 8-GPU nodes: n1 serves one 4-GPU replica, n2 lends 4 GPUs to two jobs.
// When the service's replica has waiting requests it needs a second replica
// now: its headroom goes where it fits without reclaiming (n1's free half),
// so nothing is evicted. Three replicas of headroom need n2's lent GPUs back:
// both jobs go, the one with the least work lost first.
func TestPlanKeepsHeadroomAndChoosesVictims(t *testing.T) {
	nodes := []harvest.Node{
		{Name: "n1", InPool: true, Schedulable: true, AllocatableGPUs: 8, ServingGPUs: 4, HostsInference: true},
		{Name: "n2", InPool: true, Schedulable: true, AllocatableGPUs: 8, LentGPUs: 4},
	}
	jobs := []reclaim.Candidate{job("old", "n2", 2, time.Hour), job("new", "n2", 2, time.Minute)}
	calls := 0
	obs := func(load float64) Observation {
		return Observation{Now: t0, Nodes: nodes, Published: map[string]int64{"n1": 4, "n2": 8},
			Services: []Service{{Key: "serving/chat", Declared: true, Replicas: replicas(1, min(load, 16), max(0, load-16)),
				Settings: demand.Settings{TargetLoad: 16}}},
			BestEffort: func(owing map[string]bool) []reclaim.Candidate {
				calls++
				if !owing["n2"] || len(owing) != 1 {
					t.Errorf("BestEffort asked for %v, want n2 alone", owing)
				}
				return jobs
			}}
	}
	p := New(Config{OpenAfter: 0, ReclaimLead: 15 * time.Minute, Margin: -1})
	d := p.Plan(obs(20))
	if got := d.Services[0].Need.HeadroomReplicas; got != 1 {
		t.Fatalf("headroom replicas %d, want 1 (waiting requests)", got)
	}
	if np := d.Plan.Nodes["n1"]; np.HeadroomGPUs != 4 || np.State != api.HarvestClosed {
		t.Fatalf("n1 %+v: want the headroom replica there, closed", np)
	}
	if len(d.Reclaims) != 0 || calls != 0 || len(d.Victims) != 0 {
		t.Fatalf("reclaims %v, BestEffort calls %d, victims %v: nothing is owed", d.Reclaims, calls, names(d.Victims))
	}

	d = p.Plan(obs(60)) // 60 requests on a target of 16: 4 replicas, 3 of them headroom
	if len(d.Reclaims) != 1 || d.Reclaims[0].Node != "n2" || d.Reclaims[0].GPUs != 4 {
		t.Fatalf("reclaims %+v, want n2 returning 4 GPUs", d.Reclaims)
	}
	if !strings.Contains(d.Reclaims[0].Why, "node n2 must return 4 GPUs") {
		t.Errorf("why %q", d.Reclaims[0].Why)
	}
	if got, want := names(d.Victims), []string{"new", "old"}; !reflect.DeepEqual(got, want) {
		t.Errorf("victims %v, want %v (least lost work first)", got, want)
	}
	if d.Plan.Nodes["n2"].State != api.HarvestDraining {
		t.Errorf("n2 %+v, want draining", d.Plan.Nodes["n2"])
	}
}

// The margin is kept for one service at a time: of two services at 16
// requests a replica, whose 10% margin each asks one more replica, only the
// one with the larger replicas (8 GPUs) keeps room for it; the other keeps
// none. Kept per service (MarginPerService), both keep theirs.
func TestMarginIsKeptForOneServiceAtATime(t *testing.T) {
	nodes := []harvest.Node{
		{Name: "n1", InPool: true, Schedulable: true, AllocatableGPUs: 8, ServingGPUs: 8, HostsInference: true},
		{Name: "n2", InPool: true, Schedulable: true, AllocatableGPUs: 8, ServingGPUs: 4, HostsInference: true},
		{Name: "n3", InPool: true, Schedulable: true, AllocatableGPUs: 8},
		{Name: "n4", InPool: true, Schedulable: true, AllocatableGPUs: 8},
	}
	big := []demand.Replica{{Known: true, Running: 16, GPUs: 8}}
	obs := Observation{Now: t0, Nodes: nodes, Published: map[string]int64{},
		Services: []Service{
			{Key: "serving/small", Declared: true, Replicas: replicas(1, 16, 0), Settings: demand.Settings{TargetLoad: 16}},
			{Key: "serving/big", Declared: true, Replicas: big, Settings: demand.Settings{TargetLoad: 16}},
		}}
	spare := func(d Decision) map[string]int {
		out := map[string]int{}
		for _, s := range d.Services {
			out[s.Key] = s.Need.HeadroomReplicas
		}
		return out
	}
	d := New(Config{OpenAfter: 0}).Plan(obs)
	if got, want := spare(d), map[string]int{"serving/small": 0, "serving/big": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("headroom replicas %v, want %v", got, want)
	}
	if lent := lendable(nodes, d.Plan); lent != 12 {
		t.Fatalf("%d GPUs lendable, want 12 (8 kept for one replica of serving/big): %+v", lent, d.Plan.Nodes)
	}
	d = New(Config{OpenAfter: 0, MarginPerService: true}).Plan(obs)
	if got, want := spare(d), map[string]int{"serving/small": 1, "serving/big": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("per service: headroom replicas %v, want %v", got, want)
	}
	if lent := lendable(nodes, d.Plan); lent != 8 {
		t.Fatalf("per service: %d GPUs lendable, want 8: %+v", lent, d.Plan.Nodes)
	}
}

// With a reclaim lead shorter than the horizon, a forecast that needs lent GPUs
// only beyond the lead stops the node lending but evicts nothing yet: the pods
// it will evict get notices, with when the forecast will need their GPUs.
func TestPlanEvictsJustInTimeAfterANotice(t *testing.T) {
	nodes := []harvest.Node{{Name: "n1", InPool: true, Schedulable: true, AllocatableGPUs: 8, ServingGPUs: 4, LentGPUs: 4, HostsInference: true}}
	p := New(Config{Horizon: 15 * time.Minute, ReclaimLead: 5 * time.Minute, Margin: -1})
	lent := job("train", "n1", 4, time.Hour)
	// A rising trend of half a request a minute: from 12 requests it passes
	// one replica's 16 within the horizon (19.5) but not within the lead (14.5).
	var d Decision
	plan := func(at time.Time, load float64) Decision {
		return p.Plan(Observation{Now: at, Nodes: nodes, Published: map[string]int64{"n1": 4},
			Services: []Service{{Key: "serving/chat", Declared: true, Replicas: replicas(1, load, 0), Settings: demand.Settings{TargetLoad: 16}}},
			BestEffort: func(owing map[string]bool) []reclaim.Candidate {
				if !owing["n1"] {
					t.Errorf("BestEffort asked for %v, want n1", owing)
				}
				return []reclaim.Candidate{lent}
			}})
	}
	for i, load := range []float64{10, 10.5, 11, 11.5, 12} {
		d = plan(t0.Add(time.Duration(i)*time.Minute), load)
	}
	last := t0.Add(4 * time.Minute)
	s := d.Services[0]
	if s.Need.HeadroomReplicas != 1 || s.Soon.HeadroomReplicas != 0 {
		t.Fatalf("need %+v soon %+v: want a spare replica over the horizon only", s.Need, s.Soon)
	}
	if np := d.Plan.Nodes["n1"]; np.State != api.HarvestDraining || np.ReclaimGPUs != 0 || len(d.Victims) != 0 {
		t.Fatalf("n1 %+v, victims %v: want draining with nothing to evict yet", np, names(d.Victims))
	}
	// The lead's window reaches 16.5 requests (12 + 0.5 x (4 + 5) minutes)
	// 4 minutes on: a second replica, so the pod goes then.
	if len(d.Notices) != 1 {
		t.Fatalf("notices %+v, want one for train", d.Notices)
	}
	n := d.Notices[0]
	if n.Pod.Name != "train" || n.Node != "n1" || !n.At.Equal(last.Add(4*time.Minute)) || !reflect.DeepEqual(n.Services, []string{"serving/chat"}) {
		t.Fatalf("notice %+v at %v, want train on n1 for serving/chat at %v", n, n.At, last.Add(4*time.Minute))
	}
	// A jump to 15 requests steepens the trend: the lead's window needs the
	// GPUs now, 3 minutes before the notice said. The load now does not
	// (15 < 16), so the pod is held to its notice...
	d = plan(last.Add(time.Minute), 15)
	if len(d.Victims) != 0 || len(d.Reclaims) != 0 || len(d.Notices) != 1 || !d.Notices[0].At.Equal(last.Add(4*time.Minute)) {
		t.Fatalf("victims %v, reclaims %+v, notices %+v: want train held to its notice", names(d.Victims), d.Reclaims, d.Notices)
	}
	// ...and evicted at its noticed time, warned since the first notice.
	d = plan(last.Add(4*time.Minute), 15)
	if got, since := names(d.Victims), d.Warned[lent.Pod.UID].Since; !reflect.DeepEqual(got, []string{"train"}) || since.IsZero() || since.After(last) {
		t.Fatalf("victims %v, warned %v: want train, warned since the first notice (by %v)", got, d.Warned, last)
	}

	// A pod whose declared save fits the grace period the reclaimer gives
	// it is not held: taken at once, it saves on SIGTERM what it has done,
	// and the lead's replica gets its GPUs 3 minutes sooner. Unless its
	// save takes longer than those 3 minutes (held, it saves for its notice
	// and leaves 10 s after its time, which is sooner), or its time is
	// within a notice step (a minute here): as near as notices are told.
	held := lent
	for _, tt := range []struct {
		save  string
		after time.Duration // after last, with the load at 15
		want  []string
	}{{"20s", time.Minute, []string{"train"}}, {"3m30s", time.Minute, []string{}}, {"20s", 3*time.Minute + 30*time.Second, []string{}}} {
		save, want := tt.save, tt.want
		p = New(Config{Horizon: 15 * time.Minute, ReclaimLead: 5 * time.Minute, Margin: -1})
		pod := held.Pod.DeepCopy()
		pod.Annotations = map[string]string{api.AnnotationSaveDuration: save}
		lent = reclaim.Candidate{Pod: pod, GPUs: held.GPUs, LostWork: held.LostWork, SavesInGrace: true}
		for i, load := range []float64{10, 10.5, 11, 11.5, 12} {
			d = plan(t0.Add(time.Duration(i)*time.Minute), load)
		}
		if len(d.Notices) != 1 || len(d.Victims) != 0 {
			t.Fatalf("saving in %s: notices %+v, victims %v: want train noticed and not evicted yet", save, d.Notices, names(d.Victims))
		}
		d = plan(last.Add(tt.after), 15)
		if got := names(d.Victims); !reflect.DeepEqual(got, want) {
			t.Fatalf("saving in %s: victims %v once the lead needs its GPUs, %v before its notice's time; want %v", save, got, 4*time.Minute-tt.after, want)
		}
	}
	lent = held

	// Load recedes: no horizon needs the GPUs, and the notice is gone.
	p = New(Config{Horizon: 15 * time.Minute, ReclaimLead: 5 * time.Minute, Margin: -1})
	for i, load := range []float64{10, 10.5, 11, 11.5, 12, 8, 6, 4, 4, 4, 4, 4, 4} {
		d = plan(t0.Add(time.Duration(i)*time.Minute), load)
	}
	if len(d.Notices) != 0 || len(d.Victims) != 0 {
		t.Fatalf("notices %+v, victims %v after the load receded", d.Notices, names(d.Victims))
	}
}

// A gang is held to its notice as a lone pod is, whole: its members on
// every node stay until the noticed time, their notices naming the node
// they were given for, and go together once the load now needs the GPUs.
// An elastic gang shedding a member is not held: the member goes when the
// lead needs it, and the gang keeps its quorum. Nor is a gang one of whose
// members waits at Permit (counted on its nominated node): it has nothing
// to save.
func TestPlanHoldsANoticedGangWhole(t *testing.T) {
	nodes := []harvest.Node{
		{Name: "n1", InPool: true, Schedulable: true, AllocatableGPUs: 8, ServingGPUs: 4, LentGPUs: 4, HostsInference: true},
		{Name: "n2", InPool: true, Schedulable: true, AllocatableGPUs: 8, LentGPUs: 8},
	}
	for _, tt := range []struct {
		name   string
		quorum int32
		permit bool     // g-1 waits at Permit, nominated to n2
		held   bool     // held to its notice while only the lead needs n1's GPUs
		want   []string // evicted: once the load now needs them, when held
	}{
		{"rigid", 0, false, true, []string{"g-0", "g-1"}},
		{"elastic, shedding", 1, false, false, []string{"g-0"}},
		{"rigid, a member waiting at Permit", 0, true, false, []string{"g-0", "g-1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := New(Config{Horizon: 15 * time.Minute, ReclaimLead: 5 * time.Minute, Margin: -1})
			var gang []reclaim.Candidate
			for i, node := range []string{"n1", "n2"} {
				c := job(fmt.Sprintf("g-%d", i), node, 4, time.Hour)
				c.Pod.Labels = map[string]string{api.LabelPodGroup: "g"}
				c.Quorum = tt.quorum
				if i == 1 && tt.permit {
					c.Pod.Status = v1.PodStatus{Phase: v1.PodPending, NominatedNodeName: node}
					c.LostWork = 0
				}
				gang = append(gang, c)
			}
			alone := job("alone", "n2", 4, 2*time.Hour)
			plan := func(at time.Time, running, waiting float64) Decision {
				return p.Plan(Observation{Now: at, Nodes: nodes, Published: map[string]int64{"n1": 4, "n2": 8},
					Services:   []Service{{Key: "serving/chat", Declared: true, Replicas: replicas(1, running, waiting), Settings: demand.Settings{TargetLoad: 16}}},
					BestEffort: func(map[string]bool) []reclaim.Candidate { return append(slices.Clone(gang), alone) }})
			}
			var d Decision
			for i, load := range []float64{10, 10.5, 11, 11.5, 12} {
				d = plan(t0.Add(time.Duration(i)*time.Minute), load, 0)
			}
			noticed := func(d Decision) []string {
				out := []string{}
				for _, n := range d.Notices {
					out = append(out, n.Pod.Name)
				}
				slices.Sort(out)
				return out
			}
			if got := noticed(d); len(d.Victims) != 0 || !slices.Contains(got, "g-0") {
				t.Fatalf("notices %v, victims %v: want g-0 noticed, nothing evicted yet", got, names(d.Victims))
			}
			at := d.Notices[0].At
			// The lead needs n1's GPUs 3 minutes before the notice's time; the load now does not.
			d = plan(t0.Add(5*time.Minute), 15, 0)
			victims := names(d.Victims)
			slices.Sort(victims)
			if tt.held {
				if len(victims) != 0 {
					t.Fatalf("victims %v before the noticed time %v: want the gang held", victims, at)
				}
				if got := noticed(d); !reflect.DeepEqual(got, []string{"g-0", "g-1"}) {
					t.Fatalf("notices %v: want both members' notices to stand", got)
				}
				for _, n := range d.Notices {
					if !n.At.Equal(at) || n.Node != "n1" {
						t.Fatalf("notice %s at %v for %s, want %v for n1", n.Pod.Name, n.At, n.Node, at)
					}
				}
				// Requests queue now: the gang goes, whole.
				d = plan(t0.Add(5*time.Minute+10*time.Second), 16, 8)
				victims = names(d.Victims)
				slices.Sort(victims)
			}
			if !reflect.DeepEqual(victims, tt.want) {
				t.Fatalf("victims %v, want %v", victims, tt.want)
			}
		})
	}
}

// reclaim.Take chooses a gang through one node; a node of another member
// whose time comes sooner takes it then, so every member is told that time.
func TestGangsGoTogether(t *testing.T) {
	member := func(name, node string) Notice {
		c := job(name, node, 4, time.Hour)
		c.Pod.Labels = map[string]string{api.LabelPodGroup: "g"}
		return Notice{Candidate: c, At: t0.Add(8 * time.Minute), Node: "a", Services: []string{"serving/chat"}}
	}
	lone := Notice{Candidate: job("lone", "b", 4, time.Hour), At: t0.Add(8 * time.Minute), Node: "b"}
	notices := []Notice{member("g-0", "a"), member("g-1", "b"), member("g-2", "c"), lone}
	at := map[string]time.Time{"a": t0.Add(8 * time.Minute), "b": t0.Add(3 * time.Minute)}
	gangsGoTogether(notices, at, map[string][]string{"b": {"serving/code"}})
	for _, n := range notices[:3] {
		if !n.At.Equal(t0.Add(3*time.Minute)) || n.Node != "b" || !reflect.DeepEqual(n.Services, []string{"serving/code"}) {
			t.Errorf("%s: at %v for %s %v, want b's time %v for serving/code", n.Pod.Name, n.At, n.Node, n.Services, t0.Add(3*time.Minute))
		}
	}
	if n := notices[3]; !n.At.Equal(t0.Add(8*time.Minute)) || n.Node != "b" {
		t.Errorf("a lone pod's notice moved: %+v", n)
	}
}

// The admin's HoldAndDrain closes every pool node and takes every lent GPU
// back at once: on an idle node, on a cordoned one, and a pod held to its
// notice's time too; a low-priority pod outside the pool stays.
func TestDrainTakesEveryLentGPUBack(t *testing.T) {
	nodes := []harvest.Node{
		{Name: "n1", InPool: true, Schedulable: true, AllocatableGPUs: 8, ServingGPUs: 4, LentGPUs: 4, HostsInference: true},
		{Name: "n2", InPool: true, Schedulable: true, AllocatableGPUs: 8, LentGPUs: 6},
		{Name: "n3", InPool: true, Schedulable: false, AllocatableGPUs: 8, LentGPUs: 2},
		{Name: "n4", InPool: true, Schedulable: true, AllocatableGPUs: 2},
		{Name: "off-pool", Schedulable: true, AllocatableGPUs: 8, LentGPUs: 1},
	}
	jobs := []reclaim.Candidate{job("train", "n1", 4, time.Hour), job("idle-node", "n2", 6, time.Hour), job("cordoned", "n3", 2, time.Hour),
		job("tenant-elsewhere", "off-pool", 1, time.Hour)}
	p := New(Config{Horizon: 15 * time.Minute, ReclaimLead: 5 * time.Minute, Margin: -1})
	plan := func(at time.Time, load float64, drain bool) Decision {
		return p.Plan(Observation{Now: at, Nodes: nodes, Published: map[string]int64{"n1": 4, "n2": 8, "n4": 2}, Drain: drain,
			Services:   []Service{{Key: "serving/chat", Declared: true, Replicas: replicas(1, load, 0), Settings: demand.Settings{TargetLoad: 16}}},
			BestEffort: func(map[string]bool) []reclaim.Candidate { return jobs }})
	}
	// As in TestPlanEvictsJustInTimeAfterANotice: train is noticed, not evicted.
	var d Decision
	for i, load := range []float64{10, 10.5, 11, 11.5, 12} {
		d = plan(t0.Add(time.Duration(i)*time.Minute), load, false)
	}
	if len(d.Notices) != 1 || len(d.Victims) != 0 || d.Plan.Nodes["n2"].State != api.HarvestOpen {
		t.Fatalf("before the drain: notices %+v, victims %v, n2 %+v; want train noticed, nothing evicted, n2 open", d.Notices, names(d.Victims), d.Plan.Nodes["n2"])
	}
	d = plan(t0.Add(5*time.Minute), 12, true)
	if got, want := names(d.Victims), []string{"cordoned", "idle-node", "train"}; !reflect.DeepEqual(slices.Sorted(slices.Values(got)), want) {
		t.Fatalf("victims %v, want every lent pod %v", got, want)
	}
	if len(d.Notices) != 0 {
		t.Errorf("notices %+v during a drain, want none: every pod goes now", d.Notices)
	}
	for _, n := range nodes {
		np := d.Plan.Nodes[n.Name]
		if !n.InPool {
			if np != (harvest.NodePlan{Verdict: harvest.Closed}) {
				t.Errorf("%s, outside the pool: %+v, want closed and owing nothing: its pod was never lent", n.Name, np)
			}
			continue
		}
		wantState := api.HarvestClosed
		if n.LentGPUs > 0 {
			wantState = api.HarvestDraining
		}
		if np.HarvestableGPUs != 0 || np.ReclaimGPUs != n.LentGPUs || np.State != wantState {
			t.Errorf("%s: %+v, want %s, nothing harvestable, all %d lent GPUs owed", n.Name, np, wantState, n.LentGPUs)
		}
	}
}

// planHalfLent plans the node n1 with p, at the load given to
// serving/chat's one replica (target 16 requests): 4 of n1's 8 GPUs serve
// it, and 4 are lent to lent.
func planHalfLent(p *Planner, lent reclaim.Candidate) func(at time.Time, load float64) Decision {
	nodes := []harvest.Node{{Name: "n1", InPool: true, Schedulable: true, AllocatableGPUs: 8, ServingGPUs: 4, LentGPUs: 4, HostsInference: true}}
	return func(at time.Time, load float64) Decision {
		return p.Plan(Observation{Now: at, Nodes: nodes, Published: map[string]int64{"n1": 4},
			Services:   []Service{{Key: "serving/chat", Declared: true, Replicas: replicas(1, load, 0), Settings: demand.Settings{TargetLoad: 16}}},
			BestEffort: func(map[string]bool) []reclaim.Candidate { return []reclaim.Candidate{lent} }})
	}
}

// A notice's time found to have moved by less than the step it is found to
// (a minute here) stays as given: the time the pod was told is the time that
// holds it.
func TestNoticeTimeMovesOnlyByWholeSteps(t *testing.T) {
	plan := planHalfLent(New(Config{Horizon: 15 * time.Minute, ReclaimLead: 5 * time.Minute, Margin: -1}), job("train", "n1", 4, time.Hour))
	var d Decision
	for i, load := range []float64{10, 10.5, 11, 11.5, 12} {
		d = plan(t0.Add(time.Duration(i)*time.Minute), load)
	}
	last := t0.Add(4 * time.Minute)
	if len(d.Notices) != 1 || !d.Notices[0].At.Equal(last.Add(4*time.Minute)) {
		t.Fatalf("notices %+v, want train's at %v", d.Notices, last.Add(4*time.Minute))
	}
	// Half a minute on, on the same trend, the time found is 4 minutes on
	// again: 30 s later than given, so the notice keeps its time.
	d = plan(last.Add(30*time.Second), 12.25)
	if len(d.Notices) != 1 || !d.Notices[0].At.Equal(last.Add(4*time.Minute)) {
		t.Fatalf("notices %+v, want train's still at %v", d.Notices, last.Add(4*time.Minute))
	}
}

// Notice times fall on rounds: with rounds every 30 s or 40 s (a period
// that does not divide the minute's step), a pod whose GPUs the lead needs
// from 8m07s (rounds planned 7 s past the minute) is told the first round
// at or after it, and goes in that round: when it would have gone with its
// time as found, never later, and it reads that time to the second.
func TestNoticeTimesFallOnRounds(t *testing.T) {
	found := t0.Add(8*time.Minute + 7*time.Second) // as in TestPlanEvictsJustInTimeAfterANotice, 4 minutes on
	for _, period := range []time.Duration{0, 30 * time.Second, 40 * time.Second} {
		plan := planHalfLent(New(Config{Horizon: 15 * time.Minute, ReclaimLead: 5 * time.Minute, Margin: -1, RoundPeriod: period}), job("train", "n1", 4, time.Hour))
		var d Decision
		for i, load := range []float64{10, 10.5, 11, 11.5, 12} {
			d = plan(t0.Add(time.Duration(i)*time.Minute+7*time.Second), load)
		}
		want := found
		if period > 0 {
			want = found.Truncate(period).Add(period)
		}
		if len(d.Notices) != 1 || !d.Notices[0].At.Equal(want) {
			t.Fatalf("rounds every %v: notices %+v, want train's at %v", period, d.Notices, want)
		}
		// With the lead needing the GPUs and the load now not: held in the
		// round before its time, evicted in the round at it, 2 ms late.
		before := want.Add(-time.Second)
		if period > 0 {
			before = want.Add(-period).Add(2 * time.Millisecond)
		}
		if d = plan(before, 15); len(d.Victims) != 0 {
			t.Fatalf("rounds every %v: victims %v at %v, before the noticed time %v", period, names(d.Victims), before, want)
		}
		if d = plan(want.Add(2*time.Millisecond), 15); !reflect.DeepEqual(names(d.Victims), []string{"train"}) {
			t.Fatalf("rounds every %v: victims %v in the round at %v, want train", period, names(d.Victims), want)
		}
	}
}

// Beyond the horizon, out to the notice horizon, the forecast warns without
// closing anything: a node whose lent GPUs only the hour's forecast needs
// keeps lending, its pods get notices with the time found to five minutes,
// and that time moves only by whole such steps.
func TestNoticeHorizonWarnsBeyondTheHorizon(t *testing.T) {
	lent := job("train", "n1", 4, time.Hour)
	run := func(noticeHorizon time.Duration) (*Planner, func(time.Time, float64) Decision) {
		p := New(Config{Horizon: 15 * time.Minute, ReclaimLead: 5 * time.Minute, NoticeHorizon: noticeHorizon, Margin: -1})
		return p, planHalfLent(p, lent)
	}
	// An eighth of a request a minute from 10: 10.5 now, 12.4 at the
	// horizon's end, 18 at the hour's: a second replica within the hour only.
	loads := []float64{10, 10.125, 10.25, 10.375, 10.5}
	for _, nh := range []time.Duration{15 * time.Minute, time.Hour} {
		_, plan := run(nh)
		var d Decision
		for i, load := range loads {
			d = plan(t0.Add(time.Duration(i)*time.Minute), load)
		}
		if np := d.Plan.Nodes["n1"]; np.State != api.HarvestOpen || np.HarvestableGPUs != 4 || len(d.Victims) != 0 {
			t.Fatalf("notice horizon %v: n1 %+v, victims %v: want it lending on, nothing evicted", nh, np, names(d.Victims))
		}
		if nh == 15*time.Minute {
			if len(d.Notices) != 0 {
				t.Fatalf("notice horizon %v: notices %+v, want none", nh, d.Notices)
			}
			continue
		}
		// Noticed two minutes in (the trend needs three samples): the lead's
		// window first passes 16 requests 46 minutes on (10.25 + 0.125 x 51 =
		// 16.6), the first 5-minute step beyond the horizon that does. The
		// next rounds find it up to 4 minutes earlier: under the step, so it
		// stays as given.
		if len(d.Notices) != 1 || d.Notices[0].Pod.Name != "train" || !d.Notices[0].At.Equal(t0.Add(48*time.Minute)) {
			t.Fatalf("notices %+v, want train's at %v", d.Notices, t0.Add(48*time.Minute))
		}
		// Within the horizon the time is found to the minute again: on the
		// same trend, 40 minutes in (15 requests) the lead's window passes 16
		// 4 minutes on, and the node has stopped lending.
		for m := 5; m <= 40; m++ {
			d = plan(t0.Add(time.Duration(m)*time.Minute), 10+0.125*float64(m))
		}
		if len(d.Notices) != 1 || !d.Notices[0].At.Equal(t0.Add(44*time.Minute)) || len(d.Victims) != 0 {
			t.Fatalf("notices %+v, victims %v: want train's at %v, not evicted yet", d.Notices, names(d.Victims), t0.Add(44*time.Minute))
		}
		if st := d.Plan.Nodes["n1"].State; st != api.HarvestDraining {
			t.Fatalf("n1 %v, want draining within the horizon", st)
		}
	}
}

// A noticed pod is evicted before its notice's time when inference already
// needs its node's GPUs: the load now, not only the forecast.
func TestPlanEvictsBeforeTheNoticeWhenInferenceWaits(t *testing.T) {
	nodes := []harvest.Node{{Name: "n1", InPool: true, Schedulable: true, AllocatableGPUs: 8, ServingGPUs: 4, LentGPUs: 4, HostsInference: true}}
	p := New(Config{Horizon: 15 * time.Minute, ReclaimLead: 5 * time.Minute, Margin: -1})
	lent := job("train", "n1", 4, time.Hour)
	plan := func(at time.Time, running, waiting float64) Decision {
		return p.Plan(Observation{Now: at, Nodes: nodes, Published: map[string]int64{"n1": 4},
			Services:   []Service{{Key: "serving/chat", Declared: true, Replicas: replicas(1, running, waiting), Settings: demand.Settings{TargetLoad: 16}}},
			BestEffort: func(map[string]bool) []reclaim.Candidate { return []reclaim.Candidate{lent} }})
	}
	var d Decision
	for i, load := range []float64{10, 10.5, 11, 11.5, 12} {
		d = plan(t0.Add(time.Duration(i)*time.Minute), load, 0)
	}
	if len(d.Notices) != 1 {
		t.Fatalf("notices %+v, want one", d.Notices)
	}
	// Requests queue now: 16 running and 8 waiting need a second replica.
	d = plan(t0.Add(4*time.Minute+10*time.Second), 16, 8)
	if got := names(d.Victims); !reflect.DeepEqual(got, []string{"train"}) {
		t.Fatalf("victims %v, want train at once: inference is waiting", got)
	}
}

func TestPlanScalesAutoscaledServices(t *testing.T) {
	p := New(Config{Autoscale: autoscale.Config{StableWindow: time.Minute, PanicWindow: 10 * time.Second}})
	svc := Service{Key: "s", Declared: true, Replicas: replicas(1, 16, 48), Settings: demand.Settings{TargetLoad: 16},
		Autoscale: &Autoscaled{Replicas: 1, Limits: autoscale.Limits{Min: 1, Max: 3}}}
	d := p.Plan(Observation{Now: t0, Services: []Service{svc}})
	if len(d.Scale) != 1 || d.Scale[0].From != 1 || d.Scale[0].Decision.Replicas != 3 {
		t.Fatalf("scale %+v: want 1 -> 3 (64 requests / 16 = 4, capped at the limit 3)", d.Scale)
	}
	svc.Autoscale = nil
	if d := p.Plan(Observation{Now: t0.Add(time.Second), Services: []Service{svc}}); len(d.Scale) != 0 {
		t.Fatalf("scale %+v for a service that is not autoscaled", d.Scale)
	}
}

func TestStoredProfileIsReadOnceAndSavedWhenDue(t *testing.T) {
	var learned demand.Profile
	learned.Observe(t0.Add(-7*24*time.Hour), 100) // last week, this hour: 100 requests
	raw, err := learned.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	p := New(Config{ProfileWriteInterval: 5 * time.Minute})
	obs := func(at time.Time, stored string, load float64) Observation {
		return Observation{Now: at, Services: []Service{{Key: "s", Declared: true, StoredProfile: stored,
			Replicas: replicas(1, load, 0), Settings: demand.Settings{TargetLoad: 16}}}}
	}
	d := p.Plan(obs(t0, string(raw), 1))
	if d.Services[0].Forecast.Profile != 100 || len(d.Services[0].Problems) != 0 {
		t.Fatalf("forecast %+v problems %v: want the stored profile's peak 100", d.Services[0].Forecast, d.Services[0].Problems)
	}
	// A later, unreadable value is not read again: the profile is the planner's now.
	if d := p.Plan(obs(t0.Add(time.Minute), "{broken", 1)); d.Services[0].Forecast.Profile != 100 || len(d.Services[0].Problems) != 0 {
		t.Fatalf("forecast %+v problems %v after the stored value changed", d.Services[0].Forecast, d.Services[0].Problems)
	}
	if due := p.ProfilesDue(t0.Add(time.Minute), false); len(due) != 1 {
		t.Fatalf("due %v: the profile learned since it was read was never saved", due)
	} else {
		p.ProfileSaved(due[0], t0.Add(time.Minute))
	}
	p.Plan(obs(t0.Add(2*time.Minute), "", 9)) // a new peak this hour
	if due := p.ProfilesDue(t0.Add(2*time.Minute), false); len(due) != 0 {
		t.Fatalf("due %v a minute after a save", due)
	}
	if due := p.ProfilesDue(t0.Add(2*time.Minute), true); len(due) != 1 || due[0].Key != "s" {
		t.Fatalf("forced: due %v, want s (it changed since the save)", due)
	}

	fresh := New(Config{})
	if d := fresh.Plan(obs(t0, "{broken", 1)); len(d.Services[0].Problems) != 1 || !strings.Contains(d.Services[0].Problems[0], "unreadable") {
		t.Fatalf("problems %v for an unreadable stored profile", d.Services[0].Problems)
	}
}

// A service that is no longer observed is forgotten: seen again, it starts afresh.
func TestServicesNotObservedAreForgotten(t *testing.T) {
	p := New(Config{})
	s := Service{Key: "s", Replicas: replicas(1, 50, 0), Settings: demand.Settings{TargetLoad: 16}}
	p.Plan(Observation{Now: t0, Services: []Service{s}})
	p.Plan(Observation{Now: t0.Add(time.Minute)})
	if len(p.services) != 0 {
		t.Fatalf("services remembered: %v", p.services)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, bad := range []Config{{Horizon: -1}, {ReclaimLead: -1}, {OpenAfter: -1}, {OpenAfterBackoff: -1}, {TrendWindow: -1}, {NoticeHorizon: -1}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

// FuzzPlanBoundsForgedLoad feeds one round a service whose replicas report
// any load at all (the seeds: 0, 1e6, 1e20, 1e300, NaN, Inf, negative). The
// headroom kept never exceeds what the pool's free GPUs could hold, nothing
// panics, and an unreadable load keeps room (fails closed) rather than lending.
func FuzzPlanBoundsForgedLoad(f *testing.F) {
	for _, v := range []float64{0, 1, 1e6, 1e20, 1e300, math.MaxFloat64, math.Inf(1), math.NaN(), -5} {
		f.Add(v, v, v)
	}
	f.Fuzz(func(t *testing.T, running, waiting, kv float64) {
		nodes := []harvest.Node{
			{Name: "n1", InPool: true, Schedulable: true, AllocatableGPUs: 8, ServingGPUs: 4, HostsInference: true},
			{Name: "n2", InPool: true, Schedulable: true, AllocatableGPUs: 8, LentGPUs: 2},
		}
		p := New(Config{})
		for _, metric := range []demand.Metric{demand.Requests, demand.KVCache} {
			d := p.Plan(Observation{Now: t0, Nodes: nodes, Published: map[string]int64{"n2": 8},
				Services: []Service{{Key: "tenant/forged", Declared: true, Settings: demand.Settings{Metric: metric, TargetLoad: 0.8},
					Replicas: []demand.Replica{{Known: true, Running: running, Waiting: waiting, KVCache: kv, GPUs: 4}}}},
				BestEffort: func(map[string]bool) []reclaim.Candidate { return nil }})
			var kept int64
			for _, np := range d.Plan.Nodes {
				kept += np.HeadroomGPUs
				if np.HarvestableGPUs < 0 || np.ReclaimGPUs < 0 {
					t.Fatalf("plan %+v", d.Plan.Nodes)
				}
			}
			if free := int64(4 + 8); kept > free {
				t.Fatalf("headroom %d GPUs on a pool with %d free", kept, free)
			}
			if need := d.Services[0].Need; need.Needed > 4 || need.HeadroomReplicas < 0 {
				t.Fatalf("needed %d replicas of 4 GPUs on a pool that holds 4", need.Needed)
			}
		}
	})
}

// A pod counts as prepared once it checkpointed at or after the planner
// first noticed it; one not noticed, or whose checkpoint is older, does not.
// It counts as saved once its noticed time has come, if that checkpoint was
// saved for it: within a minute before it (savedWithin), and not over two
// minutes before the eviction.
func TestMarkPrepared(t *testing.T) {
	p := New(Config{})
	since := t0.Add(-time.Minute)
	checkpointed := func(c reclaim.Candidate, at time.Time) reclaim.Candidate {
		c.Pod.Annotations = map[string]string{api.AnnotationLastCheckpoint: at.Format(time.RFC3339)}
		return c
	}
	cs := []reclaim.Candidate{
		checkpointed(job("after", "n1", 2, time.Hour), since.Add(10*time.Second)),
		checkpointed(job("before", "n1", 2, time.Hour), since.Add(-10*time.Second)),
		checkpointed(job("unnoticed", "n1", 2, time.Hour), since.Add(10*time.Second)),
		job("never", "n1", 2, time.Hour),
	}
	p.given = map[types.UID]Given{}
	for _, name := range []string{"after", "before", "never"} {
		p.given[types.UID(name)] = Given{At: t0.Add(time.Minute), Since: since}
	}
	p.markPrepared(cs, t0)
	for _, c := range cs {
		if want := c.Pod.Name == "after"; c.Prepared != want {
			t.Errorf("%s prepared = %v, want %v", c.Pod.Name, c.Prepared, want)
		}
		if c.Saved {
			t.Errorf("%s saved before its noticed time", c.Pod.Name)
		}
	}

	at := t0.Add(time.Minute + 500*time.Millisecond) // a pod reads it to the second
	for _, tt := range []struct {
		name       string
		checkpoint time.Time
		now        time.Time
		want       bool
	}{
		{"saved for the noticed time, evicted then", at.Add(-20 * time.Second), at, true},
		{"evicted a round after it", at.Add(-20 * time.Second), at.Add(30 * time.Second), true},
		{"evicted rounds after it (rounds failed meanwhile)", at.Add(-20 * time.Second), at.Add(5 * time.Minute), false},
		{"saved a minute before the time as told, to the second", at.Truncate(time.Second).Add(-time.Minute), at, true},
		{"evicted before it: the load came sooner", at.Add(-20 * time.Second), at.Add(-time.Second), false},
		{"checkpointed after the notice, but long before its time", since.Add(10 * time.Second), at, false},
	} {
		c := checkpointed(job("j", "n1", 2, time.Hour), tt.checkpoint)
		p.given = map[types.UID]Given{"j": {At: at, Since: since}}
		cs := []reclaim.Candidate{c}
		p.markPrepared(cs, tt.now)
		if !cs[0].Prepared || cs[0].Saved != tt.want {
			t.Errorf("%s: prepared %v saved %v, want prepared and saved %v", tt.name, cs[0].Prepared, cs[0].Saved, tt.want)
		}
	}
}

// TestAvailability: a service whose learned profile peaks from 12:00 needs
// both nodes' lendable GPUs then. At 10:00 each open node is forecast to be
// needed in about two hours, and the planner gives no survival chance for a
// span before it has judged a forecast over it: the hour's from 11:00, the
// four hours' from 14:00. Rounds every five minutes until 19:00 judge the
// chances given: of the hour's, those given before the peak lost their GPUs
// and those given after it kept them; the four hours' were first given after
// the peak, and all kept them.
func TestAvailability(t *testing.T) {
	nodes := []harvest.Node{
		{Name: "n1", InPool: true, Schedulable: true, AllocatableGPUs: 8, ServingGPUs: 4, HostsInference: true},
		{Name: "n2", InPool: true, Schedulable: true, AllocatableGPUs: 8},
	}
	// Learned by hour (a version 1 profile: each hour is read into its slots).
	peak := t0.Add(2 * time.Hour)
	stored := hourlyProfile(map[time.Time]float64{t0: 10, peak: 40}) // at the peak 3 replicas: 2 more
	p := New(Config{OpenAfter: 0, Margin: -1})
	obs := func(now time.Time) Observation {
		return Observation{Now: now, Nodes: nodes,
			Services: []Service{{Key: "serving/chat", Declared: true, StoredProfile: stored, Replicas: replicas(1, 10, 0),
				Settings: demand.Settings{TargetLoad: 16}}}}
	}
	given := func(d Decision, when string, want [2]bool) {
		t.Helper()
		if len(d.Availability) != 2 {
			t.Fatalf("%s: availability %+v, want both nodes", when, d.Availability)
		}
		for _, av := range d.Availability {
			for h, p := range av.Survive {
				if learned := p != harvest.NotLearned; learned != want[h] || learned && (p < 0 || p > 1) {
					t.Errorf("%s: %+v: want a chance over %v given: %v", when, av, availability.SurvivalHorizons[h], want[h])
				}
			}
		}
	}
	d := p.Plan(obs(t0))
	given(d, "10:00", [2]bool{false, false})
	for _, av := range d.Availability {
		if av.For < 90*time.Minute || av.For > 2*time.Hour {
			t.Fatalf("%+v: want needed in about 2h", av)
		}
	}
	var at1105 Decision
	for now := t0.Add(availability.Every); !now.After(t0.Add(9 * time.Hour)); now = now.Add(availability.Every) {
		d := p.Plan(obs(now))
		switch now {
		case t0.Add(65 * time.Minute):
			at1105 = d
		case t0.Add(5 * time.Hour):
			given(d, "15:00", [2]bool{true, true})
		}
	}
	given(at1105, "11:05", [2]bool{true, false})
	cal := p.Calibration()
	frac := func(days [][]availability.CalibrationBucket) (hours, survived float64) {
		for _, b := range availability.SumCalibration(days) {
			hours += b.GPUHours
			survived += b.Survived * b.GPUHours
		}
		return hours, survived / hours
	}
	if h, s := frac(cal[1]); h == 0 || s != 1 {
		t.Errorf("4h: %.1f GPU-h judged, %.2f survived; want some, all survived", h, s)
	}
	if h, s := frac(cal[0]); h == 0 || s <= 0 || s >= 1 {
		t.Errorf("1h: %.1f GPU-h judged, %.2f survived; want some survived and some not", h, s)
	}
}

// A service one request below needing a second replica: one node is needed
// (within either span) should its load be 10% above the forecast, the other
// not even at twice the forecast. The load then rises past the replica, and
// the first node loses its GPUs within the hour while the other keeps them:
// the record learns each apart, and gives a node at 110% a low chance and
// one needed at no level a high one.
func TestSurvivalIsLearnedByHowFarTheLoadsStandFromNeedingTheNode(t *testing.T) {
	p := New(Config{OpenAfter: 0, Margin: -1})
	obs := func(now time.Time, load float64) Observation {
		return Observation{Now: now, Nodes: []harvest.Node{
			{Name: "n1", InPool: true, Schedulable: true, AllocatableGPUs: 8},
			{Name: "n2", InPool: true, Schedulable: true, AllocatableGPUs: 8},
		}, Services: []Service{{Key: "serving/chat", Declared: true, Replicas: replicas(1, load, 0), Settings: demand.Settings{TargetLoad: 16}}}}
	}
	p.Plan(obs(t0, 15))
	// survival is the learned chance at a level (a percentage of the
	// forecast; 0: none) over the hour, for GPUs the forecast keeps.
	survival := func(percent int) (given int64, chance float64) {
		for _, c := range p.avail.Survival() {
			if c.NeededAtPercent == percent {
				return c.Given[0], float64(c.Survived[0]+1) / float64(c.Given[0]+1)
			}
		}
		return 0, 1
	}
	for now := t0.Add(availability.Every); !now.After(t0.Add(65 * time.Minute)); now = now.Add(availability.Every) {
		load := 15.0
		if !now.Before(t0.Add(30 * time.Minute)) {
			load = 17
		}
		p.Plan(obs(now, load))
	}
	// The round at 10:00 gave each node its level: its 8 GPUs, judged at 11:00.
	if given, got := survival(110); given < 8 || got > 0.2 {
		t.Errorf("an hour's survival at 110%%: %.2f of %d GPUs, want the near node's fate (lost)", got, given)
	}
	if given, got := survival(0); given < 8 || got < 0.9 {
		t.Errorf("an hour's survival at no level: %.2f of %d GPUs, want the far node's fate (kept)", got, given)
	}
	for _, c := range p.avail.Survival() {
		if c.NeededAtPercent != 110 && c.NeededAtPercent != 0 {
			t.Errorf("GPUs learned at %d%%: want each node at its level, 110%% and none", c.NeededAtPercent)
		}
	}
}

// Harvest windows that close in two hours make that the node's time, and
// its survival over four hours certain: none (while the hour's, with no
// forecast judged yet, is not given).
func TestAvailabilityKnowsTheWindowsClose(t *testing.T) {
	windows, err := harvest.ParseWindows("00:00-12:00", "UTC")
	if err != nil {
		t.Fatal(err)
	}
	p := New(Config{OpenAfter: 0, Margin: -1, Windows: windows})
	d := p.Plan(Observation{Now: t0, Nodes: []harvest.Node{{Name: "n1", InPool: true, Schedulable: true, AllocatableGPUs: 8}},
		Services: []Service{{Key: "serving/chat", Declared: true, Replicas: replicas(1, 1, 0), Settings: demand.Settings{TargetLoad: 16, GPUsPerReplica: 4}}}})
	if len(d.Availability) != 1 {
		t.Fatalf("availability %+v, want n1's", d.Availability)
	}
	if av := d.Availability[0]; av.For != 2*time.Hour || av.Survive != [2]float64{harvest.NotLearned, 0} {
		t.Fatalf("%+v: want 2h, an hour not yet learned, four hours certainly not", av)
	}
}

// Two services that took turns at their peak through a quarter-hour last
// week: each kept room for its own peak, but together they never needed
// more than one of the peaks at once. The pool's learned profile scales
// their room down to that, once it is learned for every slot the horizon
// touches and only while every service's load is whole; it survives a
// restart through PoolProfile and RestorePoolProfile.
func TestPoolProfileKeepsRoomForThePeaksTheServicesReachTogether(t *testing.T) {
	obs := func(at time.Time, loads [2]float64, stored [2]string) Observation {
		o := Observation{Now: at, Published: map[string]int64{}, Nodes: []harvest.Node{
			{Name: "n1", InPool: true, Schedulable: true, AllocatableGPUs: 8, ServingGPUs: 8, HostsInference: true},
			{Name: "n2", InPool: true, Schedulable: true, AllocatableGPUs: 8},
		}}
		for i, key := range []string{"serving/a", "serving/b"} {
			o.Services = append(o.Services, Service{Key: key, Declared: true, StoredProfile: stored[i],
				Replicas: replicas(1, loads[i], 0), Settings: demand.Settings{TargetLoad: 16}})
		}
		return o
	}
	// Last week, a round a minute: a at 32 requests while b idles, then the
	// other way round, in two quarter-hours, seen whole from the minute
	// before; a third quarter-hour ends the second.
	week := 7 * 24 * time.Hour
	learn := New(Config{Margin: -1})
	for m := -1; m <= 30; m++ {
		loads := [2]float64{32, 0}
		if m < 0 || m%15 >= 7 {
			loads = [2]float64{0, 32}
		}
		learn.Plan(obs(t0.Add(time.Duration(m)*time.Minute-week), loads, [2]string{}))
	}
	var stored [2]string
	for i, w := range learn.ProfilesDue(t0, true) {
		stored[i] = w.JSON
	}
	pool := learn.Memory(t0).PoolProfile
	var ratios demand.PoolProfile
	if err := json.Unmarshal([]byte(pool), &ratios); err != nil || ratios.Learned() != 2 || ratios.Ratio[demand.SlotOfWeek(t0)] != 0.5 {
		t.Fatalf("pool profile %s (%v): want a ratio of 0.5 learned for two slots", pool, err)
	}

	spare := func(cfg Config, restore string, loads [2]float64, unknown bool) []int {
		p := New(cfg)
		if err := p.Restore(Memory{PoolProfile: restore}); err != nil {
			t.Fatal(err)
		}
		o := obs(t0, loads, stored)
		if unknown {
			o.Services[0].Replicas = append(o.Services[0].Replicas, demand.Replica{GPUs: 4})
		}
		var out []int
		for _, s := range p.Plan(o).Services {
			out = append(out, s.Need.HeadroomReplicas)
		}
		return out
	}
	// Each at 8 requests (1 GPU's worth of 4) with a learned peak of 32: room
	// for one more replica each (6 GPUs' worth of room each) as if both
	// peaked at once. The pool peaked at half the sum of the peaks (8 GPUs'
	// worth), 4 above the load now: a third of each room, 16 requests, which
	// the replica each runs holds. The room is the pool's: when a takes its
	// turn at 32, b's replica stands idle until it is scaled in, and a's
	// second replica waits for lent GPUs, within the reclaim budget.
	both := [2]float64{8, 8}
	if got := spare(Config{Margin: -1}, pool, both, false); !reflect.DeepEqual(got, []int{0, 0}) {
		t.Errorf("pooled: headroom replicas %v, want none", got)
	}
	if got := spare(Config{Margin: -1, ProfilePerService: true}, pool, both, false); !reflect.DeepEqual(got, []int{1, 1}) {
		t.Errorf("per service: headroom replicas %v, want one each", got)
	}
	if got := spare(Config{Margin: -1}, "", both, false); !reflect.DeepEqual(got, []int{1, 1}) {
		t.Errorf("pool profile not learned: headroom replicas %v, want one each", got)
	}
	// a's second replica has no metrics: the pool's load now is not known,
	// and b keeps room for its own peak.
	if got := spare(Config{Margin: -1}, pool, both, true); got[1] != 1 {
		t.Errorf("a service's load unknown: headroom replicas %v, want one for serving/b", got)
	}

	p := New(Config{})
	for _, bad := range []string{"{", `{"v":2}`, `{"v":1,"ratio":[0.5],"weeks":[1]}`,
		strings.Replace(pool, "0.5", "1.5", 1), strings.Replace(pool, `"weeks":[`, `"weeks":[0,`, 1)} {
		if err := p.Restore(Memory{PoolProfile: bad}); err == nil {
			t.Errorf("Restore of pool profile %.60q took it", bad)
		}
	}
	if got := p.Memory(t0).PoolProfile; got != `{"v":1}` {
		t.Errorf("pool profile %s after refused restores, want nothing learned", got)
	}
}

// pooled scales the services' rooms above their loads, all alike, to what
// the pool is expected to rise by, and no further than the largest
// service's own peak lets it.
func TestPooledScalesTheRoomsToThePoolsRise(t *testing.T) {
	slot := demand.SlotOfWeek(t0)
	learned := func(peak float64) *demand.Profile {
		var p demand.Profile
		for _, s := range []int{slot, slot + 1} {
			p.Peak[s], p.Weeks[s] = peak, 1
		}
		return &p
	}
	service := func(key string, load, peak float64) ServiceDecision {
		// Replicas of 4 GPUs at a target of 16: a GPU per 4 load.
		return ServiceDecision{Key: key, observed: demand.Observed{Load: load, Complete: true}, gpusPerLoad: 0.25, profile: learned(peak)}
	}
	profiles := func(p *Planner, services []ServiceDecision) []float64 {
		forecasts := make([]demand.Forecast, len(services))
		for i, s := range services {
			if s.profile != nil {
				forecasts[i].Profile, _ = s.profile.PeakOver(t0, 15*time.Minute)
			}
		}
		v := &view{p: p, now: t0, services: services}
		v.pool(forecasts, whatIf{from: t0, length: 15 * time.Minute})
		out := make([]float64, len(forecasts))
		for i, f := range forecasts {
			out[i] = f.Profile
		}
		return out
	}
	withRatio := func(r float64) *Planner {
		p := New(Config{})
		for _, s := range []int{slot, slot + 1} {
			p.pool.Ratio[s], p.pool.Weeks[s] = r, 1
		}
		return p
	}
	// Idle, with learned peaks of 16, 8 and 8 GPUs: rooms of 32 GPUs. The
	// pool is expected to reach half the sum, 16: half of every room.
	idle := []ServiceDecision{service("a", 0, 64), service("b", 0, 32), service("c", 0, 32)}
	for _, tt := range []struct {
		name     string
		p        *Planner
		services []ServiceDecision
		want     []float64
	}{
		{"idle", withRatio(0.5), idle, []float64{32, 16, 16}},
		// A ratio of a quarter would expect 8 GPUs; a alone peaks at 16.
		{"no lower than the largest peak", withRatio(0.25), idle, []float64{32, 16, 16}},
		// At 8 GPUs each, 24 in all, the pool is past its learned peak:
		// no room for any profile (a's 32 requests are its load).
		{"past the pool's peak", withRatio(0.5), []ServiceDecision{service("a", 32, 64), service("b", 32, 32), service("c", 32, 32)}, []float64{32, 32, 32}},
		{"a newcomer the pool never saw", withRatio(0.5), append(slices.Clone(idle), ServiceDecision{Key: "d", observed: demand.Observed{Load: 40, Complete: true}, gpusPerLoad: 0.25}), []float64{32, 16, 16, 0}},
		{"a load unknown", withRatio(0.5), append(slices.Clone(idle), ServiceDecision{Key: "d", gpusPerLoad: 0.25}), []float64{64, 32, 32, 0}},
		{"per service", New(Config{ProfilePerService: true}), idle, []float64{64, 32, 32}},
		{"not learned", New(Config{}), idle, []float64{64, 32, 32}},
	} {
		if got := profiles(tt.p, tt.services); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: profiles %v, want %v", tt.name, got, tt.want)
		}
	}
}

// What a restart reads back can move the planner only so far: a stored
// pool profile whose ratio is near 0 keeps room for at least half the
// services' peaks until the slot is seen again (less lending while it is
// relearned), and a survival record of 2^40 GPUs weighs, after the first
// round, no more than the pool's own forecasts could.
func TestRestoredMemoryIsBounded(t *testing.T) {
	var stored demand.PoolProfile
	slot := demand.SlotOfWeek(t0)
	stored.Ratio[slot], stored.Weeks[slot] = 0.01, 1000
	raw, err := json.Marshal(stored)
	if err != nil {
		t.Fatal(err)
	}
	huge := int64(1 << 40)
	p := New(Config{})
	if err := p.Restore(Memory{PoolProfile: string(raw), Survival: []availability.SurvivalCount{
		{NeededAtPercent: 110, Judged: availability.Judged{Given: [2]int64{huge, huge}, Survived: [2]int64{huge, huge}}}}}); err != nil {
		t.Fatal(err)
	}
	peaks := func(int) (float64, float64) { return 32, 8 } // four services peaking at 8 GPUs
	peak, ok := p.pool.PeakOver(t0, time.Minute, peaks)
	if !ok || peak < 16 {
		t.Errorf("a restored ratio of 0.01: room for a pool peak of %v GPUs of the 32 the services' peaks add up to, want at least 16", peak)
	}
	p.Plan(Observation{Now: t0, Published: map[string]int64{}, Nodes: []harvest.Node{
		{Name: "n1", InPool: true, Schedulable: true, AllocatableGPUs: 8},
		{Name: "n2", InPool: true, Schedulable: true, AllocatableGPUs: 8}}})
	most := int64(16 * 832)
	for _, c := range p.Memory(t0).Survival {
		for h, given := range c.Given {
			if given > most {
				t.Errorf("after a round of a 16-GPU pool, the restored record holds %d GPUs over span %d, want at most %d", given, h, most)
			}
		}
	}
}
