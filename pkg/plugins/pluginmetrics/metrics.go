// Package pluginmetrics holds the gleaner_scheduler_ metrics that Gleaner's
// plugins add to gleaner-scheduler's own /metrics endpoint. docs/metrics.md
// lists them; a test keeps the two in step.
package pluginmetrics

import "github.com/gleaner-dev/gleaner/pkg/metricset"

// Values of the reason label of FilterRejections.
const (
	ReasonHeartbeatStale = "heartbeat_stale"
	ReasonLendingStopped = "lending_stopped"
	ReasonNotOpen        = "not_open"
	ReasonBadVerdict     = "bad_verdict"
	ReasonNotEnoughGPUs  = "not_enough_gpus"
	ReasonNewNode        = "new_node"
	ReasonResourceClaims = "resource_claims"
)

// schedulerMetrics are the metrics below, gleaner_scheduler_NAME.
var schedulerMetrics = metricset.New("scheduler")

var (
	// FilterRejections counts GPUHarvest's rejections: per pod for a stale
	// heartbeat or stopped lending (PreFilter), per pod and node otherwise.
	FilterRejections = schedulerMetrics.CounterVec("harvest_rejections_total",
		"Best-effort placements GPUHarvest rejected, by reason: heartbeat_stale, lending_stopped (the admin's kill switch), resource_claims (the pod has ResourceClaims of its own) (per pod), not_open, bad_verdict, not_enough_gpus, new_node (per pod and node).", "reason")
	// HeartbeatFresh is 1 while the controller's Lease is fresh, else 0.
	HeartbeatFresh = schedulerMetrics.Gauge("controller_heartbeat_fresh",
		"1 while gleaner-controller's Lease is fresh (GPUs may be lent), 0 while it is stale, missing or carries the admin's stop-lending switch (every node counts as closed).")
	// LendingStopped is 1 once this scheduler has seen the admin's kill
	// switch on the controller's Lease, 0 once it has seen it lifted.
	LendingStopped = schedulerMetrics.Gauge("lending_stopped",
		"1 while the controller's Lease, as this scheduler last saw it, carries the admin's stop-lending switch (nothing is lent), else 0. kubectl gleaner pause has reached this scheduler once it reads 1.")
	// GangDecisions counts Permit outcomes for pod-group members.
	GangDecisions = schedulerMetrics.CounterVec("gang_decisions_total",
		"Gang decisions, by result: completed (the member that completed its group), waiting (a member waits at Permit), released (a member failed or timed out and its group's waiting members were rejected).", "result")
	// Preemptions counts ReclaimPreemption's PostFilter calls.
	Preemptions = schedulerMetrics.CounterVec("reclaim_preemption_attempts_total",
		"ReclaimPreemption attempts, by result: nominated (victims chosen), failed (no node could be freed), refused (the pod is best-effort), awaiting_terminating (pods already terminating will make room).", "result")
)

// Register adds the metrics to the registry gleaner-scheduler serves. Plugins
// call it from their factories.
func Register() {
	schedulerMetrics.Register()
}
