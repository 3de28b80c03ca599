package harvest

import "time"

// PlacementNode is what the placement score reads about one node.
type PlacementNode struct {
	// HarvestableGPUs is the node's published harvestable GPU count.
	HarvestableGPUs int64
	// LentGPUs are held by best-effort pods on the node (terminating ones included).
	LentGPUs int64
	// AllocatableGPUs is the node's allocatable GPU count.
	AllocatableGPUs int64
	// ServingGPUs are requested by pods that are not best-effort (inference).
	ServingGPUs int64
}

// PlacementScore is how much a best-effort pod requesting request GPUs prefers
// a node, in [0, maxScore], combining two preferences with weights wPacking and wIdle:
//
//	packing    = maxScore * min(lent + request, harvestable) / harvestable
//	idleWindow = maxScore * (allocatable - serving) / allocatable
//	score      = (wPacking * packing + wIdle * idleWindow) / (wPacking + wIdle)
//
// Packing fills one node's lent GPUs before the next, so reclaiming room for one
// inference replica evicts few jobs and other nodes stay whole. The idle window
// prefers nodes serving little inference: the planner keeps inference headroom
// on nodes that already serve, so GPUs lent there are the first taken back.
// A node with nothing harvestable scores 0. The GPUHarvest scheduler plugin and
// the simulator both score with this function.
func PlacementScore(n PlacementNode, request int64, wPacking, wIdle, maxScore int64) int64 {
	if n.HarvestableGPUs <= 0 || wPacking+wIdle <= 0 {
		return 0
	}
	packing := maxScore * min(n.LentGPUs+request, n.HarvestableGPUs) / n.HarvestableGPUs
	var idle int64
	if n.AllocatableGPUs > 0 {
		idle = maxScore * max(n.AllocatableGPUs-max(n.ServingGPUs, 0), 0) / n.AllocatableGPUs
	}
	return (wPacking*packing + wIdle*idle) / (wPacking + wIdle)
}

// AvailabilityScore is how much a best-effort pod that runs interval between
// checkpoints prefers a node whose lendable GPUs have availability a, in
// [0, maxScore]:
//
//	survive = the chance the GPUs stay lent for interval: Survive1h up to an
//	          hour, Survive4h from four, linear between
//	waste   = Survive4h for a pod that checkpoints within the hour, else 0
//	score   = maxScore * max(0, survive - waste/5)
//
// A pod goes where it is likely to reach its next checkpoint; a short one,
// among nodes as likely, to those whose GPUs will not stay long, leaving
// the long windows to long jobs. A chance NotLearned counts as 0, as a node
// without availability scores 0: the controller learns each span for the
// whole pool at once, so every node lacks it alike.
func AvailabilityScore(a Availability, interval time.Duration, maxScore int64) int64 {
	a.Survive1h, a.Survive4h = max(a.Survive1h, 0), max(a.Survive4h, 0)
	survive := a.Survive1h
	switch {
	case interval >= 4*time.Hour:
		survive = a.Survive4h
	case interval > time.Hour:
		f := float64(interval-time.Hour) / float64(3*time.Hour)
		survive = a.Survive1h*(1-f) + a.Survive4h*f
	}
	var waste float64
	if interval <= time.Hour {
		waste = a.Survive4h
	}
	return int64(float64(maxScore) * max(0, survive-waste/5))
}

// WithAvailability joins a placement score (weighed wPlacement in all) and an
// availability score with weight wAvail, as GPUHarvest's Score does for a pod
// that declares its checkpoint interval.
func WithAvailability(placement, wPlacement, avail, wAvail int64) int64 {
	if wAvail <= 0 || wPlacement+wAvail <= 0 {
		return placement
	}
	return (placement*wPlacement + avail*wAvail) / (wPlacement + wAvail)
}
