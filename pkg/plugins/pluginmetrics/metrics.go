// Package pluginmetrics holds the gleaner_scheduler_ metrics that Gleaner's
// plugins add to gleaner-scheduler's own /metrics endpoint. docs/metrics.md
// lists them; a test keeps the two in step.
package pluginmetrics

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Values of the reason label of FilterRejections.
const (
	ReasonHeartbeatStale = "heartbeat_stale"
	ReasonLendingStopped = "lending_stopped"
	ReasonNotOpen        = "not_open"
	ReasonBadVerdict     = "bad_verdict"
	ReasonNotEnoughGPUs  = "not_enough_gpus"
	ReasonNewNode        = "new_node"
)

var (
	// FilterRejections counts GPUHarvest's rejections: per pod for a stale
	// heartbeat or stopped lending (PreFilter), per pod and node otherwise.
	FilterRejections = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "gleaner", Subsystem: "scheduler", Name: "harvest_rejections_total",
		Help:           "Best-effort placements GPUHarvest rejected, by reason: heartbeat_stale, lending_stopped (the admin's kill switch) (per pod), not_open, bad_verdict, not_enough_gpus, new_node (per pod and node).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	// HeartbeatFresh is 1 while the controller's Lease is fresh, else 0.
	HeartbeatFresh = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "gleaner", Subsystem: "scheduler", Name: "controller_heartbeat_fresh",
		Help:           "1 while gleaner-controller's Lease is fresh (GPUs may be lent), 0 while it is stale, missing or carries the admin's stop-lending switch (every node counts as closed).",
		StabilityLevel: metrics.ALPHA,
	})
	// GangDecisions counts Permit outcomes for pod-group members.
	GangDecisions = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "gleaner", Subsystem: "scheduler", Name: "gang_decisions_total",
		Help:           "Gang decisions, by result: completed (the member that completed its group), waiting (a member waits at Permit), released (a member failed or timed out and its group's waiting members were rejected).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	// Preemptions counts ReclaimPreemption's PostFilter calls.
	Preemptions = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "gleaner", Subsystem: "scheduler", Name: "reclaim_preemption_attempts_total",
		Help:           "ReclaimPreemption attempts, by result: nominated (victims chosen), failed (no node could be freed), refused (the pod is best-effort), awaiting_terminating (pods already terminating will make room).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	// All lists every metric of the package, for registration and docs checks.
	All = []interface {
		metrics.Registerable
		FQName() string
	}{FilterRejections, HeartbeatFresh, GangDecisions, Preemptions}

	registerOnce sync.Once
)

// Register adds the metrics to the registry gleaner-scheduler serves. Plugins
// call it from their factories.
func Register() {
	registerOnce.Do(func() {
		for _, m := range All {
			legacyregistry.MustRegister(m)
		}
	})
}
