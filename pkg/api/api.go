// Package api holds the names Gleaner's components agree on: labels, annotations,
// PriorityClasses, the scheduler name and the controller's Lease. Every other
// package takes these from here so the contract lives in one place.
package api

import (
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// Prefix begins every label and annotation key of Gleaner's.
	Prefix = "gleaner.dev/"
	// LabelRole marks inference pods (value RoleInference).
	LabelRole     = "gleaner.dev/role"
	RoleInference = "inference"
	// LabelService names the inference service a pod serves; default: the owning Deployment.
	LabelService = "gleaner.dev/service"
	// AnnotationMetricsPort and AnnotationMetricsPath locate a vLLM pod's /metrics.
	AnnotationMetricsPort = "gleaner.dev/metrics-port"
	AnnotationMetricsPath = "gleaner.dev/metrics-path"
	DefaultMetricsPort    = 8000
	DefaultMetricsPath    = "/metrics"

	// LabelInferenceNamespace opts a namespace in as inference (value "true"):
	// only there do inference pods and Deployments make services whose demand
	// Gleaner keeps room for. It is the cluster admin's to set, not a tenant's.
	LabelInferenceNamespace = "gleaner.dev/inference"

	// LabelPool marks the GPU nodes Gleaner may lend (value PoolInference by default).
	LabelPool     = "gleaner.dev/pool"
	PoolInference = "inference"

	// LabelHarvest is the planner's verdict on a node, one of the Harvest* values.
	LabelHarvest = "gleaner.dev/harvest"
	// AnnotationHarvestableGPUs is how many of the node's GPUs may be lent (a decimal integer).
	AnnotationHarvestableGPUs = "gleaner.dev/harvestable-gpus"
	// AnnotationAvailability is how long an open node's lendable GPUs are
	// expected to stay lendable (harvest.Availability): "for=1h45m,survive-1h=0.93,survive-4h=0.41".
	AnnotationAvailability = "gleaner.dev/availability"

	// Per-service settings, read from the annotations of the Deployment that owns
	// a service's inference pods. An invalid value is reported as an Event on the
	// Deployment and replaced by the controller's default.
	//
	// AnnotationTargetLoad: the load one replica should carry, a positive number
	// (requests for LoadMetricRequests, a KV-cache fraction in (0, 1] for LoadMetricKVCache).
	AnnotationTargetLoad = "gleaner.dev/target-load"
	// AnnotationLoadMetric: what load means for the service, LoadMetricRequests (default) or LoadMetricKVCache.
	AnnotationLoadMetric = "gleaner.dev/load-metric"
	LoadMetricRequests   = "requests"
	LoadMetricKVCache    = "kv-cache"
	// AnnotationGPUsPerReplica: GPUs one replica needs on one node; default the pod template's request.
	AnnotationGPUsPerReplica = "gleaner.dev/gpus-per-replica"
	// AnnotationAutoscale: "true" lets gleaner-controller scale the Deployment on vLLM load.
	AnnotationAutoscale = "gleaner.dev/autoscale"
	// AnnotationMinReplicas and AnnotationMaxReplicas bound the autoscaler (defaults 1 and the controller's maximum).
	AnnotationMinReplicas = "gleaner.dev/min-replicas"
	AnnotationMaxReplicas = "gleaner.dev/max-replicas"
	// AnnotationDemandProfile holds the service's learned quarter-hour-of-week load
	// profile (JSON, written by gleaner-controller), so a restart forgets nothing.
	AnnotationDemandProfile = "gleaner.dev/demand-profile"

	// LabelPodGroup is the scheduler-plugins PodGroup label: pods sharing its
	// value in one namespace are a gang and are evicted together.
	LabelPodGroup = "scheduling.x-k8s.io/pod-group"

	// AnnotationCheckpointInterval is how long a best-effort pod runs between
	// checkpoints (a Go duration, e.g. "45m"): GPUHarvest's Score places it
	// where lendable GPUs are likely to stay lent that long.
	AnnotationCheckpointInterval = "gleaner.dev/checkpoint-interval"

	// AnnotationLastCheckpoint is an RFC 3339 time a best-effort pod writes after each checkpoint.
	AnnotationLastCheckpoint = "gleaner.dev/last-checkpoint"
	// AnnotationSaveDuration is how long a best-effort pod takes, once asked
	// to stop, to have saved a checkpoint (a Go duration, e.g. "25s": the
	// step in flight and the save, the longest it has measured), written
	// beside AnnotationLastCheckpoint. A reclaim that must take the pod
	// before it saved for a notice gives it this long and
	// reclaim.SavedGrace to exit, when that is shorter than its grace
	// period, so inference waits for the save, not the whole grace period.
	AnnotationSaveDuration = "gleaner.dev/save-duration"

	// AnnotationReclaimNotice is the RFC 3339 time gleaner-controller expects
	// to evict a best-effort pod: its GPUs will be needed by inference. It is
	// set (and moved) by gleaner-controller and removed when the forecast
	// recedes; a job that reads it checkpoints before then.
	AnnotationReclaimNotice = "gleaner.dev/reclaim-notice"
	// ConditionReclaimNotice is the pod condition that says why: True while a
	// notice stands, False once withdrawn.
	ConditionReclaimNotice = "gleaner.dev/ReclaimNotice"
	// ConditionEvictionRefused is the pod condition gleaner-controller sets,
	// True, when a PodDisruptionBudget first refuses to let it evict the pod:
	// its lastTransitionTime starts the pod's wait on the budget, which a
	// restarted controller takes up where it was (pod status is not a
	// tenant's to write).
	ConditionEvictionRefused = "gleaner.dev/EvictionRefused"

	PriorityClassInference  = "gleaner-inference"
	PriorityClassBestEffort = "gleaner-best-effort"

	SchedulerName = "gleaner-scheduler"

	// SystemNamespace holds Gleaner's Leases. ControllerLeaseName is the
	// controller's leader-election Lease; HeartbeatLeaseName is the Lease the
	// controller renews after every planning round that published every
	// verdict: the scheduler lends only while it sees it renewed.
	SystemNamespace     = "gleaner-system"
	ControllerLeaseName = "gleaner-controller"
	HeartbeatLeaseName  = "gleaner-controller-heartbeat"

	// GPUResource is the extended resource Gleaner lends.
	GPUResource v1.ResourceName = "nvidia.com/gpu"

	// DefaultBestEffortPriorityThreshold: pods with a priority below it are best-effort.
	DefaultBestEffortPriorityThreshold int32 = 0
)

