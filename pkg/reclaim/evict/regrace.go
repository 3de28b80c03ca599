package evict

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gleaner-dev/gleaner/pkg/reclaim"
)

// CapGrace asks the API server to evict a terminating pod again, with the
// grace period a reclaim gives it (its own, capped at MaxGrace), and records
// an Event saying so. The API server only ever shortens a terminating pod's
// grace period, counted from when it was first asked to stop, and an eviction
// of a terminating pod does not wait on its PodDisruptionBudgets; the kubelet
// then stops the pod by the shorter deadline. A pod already gone is not an
// error.
func (e *Evictor) CapGrace(ctx context.Context, pod *v1.Pod) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	grace := int64(reclaim.CappedGrace(pod, e.maxGrace()) / time.Second)
	eviction := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &pod.UID}},
	}
	err := e.Client.PolicyV1().Evictions(pod.Namespace).Evict(ctx, eviction)
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil // gone, or another pod by now
	case err != nil:
		return fmt.Errorf("evicting %s/%s again with a grace period of %ds: %w", pod.Namespace, pod.Name, grace, err)
	}
	e.Recorder.Eventf(pod, v1.EventTypeWarning, reclaim.ReasonGraceCapped,
		"Asked again by gleaner-controller to stop within %ds: it was asked with %ds, more than the %v a best-effort pod holding lent GPUs is given", grace, ptr.Deref(pod.DeletionGracePeriodSeconds, 0), e.maxGrace())
	return nil
}
