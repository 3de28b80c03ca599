package harvest

import (
	"strings"
	"testing"
	"time"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

func TestWindowsAcrossMidnight(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skipf("no tz database: %v", err)
	}
	night, err := ParseWindows("20:00-08:00", "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	two, err := ParseWindows("22:30-02:00, 12:00-13:00", "")
	if err != nil {
		t.Fatal(err)
	}
	at := func(loc *time.Location, day, h, m int) time.Time { return time.Date(2026, 3, day, h, m, 0, 0, loc) }
	tests := []struct {
		name string
		w    Windows
		at   time.Time
		want bool
	}{
		{"continuous by default", Windows{}, at(time.UTC, 2, 12, 0), true},
		{"evening start is inside", night, at(berlin, 2, 20, 0), true},
		{"just before start is outside", night, at(berlin, 2, 19, 59), false},
		{"after midnight is inside", night, at(berlin, 3, 0, 30), true},
		{"07:59 is inside", night, at(berlin, 3, 7, 59), true},
		{"the end is exclusive", night, at(berlin, 3, 8, 0), false},
		{"noon is outside", night, at(berlin, 3, 12, 0), false},
		{"the zone applies: 19:30 UTC is 20:30 in Berlin in March", night, at(time.UTC, 2, 19, 30), true},
		{"second span, across midnight", two, at(time.UTC, 2, 1, 59), true},
		{"between spans", two, at(time.UTC, 2, 2, 0), false},
		{"second span by day", two, at(time.UTC, 2, 12, 30), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.w.Open(tt.at); got != tt.want {
				t.Fatalf("Open(%s) for %s = %v, want %v", tt.at, tt.w, got, tt.want)
			}
		})
	}
	for _, bad := range []struct{ spec, zone, want string }{
		{"20:00", "", "want HH:MM-HH:MM"},
		{"25:00-08:00", "", "is not a time of day"},
		{"20:00-8", "", "is not a time of day"},
		{"20:00-08:00", "Mars/Olympus", "time zone"},
	} {
		if _, err := ParseWindows(bad.spec, bad.zone); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseWindows(%q, %q) error = %v, want one containing %q", bad.spec, bad.zone, err, bad.want)
		}
	}
}

// onePoolNode is the one pool node "n" of the gate tests, with 8 GPUs, lent of them lent.
func onePoolNode(lent int64) []Node {
	return []Node{{Name: "n", InPool: true, Schedulable: true, AllocatableGPUs: 8, LentGPUs: lent}}
}

// gatePlan is a plan that offers harvestable GPUs on "n".
func gatePlan(harvestable int64) Plan {
	return Plan{Nodes: map[string]NodePlan{"n": {Verdict: Verdict{State: api.HarvestOpen, HarvestableGPUs: harvestable}}}}
}

// gateStep is one round of a gate test and the verdict it must give.
type gateStep struct {
	after     time.Duration // since t0
	planned   int64
	lent      int64
	wantGPUs  int64
	wantState api.HarvestState
}

