// Package evict is the reclaimer's side that talks to the API: it evicts
// the pods pkg/reclaim chooses through the Eviction API, with their grace
// periods capped, and reads a gang's quorum from its PodGroup.
package evict

import (
	"context"
	"encoding/json"
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

	"github.com/gleaner-dev/gleaner/pkg/api"
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
// evictions a budget first refused PDBWait ago or more is deleted directly,
// with the grace period its eviction would have had, bypassing the budget,
// and an Event says so.
// The wait is the pod's, once: rounds that do not try the pod (others were
// taken in its place) do not start it again, and the first refusal is kept
// on the pod as the condition api.ConditionEvictionRefused, so a restarted
// controller goes on counting from it. The refusal is reported once.
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
	// refusals: when a budget first refused each pod's eviction, and whether
	// that is kept on the pod yet.
	refusals map[types.UID]refusal
}

func (e *Evictor) maxGrace() time.Duration {
	if e.MaxGrace <= 0 {
		return reclaim.DefaultMaxGrace
	}
	return e.MaxGrace
}

// Evict asks the API server to evict c's pod with the pod's own grace
// period, so it can checkpoint, capped at MaxGrace (shorter for a pod that
// saved for its notice or declares how long its saves take:
// Candidate.EvictionGrace), and records an Event on the
// pod naming why. A pod already gone is not an error. A pod whose evictions
// have been refused for PDBWait is deleted instead (see Evictor).
func (e *Evictor) Evict(ctx context.Context, c reclaim.Candidate, why string) error {
	// One eviction the API server sits on must not stall the round: the
	// others, and the next round, are waiting.
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	pod := c.Pod
	grace := int64(c.EvictionGrace(e.maxGrace()) / time.Second)
	eviction := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: &grace},
	}
	err := e.Client.PolicyV1().Evictions(pod.Namespace).Evict(ctx, eviction)
	switch {
	case err == nil:
		because := ""
		if r := c.GraceReason(e.maxGrace()); r != "" {
			because = " (" + r + ")"
		}
		e.Recorder.Eventf(pod, v1.EventTypeWarning, reclaim.ReasonReclaimed, "Evicted by gleaner-controller with a grace period of %ds%s to return GPUs to inference: %s", grace, because, why)
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
		if perr := e.keep(ctx, pod, since); perr != nil {
			return fmt.Errorf("evicting %s/%s: refused: %w (and keeping when: %v)", pod.Namespace, pod.Name, err, perr)
		}
		return fmt.Errorf("evicting %s/%s: refused: %w", pod.Namespace, pod.Name, err)
	default:
		return fmt.Errorf("evicting %s/%s: %w", pod.Namespace, pod.Name, err)
	}
}

// Undecided reports whether err says the API server judged no eviction: it
// throttled it (a 429 without a budget's cause), timed out, or was
// unavailable. The pod may still go, or be gone already (a request that
// timed out may have been carried out), so it is no refusal: no other pod is
// taken in its place, and the next round tries it again if it is still owed.
func Undecided(err error) bool {
	if err == nil || RefusedByBudget(err) {
		return false
	}
	return apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsServiceUnavailable(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// multipleBudgets is what the API server answers, with a 500, to an eviction
// of a pod that more than one PodDisruptionBudget selects: it never allows
// one, whatever the budgets say (pkg/registry/core/pod/storage/eviction.go).
const multipleBudgets = "more than one PodDisruptionBudget"

// RefusedByBudget tells whether err is an eviction refused for a
// PodDisruptionBudget's sake: 429 with a DisruptionBudget cause while a
// budget allows no disruption, or the API server's status for a pod under two
// budgets (a 500, or by some versions a Failure body). Either is a tenant's
// to cause (budgets live in their namespaces), so both count toward PDBWait;
// a pod two budgets select would otherwise shield its GPUs for ever. A 429
// without the cause is the API server throttling (priority and fairness, a
// busy server): no budget refused anything, and the pod's wait is not
// started or shortened by it.
func RefusedByBudget(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	if apierrors.IsTooManyRequests(err) {
		if d := status.Status().Details; d != nil {
			for _, c := range d.Causes {
				if c.Type == policyv1.DisruptionBudgetCause {
					return true
				}
			}
		}
		return false
	}
	return strings.Contains(status.Status().Message, multipleBudgets)
}

// force deletes a pod whose evictions were refused for waited, with the
// grace period its eviction would have had.
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
// when a budget has refused its evictions (the first refusal this process
// saw, or an earlier one kept on the pod) and whether this refusal is the
// first.
func (e *Evictor) refused(pod *v1.Pod) (since time.Time, first bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	r, ok := e.refusals[pod.UID]
	if !ok {
		if at, kept := RefusedSince(pod, now); kept {
			r, ok = refusal{first: at, kept: true}, true
		}
	}
	if !ok {
		r, first = refusal{first: now}, true
	}
	if e.refusals == nil {
		e.refusals = map[types.UID]refusal{}
	}
	e.refusals[pod.UID] = r
	return r.first, first
}

// refusal is when a budget first refused a pod's eviction; kept: the pod's
// condition says so.
type refusal struct {
	first time.Time
	kept  bool
}

// RefusedSince reads the first refusal kept on pod (its
// api.ConditionEvictionRefused), if it is one a controller could have
// written: True, not before the pod was created, not after now. Anything
// else is ignored, and the wait starts at the next refusal as if nothing had
// been kept: a time in the future, trusted, would lengthen the wait.
func RefusedSince(pod *v1.Pod, now time.Time) (time.Time, bool) {
	for _, c := range pod.Status.Conditions {
		if c.Type != api.ConditionEvictionRefused {
			continue
		}
		at := c.LastTransitionTime.Time
		if c.Status != v1.ConditionTrue || at.IsZero() || at.Before(pod.CreationTimestamp.Truncate(time.Second)) || at.After(now) {
			return time.Time{}, false
		}
		return at, true
	}
	return time.Time{}, false
}

// keep writes the pod's first refusal as its api.ConditionEvictionRefused,
// once.
func (e *Evictor) keep(ctx context.Context, pod *v1.Pod, since time.Time) error {
	e.mu.Lock()
	r, ok := e.refusals[pod.UID]
	e.mu.Unlock()
	if !ok || r.kept {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []v1.PodCondition{{
		Type: api.ConditionEvictionRefused, Status: v1.ConditionTrue, Reason: "DisruptionBudget",
		Message:            fmt.Sprintf("A PodDisruptionBudget refused gleaner-controller's eviction; past %v the pod is deleted without the budget's check", e.pdbWait()),
		LastTransitionTime: metav1.NewTime(since),
	}}}})
	if err != nil {
		return err
	}
	if _, err := e.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	e.mu.Lock()
	if r, ok := e.refusals[pod.UID]; ok {
		r.kept = true
		e.refusals[pod.UID] = r
	}
	e.mu.Unlock()
	return nil
}

func (e *Evictor) forget(pod *v1.Pod) {
	e.mu.Lock()
	delete(e.refusals, pod.UID)
	e.mu.Unlock()
}

// Prune forgets refusals of pods not in live (the pods that still exist).
// Refusals are rare: with none, live is not read.
func (e *Evictor) Prune(live []*v1.Pod) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.refusals) == 0 {
		return
	}
	alive := make(map[types.UID]bool, len(e.refusals))
	for _, p := range live {
		if _, ok := e.refusals[p.UID]; ok {
			alive[p.UID] = true
		}
	}
	for uid := range e.refusals {
		if !alive[uid] {
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
