// Package reclaim takes lent GPUs back from best-effort pods. Choosing victims
// is pure; evicting them goes through the Eviction API so each pod's grace period
// (its time to checkpoint) applies.
package reclaim

import (
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// Candidate is a best-effort pod that could be evicted.
type Candidate struct {
	Pod  *v1.Pod
	GPUs int64
	// LostWork in GPU-seconds if evicted now.
	LostWork float64
}

// LostWork is the work a pod loses if evicted at now, in GPU-seconds:
// GPUs x time since its last checkpoint (annotation api.AnnotationLastCheckpoint,
// RFC 3339) or, without a readable one, since it started. A pod that has not
// started loses nothing.
func LostWork(pod *v1.Pod, gpus int64, now time.Time) float64 {
	if pod.Status.StartTime == nil {
		return 0
	}
	since := pod.Status.StartTime.Time
	if raw, ok := pod.Annotations[api.AnnotationLastCheckpoint]; ok {
		if t, err := time.Parse(time.RFC3339, raw); err == nil && t.After(since) && !t.After(now) {
			since = t
		}
	}
	if !now.After(since) {
		return 0
	}
	return float64(max(gpus, 1)) * now.Sub(since).Seconds()
}

// NewCandidate builds a Candidate for pod at time now.
func NewCandidate(pod *v1.Pod, gpuResource v1.ResourceName, now time.Time) Candidate {
	gpus := api.PodGPUs(pod, gpuResource)
	return Candidate{Pod: pod, GPUs: gpus, LostWork: LostWork(pod, gpus, now)}
}
