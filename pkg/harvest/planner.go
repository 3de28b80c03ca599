// Package harvest decides, per pool node, how many GPUs may be lent to
// best-effort pods. The planning is pure (plain values in, verdicts out) so the
// controller and any simulator run the same policy.
package harvest

import (
	"sort"

	"github.com/gleaner-dev/gleaner/pkg/api"
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
	// Unplaced lists headroom replicas that fit on no node even with every
	// best-effort pod gone; reclaiming cannot help them, so nothing is reserved.
	Unplaced []Headroom
}

// MakePlan computes, for every node:
//
//	free        = allocatable - GPUs reserved by pods that are not best-effort
//	harvestable = free - headroom placed on the node
//
// Headroom is placed one whole replica at a time (largest first), on a node whose
// free GPUs can hold it, preferring (1) a node where it fits without reclaiming lent
// GPUs, (2) a node already hosting inference, so whole idle nodes stay lendable,
// (3) the tightest fit. The verdict is draining when lent GPUs exceed harvestable
// ones, closed when nothing is harvestable, open otherwise. Nodes outside the pool,
// unschedulable nodes and nodes whose reservations exceed their allocatable GPUs are closed.
func MakePlan(nodes []Node, headroom []Headroom) Plan {
	plan := Plan{Nodes: make(map[string]NodePlan, len(nodes))}
	spare := make(map[string]int64, len(nodes))
	var lendable []*Node
	for i := range nodes {
		n := &nodes[i]
		free := n.AllocatableGPUs - n.ReservedGPUs
		if !n.InPool || !n.Schedulable || free < 0 {
			plan.Nodes[n.Name] = NodePlan{Verdict: Closed}
			continue
		}
		spare[n.Name] = free
		lendable = append(lendable, n)
	}

	var replicas []Headroom
	for _, h := range headroom {
		if h.GPUsPerReplica <= 0 {
			continue
		}
		for range h.Replicas {
			replicas = append(replicas, Headroom{Service: h.Service, GPUsPerReplica: h.GPUsPerReplica, Replicas: 1})
		}
	}
	sort.SliceStable(replicas, func(i, j int) bool { return replicas[i].GPUsPerReplica > replicas[j].GPUsPerReplica })

	placed := make(map[string]int64, len(lendable))
	for _, r := range replicas {
		var best *Node
		for _, n := range lendable {
			if spare[n.Name] < r.GPUsPerReplica {
				continue
			}
			if best == nil || betterHome(n, best, spare, r.GPUsPerReplica) {
				best = n
			}
		}
		if best == nil {
			plan.Unplaced = append(plan.Unplaced, r)
			continue
		}
		spare[best.Name] -= r.GPUsPerReplica
		placed[best.Name] += r.GPUsPerReplica
	}

	for _, n := range lendable {
		harvestable := spare[n.Name]
		np := NodePlan{HeadroomGPUs: placed[n.Name], Verdict: Verdict{HarvestableGPUs: harvestable}}
		switch {
		case n.LentGPUs > harvestable:
			np.State = api.HarvestDraining
			np.ReclaimGPUs = n.LentGPUs - harvestable
		case harvestable == 0:
			np.State = api.HarvestClosed
		default:
			np.State = api.HarvestOpen
		}
		plan.Nodes[n.Name] = np
	}
	return plan
}

// betterHome reports whether a is a better place than b for a replica of size gpus.
func betterHome(a, b *Node, spare map[string]int64, gpus int64) bool {
	aNoReclaim := spare[a.Name]-a.LentGPUs >= gpus
	bNoReclaim := spare[b.Name]-b.LentGPUs >= gpus
	if aNoReclaim != bNoReclaim {
		return aNoReclaim
	}
	if a.HostsInference != b.HostsInference {
		return a.HostsInference
	}
	if spare[a.Name] != spare[b.Name] {
		return spare[a.Name] < spare[b.Name]
	}
	return a.Name < b.Name
}
