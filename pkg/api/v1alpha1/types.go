// Package v1alpha1 is what gleaner-controller publishes for people to read
// through the Kubernetes API (group gleaner.dev, version v1alpha1): the pool
// at a glance (GPUPool, cluster-scoped) and each namespace's harvest
// (HarvestReport, one per namespace). Both are status only: the controller
// writes them, nobody else does, and nothing in them moves Gleaner.
//
// A GPUPool holds pool totals and per-node GPU states, nothing about any
// tenant; a HarvestReport holds one namespace's jobs and GPU-hours and, in a
// namespace opted in as inference, how long its services' replicas waited
// for GPUs, readable by whoever may read that namespace (it aggregates to
// the view ClusterRole).
package v1alpha1

import (
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group and Version of the API.
const (
	Group   = "gleaner.dev"
	Version = "v1alpha1"
)

// GPUPoolResource and HarvestReportResource are the API's resources.
var (
	GPUPoolResource       = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "gpupools"}
	HarvestReportResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "harvestreports"}
)

// NotServed says whether err means that the API server does not serve the
// resource asked for at all (its CRD is not installed), rather than that one
// object, or its namespace, is missing.
func NotServed(err error) bool {
	if meta.IsNoMatchError(err) {
		return true
	}
	var status apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d == nil || d.Name == ""
}

// HarvestReportName is the name of the one HarvestReport in each namespace.
const HarvestReportName = "gleaner"

// GPUPool is the pool of GPU nodes one gleaner-controller lends from, as its
// last published round saw it. Its name is the pool label's value.
type GPUPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Status            GPUPoolStatus `json:"status,omitempty"`
}

// GPUPoolStatus is the pool at a glance.
type GPUPoolStatus struct {
	// ObservedTime is when the round this status describes ran.
	ObservedTime metav1.Time `json:"observedTime"`
	// Planning is true while the controller plans every round and publishes
	// every verdict: false, nothing new is lent.
	Planning bool `json:"planning"`
	// LendingStopped is the cluster admin's kill switch as the controller
	// last read it (api.StopHold or api.StopHoldAndDrain; empty: lending on),
	// and LendingStoppedReason the admin's word for it.
	LendingStopped       string `json:"lendingStopped,omitempty"`
	LendingStoppedReason string `json:"lendingStoppedReason,omitempty"`
	// Nodes counts the pool's nodes by verdict.
	Nodes NodeCounts `json:"nodes"`
	// GPUs counts the pool's GPUs by state.
	GPUs GPUCounts `json:"gpus"`
	// NodeStates are each node's GPUs by state, in name order (at most
	// MaxNodeStates; NodeStatesTruncated says when more were left out).
	NodeStates          []NodeState `json:"nodeStates,omitempty"`
	NodeStatesTruncated bool        `json:"nodeStatesTruncated,omitempty"`
	// History samples the pool every HistoryStep over the last HistorySpan.
	History []PoolSample `json:"history,omitempty"`
	// Outlook forecasts the pool every OutlookStep over the next OutlookSpan,
	// from the services' learned profiles and trends.
	Outlook []OutlookPoint `json:"outlook,omitempty"`
	// HarvestedGPUSeconds is every namespace's harvest, summed.
	HarvestedGPUSeconds int64 `json:"harvestedGPUSeconds"`
	// Price is the admin's GPU-hour price, if set: harvest is valued at it.
	Price *Price `json:"price,omitempty"`
	// SurvivalByLoad is what the controller learned of the availability it
	// forecasts for open nodes (gleaner.dev/availability): per load, as a
	// share of the forecast, at which a node would first be needed within
	// the span, how many GPUs were given that forecast and how many of them
	// stayed lent for an hour, and for four, fading with a half-life of two
	// days. The probabilities on the nodes come from it; the controller reads
	// it back after a restart.
	SurvivalByLoad []SurvivalRecord `json:"survivalByLoad,omitempty"`
	// Recalibration is what the controller learned of how far the chances
	// SurvivalByLoad gives come true: per band of those chances (in
	// log-odds), how many GPUs were given one in it and how many of them
	// stayed lent for an hour, and for four, fading as SurvivalByLoad does.
	// The probabilities on the nodes are SurvivalByLoad's passed through a
	// curve fitted to it; the controller reads it back after a restart.
	Recalibration []RecalibrationRecord `json:"recalibration,omitempty"`
	// PoolProfile is what the controller learned of how the inference
	// services' peaks add up in each quarter-hour of the week (JSON, at
	// most MaxPoolProfile bytes); the controller reads it back after a restart.
	PoolProfile string `json:"poolProfile,omitempty"`
}

