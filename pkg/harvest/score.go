package harvest

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
