// Package reclaim chooses which best-effort pods give lent GPUs back, and
// when a terminating pod's GPUs count as returning. It is pure: plain values
// and times in. Evicting them through the Eviction API, so each pod's grace
// period (its time to checkpoint) applies, is pkg/reclaim/evict's.
package reclaim

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// ReasonReclaimed is the Event reason on an evicted best-effort pod.
const ReasonReclaimed = "GleanerReclaimed"

// ReasonReclaimBlocked is the Event reason when an eviction was refused (e.g. by a PodDisruptionBudget).
const ReasonReclaimBlocked = "GleanerReclaimBlocked"

// ReasonReclaimForced is the Event reason when a pod whose evictions were
// refused for longer than the wait is deleted without the PDB check.
const ReasonReclaimForced = "GleanerReclaimForced"

// ReasonGraceCapped is the Event reason on a best-effort pod that was asked
// to stop with a grace period over the cap and was asked again with the cap.
const ReasonGraceCapped = "GleanerGraceCapped"

// Candidate is a best-effort pod that could be evicted.
type Candidate struct {
	Pod  *v1.Pod
	GPUs int64
	// LostWork in GPU-seconds if evicted now.
	LostWork float64
	// Overdue: the pod is terminating past its capped grace period (see
	// Terminations.Returning). Its GPUs are owed, not on their way back.
	Overdue bool
	// Prepared: the pod checkpointed after it was given a reclaim notice, so
	// evicting it now loses (almost) nothing it was warned about. Victims are
	// chosen among prepared pods first.
	Prepared bool
	// Noticed: the planner that evicts gave the pod a reclaim notice in an
	// earlier round (its own memory, not the pod's annotation, so a new
	// leader knows none). Victims are chosen among noticed pods before the
	// others that leave no sooner (Choose): a notice says the pod will go,
	// and a pod not warned that would lose anything goes only for what those
	// do not free.
	Noticed bool
	// Saved: the pod saved for its notice (checkpointed at or after it was
	// given, within a minute before the noticed time) and that time has
	// come. It has nothing left to save for this eviction, so it gets
	// SavedGrace rather than its own grace period: its GPUs come back
	// seconds after the eviction, when the replica the notice made room for
	// is waiting.
	Saved bool
	// SavesInGrace: the pod declares how long it takes to save (DeclaredSave:
	// not a gang member), and that and SavedGrace to exit fit its capped
	// grace period: taken at any time, it saves what it has done within the
	// grace period it is given. A notice's time need not hold it.
	SavesInGrace bool
	// Quorum is, for a gang member, the members its gang needs to keep
	// running (its PodGroup's minMember or native minCount, read by
	// evict.GangQuorum): a gang with more
	// live members is elastic and sheds members above it one at a time. 0
	// (unknown, or not a gang) evicts a gang whole.
	Quorum int32

	// maxGrace is the cap NewCandidate was given: what EvictionGrace is
	// judged with when victims are chosen (0 for a Candidate built otherwise,
	// which then leaves at once).
	maxGrace time.Duration
}

// warned: the pod had a notice (Noticed), or saved after one (Prepared).
func (c Candidate) warned() bool { return c.Noticed || c.Prepared }

// DefaultMaxGrace caps the grace period of every reclaim: a best-effort pod
// asking for more still gets this long to checkpoint, and no longer, so no
// tenant's grace period makes inference wait.
const DefaultMaxGrace = 120 * time.Second

// killSlack is how long past its grace period a pod may take to be killed and
// removed before it counts as stuck.
const killSlack = 5 * time.Second

// Grace is the pod's own grace period: terminationGracePeriodSeconds, 30 s
// when it sets none (as the API server defaults it).
func Grace(pod *v1.Pod) time.Duration {
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		return max(0, time.Duration(*pod.Spec.TerminationGracePeriodSeconds)*time.Second)
	}
	return 30 * time.Second
}

// CappedGrace is the grace period a reclaim gives pod: its own, at most maxGrace.
func CappedGrace(pod *v1.Pod, maxGrace time.Duration) time.Duration {
	return min(Grace(pod), maxGrace)
}

