package reclaim

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
)

// ReasonReclaimed is the Event reason on an evicted best-effort pod.
const ReasonReclaimed = "GleanerReclaimed"

// ReasonReclaimBlocked is the Event reason when an eviction was refused (e.g. by a PodDisruptionBudget).
const ReasonReclaimBlocked = "GleanerReclaimBlocked"

// Evictor evicts pods through the Eviction API and records why on each pod.
type Evictor struct {
	Client   kubernetes.Interface
	Recorder record.EventRecorder
	// MaxGrace caps the grace period of every eviction (0: DefaultMaxGrace).
	MaxGrace time.Duration
}

// Evict asks the API server to evict pod with the pod's own grace period, so it
// can checkpoint, capped at MaxGrace, and records an Event on the pod naming
// why. A pod already gone is not an error.
func (e *Evictor) Evict(ctx context.Context, pod *v1.Pod, why string) error {
	maxGrace := e.MaxGrace
	if maxGrace <= 0 {
		maxGrace = DefaultMaxGrace
	}
	grace := int64(CappedGrace(pod, maxGrace) / time.Second)
	eviction := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: &grace},
	}
	err := e.Client.PolicyV1().Evictions(pod.Namespace).Evict(ctx, eviction)
	switch {
	case err == nil:
		e.Recorder.Eventf(pod, v1.EventTypeWarning, ReasonReclaimed, "Evicted by gleaner-controller with a grace period of %ds to return GPUs to inference: %s", grace, why)
		return nil
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsTooManyRequests(err):
		e.Recorder.Eventf(pod, v1.EventTypeWarning, ReasonReclaimBlocked, "Eviction refused (%v); gleaner-controller will try other pods", err)
		return fmt.Errorf("evicting %s/%s: refused: %w", pod.Namespace, pod.Name, err)
	default:
		return fmt.Errorf("evicting %s/%s: %w", pod.Namespace, pod.Name, err)
	}
}
