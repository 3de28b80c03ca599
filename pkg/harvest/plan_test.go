package harvest

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// poolNode is a schedulable pool node with nothing reserved or lent.
func poolNode(name string, allocatable int64) Node {
	return Node{Name: name, InPool: true, Schedulable: true, AllocatableGPUs: allocatable}
}

func with(n Node, f func(*Node)) Node {
	f(&n)
	return n
}

func reserved(g int64) func(*Node)  { return func(n *Node) { n.ServingGPUs = g } }
func lent(g int64) func(*Node)      { return func(n *Node) { n.LentGPUs = g } }
func inference(n *Node)             { n.HostsInference = true }
func returning(g int64) func(*Node) { return func(n *Node) { n.ReturningGPUs = g } }
func stuck(g int64) func(*Node)     { return func(n *Node) { n.StuckGPUs = g } }
func leaves(d time.Duration) func(*Node) {
	return func(n *Node) { n.LeavesIn = d }
}

func all(fs ...func(*Node)) func(*Node) {
	return func(n *Node) {
		for _, f := range fs {
			f(n)
		}
	}
}

func plan(state api.HarvestState, harvestable, headroom, reclaim int64) NodePlan {
	return NodePlan{
		Verdict:      Verdict{State: state, HarvestableGPUs: harvestable},
		HeadroomGPUs: headroom,
		ReclaimGPUs:  reclaim,
	}
}

const (
	open     = api.HarvestOpen
	draining = api.HarvestDraining
	closed   = api.HarvestClosed
)

