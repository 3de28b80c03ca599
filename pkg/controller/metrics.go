package controller

import (
	"k8s.io/component-base/metrics"

	"github.com/gleaner-dev/gleaner/pkg/metricset"
	"github.com/gleaner-dev/gleaner/pkg/vllm"
)

// families are the controller's metrics, served on its /metrics endpoint: the
// ones below and the demand model's and the autoscaler's (metrics_policy.go).
// docs/metrics.md lists every gleaner_ metric; keep it in step.
var families = metricset.New("")

var (
	// gpus: pool GPUs by state. serving: held by pods that are not best-effort;
	// lent: held by best-effort pods; headroom: kept free for inference to scale
	// into; harvestable: may be lent (lent ones included); idle: held by no pod.
	gpusGauge = families.GaugeVec("gpus",
		"GPUs of the pool nodes by state: serving, lent, stuck (the part of lent held by best-effort pods terminating past their capped grace), headroom, harvestable, idle.", "state")
	nodesGauge = families.GaugeVec("nodes",
		"Nodes by published harvest verdict: open, draining, closed (pool nodes only).", "state")
	harvestedGPUSeconds = families.CounterVec("harvested_gpu_seconds_total",
		"GPU-seconds held by best-effort pods on pool nodes, by the pods' namespace.", "namespace")
	evictionsTotal = families.CounterVec("reclaim_evictions_total",
		"Evictions the reclaimer asked for, by result: evicted, blocked (refused, e.g. by a PodDisruptionBudget), error.", "result")
	noticesTotal = families.CounterVec("reclaim_notices_total",
		"Reclaim notices written on best-effort pods, by event: given (a first notice), moved (its expected time changed by a minute or more), withdrawn (the forecast receded), error.", "event")
	noticeLead = families.Histogram("reclaim_notice_lead_seconds",
		"How long before its eviction a best-effort pod was first given a reclaim notice.", []float64{10, 30, 60, 120, 300, 600, 900, 1800, 3600})
	unwarnedEvictions = families.CounterVec("reclaim_evictions_unwarned_total",
		"Evictions without a notice that ran its course, by reason: unforeseen (no notice: the forecast saw the need only within the reclaim lead), inference_waiting (evicted before its notice's time because inference already needed the GPUs).", "reason")
	lostWorkGPUSeconds = families.Counter("reclaim_lost_work_gpu_seconds_total",
		"Work lost by evicted best-effort pods: GPUs x time since their last checkpoint or start.")
	reclaimLatency = families.Histogram("reclaim_duration_seconds",
		"Time from a node starting to drain until its lent GPUs were back within its harvestable GPUs.", []float64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600})
	inferenceWait = families.Histogram("inference_pod_scheduling_wait_seconds",
		"Time inference pods on pool nodes waited from creation until they were scheduled.", waitBuckets)
	// The same per service, beside the reclaim budget (waits.go).
	serviceWait = families.HistogramVec("service_scheduling_wait_seconds",
		"Time a service's inference pods on pool nodes waited from creation until they were scheduled (namespaces opted in as inference).", waitBuckets, "namespace", "service")
	serviceWaitLongest = families.GaugeVec("service_scheduling_wait_longest_seconds",
		"The longest wait to be scheduled of a service's inference pods scheduled on pool nodes in the last 10 minutes; 0 when none was.", "namespace", "service")
	serviceWaitsOverBudget = families.CounterVec("service_scheduling_waits_over_budget_total",
		"A service's inference pods on pool nodes that waited longer than the reclaim budget to be scheduled.", "namespace", "service")
	reclaimBudget = families.Gauge("reclaim_budget_seconds",
		"The reclaim budget: the longest an inference pod should wait for lent GPUs (a round, the grace cap, and 5 s).")
	owedSeconds = families.Gauge("reclaim_owed_seconds",
		"How long the node that has owed lent GPUs back the longest has owed them (0 when none owes any).")
	unplacedHeadroom = families.Gauge("headroom_unplaced_replicas",
		"Inference replicas of headroom that fit on no pool node even with nothing lent.")
	syncDuration = families.Histogram("controller_sync_duration_seconds",
		"Duration of one planning round: observe, plan, publish, reclaim.", metrics.ExponentialBuckets(0.001, 2, 14))
	planDuration = families.Histogram("controller_plan_duration_seconds",
		"Wall time of a planning round's observe and plan steps, which make no API calls (the rest of the round is its writes).", metrics.ExponentialBuckets(0.001, 2, 14))
	planCPUSeconds = families.Histogram("controller_plan_cpu_seconds",
		"CPU time of a planning round's observe and plan steps on the round's own thread (Linux only): the round's cost without API I/O, scrapes or watches.", metrics.ExponentialBuckets(0.001, 2, 14))
	lastRound = families.Gauge("controller_last_round_timestamp_seconds",
		"Unix time of the last planning round that published every node's verdict (and renewed the heartbeat).")
	watchStalled = families.GaugeVec("controller_watch_stalled",
		"1 while the controller's watch of a resource (nodes, pods) has not reached a version the API server was at longer ago than the bound: it does not renew the heartbeat.", "resource")
	lendingStopped = families.GaugeVec("lending_stopped",
		"1 while the cluster admin's kill switch (annotation gleaner.dev/stop-lending on the heartbeat Lease) is set to this mode (Hold: nothing new is lent; HoldAndDrain: and every lent GPU is taken back), as the controller last read it.", "mode")
	roundAge = families.Gauge("controller_round_age_seconds",
		"Seconds since this process, while planning, last completed a round that published every verdict (since it started planning, before the first); 0 when it does not plan.")
	syncErrors = families.Counter("controller_sync_errors_total",
		"Planning rounds that ended with an error (API writes or evictions failed).")
)

// waitBuckets bound inference waits: the reclaim budget is 130 s by default.
var waitBuckets = []float64{0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300}

// RegisterMetrics adds the controller's and the vLLM informer's metrics to the
// legacy registry served on /metrics.
func RegisterMetrics() {
	families.Register()
	vllm.RegisterMetrics()
}

// b2f is 1 for true, 0 for false: a gauge that says yes or no.
func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