// HarvestState is the value of LabelHarvest.
type HarvestState string

const (
	// HarvestOpen: best-effort pods may be placed on the node's harvestable GPUs.
	HarvestOpen HarvestState = "open"
	// HarvestDraining: inference needs GPUs that are lent; lent pods are being reclaimed and nothing new is placed.
	HarvestDraining HarvestState = "draining"
	// HarvestClosed: nothing is lent here.
	HarvestClosed HarvestState = "closed"
)

// IsBestEffort reports whether a pod's priority is below threshold. A pod without a
// resolved priority (nil) counts as priority 0, as the scheduler treats it.
func IsBestEffort(pod *v1.Pod, threshold int32) bool {
	var p int32
	if pod.Spec.Priority != nil {
		p = *pod.Spec.Priority
	}
	return p < threshold
}

// IsInference reports whether a pod carries the inference role label.
func IsInference(pod *v1.Pod) bool {
	return pod.Labels[LabelRole] == RoleInference
}

// ServiceName is the service an inference pod serves: the label
// LabelService, else the owning Deployment (the ReplicaSet name minus its
// pod-template-hash suffix), else the controlling owner's name, else the
// pod's own name.
func ServiceName(pod *v1.Pod) string {
	if s := pod.Labels[LabelService]; s != "" {
		return s
	}
	owner := metav1.GetControllerOf(pod)
	if owner == nil && len(pod.OwnerReferences) > 0 {
		owner = &pod.OwnerReferences[0]
	}
	if owner == nil {
		return pod.Name
	}
	if owner.Kind == "ReplicaSet" {
		if hash := pod.Labels[appsv1.DefaultDeploymentUniqueLabelKey]; hash != "" {
			if deployment, ok := strings.CutSuffix(owner.Name, "-"+hash); ok && deployment != "" {
				return deployment
			}
		}
	}
	return owner.Name
}

