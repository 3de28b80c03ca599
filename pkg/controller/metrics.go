package controller

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/gleaner-dev/gleaner/pkg/vllm"
)

// The controller's metrics, served on its /metrics endpoint. docs/metrics.md
// lists every gleaner_ metric; keep it in step.
var (
	// gpus: pool GPUs by state. serving: held by pods that are not best-effort;
	// lent: held by best-effort pods; headroom: kept free for inference to scale
	// into; harvestable: may be lent (lent ones included); idle: held by no pod.
	gpusGauge = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "gleaner", Name: "gpus",
		Help:           "GPUs of the pool nodes by state: serving, lent, stuck (the part of lent held by best-effort pods terminating past their capped grace), headroom, harvestable, idle.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"state"})
	nodesGauge = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "gleaner", Name: "nodes",
		Help:           "Nodes by published harvest verdict: open, draining, closed (pool nodes only).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"state"})
	harvestedGPUSeconds = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "gleaner", Name: "harvested_gpu_seconds_total",
		Help:           "GPU-seconds held by best-effort pods on pool nodes, by the pods' namespace.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"namespace"})
	evictionsTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "gleaner", Name: "reclaim_evictions_total",
		Help:           "Evictions the reclaimer asked for, by result: evicted, blocked (refused, e.g. by a PodDisruptionBudget), error.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	noticesTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "gleaner", Name: "reclaim_notices_total",
		Help:           "Reclaim notices written on best-effort pods, by event: given (a first notice), moved (its expected time changed by a minute or more), withdrawn (the forecast receded), error.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"event"})
	noticeLead = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace: "gleaner", Name: "reclaim_notice_lead_seconds",
		Help:           "How long before its eviction a best-effort pod was first given a reclaim notice.",
		Buckets:        []float64{10, 30, 60, 120, 300, 600, 900, 1800, 3600},
		StabilityLevel: metrics.ALPHA,
	})
	unwarnedEvictions = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "gleaner", Name: "reclaim_evictions_unwarned_total",
		Help:           "Evictions without a notice that ran its course, by reason: unforeseen (no notice: the forecast saw the need only within the reclaim lead), inference_waiting (evicted before its notice's time because inference already needed the GPUs).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	lostWorkGPUSeconds = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "gleaner", Name: "reclaim_lost_work_gpu_seconds_total",
		Help:           "Work lost by evicted best-effort pods: GPUs x time since their last checkpoint or start.",
		StabilityLevel: metrics.ALPHA,
	})
	reclaimLatency = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace: "gleaner", Name: "reclaim_duration_seconds",
		Help:           "Time from a node starting to drain until its lent GPUs were back within its harvestable GPUs.",
		Buckets:        []float64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600},
		StabilityLevel: metrics.ALPHA,
	})
	inferenceWait = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace: "gleaner", Name: "inference_pod_scheduling_wait_seconds",
		Help:           "Time inference pods on pool nodes waited from creation until they were scheduled.",
		Buckets:        waitBuckets,
		StabilityLevel: metrics.ALPHA,
	})
	// The same per service, beside the reclaim budget (waits.go).
	serviceWait = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace: "gleaner", Name: "service_scheduling_wait_seconds",
		Help:           "Time a service's inference pods on pool nodes waited from creation until they were scheduled (namespaces opted in as inference).",
		Buckets:        waitBuckets,
		StabilityLevel: metrics.ALPHA,
	}, []string{"namespace", "service"})
	serviceWaitLongest = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "gleaner", Name: "service_scheduling_wait_longest_seconds",
		Help:           "The longest wait to be scheduled of a service's inference pods scheduled on pool nodes in the last 10 minutes; 0 when none was.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"namespace", "service"})
	serviceWaitsOverBudget = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "gleaner", Name: "service_scheduling_waits_over_budget_total",
		Help:           "A service's inference pods on pool nodes that waited longer than the reclaim budget to be scheduled.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"namespace", "service"})
	reclaimBudget = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "gleaner", Name: "reclaim_budget_seconds",
		Help:           "The reclaim budget: the longest an inference pod should wait for lent GPUs (a round, the grace cap, and 5 s).",
		StabilityLevel: metrics.ALPHA,
	})
	owedSeconds = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "gleaner", Name: "reclaim_owed_seconds",
		Help:           "How long the node that has owed lent GPUs back the longest has owed them (0 when none owes any).",
		StabilityLevel: metrics.ALPHA,
	})
	unplacedHeadroom = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "gleaner", Name: "headroom_unplaced_replicas",
		Help:           "Inference replicas of headroom that fit on no pool node even with nothing lent.",
		StabilityLevel: metrics.ALPHA,
	})
	syncDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace: "gleaner", Name: "controller_sync_duration_seconds",
		Help:           "Duration of one planning round: observe, plan, publish, reclaim.",
		Buckets:        metrics.ExponentialBuckets(0.001, 2, 14),
		StabilityLevel: metrics.ALPHA,
	})
	planDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace: "gleaner", Name: "controller_plan_duration_seconds",
		Help:           "Wall time of a planning round's observe and plan steps, which make no API calls (the rest of the round is its writes).",
		Buckets:        metrics.ExponentialBuckets(0.001, 2, 14),
		StabilityLevel: metrics.ALPHA,
	})
	planCPUSeconds = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace: "gleaner", Name: "controller_plan_cpu_seconds",
		Help:           "CPU time of a planning round's observe and plan steps on the round's own thread (Linux only): the round's cost without API I/O, scrapes or watches.",
		Buckets:        metrics.ExponentialBuckets(0.001, 2, 14),
		StabilityLevel: metrics.ALPHA,
	})
	lastRound = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "gleaner", Name: "controller_last_round_timestamp_seconds",
		Help:           "Unix time of the last planning round that published every node's verdict (and renewed the heartbeat).",
		StabilityLevel: metrics.ALPHA,
	})
	watchStalled = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "gleaner", Name: "controller_watch_stalled",
		Help:           "1 while the controller's watch of a resource (nodes, pods) has not reached a version the API server was at longer ago than the bound: it does not renew the heartbeat.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	lendingStopped = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "gleaner", Name: "lending_stopped",
		Help:           "1 while the cluster admin's kill switch (annotation gleaner.dev/stop-lending on the heartbeat Lease) is set to this mode (Hold: nothing new is lent; HoldAndDrain: and every lent GPU is taken back), as the controller last read it.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"mode"})
	roundAge = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "gleaner", Name: "controller_round_age_seconds",
		Help:           "Seconds since this process, while planning, last completed a round that published every verdict (since it started planning, before the first); 0 when it does not plan.",
		StabilityLevel: metrics.ALPHA,
	})
	syncErrors = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "gleaner", Name: "controller_sync_errors_total",
		Help:           "Planning rounds that ended with an error (API writes or evictions failed).",
		StabilityLevel: metrics.ALPHA,
	})
)

