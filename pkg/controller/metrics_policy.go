package controller

import (
	"k8s.io/component-base/metrics"
)

// Metrics of the demand model and the autoscaler; listed in allMetrics with the
// others, so RegisterMetrics serves them and the docs test checks them.
var (
	forecastPeakLoad = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "gleaner", Name: "demand_forecast_load",
		Help:           "Peak load a service is expected to reach over the reclaim horizon, in its load metric (requests or KV-cache fraction summed over replicas).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"namespace", "service"})
	serviceLoad = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "gleaner", Name: "demand_load",
		Help:           "A service's load now, summed over its replicas with fresh metrics, in its load metric.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"namespace", "service"})
	serviceReplicas = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "gleaner", Name: "demand_replicas",
		Help:           "A service's replicas, by kind: current (its inference pods), pending (those not scheduled yet) and needed (what its forecast load needs over the horizon).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"namespace", "service", "kind"})
	serviceHeadroom = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "gleaner", Name: "demand_headroom_gpus",
		Help:           "GPUs a service's spare replicas (needed minus current) take: the room kept free for it to scale into, as far as the pool holds it.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"namespace", "service"})
	profileWrites = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "gleaner", Name: "demand_profile_writes_total",
		Help:           "Writes of learned demand profiles to Deployment annotations, by result: written, error.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	autoscaleOps = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "gleaner", Name: "autoscale_operations_total",
		Help:           "Scale changes the autoscaler made to inference Deployments, by direction (up, down) and result (scaled, error).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"direction", "result"})
	invalidAnnotations = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "gleaner", Name: "invalid_annotations_total",
		Help:           "Times a Deployment's gleaner.dev annotations were found invalid and replaced by defaults (each also an Event on the Deployment).",
		StabilityLevel: metrics.ALPHA,
	})
)
