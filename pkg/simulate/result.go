package simulate

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/gleaner-dev/gleaner/pkg/availability"
)

// Sample is the cluster at one time of the timeline, in GPUs.
type Sample struct {
	Days float64 `json:"days"`
	// Serving: held by bound inference replicas.
	Serving int64 `json:"serving"`
	// Needed: what the replicas inference wants need (serving plus waiting replicas).
	Needed int64 `json:"needed"`
	// Lent: held by best-effort pods, terminating ones included.
	Lent int64 `json:"lent"`
	// Idle: held by no one.
	Idle int64 `json:"idle"`
}

// Result is one policy's outcome. GPU-hours integrate GPU counts held
// constant over each step.
type Result struct {
	Policy    Policy  `json:"policy"`
	Days      float64 `json:"days"`
	Nodes     int     `json:"nodes"`
	FleetGPUs int64   `json:"fleetGpus"`
	// IdleGPUHours: fleet GPUs minus the GPUs of the replicas inference wants
	// (max(1, ceil(load/capacity)) per service), integrated over time. It does
	// not depend on the policy.
	IdleGPUHours float64 `json:"idleGpuHours"`
	// ServingGPUHours: GPUs held by bound inference replicas.
	ServingGPUHours float64 `json:"servingGpuHours"`
	// HarvestedGPUHours: GPUs held by best-effort pods (as gleaner-controller
	// counts harvested GPU-seconds: terminating pods included).
	HarvestedGPUHours float64 `json:"harvestedGpuHours"`
	// HarvestedFraction = HarvestedGPUHours / IdleGPUHours.
	HarvestedFraction float64 `json:"harvestedFraction"`
	// LostGPUHours: work lost to preemption (the progress since each evicted
	// job's last completed checkpoint), the time jobs spent saving
	// checkpoints for notices, and the time resumed jobs spent restarting.
	LostGPUHours float64 `json:"lostGpuHours"`
	// RestartGPUHours: the part of LostGPUHours resumed jobs spent
	// restarting (Config.RestartCost).
	RestartGPUHours float64 `json:"restartGpuHours"`
	// Preemptions: best-effort pods evicted.
	Preemptions int `json:"preemptions"`
	// NoticedEvictions: preemptions of pods that had a reclaim notice.
	NoticedEvictions int `json:"noticedEvictions"`
	// Notices: reclaim notices given; NoticesWithdrawn: taken back.
	Notices          int `json:"notices"`
	NoticesWithdrawn int `json:"noticesWithdrawn"`
	// NoticeLeadP50Seconds, NoticeLeadP10Seconds: notice to eviction, over the
	// noticed evictions (the median and the shortest tenth).
	NoticeLeadP50Seconds float64 `json:"noticeLeadP50Seconds"`
	NoticeLeadP10Seconds float64 `json:"noticeLeadP10Seconds"`
	// NoticeFirmLeadP50Seconds: the same, counted from when the notice's
	// time was last moved earlier (or first given): how long before its
	// eviction a job knew the time it would have to stop by.
	NoticeFirmLeadP50Seconds float64 `json:"noticeFirmLeadP50Seconds"`
	// NoticeCheckpointGPUHours: time jobs spent saving checkpoints because of
	// notices, included in LostGPUHours.
	NoticeCheckpointGPUHours float64 `json:"noticeCheckpointGpuHours"`
	// ReclaimedGPUs: GPUs of the evicted pods.
	ReclaimedGPUs int64 `json:"reclaimedGpus"`
	// ReclaimedUnusedGPUs: reclaimed GPUs lent again on their node before an
	// inference replica bound there (each binding uses up to GPUsPerReplica of them).
	ReclaimedUnusedGPUs int64 `json:"reclaimedUnusedGpus"`
	// InferenceAutoscaler is what scaled the services.
	InferenceAutoscaler InferenceAutoscaler `json:"inferenceAutoscaler"`
	// InferenceReplicaStarts: replicas bound after the start (the initial ones excluded).
	InferenceReplicaStarts int `json:"inferenceReplicaStarts"`
	// InferenceWaitSeconds: total time wanted replicas waited for GPUs while
	// the load they were for was there (a replica the forecast asked for
	// ahead of its load may wait unseen before it arrives).
	InferenceWaitSeconds float64 `json:"inferenceWaitSeconds"`
	// InferenceWaitsOverBudget: replicas that waited longer than ReclaimBudgetSeconds.
	InferenceWaitsOverBudget int     `json:"inferenceWaitsOverBudget"`
	MaxInferenceWaitSeconds  float64 `json:"maxInferenceWaitSeconds"`
	// InferenceWaitP99Seconds: the 99th percentile of the replicas' waits,
	// over those that waited at all.
	InferenceWaitP99Seconds float64 `json:"inferenceWaitP99Seconds"`
	ReclaimBudgetSeconds    float64 `json:"reclaimBudgetSeconds"`
	JobsStarted             int     `json:"jobsStarted"`
	JobsCompleted           int     `json:"jobsCompleted"`
	// Savings = HarvestedGPUHours x PricePerGPUHour.
	Savings         float64 `json:"savings"`
	PricePerGPUHour float64 `json:"pricePerGpuHour"`
	// Availability is the check of the survival probabilities the planner
	// gives open nodes: per span, what became of the GPUs given each tenth of
	// probability.
	Availability []Calibration `json:"availability,omitempty"`
	Timeline     []Sample      `json:"-"`
}