// MaxPoolProfile bounds GPUPoolStatus.PoolProfile: a full week of ratios
// takes about 16 KB.
const MaxPoolProfile = 64 << 10

// SurvivalRecord counts, for one load level, the GPUs given it and those
// that stayed lent (each forecast counted once it was judged).
type SurvivalRecord struct {
	// NeededAtPercent is the load, as a percentage of the forecast, at which
	// the forecast first needs the GPUs within the span; 0 for GPUs needed
	// at none of the levels (up to twice the forecast).
	NeededAtPercent int32 `json:"neededAtPercent"`
	JudgedCounts    `json:",inline"`
}

// RecalibrationRecord counts, for one band of the chances given, the GPUs
// given a chance in it and those that stayed lent.
type RecalibrationRecord struct {
	// LogOddsMilli is the band's middle: log(p/(1-p)), in thousandths.
	LogOddsMilli int32 `json:"logOddsMilli"`
	JudgedCounts `json:",inline"`
}

// JudgedCounts are the GPUs given a chance of staying lent for an hour, and
// for four, and how many of them did.
type JudgedCounts struct {
	Given1h    int64 `json:"given1h"`
	Survived1h int64 `json:"survived1h"`
	Given4h    int64 `json:"given4h"`
	Survived4h int64 `json:"survived4h"`
}

// NodeCounts are the pool's nodes by verdict.
type NodeCounts struct {
	Open     int32 `json:"open"`
	Draining int32 `json:"draining"`
	Closed   int32 `json:"closed"`
}

// GPUCounts are GPUs by state. Every GPU of the pool is in one of serving,
// lent, headroom and idle; lendable says how many the verdicts lend.
type GPUCounts struct {
	Total int64 `json:"total"`
	// Serving: held by inference or anything else not best-effort.
	Serving int64 `json:"serving"`
	// Lent: held by best-effort pods.
	Lent int64 `json:"lent"`
	// Headroom: kept free for inference replicas the forecast expects.
	Headroom int64 `json:"headroom"`
	// Idle: free and not kept; on open nodes, waiting for a best-effort pod.
	Idle int64 `json:"idle"`
	// Lendable: what the verdicts let the scheduler lend (lent ones included).
	Lendable int64 `json:"lendable"`
}

// NodeState is one node's verdict and GPUs.
type NodeState struct {
	Name      string `json:"name"`
	Verdict   string `json:"verdict"`
	GPUCounts `json:",inline"`
}

// PoolSample is the pool's GPUs at one time.
type PoolSample struct {
	Time metav1.Time `json:"time"`
	// Serving: held by inference or anything else not best-effort
	// (GPUCounts.Serving). Earlier controllers wrote it as "inference";
	// it is read from there.
	Serving  int64 `json:"serving"`
	Lent     int64 `json:"lent"`
	Lendable int64 `json:"lendable"`
}