// waitBuckets bound inference waits: the reclaim budget is 130 s by default.
var waitBuckets = []float64{0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300}

var (
	registerOnce sync.Once
	allMetrics   = []interface {
		metrics.Registerable
		FQName() string
	}{gpusGauge, nodesGauge, harvestedGPUSeconds, evictionsTotal, noticesTotal, noticeLead, unwarnedEvictions, lostWorkGPUSeconds,
		reclaimLatency, owedSeconds, inferenceWait, serviceWait, serviceWaitLongest, serviceWaitsOverBudget, reclaimBudget, unplacedHeadroom, syncDuration, planDuration, planCPUSeconds, syncErrors, lastRound, roundAge, watchStalled, lendingStopped,
		// The demand model's and the autoscaler's, from metrics_policy.go.
		forecastPeakLoad, serviceLoad, serviceReplicas, serviceHeadroom, profileWrites, autoscaleOps, invalidAnnotations}
)

// RegisterMetrics adds the controller's and the vLLM informer's metrics to the
// legacy registry served on /metrics.
func RegisterMetrics() {
	registerOnce.Do(func() {
		for _, m := range allMetrics {
			legacyregistry.MustRegister(m)
		}
		vllm.RegisterMetrics()
	})
}

// b2f is 1 for true, 0 for false: a gauge that says yes or no.
func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