func TestGateHysteresis(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		openAfter time.Duration
		published int64
		steps     []gateStep
	}{
		{
			name: "a fresh node opens only after OpenAfter of spare capacity", openAfter: time.Minute,
			steps: []gateStep{
				{0, 8, 0, 0, api.HarvestClosed},
				{30 * time.Second, 8, 0, 0, api.HarvestClosed},
				{59 * time.Second, 8, 0, 0, api.HarvestClosed},
				{61 * time.Second, 8, 0, 8, api.HarvestOpen},
			},
		},
		{
			name: "draining starts at once, reopening waits again", openAfter: time.Minute, published: 8,
			steps: []gateStep{
				{0, 8, 8, 8, api.HarvestOpen},
				{10 * time.Second, 4, 8, 4, api.HarvestDraining},
				{20 * time.Second, 8, 4, 4, api.HarvestOpen},
				{79 * time.Second, 8, 4, 4, api.HarvestOpen}, // spare again only since 20s
				{80 * time.Second, 8, 4, 8, api.HarvestOpen},
			},
		},
		{
			name: "a flapping plan keeps the lowest offer", openAfter: time.Minute, published: 4,
			steps: []gateStep{
				{0, 8, 0, 4, api.HarvestOpen},
				{20 * time.Second, 2, 0, 2, api.HarvestOpen},
				{40 * time.Second, 8, 0, 2, api.HarvestOpen},
				{60 * time.Second, 8, 0, 2, api.HarvestOpen},
				{99 * time.Second, 8, 0, 2, api.HarvestOpen}, // 8 on offer only since 40s
				{100 * time.Second, 8, 0, 8, api.HarvestOpen},
			},
		},
		{
			name:      "after a restart the published verdict stands, no more",
			openAfter: time.Minute, published: 4,
			steps: []gateStep{
				{0, 8, 4, 4, api.HarvestOpen},
				{61 * time.Second, 8, 4, 8, api.HarvestOpen},
			},
		},
		{
			name: "no hysteresis: the plan is published as is", openAfter: 0,
			steps: []gateStep{
				{0, 8, 0, 8, api.HarvestOpen},
				{time.Second, 2, 4, 2, api.HarvestDraining},
				{2 * time.Second, 8, 2, 8, api.HarvestOpen},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &Gate{OpenAfter: tt.openAfter}
			published := map[string]int64{"n": tt.published}
			for _, s := range tt.steps {
				got := g.Apply(t0.Add(s.after), onePoolNode(s.lent), gatePlan(s.planned), published).Nodes["n"]
				published["n"] = got.HarvestableGPUs
				if got.HarvestableGPUs != s.wantGPUs || got.State != s.wantState {
					t.Fatalf("at +%v (planned %d, lent %d): %s with %d harvestable, want %s with %d", s.after, s.planned, s.lent, got.State, got.HarvestableGPUs, s.wantState, s.wantGPUs)
				}
				if got.State == api.HarvestDraining && got.ReclaimGPUs != s.lent-s.wantGPUs {
					t.Fatalf("at +%v: reclaim %d GPUs, want %d", s.after, got.ReclaimGPUs, s.lent-s.wantGPUs)
				}
			}
		})
	}
}

func TestGateOutsideWindowsDrains(t *testing.T) {
	night, err := ParseWindows("20:00-08:00", "")
	if err != nil {
		t.Fatal(err)
	}
	g := &Gate{Windows: night}
	nodes := []Node{
		{Name: "lent", InPool: true, Schedulable: true, AllocatableGPUs: 8, LentGPUs: 6},
		{Name: "idle", InPool: true, Schedulable: true, AllocatableGPUs: 8},
		{Name: "cordoned", InPool: true, Schedulable: false, AllocatableGPUs: 8},
	}
	plan := MakePlan(nodes, nil)
	morning := time.Date(2026, 3, 2, 7, 59, 0, 0, time.UTC)
	got := g.Apply(morning, nodes, plan, map[string]int64{"lent": 8, "idle": 8})
	if got.Nodes["lent"].State != api.HarvestOpen || got.Nodes["idle"].HarvestableGPUs != 8 {
		t.Fatalf("inside the window: %+v, want both open with 8", got.Nodes)
	}
	got = g.Apply(morning.Add(time.Minute), nodes, plan, map[string]int64{"lent": 8, "idle": 8})
	if np := got.Nodes["lent"]; np.State != api.HarvestDraining || np.ReclaimGPUs != 6 {
		t.Fatalf("at 08:00 node lent = %+v, want draining all 6 lent GPUs", np)
	}
	if np := got.Nodes["idle"]; np.State != api.HarvestClosed {
		t.Fatalf("at 08:00 node idle = %+v, want closed", np)
	}
	if np := got.Nodes["cordoned"]; np.State != api.HarvestClosed || np.HarvestableGPUs != 0 {
		t.Fatalf("cordoned node = %+v, want closed", np)
	}
}