// OutlookPoint forecasts one step of the next OutlookSpan: the GPUs
// inference is expected to hold (serving), and the GPUs expected lendable, between
// what the controller's cautious forecast would lend (LendableLow: the peak
// of trend, profile and the load now) and what the learned profile alone
// would (LendableHigh).
type OutlookPoint struct {
	Time metav1.Time `json:"time"`
	// Serving: the GPUs inference is expected to hold. Objects written
	// wrote it as "inference"; it is read from there.
	Serving      int64 `json:"serving"`
	LendableLow  int64 `json:"lendableLow"`
	LendableHigh int64 `json:"lendableHigh"`
}

// Price values harvested GPU-hours: PerGPUHour in Currency.
type Price struct {
	PerGPUHour string `json:"perGPUHour"`
	Currency   string `json:"currency"`
}

// HarvestReport is one namespace's best-effort jobs on Gleaner's GPUs and
// what they harvested and, in a namespace opted in as inference, how long
// its services' replicas waited to be scheduled on the pool. Its name is
// HarvestReportName.
type HarvestReport struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Status            HarvestReportStatus `json:"status,omitempty"`
}

// HarvestReportStatus is a namespace's harvest.
type HarvestReportStatus struct {
	ObservedTime metav1.Time `json:"observedTime"`
	// HarvestedGPUSeconds is what the namespace's pods held of lent GPUs,
	// since the report was created.
	HarvestedGPUSeconds int64 `json:"harvestedGPUSeconds"`
	// HarvestedGPUHours is the same in hours, as a decimal ("12.50").
	HarvestedGPUHours string `json:"harvestedGPUHours"`
	// Value is HarvestedGPUSeconds at Price, if one is set.
	Value string `json:"value,omitempty"`
	Price *Price `json:"price,omitempty"`
	// Daily are the last days' harvest, one per UTC day, oldest first (at
	// most MaxDays).
	Daily []DailyHarvest `json:"daily,omitempty"`
	// Jobs are the namespace's jobs, newest first (at most MaxJobs).
	Jobs []Job `json:"jobs,omitempty"`
	// ReclaimBudgetMilliseconds is the reclaim budget the services' waits
	// are judged by: the longest an inference replica should wait for lent
	// GPUs to come back (a planning round to see it, the grace cap of the
	// best-effort pods evicted for it, and a few seconds for the scheduler
	// and the kubelet). Set in namespaces with services.
	ReclaimBudgetMilliseconds int64 `json:"reclaimBudgetMilliseconds,omitempty"`
	// Services are the namespace's inference services (a namespace opted in
	// as inference), by name (at most MaxServices; ServicesTruncated says
	// when more were left out).
	Services          []ServiceWaits `json:"services,omitempty"`
	ServicesTruncated bool           `json:"servicesTruncated,omitempty"`
}

// ServiceWaits is how long one inference service's replicas waited to be
// scheduled on the pool's nodes, from each pod's creation until it was
// scheduled: whatever held it up (lent GPUs being taken back, a pool full of
// inference, its own constraints).
type ServiceWaits struct {
	// Name is the service (gleaner.dev/service, default its Deployment).
	Name string `json:"name"`
	// Since is when the controller began counting the service's waits.
	Since metav1.Time `json:"since"`
	// Replicas counts its inference pods now; Pending those not yet
	// scheduled, the oldest created at PendingSince.
	Replicas     int32        `json:"replicas"`
	Pending      int32        `json:"pending"`
	PendingSince *metav1.Time `json:"pendingSince,omitempty"`
	// Waits are its replicas scheduled on pool nodes since Since.
	Waits WaitCounts `json:"waits"`
	// Daily are the same per UTC day, for the days any was scheduled,
	// oldest first (at most MaxDays).
	Daily []DailyWaits `json:"daily,omitempty"`
}

// WaitCounts count replicas scheduled on pool nodes and how long they waited.
type WaitCounts struct {
	// Scheduled counts the replicas; OverBudget those that waited longer
	// than the reclaim budget of the time.
	Scheduled  int64 `json:"scheduled"`
	OverBudget int64 `json:"overBudget"`
	// LongestMilliseconds is the longest wait, of the replica LongestPod,
	// scheduled at LongestAt.
	LongestMilliseconds int64        `json:"longestMilliseconds"`
	LongestPod          string       `json:"longestPod,omitempty"`
	LongestAt           *metav1.Time `json:"longestAt,omitempty"`
}