// PodGPUs is the pod's effective request of the given resource (containers, init
// containers and overhead combined the way the scheduler counts them):
//
//	max(containers + sidecars, each init container + the sidecars before it) + overhead
//
// as resourcehelper.PodRequests counts it for an extended resource (pod-level
// resources do not take one), for one resource alone: a round asks it of
// every pod on the fleet several times, and building every resource's list
// for every pod was most of a round's cost (BenchmarkDecideFleet).
func PodGPUs(pod *v1.Pod, name v1.ResourceName) int64 {
	var sum, sidecars, inits resource.Quantity
	for i := range pod.Spec.Containers {
		if q, ok := pod.Spec.Containers[i].Resources.Requests[name]; ok {
			sum.Add(q)
		}
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		q := c.Resources.Requests[name]
		var use resource.Quantity
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			sum.Add(q)
			sidecars.Add(q)
			use = sidecars.DeepCopy()
		} else {
			use = q.DeepCopy()
			use.Add(sidecars)
		}
		if use.Cmp(inits) > 0 {
			inits = use
		}
	}
	if inits.Cmp(sum) > 0 {
		sum = inits
	}
	if q, ok := pod.Spec.Overhead[name]; ok {
		sum.Add(q)
	}
	return sum.Value()
}

// NodeReady reports whether a node's Ready condition is True: a node whose
// kubelet stopped reporting, or never did, is not.
func NodeReady(n *v1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// HoldsResources reports whether a pod still occupies its node's resources: bound and not finished.
func HoldsResources(pod *v1.Pod) bool {
	return pod.Spec.NodeName != "" && pod.Status.Phase != v1.PodSucceeded && pod.Status.Phase != v1.PodFailed
}

// MaxSaveDuration bounds AnnotationSaveDuration: no grace period is longer.
const MaxSaveDuration = 24 * time.Hour

// SaveDuration is how long the pod says it takes to save a checkpoint once
// asked to stop (AnnotationSaveDuration), if it says so readably: a Go
// duration in [0, MaxSaveDuration], of at most 32 characters. The pod's own
// word: it can only shorten the pod's own grace period
// (reclaim.Candidate.EvictionGrace).
func SaveDuration(pod *v1.Pod) (time.Duration, bool) {
	raw, ok := pod.Annotations[AnnotationSaveDuration]
	if !ok || len(raw) > 32 {
		return 0, false
	}
	d, err := time.ParseDuration(raw)
	if err != nil || d < 0 || d > MaxSaveDuration {
		return 0, false
	}
	return d, true
}

// MaxCheckpointInterval bounds AnnotationCheckpointInterval.
const MaxCheckpointInterval = 7 * 24 * time.Hour

// CheckpointInterval is the pod's declared time between checkpoints, if it
// declares a readable one in (0, MaxCheckpointInterval].
func CheckpointInterval(pod *v1.Pod) (time.Duration, bool) {
	raw, ok := pod.Annotations[AnnotationCheckpointInterval]
	if !ok || len(raw) > 32 {
		return 0, false
	}
	d, err := time.ParseDuration(raw)
	if err != nil || d <= 0 || d > MaxCheckpointInterval {
		return 0, false
	}
	return d, true
}