func TestMakePlan(t *testing.T) {
	tests := []struct {
		name         string
		nodes        []Node
		headroom     []Headroom
		want         map[string]NodePlan
		wantUnplaced []Headroom
	}{
		{
			name:  "no nodes, no headroom",
			nodes: nil,
			want:  map[string]NodePlan{},
		},
		{
			name:  "no headroom: everything free is harvestable",
			nodes: []Node{with(poolNode("a", 8), reserved(3))},
			want:  map[string]NodePlan{"a": plan(open, 5, 0, 0)},
		},
		{
			name:     "harvestable = allocatable - reserved - headroom",
			nodes:    []Node{with(poolNode("a", 8), all(reserved(2), lent(1)))},
			headroom: []Headroom{{Service: "s", GPUsPerReplica: 2, Replicas: 1}},
			want:     map[string]NodePlan{"a": plan(open, 4, 2, 0)},
		},
		{
			name:     "headroom with non-positive GPUs per replica is ignored",
			nodes:    []Node{poolNode("a", 8)},
			headroom: []Headroom{{Service: "s", GPUsPerReplica: 0, Replicas: 3}, {Service: "t", GPUsPerReplica: -1, Replicas: 1}},
			want:     map[string]NodePlan{"a": plan(open, 8, 0, 0)},
		},
		{
			name:     "headroom with zero or negative replicas places nothing",
			nodes:    []Node{poolNode("a", 8)},
			headroom: []Headroom{{Service: "s", GPUsPerReplica: 2, Replicas: 0}, {Service: "t", GPUsPerReplica: 2, Replicas: -2}},
			want:     map[string]NodePlan{"a": plan(open, 8, 0, 0)},
		},
		{
			name: "prefer a node where the replica fits without reclaiming, over inference host and tighter fit",
			nodes: []Node{
				// a: tighter and hosts inference, but 2 of its 4 free GPUs are lent.
				with(poolNode("a", 4), all(lent(2), inference)),
				with(poolNode("b", 8), lent(2)),
			},
			headroom: []Headroom{{Service: "s", GPUsPerReplica: 4, Replicas: 1}},
			want: map[string]NodePlan{
				"a": plan(open, 4, 0, 0),
				"b": plan(open, 4, 4, 0),
			},
		},
		{
			// b's lent GPUs are already terminating: the replica takes them
			// rather than have a's lent pods evicted too.
			name: "lent GPUs already returning count as free for placement",
			nodes: []Node{
				with(poolNode("a", 8), all(lent(8), inference)),
				with(poolNode("b", 8), all(lent(8), returning(8))),
			},
			headroom: []Headroom{{Service: "s", GPUsPerReplica: 8, Replicas: 1}},
			want: map[string]NodePlan{
				"a": plan(open, 8, 0, 0),
				"b": plan(draining, 0, 8, 8),
			},
		},
		{
			// a's other 4 GPUs are held by a pod terminating past its grace: no
			// eviction frees them, so the replica's room is made on b.
			name: "stuck GPUs are taken: headroom goes where evictions can make it",
			nodes: []Node{
				with(poolNode("a", 8), all(reserved(4), stuck(4), inference)),
				with(poolNode("b", 8), lent(8)),
			},
			headroom: []Headroom{{Service: "s", GPUsPerReplica: 4, Replicas: 1}},
			want: map[string]NodePlan{
				"a": plan(closed, 0, 0, 0),
				"b": plan(draining, 4, 4, 4),
			},
		},
		{
			name: "prefer a node hosting inference over a tighter fit",
			nodes: []Node{
				with(poolNode("a", 8), inference),
				poolNode("b", 4),
			},
			headroom: []Headroom{{Service: "s", GPUsPerReplica: 4, Replicas: 1}},
			want: map[string]NodePlan{
				"a": plan(open, 4, 4, 0),
				"b": plan(open, 4, 0, 0),
			},
		},
		{
			name: "prefer the tightest fit",
			nodes: []Node{
				poolNode("a", 8),
				with(poolNode("b", 8), reserved(2)),
				with(poolNode("c", 8), reserved(4)),
				with(poolNode("d", 8), reserved(5)), // too small
			},
			headroom: []Headroom{{Service: "s", GPUsPerReplica: 4, Replicas: 1}},
			want: map[string]NodePlan{
				"a": plan(open, 8, 0, 0),
				"b": plan(open, 6, 0, 0),
				"c": plan(closed, 0, 4, 0),
				"d": plan(open, 3, 0, 0),
			},
		},
		{
			name: "nodes that must reclaim: the name decides while no replica waits",
			nodes: []Node{
				with(poolNode("a", 8), all(lent(8), leaves(2*time.Minute))),
				with(poolNode("b", 8), all(lent(8), leaves(33*time.Second))),
			},
			headroom: []Headroom{{Service: "s", GPUsPerReplica: 1, Replicas: 1}},
			want: map[string]NodePlan{
				"a": plan(draining, 7, 1, 1),
				"b": plan(open, 8, 0, 0),
			},
		},
		{
			name: "nodes that must reclaim: while a replica waits, where the lent pods leave soonest",
			nodes: []Node{
				with(poolNode("a", 8), all(lent(8), leaves(2*time.Minute))),
				with(poolNode("b", 8), all(lent(8), leaves(33*time.Second))),
				// t's first replica fits here without a reclaim; its second
				// goes here too, the tightest fit coming before how soon.
				with(poolNode("c", 8), all(lent(4), leaves(10*time.Second))),
			},
			headroom: []Headroom{{Service: "s", GPUsPerReplica: 1, Replicas: 1}, {Service: "t", GPUsPerReplica: 4, Replicas: 2, Waiting: true}},
			want: map[string]NodePlan{
				"a": plan(open, 8, 0, 0),
				"b": plan(draining, 7, 1, 1),
				"c": plan(draining, 0, 8, 4),
			},
		},
		{
			name: "ties go to the node name",
			nodes: []Node{
				poolNode("b", 4),
				poolNode("a", 4),
			},
			headroom: []Headroom{{Service: "s", GPUsPerReplica: 4, Replicas: 1}},
			want: map[string]NodePlan{
				"a": plan(closed, 0, 4, 0),
				"b": plan(open, 4, 0, 0),
			},
		},
		{
			name: "when every fit needs a reclaim, prefer inference host, and the node drains",
			nodes: []Node{
				with(poolNode("a", 8), lent(6)),
				with(poolNode("b", 8), all(lent(8), inference)),
			},
			headroom: []Headroom{{Service: "s", GPUsPerReplica: 4, Replicas: 1}},
			want: map[string]NodePlan{
				"a": plan(open, 8, 0, 0),
				"b": plan(draining, 4, 4, 4),
			},
		},
		{
			name: "no-reclaim check accounts for headroom already placed",
			nodes: []Node{
				with(poolNode("a", 8), all(lent(4), inference)),
				poolNode("b", 8),
			},
			headroom: []Headroom{{Service: "s", GPUsPerReplica: 4, Replicas: 2}},
			// First replica: both fit without reclaim, a hosts inference. Second: a
			// would need a reclaim now (4 spare, 4 lent), b does not.
			want: map[string]NodePlan{
				"a": plan(open, 4, 4, 0),
				"b": plan(open, 4, 4, 0),
			},
		},
		{
			name: "several replicas of one service pack by tightest fit",
			nodes: []Node{
				poolNode("a", 4),
				poolNode("b", 4),
			},
			headroom: []Headroom{{Service: "s", GPUsPerReplica: 2, Replicas: 3}},
			want: map[string]NodePlan{
				"a": plan(closed, 0, 4, 0),
				"b": plan(open, 2, 2, 0),
			},
		},
		{
			name: "a whole replica is never split across nodes",
			nodes: []Node{
				with(poolNode("a", 8), reserved(6)),
				with(poolNode("b", 8), reserved(5)),
			},
			headroom: []Headroom{{Service: "big", GPUsPerReplica: 4, Replicas: 1}},
			want: map[string]NodePlan{
				"a": plan(open, 2, 0, 0),
				"b": plan(open, 3, 0, 0),
			},
			wantUnplaced: []Headroom{{Service: "big", GPUsPerReplica: 4, Replicas: 1}},
		},
		{
			name: "replicas that fit nowhere are unplaced, counted per service, the rest placed",
			nodes: []Node{
				with(poolNode("a", 8), reserved(4)),
			},
			headroom: []Headroom{{Service: "big", GPUsPerReplica: 4, Replicas: 3}},
			want: map[string]NodePlan{
				"a": plan(closed, 0, 4, 0),
			},
			wantUnplaced: []Headroom{
				{Service: "big", GPUsPerReplica: 4, Replicas: 2},
			},
		},
		{
			name: "a replica fits where best-effort pods must go",
			nodes: []Node{
				with(poolNode("a", 4), lent(4)),
			},
			headroom: []Headroom{{Service: "big", GPUsPerReplica: 4, Replicas: 1}},
			want: map[string]NodePlan{
				"a": plan(draining, 0, 4, 4),
			},
		},
		{
			name: "draining reclaims lent minus harvestable",
			nodes: []Node{
				with(poolNode("a", 8), all(reserved(2), lent(4))),
			},
			headroom: []Headroom{{Service: "s", GPUsPerReplica: 4, Replicas: 1}},
			want: map[string]NodePlan{
				"a": plan(draining, 2, 4, 2),
			},
		},
		{
			name: "lent equal to harvestable stays open",
			nodes: []Node{
				with(poolNode("a", 8), all(reserved(2), lent(2))),
			},
			headroom: []Headroom{{Service: "s", GPUsPerReplica: 4, Replicas: 1}},
			want: map[string]NodePlan{
				"a": plan(open, 2, 4, 0),
			},
		},
		{
			name: "fully reserved node is closed",
			nodes: []Node{
				with(poolNode("a", 8), reserved(8)),
			},
			want: map[string]NodePlan{"a": plan(closed, 0, 0, 0)},
		},
		{
			name: "nodes outside the pool, unschedulable or over-reserved are closed and get no headroom",
			nodes: []Node{
				with(poolNode("outside", 8), func(n *Node) { n.InPool = false }),
				with(poolNode("cordoned", 8), func(n *Node) { n.Schedulable = false }),
				with(poolNode("over", 8), reserved(9)),
				with(poolNode("outside-lent", 8), func(n *Node) { n.InPool = false; n.LentGPUs = 4 }),
			},
			headroom: []Headroom{{Service: "s", GPUsPerReplica: 1, Replicas: 1}},
			want: map[string]NodePlan{
				"outside":      {Verdict: Closed},
				"cordoned":     {Verdict: Closed},
				"over":         {Verdict: Closed},
				"outside-lent": {Verdict: Closed},
			},
			wantUnplaced: []Headroom{{Service: "s", GPUsPerReplica: 1, Replicas: 1}},
		},
		{
			name: "largest replicas are placed first",
			nodes: []Node{
				// Placing the 2-GPU replica first would take a (inference host) and
				// leave the 4-GPU replica nowhere to go.
				with(poolNode("a", 4), inference),
				poolNode("b", 3),
			},
			headroom: []Headroom{
				{Service: "small", GPUsPerReplica: 2, Replicas: 1},
				{Service: "big", GPUsPerReplica: 4, Replicas: 1},
			},
			want: map[string]NodePlan{
				"a": plan(closed, 0, 4, 0),
				"b": plan(open, 1, 2, 0),
			},
		},
		{
			name: "largest first also decides which replica is unplaced",
			nodes: []Node{
				poolNode("a", 4),
			},
			headroom: []Headroom{
				{Service: "small", GPUsPerReplica: 1, Replicas: 1},
				{Service: "big", GPUsPerReplica: 4, Replicas: 1},
			},
			want: map[string]NodePlan{
				"a": plan(closed, 0, 4, 0),
			},
			wantUnplaced: []Headroom{{Service: "small", GPUsPerReplica: 1, Replicas: 1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := MakePlan(tt.nodes, tt.headroom)
			if !reflect.DeepEqual(got.Nodes, tt.want) {
				t.Errorf("Nodes:\n got  %+v\n want %+v", got.Nodes, tt.want)
			}
			if len(got.Unplaced) != 0 || len(tt.wantUnplaced) != 0 {
				if !reflect.DeepEqual(got.Unplaced, tt.wantUnplaced) {
					t.Errorf("Unplaced:\n got  %+v\n want %+v", got.Unplaced, tt.wantUnplaced)
				}
			}
			// Invariants every plan must keep.
			for _, n := range tt.nodes {
				np, ok := got.Nodes[n.Name]
				if !ok {
					t.Errorf("node %s has no plan", n.Name)
					continue
				}
				if np.HarvestableGPUs < 0 {
					t.Errorf("node %s: harvestable %d < 0", n.Name, np.HarvestableGPUs)
				}
				if (np.State == draining) != (np.ReclaimGPUs > 0) {
					t.Errorf("node %s: state %s with ReclaimGPUs %d", n.Name, np.State, np.ReclaimGPUs)
				}
				free := n.AllocatableGPUs - n.ServingGPUs - n.StuckGPUs
				lendable := n.InPool && n.Schedulable && free >= 0
				if lendable && np.HarvestableGPUs+np.HeadroomGPUs != free {
					t.Errorf("node %s: harvestable %d + headroom %d != allocatable %d - reserved %d - stuck %d",
						n.Name, np.HarvestableGPUs, np.HeadroomGPUs, n.AllocatableGPUs, n.ServingGPUs, n.StuckGPUs)
				}
			}
		})
	}
}

// TestMakePlanDoesNotMutateInput guards the "pure" contract: the caller's nodes
// and headroom are unchanged.
func TestMakePlanDoesNotMutateInput(t *testing.T) {
	nodes := []Node{with(poolNode("a", 8), all(lent(2), inference)), poolNode("b", 4)}
	headroom := []Headroom{{Service: "s", GPUsPerReplica: 2, Replicas: 3}}
	nodesCopy := append([]Node(nil), nodes...)
	headroomCopy := append([]Headroom(nil), headroom...)
	MakePlan(nodes, headroom)
	if !reflect.DeepEqual(nodes, nodesCopy) {
		t.Errorf("nodes changed: %+v, was %+v", nodes, nodesCopy)
	}
	if !reflect.DeepEqual(headroom, headroomCopy) {
		t.Errorf("headroom changed: %+v, was %+v", headroom, headroomCopy)
	}
}

// scanPlan places headroom as MakePlan did before it kept homes in a heap:
// every replica walks every lendable node for the best home. MakePlan must
// place every replica where this does.
func scanPlan(nodes []Node, headroom []Headroom) Plan {
	plan := Plan{Nodes: map[string]NodePlan{}}
	var lendable []home
	for i := range nodes {
		n := &nodes[i]
		free := n.AllocatableGPUs - n.ServingGPUs - n.StuckGPUs
		if !n.InPool || !n.Schedulable || free < 0 {
			plan.Nodes[n.Name] = NodePlan{Verdict: Closed}
			continue
		}
		lendable = append(lendable, home{Node: n, spare: free})
	}
	var wanted []Headroom
	soonest := false
	for _, h := range headroom {
		if h.GPUsPerReplica > 0 && h.Replicas > 0 {
			wanted = append(wanted, h)
			soonest = soonest || h.Waiting
		}
	}
	sort.SliceStable(wanted, func(i, j int) bool { return wanted[i].GPUsPerReplica > wanted[j].GPUsPerReplica })
	for _, r := range wanted {
		for placed := 0; placed < r.Replicas; placed++ {
			var best *home
			for i := range lendable {
				if h := &lendable[i]; h.spare >= r.GPUsPerReplica && (best == nil || betterHome(h, best, r.GPUsPerReplica, soonest)) {
					best = h
				}
			}
			if best == nil {
				plan.Unplaced = append(plan.Unplaced, Headroom{Service: r.Service, GPUsPerReplica: r.GPUsPerReplica, Replicas: r.Replicas - placed})
				break
			}
			best.spare -= r.GPUsPerReplica
			best.placed += r.GPUsPerReplica
			if f := plan.HeadroomFor[best.Name]; len(f) == 0 || f[len(f)-1] != r.Service {
				if plan.HeadroomFor == nil {
					plan.HeadroomFor = map[string][]string{}
				}
				plan.HeadroomFor[best.Name] = append(f, r.Service)
			}
		}
	}
	for _, h := range lendable {
		plan.Nodes[h.Name] = planFor(h.placed, h.LentGPUs, h.spare)
	}
	return plan
}

// randomPool is n nodes of 4 or 8 GPUs in every state MakePlan tells apart,
// and headroom for up to 12 services of 1, 2, 4 or 8 GPUs a replica.
func randomPool(rng *rand.Rand, n int) ([]Node, []Headroom) {
	nodes := make([]Node, n)
	for i := range nodes {
		alloc := []int64{4, 8}[rng.IntN(2)]
		reserved := rng.Int64N(alloc + 1)
		lentGPUs := rng.Int64N(alloc - reserved + 1)
		nodes[i] = Node{Name: fmt.Sprintf("n%04d", rng.IntN(10*n)) + fmt.Sprint(i), InPool: rng.IntN(10) > 0, Schedulable: rng.IntN(20) > 0,
			AllocatableGPUs: alloc, ServingGPUs: reserved, LentGPUs: lentGPUs, ReturningGPUs: rng.Int64N(lentGPUs + 1),
			HostsInference: reserved > 0 && rng.IntN(2) == 0}
		if rng.IntN(30) == 0 {
			nodes[i].StuckGPUs = 1
		}
		if lentGPUs > 0 {
			nodes[i].LeavesIn = time.Duration(1+rng.IntN(3)) * 30 * time.Second
		}
	}
	headroom := make([]Headroom, rng.IntN(12))
	for i := range headroom {
		headroom[i] = Headroom{Service: fmt.Sprintf("s%d", i), GPUsPerReplica: []int64{1, 2, 4, 8}[rng.IntN(4)], Replicas: rng.IntN(n),
			Waiting: rng.IntN(4) == 0}
	}
	return nodes, headroom
}

// TestMakePlanPlacesAsTheScanDid: the heap of homes changes what placing a
// replica costs, not where it goes; NodePlans plans as MakePlan does.
func TestMakePlanPlacesAsTheScanDid(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 500 {
		nodes, headroom := randomPool(rng, 1+rng.IntN(40))
		got, want := MakePlan(nodes, headroom), scanPlan(nodes, headroom)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("trial %d: nodes %+v headroom %+v:\nheap plan %+v\nscan plan %+v", trial, nodes, headroom, got, want)
		}
		for i, np := range NodePlans(make([]NodePlan, 3), nodes, headroom) {
			if np != want.Nodes[nodes[i].Name] {
				t.Fatalf("trial %d: NodePlans gave node %s %+v, MakePlan %+v", trial, nodes[i].Name, np, want.Nodes[nodes[i].Name])
			}
		}
	}
}

