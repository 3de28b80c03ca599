// Package harvest decides, per pool node, how many GPUs may be lent to
// best-effort pods. The planning is pure (plain values in, verdicts out) so the
// controller and any simulator run the same policy.
package harvest

import (
	"sort"
)

// Node is the planner's view of one node.
type Node struct {
	Name string
	// InPool: the node carries the pool label, so Gleaner may lend it.
	InPool bool
	// Schedulable: Ready and not cordoned. Gleaner lends nothing on other nodes.
	Schedulable bool
	// AllocatableGPUs is the node's allocatable GPU count.
	AllocatableGPUs int64
	// ReservedGPUs are requested by pods that are not best-effort (inference and anything else).
	ReservedGPUs int64
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
}

// Headroom asks the planner to keep room for whole inference replicas.
type Headroom struct {
	Service        string
	GPUsPerReplica int64
	Replicas       int
}

// NodePlan is the planner's decision for one node.
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
//	free        = allocatable - GPUs reserved by pods that are not best-effort - stuck GPUs
//	harvestable = free - headroom placed on the node
//
// Headroom is placed one whole replica at a time (largest first), on a node whose
// free GPUs can hold it, preferring (1) a node where it fits without evicting
// anything more (its free GPUs, and lent ones already returning), (2) a node already hosting inference, so whole idle nodes stay lendable,
// (3) the tightest fit. The verdict is draining when lent GPUs exceed harvestable
// ones, closed when nothing is harvestable, open otherwise (planFor). Nodes outside the pool,
// unschedulable nodes and nodes whose reservations exceed their allocatable GPUs are closed.
func MakePlan(nodes []Node, headroom []Headroom) Plan {
	plan := Plan{Nodes: make(map[string]NodePlan, len(nodes))}
	// Spare and placed GPUs live beside each node rather than in maps by name:
	// placing a replica compares every lendable node, and on a large pool with
	// much headroom the map lookups were most of the planner's time.
	lendable := make([]home, 0, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		free := n.AllocatableGPUs - n.ReservedGPUs - n.StuckGPUs
		if !n.InPool || !n.Schedulable || free < 0 {
			plan.Nodes[n.Name] = NodePlan{Verdict: Closed}
			continue
		}
		lendable = append(lendable, home{Node: n, spare: free})
	}

	// Headroom is counted, not listed replica by replica: a service asking for
	// a billion replicas costs one placement per replica that fits, no more.
	var wanted []Headroom
	for _, h := range headroom {
		if h.GPUsPerReplica > 0 && h.Replicas > 0 {
			wanted = append(wanted, h)
		}
	}
	sort.SliceStable(wanted, func(i, j int) bool { return wanted[i].GPUsPerReplica > wanted[j].GPUsPerReplica })

	for _, r := range wanted {
		for placed := 0; placed < r.Replicas; placed++ {
			var best *home
			for i := range lendable {
				h := &lendable[i]
				if h.spare < r.GPUsPerReplica {
					continue
				}
				if best == nil || betterHome(h, best, r.GPUsPerReplica) {
					best = h
				}
			}
			if best == nil {
				// Nothing holds this replica, so nothing holds the rest of them.
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

// home is a lendable node while headroom is placed: its GPUs not yet reserved
// (spare) and the headroom placed on it.
type home struct {
	*Node
	spare, placed int64
}

// betterHome reports whether a is a better place than b for a replica of size gpus.
func betterHome(a, b *home, gpus int64) bool {
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
	return a.Name < b.Name
}