// Calibration is how well the survival probabilities over one span held.
type Calibration struct {
	Hours   float64             `json:"hours"`
	Buckets []CalibrationBucket `json:"buckets"`
	// WorstPoints is the largest gap, in percentage points, between the
	// probability given and the fraction that survived, over the buckets
	// holding at least 1% of the GPU-hours.
	WorstPoints float64 `json:"worstPoints"`
	// MeanPoints is the gap averaged over the GPU-hours of every bucket.
	MeanPoints float64 `json:"meanPoints"`
}

// CalibrationBucket is one tenth of probability and how far its gap could
// move with other days of the same traffic.
type CalibrationBucket struct {
	availability.CalibrationBucket
	// GapLow and GapHigh bound, in points, 90% of the gap (Survived -
	// Predicted) over the run's days drawn again with replacement
	// (calibrationResamples times, the same draws every run). The
	// forecast's errors come in spells of a day or two that strike every
	// node at once, so a tenth that a few days fill can be several points
	// off on one run's days alone; a bucket whose range holds 0 is as
	// calibrated as those days can tell. A tenth that one day fills has no
	// range: the draws cannot tell.
	GapLow  float64 `json:"gapLow"`
	GapHigh float64 `json:"gapHigh"`
	// Days is how many of the run's days gave the tenth any GPU-hours.
	Days int `json:"days"`
}

// calibrationResamples is how many times the days are drawn again.
const calibrationResamples = 2000

// newCalibration checks the probabilities given over span, from the
// planner's record by day (round.Planner.Calibration).
func newCalibration(span time.Duration, days [][]availability.CalibrationBucket) Calibration {
	c := Calibration{Hours: span.Hours()}
	var total float64
	for _, b := range availability.SumCalibration(days) {
		total += b.GPUHours
		c.MeanPoints += b.GPUHours * 100 * math.Abs(b.Predicted-b.Survived)
		c.Buckets = append(c.Buckets, CalibrationBucket{CalibrationBucket: b})
	}
	if total == 0 {
		return Calibration{}
	}
	c.MeanPoints /= total
	for _, b := range c.Buckets {
		if b.GPUHours >= total/100 {
			c.WorstPoints = max(c.WorstPoints, 100*math.Abs(b.Predicted-b.Survived))
		}
	}
	// of is the place in c.Buckets of a day's bucket.
	of := func(b availability.CalibrationBucket) int {
		return slices.IndexFunc(c.Buckets, func(cb CalibrationBucket) bool { return cb.From == b.From })
	}
	for _, day := range days {
		for _, b := range day {
			c.Buckets[of(b)].Days++
		}
	}
	// Each draw takes len(days) days with replacement and adds them up.
	gaps := make([][]float64, len(c.Buckets))
	rng := rand.New(rand.NewPCG(1, 2))
	drawn := make([][]availability.CalibrationBucket, len(days))
	for range calibrationResamples {
		for i := range drawn {
			drawn[i] = days[rng.IntN(len(days))]
		}
		for _, b := range availability.SumCalibration(drawn) {
			i := of(b)
			gaps[i] = append(gaps[i], 100*(b.Survived-b.Predicted))
		}
	}
	for i, g := range gaps {
		if len(g) == 0 {
			continue
		}
		slices.Sort(g)
		c.Buckets[i].GapLow, c.Buckets[i].GapHigh = g[(len(g)-1)*5/100], g[(len(g)-1)*95/100]
	}
	return c
}