// BenchmarkMakePlan is one plan of a 5,000-node pool with headroom for 24
// services (480 replicas): MakePlan, NodePlans, and the scan MakePlan was.
func BenchmarkMakePlan(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	nodes, _ := randomPool(rng, 5000)
	headroom := make([]Headroom, 24)
	for i := range headroom {
		headroom[i] = Headroom{Service: fmt.Sprintf("s%d", i), GPUsPerReplica: []int64{1, 2, 4, 8}[i%4], Replicas: 20}
	}
	b.Run("MakePlan", func(b *testing.B) {
		for b.Loop() {
			MakePlan(nodes, headroom)
		}
	})
	b.Run("NodePlans", func(b *testing.B) {
		var plans []NodePlan
		for b.Loop() {
			plans = NodePlans(plans, nodes, headroom)
		}
	})
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			scanPlan(nodes, headroom)
		}
	})
}

// A service whose replicas take GPUs through DRA claims keeps its room on
// DRA nodes only: such a replica cannot use a device plugin's GPUs. A DRA
// replica that no DRA node holds is unplaced, even with device-plugin GPUs
// free. Another service's room may go on either (the scheduler backs an
// extended request with DRA devices), after the DRA services'.
func TestHeadroomGoesWhereItsKindOfGPUs(t *testing.T) {
	nodes := []Node{
		{Name: "plugin", InPool: true, Schedulable: true, AllocatableGPUs: 8, HostsInference: true},
		{Name: "dra", InPool: true, Schedulable: true, AllocatableGPUs: 8, LentGPUs: 4, DRA: true},
	}
	plan := MakePlan(nodes, []Headroom{
		{Service: "serving/embed", GPUsPerReplica: 4, Replicas: 1, DRA: true},
		{Service: "serving/chat", GPUsPerReplica: 4, Replicas: 1},
	})
	if got := plan.HeadroomFor; len(got["dra"]) != 1 || got["dra"][0] != "serving/embed" || len(got["plugin"]) != 1 || got["plugin"][0] != "serving/chat" {
		t.Errorf("headroom for %v; want embed on dra and chat on plugin", got)
	}
	if p := plan.Nodes["dra"]; p.HarvestableGPUs != 4 || p.ReclaimGPUs != 0 {
		t.Errorf("dra %+v", p)
	}
	plan = MakePlan(nodes, []Headroom{{Service: "serving/embed", GPUsPerReplica: 4, Replicas: 3, DRA: true}})
	if len(plan.Unplaced) != 1 || plan.Unplaced[0].Replicas != 1 || !plan.Unplaced[0].DRA || len(plan.HeadroomFor["plugin"]) != 0 {
		t.Errorf("three DRA replicas on one DRA node: unplaced %+v, headroom %v", plan.Unplaced, plan.HeadroomFor)
	}
	if p := plan.Nodes["dra"]; p.HarvestableGPUs != 0 || p.ReclaimGPUs != 4 {
		t.Errorf("dra %+v; want it to owe its 4 lent GPUs", p)
	}
	// A larger replica of a service asking for nvidia.com/gpu fits only on
	// the DRA node, but DRA's own room is placed first.
	plan = MakePlan(nodes[1:], []Headroom{
		{Service: "serving/chat", GPUsPerReplica: 8, Replicas: 1},
		{Service: "serving/embed", GPUsPerReplica: 4, Replicas: 1, DRA: true},
	})
	if got := plan.HeadroomFor["dra"]; len(got) != 1 || got[0] != "serving/embed" || len(plan.Unplaced) != 1 || plan.Unplaced[0].Service != "serving/chat" {
		t.Errorf("headroom %v, unplaced %+v; want embed's room first", plan.HeadroomFor, plan.Unplaced)
	}
	plan = MakePlan(nodes[1:], []Headroom{{Service: "serving/chat", GPUsPerReplica: 8, Replicas: 1}})
	if got := plan.HeadroomFor["dra"]; len(got) != 1 {
		t.Errorf("headroom %v: a replica asking for nvidia.com/gpu may use DRA GPUs", plan.HeadroomFor)
	}
}