// On fragmented nodes headroom goes where a whole replica fits, and the idle
// node is lent whole.
func TestPlanFragmentedNodes(t *testing.T) {
	nodes := []Node{
		{Name: "frag-1", InPool: true, Schedulable: true, AllocatableGPUs: 8, ServingGPUs: 5, HostsInference: true}, // 3 free
		{Name: "frag-2", InPool: true, Schedulable: true, AllocatableGPUs: 8, ServingGPUs: 5, HostsInference: true}, // 3 free
		{Name: "host", InPool: true, Schedulable: true, AllocatableGPUs: 8, ServingGPUs: 4, HostsInference: true},   // 4 free
		{Name: "idle", InPool: true, Schedulable: true, AllocatableGPUs: 8},
	}
	plan := MakePlan(nodes, []Headroom{{Service: "chat", GPUsPerReplica: 4, Replicas: 2}})
	want := map[string]int64{"frag-1": 3, "frag-2": 3, "host": 0, "idle": 4}
	for name, h := range want {
		if got := plan.Nodes[name].HarvestableGPUs; got != h {
			t.Errorf("%s: %d harvestable, want %d (plan %+v)", name, got, h, plan.Nodes)
		}
	}
	if len(plan.Unplaced) != 0 {
		t.Errorf("unplaced %+v: 6 free GPUs in 3-GPU fragments must not count, but host and idle hold two replicas", plan.Unplaced)
	}
	// A third replica has nowhere whole to go although 6 GPUs are free in fragments.
	plan = MakePlan(nodes, []Headroom{{Service: "chat", GPUsPerReplica: 4, Replicas: 4}})
	if len(plan.Unplaced) != 1 {
		t.Fatalf("unplaced %+v, want exactly one replica: fragments do not add up to a replica", plan.Unplaced)
	}
}

// The flap-damping steps below are worked out from the rule in Gate's
// documentation: OpenAfter 1 m, BackoffLimit 4 (open-after 1, 2 or 4 min),
// RelaxAfter 2 (one doubling forgotten after 2 x the current open-after
// without a drain).
func TestGateFlapDamping(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	s := time.Second
	tests := []struct {
		name      string
		backoff   int
		published int64
		steps     []gateStep
	}{
		{
			name: "each drain doubles the open-after up to the cap, and it relaxes", backoff: 4, published: 8,
			steps: []gateStep{
				{0, 8, 8, 8, api.HarvestOpen},
				// Drain 1 at 10 s: open-after 2 m.
				{10 * s, 4, 8, 4, api.HarvestDraining},
				{20 * s, 8, 4, 4, api.HarvestOpen},
				{80 * s, 8, 4, 4, api.HarvestOpen},  // undamped, 8 would open here
				{139 * s, 8, 4, 4, api.HarvestOpen}, // the 4 offered until 20 s is 119 s old
				{140 * s, 8, 4, 8, api.HarvestOpen},
				// Drain 2 at 150 s: open-after 4 m.
				{150 * s, 4, 8, 4, api.HarvestDraining},
				{160 * s, 8, 4, 4, api.HarvestOpen},
				{399 * s, 8, 4, 4, api.HarvestOpen},
				{400 * s, 8, 4, 8, api.HarvestOpen},
				// Drain 3 at 600 s: at the cap, open-after stays 4 m.
				{600 * s, 4, 8, 4, api.HarvestDraining},
				{610 * s, 8, 4, 4, api.HarvestOpen},
				{849 * s, 8, 4, 4, api.HarvestOpen},
				{850 * s, 8, 4, 8, api.HarvestOpen},
				// No drain since 600 s: one doubling goes at 600 + 2 x 4 m = 1080 s,
				// the next at 1080 + 2 x 2 m = 1320 s. A drain at 1330 s then
				// doubles 1 m once: open-after 2 m.
				{1320 * s, 8, 8, 8, api.HarvestOpen},
				{1330 * s, 4, 8, 4, api.HarvestDraining},
				{1340 * s, 8, 4, 4, api.HarvestOpen},
				{1459 * s, 8, 4, 4, api.HarvestOpen},
				{1460 * s, 8, 4, 8, api.HarvestOpen},
			},
		},
		{
			name: "a fall that takes no lent GPU back is no drain", backoff: 4, published: 8,
			steps: []gateStep{
				{0, 8, 2, 8, api.HarvestOpen},
				{10 * s, 4, 2, 4, api.HarvestOpen},
				{20 * s, 8, 2, 4, api.HarvestOpen},
				{80 * s, 8, 2, 8, api.HarvestOpen}, // plain open-after: 1 m after 20 s
			},
		},
		{
			name: "backoff 1 is no damping", backoff: 1, published: 8,
			steps: []gateStep{
				{0, 8, 8, 8, api.HarvestOpen},
				{10 * s, 4, 8, 4, api.HarvestDraining},
				{20 * s, 8, 4, 4, api.HarvestOpen},
				{79 * s, 8, 4, 4, api.HarvestOpen},
				{80 * s, 8, 4, 8, api.HarvestOpen},
			},
		},
		{
			// A restart finds the node lending 8 while it publishes 4: it counts
			// one drain, so 8 opens 2 m after the 4 offered until 10 s.
			name: "after a restart a draining node counts one drain", backoff: 4, published: 4,
			steps: []gateStep{
				{0, 4, 8, 4, api.HarvestDraining},
				{10 * s, 8, 4, 4, api.HarvestOpen},
				{129 * s, 8, 4, 4, api.HarvestOpen},
				{130 * s, 8, 4, 8, api.HarvestOpen},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &Gate{OpenAfter: time.Minute, BackoffLimit: tt.backoff}
			published := map[string]int64{"n": tt.published}
			for _, st := range tt.steps {
				got := g.Apply(t0.Add(st.after), onePoolNode(st.lent), gatePlan(st.planned), published).Nodes["n"]
				published["n"] = got.HarvestableGPUs
				if got.HarvestableGPUs != st.wantGPUs || got.State != st.wantState {
					t.Fatalf("at +%v (planned %d, lent %d): %s with %d harvestable, want %s with %d", st.after, st.planned, st.lent, got.State, got.HarvestableGPUs, st.wantState, st.wantGPUs)
				}
			}
		})
	}
}