// SavedGrace is the grace period of a pod evicted at its noticed time after
// saving for it (Candidate.Saved): enough to exit, not to save again.
const SavedGrace = 10 * time.Second

// EvictionGrace is the grace period the reclaimer gives c: its capped grace,
// or, when shorter, SavedGrace if c saved for its notice, else the time it
// takes to save (api.SaveDuration; not for a gang member) and SavedGrace to
// exit, to the next whole second. A pod's declared save duration can only
// shorten its own grace.
func (c Candidate) EvictionGrace(maxGrace time.Duration) time.Duration {
	g, _ := c.evictionGrace(maxGrace)
	return g
}

// GraceReason says why EvictionGrace gives c less than its capped grace
// ("" when it does not).
func (c Candidate) GraceReason(maxGrace time.Duration) string {
	_, why := c.evictionGrace(maxGrace)
	return why
}

func (c Candidate) evictionGrace(maxGrace time.Duration) (time.Duration, string) {
	g := CappedGrace(c.Pod, maxGrace)
	if c.Saved {
		if SavedGrace < g {
			return SavedGrace, "it saved for its reclaim notice"
		}
		return g, ""
	}
	if d, ok := DeclaredSave(c.Pod); ok {
		if s := SaveGrace(d); s < g {
			return s, fmt.Sprintf("its saves take %v, and %v to exit", d, SavedGrace)
		}
	}
	return g, ""
}

// LeavesIn is how long pod, evicted now, takes to give its GPUs back when it
// has not saved for a notice: the grace period the reclaimer gives it
// (Candidate.EvictionGrace) with its grace capped at maxGrace.
func LeavesIn(pod *v1.Pod, maxGrace time.Duration) time.Duration {
	return Candidate{Pod: pod}.EvictionGrace(maxGrace)
}

// SaveGrace is the grace period a pod that takes d to save is given when
// shorter than its own: d and SavedGrace to exit, to the next whole second.
func SaveGrace(d time.Duration) time.Duration {
	return (d + SavedGrace + time.Second - 1).Truncate(time.Second)
}

// DeclaredSave is the pod's declared save duration (api.SaveDuration), but
// for a gang member: its gang saves together, and a member stopped early
// would leave the others' save waiting on it.
func DeclaredSave(pod *v1.Pod) (time.Duration, bool) {
	if api.GangKey(pod) != "" {
		return 0, false
	}
	return api.SaveDuration(pod)
}

// AskedToStop is when the API server says a terminating pod was asked to
// stop: its DeletionTimestamp less the grace period granted.
func AskedToStop(pod *v1.Pod) time.Time {
	return pod.DeletionTimestamp.Add(-granted(pod))
}

// granted is the grace period the API server granted a terminating pod (0
// when it says none).
func granted(pod *v1.Pod) time.Duration {
	if g := pod.DeletionGracePeriodSeconds; g != nil {
		return time.Duration(*g) * time.Second
	}
	return 0
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
	if t, ok := api.LastCheckpoint(pod); ok && t.After(since) && !t.After(now) {
		since = t
	}
	if !now.After(since) {
		return 0
	}
	return float64(max(gpus, 1)) * now.Sub(since).Seconds()
}

// NewCandidate builds a Candidate for pod at time now, with reclaims' grace
// periods capped at maxGrace, and terminations judged by t (nil: by the API
// server's clock).
func NewCandidate(pod *v1.Pod, gpuResource v1.ResourceName, now time.Time, maxGrace time.Duration, t *Terminations) Candidate {
	gpus := api.PodGPUs(pod, gpuResource)
	save, declared := DeclaredSave(pod)
	return Candidate{Pod: pod, GPUs: gpus, LostWork: LostWork(pod, gpus, now),
		Overdue:      pod.DeletionTimestamp != nil && !t.Returning(pod, now, maxGrace),
		SavesInGrace: declared && SaveGrace(save) <= CappedGrace(pod, maxGrace), maxGrace: maxGrace}
}
