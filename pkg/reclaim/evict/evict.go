// Package evict is the reclaimer's side that talks to the API: it evicts
// the pods pkg/reclaim chooses through the Eviction API, with their grace
// periods capped, and reads a gang's quorum from its PodGroup.
package evict

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/gleaner-dev/gleaner/pkg/reclaim"
)

// callTimeout bounds one eviction or deletion request.
const callTimeout = 10 * time.Second

// Evictor evicts pods through the Eviction API and records why on each pod.
//
// A PodDisruptionBudget may refuse an eviction, and Gleaner then tries other
// pods first. But a budget is the tenant's to write: one that never allows a
// disruption (maxUnavailable: 0) would shield its pods forever and push every
// reclaim onto other tenants' pods, or leave inference waiting. So a pod whose
// evictions have been refused, without a break, for PDBWait is deleted
// directly, with its capped grace period, bypassing the budget, and an Event
// says so. A run of refusals is reported once, not every round.
type Evictor struct {
	Client   kubernetes.Interface
	Recorder record.EventRecorder
	// MaxGrace caps the grace period of every eviction (0: reclaim.DefaultMaxGrace).
	MaxGrace time.Duration
	// PDBWait is how long evictions of a pod may be refused before it is
	// deleted without the budget's check (0: MaxGrace).
	PDBWait time.Duration
	Clock   clock.PassiveClock

	mu sync.Mutex
	// refusals: each pod's current run of refused evictions.
	refusals map[types.UID]refusal
}

func (e *Evictor) maxGrace() time.Duration {
	if e.MaxGrace <= 0 {
		return reclaim.DefaultMaxGrace
	}
	return e.MaxGrace
}

// Evict asks the API server to evict pod with the pod's own grace period, so it
// can checkpoint, capped at MaxGrace, and records an Event on the pod naming
// why. A pod already gone is not an error. A pod whose evictions have been
// refused for PDBWait is deleted instead (see Evictor).
func (e *Evictor) Evict(ctx context.Context, pod *v1.Pod, why string) error {
	// One eviction the API server sits on must not stall the round: the
	// others, and the next round, are waiting.
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	grace := int64(reclaim.CappedGrace(pod, e.maxGrace()) / time.Second)
	eviction := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: &grace},
	}
	err := e.Client.PolicyV1().Evictions(pod.Namespace).Evict(ctx, eviction)
	switch {
	case err == nil:
		e.Recorder.Eventf(pod, v1.EventTypeWarning, reclaim.ReasonReclaimed, "Evicted by gleaner-controller with a grace period of %ds to return GPUs to inference: %s", grace, why)
		return nil
	case apierrors.IsNotFound(err):
		return nil
	case RefusedByBudget(err):
		since, first := e.refused(pod)
		if first {
			e.Recorder.Eventf(pod, v1.EventTypeWarning, reclaim.ReasonReclaimBlocked, "Eviction refused (%v); gleaner-controller tries other pods, and deletes this one without the budget's check if its evictions are still refused after %v", err, e.pdbWait())
		}
		if waited := e.now().Sub(since); waited >= e.pdbWait() {
			return e.force(ctx, pod, grace, waited, why)
		}
		return fmt.Errorf("evicting %s/%s: refused: %w", pod.Namespace, pod.Name, err)
	default:
		return fmt.Errorf("evicting %s/%s: %w", pod.Namespace, pod.Name, err)
	}
}

// multipleBudgets is what the API server answers, with a 500, to an eviction
// of a pod that more than one PodDisruptionBudget selects: it never allows
// one, whatever the budgets say (pkg/registry/core/pod/storage/eviction.go).
const multipleBudgets = "more than one PodDisruptionBudget"

// RefusedByBudget tells whether err is an eviction refused for a
// PodDisruptionBudget's sake: 429 while a budget allows no disruption, or the
// API server's status for a pod under two budgets (a 500, or by some versions
// a Failure body). Either is a tenant's to cause (budgets live in their
// namespaces), so both count toward PDBWait; a pod two budgets select would
// otherwise shield its GPUs for ever.
func RefusedByBudget(err error) bool {
	if apierrors.IsTooManyRequests(err) {
		return true
	}
	var status apierrors.APIStatus
	return errors.As(err, &status) && strings.Contains(status.Status().Message, multipleBudgets)
}

// force deletes a pod whose evictions were refused for waited, with its
// capped grace period.
func (e *Evictor) force(ctx context.Context, pod *v1.Pod, grace int64, waited time.Duration, why string) error {
	err := e.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %s/%s after its evictions were refused for %v: %w", pod.Namespace, pod.Name, waited.Round(time.Second), err)
	}
	e.forget(pod)
	if err == nil {
		e.Recorder.Eventf(pod, v1.EventTypeWarning, reclaim.ReasonReclaimForced, "Deleted by gleaner-controller with a grace period of %ds, without its PodDisruptionBudget's check: its evictions were refused for %v and inference needs the GPUs: %s", grace, waited.Round(time.Second), why)
	}
	return nil
}

// refused notes that an eviction of pod was refused now, and returns since
// when its evictions have been refused without a break (a gap longer than
// PDBWait between refusals starts the count again: the budget may have
// allowed a disruption meanwhile) and whether this refusal starts the count.
func (e *Evictor) refused(pod *v1.Pod) (since time.Time, first bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	r, ok := e.refusals[pod.UID]
	if !ok || now.Sub(r.last) > e.pdbWait() {
		r, first = refusal{first: now}, true
	}
	r.last = now
	if e.refusals == nil {
		e.refusals = map[types.UID]refusal{}
	}
	e.refusals[pod.UID] = r
	return r.first, first
}

// refusal is a run of refused evictions of one pod.
type refusal struct{ first, last time.Time }

func (e *Evictor) forget(pod *v1.Pod) {
	e.mu.Lock()
	delete(e.refusals, pod.UID)
	e.mu.Unlock()
}

// Prune forgets refusals of pods not in live (the pods that still exist).
func (e *Evictor) Prune(live map[types.UID]bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for uid := range e.refusals {
		if !live[uid] {
			delete(e.refusals, uid)
		}
	}
}

func (e *Evictor) pdbWait() time.Duration {
	if e.PDBWait > 0 {
		return e.PDBWait
	}
	return e.maxGrace()
}

func (e *Evictor) now() time.Time {
	if e.Clock == nil {
		return time.Now()
	}
	return e.Clock.Now()
}