// DailyWaits are one UTC day's waits.
type DailyWaits struct {
	Date       string `json:"date"`
	WaitCounts `json:",inline"`
}

// DailyHarvest is one UTC day's harvest.
type DailyHarvest struct {
	Date       string `json:"date"`
	GPUSeconds int64  `json:"gpuSeconds"`
}

// Job is one best-effort job: a pod group, a workflow, a Job or a lone pod,
// across every pod it ran as.
type Job struct {
	// Kind is PodGroup, Workflow, Job or Pod; Name is its name.
	Kind string `json:"kind"`
	Name string `json:"name"`
	// State is the job in Gleaner's words (one of the JobState values).
	State JobState `json:"state"`
	// GPUs is what its pods hold or ask for now.
	GPUs int64 `json:"gpus"`
	// Pods counts its pods now (not finished).
	Pods int32 `json:"pods"`
	// HarvestedGPUSeconds is what its pods held of lent GPUs.
	HarvestedGPUSeconds int64 `json:"harvestedGPUSeconds"`
	// LostGPUSeconds is the work its evictions lost (GPUs times the time since
	// each evicted pod's last checkpoint).
	LostGPUSeconds int64 `json:"lostGPUSeconds"`
	Evictions      int32 `json:"evictions"`
	// LastCheckpoint is the newest checkpoint any of its pods reported.
	LastCheckpoint *metav1.Time `json:"lastCheckpoint,omitempty"`
	// ReclaimNotice is when its pods are expected to be evicted, if noticed.
	ReclaimNotice *metav1.Time `json:"reclaimNotice,omitempty"`
	// Timeline is what happened to it, oldest first (at most MaxEvents: the
	// first and the latest are kept).
	Timeline []JobEvent `json:"timeline,omitempty"`
}

// JobState is a job's state in Gleaner's words.
type JobState string

const (
	// JobWaiting: pods wait for GPUs (never placed yet).
	JobWaiting JobState = "Waiting"
	// JobRunning: pods run on lent GPUs.
	JobRunning JobState = "Running"
	// JobCheckpointing: running with a reclaim notice: its pods should
	// checkpoint now, before the notice's time.
	JobCheckpointing JobState = "Checkpointing"
	// JobEvicted: evicted and waiting to resume.
	JobEvicted JobState = "Evicted"
	// JobSucceeded, JobFailed: every pod finished.
	JobSucceeded JobState = "Succeeded"
	JobFailed    JobState = "Failed"
	// JobGone: its pods were deleted before they finished.
	JobGone JobState = "Gone"
)

// JobEvent is one entry of a job's timeline.
type JobEvent struct {
	Time metav1.Time `json:"time"`
	// Type is one of the EventType values.
	Type EventType `json:"type"`
	Pod  string    `json:"pod,omitempty"`
	Node string    `json:"node,omitempty"`
	GPUs int64     `json:"gpus,omitempty"`
	// Message says why, in a sentence (which services needed the GPUs, ...).
	Message string `json:"message,omitempty"`
}

// EventType names what happened to a job.
type EventType string

const (
	EventSubmitted    EventType = "Submitted"
	EventPlaced       EventType = "Placed"
	EventCheckpointed EventType = "Checkpointed"
	EventNoticed      EventType = "Noticed"
	EventEvicted      EventType = "Evicted"
	EventResumed      EventType = "Resumed"
	EventFinished     EventType = "Finished"
)

// Bounds on what is published, so an object stays far below etcd's limit
// whatever tenants run.
const (
	MaxNodeStates = 2000
	MaxJobs       = 100
	MaxEvents     = 40
	MaxDays       = 31
	MaxMessage    = 256
	MaxServices   = 50
)
