// Package harvest decides, per pool node, how many GPUs may be lent to
// best-effort pods. The planning is pure (plain values in, verdicts out) so the
// controller and any simulator run the same policy.
package harvest

import (
	"container/heap"
	"sort"
	"time"
)

// Node is one node as a plan sees it.
type Node struct {
	Name string
	// InPool: the node carries the pool label, so Gleaner may lend it.
	InPool bool
	// Schedulable: Ready and not cordoned. Gleaner lends nothing on other nodes.
	Schedulable bool
	// AllocatableGPUs is the node's allocatable GPU count.
	AllocatableGPUs int64
	// ServingGPUs are requested by pods that are not best-effort (inference and anything else).
	ServingGPUs int64
	// LentGPUs are held by best-effort pods.
	LentGPUs int64
	// ReturningGPUs are the part of LentGPUs held by best-effort pods already
	// terminating within their grace period: they come back without another
	// eviction.
	ReturningGPUs int64
	// StuckGPUs are held by best-effort pods terminating past their capped
	// grace period (a finalizer, a kubelet that stopped answering). They are
	// not in LentGPUs: no eviction takes them back, so the planner counts them
	// as taken and keeps inference's room where evictions can make it.
	StuckGPUs int64
	// HostsInference: at least one inference pod is bound here.
	HostsInference bool
	// DRA: the node has GPUs published through DRA: the only GPUs that
	// replicas taking theirs through ResourceClaims can use. (A request of
	// the extended resource can use them too: the scheduler backs it with
	// DRA devices where the node does not advertise it.)
	DRA bool
	// LeavesIn is how long the node's lent pods, evicted now, take to give
	// all their GPUs back: the longest grace period the reclaimer would give
	// one that holds GPUs, is bound and is not terminating (reclaim.LeavesIn,
	// which does not know whether it saved for a notice). 0 when none is.
	LeavesIn time.Duration
}

// Headroom asks a plan to keep room for whole inference replicas.
type Headroom struct {
	Service        string
	GPUsPerReplica int64
	Replicas       int
	// DRA: the service's replicas take their GPUs through ResourceClaims,
	// so its room is kept on DRA nodes only. It is placed before any other
	// service's, which may go anywhere.
	DRA bool
	// Waiting: a replica of the service waits for GPUs now. While any does,
	// the plan takes room that must be reclaimed where the lent pods leave
	// soonest (Node.LeavesIn), so the GPUs reach it sooner.
	Waiting bool
}

// NodePlan is the plan for one node.
type NodePlan struct {
	Verdict
	// HeadroomGPUs are kept free on this node for inference replicas to scale into.
	HeadroomGPUs int64
	// ReclaimGPUs are lent GPUs that must be taken back (LentGPUs - HarvestableGPUs when positive).
	ReclaimGPUs int64
}

// Plan is the result of one planning round.
type Plan struct {
	Nodes map[string]NodePlan
	// Unplaced lists headroom replicas, per service, that fit on no node even
	// with every best-effort pod gone; reclaiming cannot help them, so nothing
	// is reserved.
	Unplaced []Headroom
	// HeadroomFor names, per node, the services whose headroom is placed there
	// (in the order placed): whom the node's GPUs are kept for.
	HeadroomFor map[string][]string
}

// MakePlan computes, for every node:
//
//	free        = allocatable - serving GPUs (held by pods that are not best-effort) - stuck GPUs
//	harvestable = free - headroom placed on the node
//
// Headroom is placed one whole replica at a time (largest first), on a node
// whose free GPUs can hold it, preferring (1) a node where it fits without
// evicting anything more (its free GPUs, and lent ones already returning),
// (2) a node already hosting inference, so whole idle nodes stay lendable,
// (3) the tightest fit, (4) while a replica waits (Headroom.Waiting) and the
// node must reclaim, the node whose lent pods leave soonest. The verdict is
// draining when lent GPUs exceed harvestable ones, closed when nothing is
// harvestable, open otherwise (planFor). Nodes outside the pool,
// unschedulable nodes and nodes whose reservations exceed their allocatable
// GPUs are closed.
func MakePlan(nodes []Node, headroom []Headroom) Plan {
	plan := Plan{Nodes: make(map[string]NodePlan, len(nodes))}
	plans := make([]NodePlan, len(nodes))
	plan.Unplaced = place(nodes, headroom, plans, func(node, service string) {
		if f := plan.HeadroomFor[node]; len(f) == 0 || f[len(f)-1] != service {
			if plan.HeadroomFor == nil {
				plan.HeadroomFor = map[string][]string{}
			}
			plan.HeadroomFor[node] = append(f, service)
		}
	})
	for i := range nodes {
		plan.Nodes[nodes[i].Name] = plans[i]
	}
	return plan
}

// NodePlans is MakePlan's NodePlans alone, one per node in the order given,
// into dst when it has the room: for callers that plan the same nodes many
// times over (a round looking ahead step by step), where building the map
// was most of the cost.
func NodePlans(dst []NodePlan, nodes []Node, headroom []Headroom) []NodePlan {
	if cap(dst) < len(nodes) {
		dst = make([]NodePlan, len(nodes))
	}
	dst = dst[:len(nodes)]
	place(nodes, headroom, dst, nil)
	return dst
}

