package controller

// Metrics of the demand model and the autoscaler: declared through families
// with the others, so RegisterMetrics serves them and the docs test checks them.
var (
	forecastPeakLoad = families.GaugeVec("demand_forecast_load",
		"Peak load a service is expected to reach over the reclaim horizon, in its load metric (requests or KV-cache fraction summed over replicas).", "namespace", "service")
	serviceLoad = families.GaugeVec("demand_load",
		"A service's load now, summed over its replicas with fresh metrics, in its load metric.", "namespace", "service")
	serviceReplicas = families.GaugeVec("demand_replicas",
		"A service's replicas, by kind: current (its inference pods), pending (those not scheduled yet) and needed (what its forecast load needs over the horizon).", "namespace", "service", "kind")
	serviceHeadroom = families.GaugeVec("demand_headroom_gpus",
		"GPUs a service's spare replicas (needed minus current) take: the room kept free for it to scale into, as far as the pool holds it.", "namespace", "service")
	profileWrites = families.CounterVec("demand_profile_writes_total",
		"Writes of learned demand profiles to Deployment annotations, by result: written, error.", "result")
	autoscaleOps = families.CounterVec("autoscale_operations_total",
		"Scale changes the autoscaler made to inference Deployments, by direction (up, down) and result (scaled, error).", "direction", "result")
	invalidAnnotations = families.Counter("invalid_annotations_total",
		"Times a Deployment's gleaner.dev annotations were found invalid and replaced by defaults (each also an Event on the Deployment).")
)