func TestGateJustInTime(t *testing.T) {
	np := func(harvestable, reclaim int64) NodePlan {
		state := api.HarvestOpen
		switch {
		case reclaim > 0:
			state = api.HarvestDraining
		case harvestable == 0:
			state = api.HarvestClosed
		}
		return NodePlan{Verdict: Verdict{State: state, HarvestableGPUs: harvestable}, ReclaimGPUs: reclaim}
	}
	gated := Plan{Nodes: map[string]NodePlan{
		"forecast-only": np(4, 4), // lent 8; soon needs none of them
		"partly":        np(0, 8), // lent 8; soon needs 4 of them
		"needed now":    np(0, 8), // lent 8; soon needs all
		"unknown":       np(4, 4), // missing from soon
		"open":          np(8, 0), // lent 4; soon would place headroom here: still no eviction
	}}
	soon := Plan{Nodes: map[string]NodePlan{
		"forecast-only": np(8, 0),
		"partly":        np(4, 4),
		"needed now":    np(0, 8),
		"open":          np(0, 4),
	}}
	// reclaim = min(lent - harvestable, max(0, lent - soonHarvestable))
	want := map[string]int64{"forecast-only": 0, "partly": 4, "needed now": 8, "unknown": 4, "open": 0}
	g := &Gate{}
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	got := g.JustInTime(now, gated, soon)
	for name, w := range want {
		n := got.Nodes[name]
		if n.ReclaimGPUs != w {
			t.Errorf("%s: reclaim %d, want %d", name, n.ReclaimGPUs, w)
		}
		if n.Verdict != gated.Nodes[name].Verdict {
			t.Errorf("%s: verdict %+v changed, want %+v: the node stops lending all the same", name, n.Verdict, gated.Nodes[name].Verdict)
		}
	}
	// Outside the harvest windows everything lent goes at once.
	night, err := ParseWindows("20:00-08:00", "")
	if err != nil {
		t.Fatal(err)
	}
	g = &Gate{Windows: night}
	got = g.JustInTime(now, gated, soon)
	if r := got.Nodes["forecast-only"].ReclaimGPUs; r != 4 {
		t.Errorf("outside the windows: forecast-only reclaims %d, want 4", r)
	}
}