// place plans every node into plans (aligned with nodes) and returns the
// headroom that fit nowhere; placed, when not nil, hears of every replica
// placed, in order.
func place(nodes []Node, headroom []Headroom, plans []NodePlan, placed func(node, service string)) []Headroom {
	// Spare and placed GPUs live beside each node rather than in maps by name:
	// placing a replica compares every lendable node, and on a large pool with
	// much headroom the map lookups were most of the planner's time.
	lendable := make([]home, 0, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		free := n.AllocatableGPUs - n.ServingGPUs - n.StuckGPUs
		if !n.InPool || !n.Schedulable || free < 0 {
			plans[i] = NodePlan{Verdict: Closed}
			continue
		}
		lendable = append(lendable, home{Node: n, index: i, spare: free})
	}

	// Headroom is counted, not listed replica by replica: a service asking for
	// a billion replicas costs one placement per replica that fits, no more.
	var wanted []Headroom
	soonest := false
	for _, h := range headroom {
		if h.GPUsPerReplica > 0 && h.Replicas > 0 {
			wanted = append(wanted, h)
			soonest = soonest || h.Waiting
		}
	}
	sort.SliceStable(wanted, func(i, j int) bool {
		if wanted[i].DRA != wanted[j].DRA {
			return wanted[i].DRA
		}
		return wanted[i].GPUsPerReplica > wanted[j].GPUsPerReplica
	})

	// Replicas of one size go, one at a time, to the best home that holds
	// them (betterHome: a strict order, so the best is one node). The homes
	// wait in a heap ordered for that size, so placing a replica costs a
	// heap fix rather than a walk of every node.
	var unplaced []Headroom
	for i := 0; i < len(wanted); {
		q := homeQueue{gpus: wanted[i].GPUsPerReplica, soonest: soonest}
		dra := wanted[i].DRA
		for k := range lendable {
			if lendable[k].spare >= q.gpus && (lendable[k].DRA || !dra) {
				q.homes = append(q.homes, &lendable[k])
			}
		}
		heap.Init(&q)
		for ; i < len(wanted) && wanted[i].GPUsPerReplica == q.gpus && wanted[i].DRA == dra; i++ {
			r := wanted[i]
			for n := 0; n < r.Replicas; n++ {
				if len(q.homes) == 0 {
					// Nothing holds this replica, so nothing holds the rest of them.
					unplaced = append(unplaced, Headroom{Service: r.Service, GPUsPerReplica: r.GPUsPerReplica, Replicas: r.Replicas - n, DRA: r.DRA})
					break
				}
				best := q.homes[0]
				best.spare -= r.GPUsPerReplica
				best.placed += r.GPUsPerReplica
				if best.spare < q.gpus {
					heap.Pop(&q)
				} else {
					heap.Fix(&q, 0)
				}
				if placed != nil {
					placed(best.Name, r.Service)
				}
			}
		}
	}

	for _, h := range lendable {
		plans[h.index] = planFor(h.placed, h.LentGPUs, h.spare)
	}
	return unplaced
}

// home is a lendable node while headroom is placed: its GPUs not yet reserved
// (spare) and the headroom placed on it.
type home struct {
	*Node
	index         int // in the nodes planned
	spare, placed int64
}

// homeQueue is a heap of the homes that hold a replica of gpus, best first.
type homeQueue struct {
	gpus    int64
	soonest bool // a replica waits: see betterHome
	homes   []*home
}

func (q *homeQueue) Len() int           { return len(q.homes) }
func (q *homeQueue) Less(i, j int) bool { return betterHome(q.homes[i], q.homes[j], q.gpus, q.soonest) }
func (q *homeQueue) Swap(i, j int)      { q.homes[i], q.homes[j] = q.homes[j], q.homes[i] }
func (q *homeQueue) Push(x any)         { q.homes = append(q.homes, x.(*home)) }
func (q *homeQueue) Pop() any {
	last := q.homes[len(q.homes)-1]
	q.homes = q.homes[:len(q.homes)-1]
	return last
}

// betterHome reports whether a is a better place than b for a replica of size
// gpus. soonest: a replica waits, so of two nodes that must reclaim and are
// otherwise alike, the one whose lent pods leave sooner is better. At other
// times the name decides, so the room stays where it was kept and the
// notices given for it hold.
func betterHome(a, b *home, gpus int64, soonest bool) bool {
	aNoReclaim := a.spare-(a.LentGPUs-a.ReturningGPUs) >= gpus
	bNoReclaim := b.spare-(b.LentGPUs-b.ReturningGPUs) >= gpus
	if aNoReclaim != bNoReclaim {
		return aNoReclaim
	}
	if a.HostsInference != b.HostsInference {
		return a.HostsInference
	}
	if a.spare != b.spare {
		return a.spare < b.spare
	}
	if soonest && !aNoReclaim && a.LeavesIn != b.LeavesIn {
		return a.LeavesIn < b.LeavesIn
	}
	return a.Name < b.Name
}

// Drain is plan with every pool node closed and all of its lent GPUs owed
// back: what the admin's kill switch asks for with HoldAndDrain
// (api.StopHoldAndDrain). Nodes outside the pool keep their plan: a
// low-priority pod there was never lent anything. The headroom placed and
// what stayed unplaced are kept, for people.
func Drain(nodes []Node, plan Plan) Plan {
	out := plan
	out.Nodes = make(map[string]NodePlan, len(nodes))
	for _, n := range nodes {
		if !n.InPool {
			out.Nodes[n.Name] = plan.Nodes[n.Name]
			continue
		}
		out.Nodes[n.Name] = planFor(plan.Nodes[n.Name].HeadroomGPUs, n.LentGPUs, 0)
	}
	return out
}
