package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gleaner-dev/gleaner/pkg/api"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// heartbeat is the controller's promise to the scheduler that its verdicts are
// current. After every round that published every verdict that lends less
// than the one its node carries (writes.go), the controller renews a Lease of
// its own (not the leader-election Lease: that
// one renews while the controller is stuck). gleaner-scheduler lends only while
// it has seen this Lease change within its timeout, on its own clock, so a
// controller that cannot plan (informers that never sync, Node writes that
// keep failing, a clock far off) stops all lending within the timeout. When the
// controller stops, it releases the Lease (empty holder), which the scheduler
// reads as stale at once.
type heartbeat struct {
	client   kubernetes.Interface
	clock    clock.PassiveClock
	ns, name string
	identity string
	// timeout is written as the Lease's duration: how long after a round the
	// scheduler may still lend on it, and the bound /readyz holds rounds to.
	timeout time.Duration

	// stop is the admin's kill switch as last read (readStop).
	stop api.Stop

	mu sync.Mutex
	// planning: when this process started planning (zero: it does not plan,
	// e.g. a standby); last: its last round that published every verdict.
	planning, last time.Time
}

// start records that this process plans from now on.
func (h *heartbeat) start() {
	h.mu.Lock()
	h.planning = h.clock.Now()
	h.mu.Unlock()
}

// beat renews the Lease after a round that published every verdict.
func (h *heartbeat) beat(ctx context.Context) error {
	now := h.clock.Now()
	if err := h.write(ctx, h.identity, now); err != nil {
		return err
	}
	h.mu.Lock()
	h.last = now
	h.mu.Unlock()
	lastRound.Set(float64(now.UnixNano()) / 1e9)
	return nil
}

// release empties the Lease's holder when this process stops planning.
func (h *heartbeat) release(ctx context.Context) error {
	h.mu.Lock()
	h.planning, h.last = time.Time{}, time.Time{}
	h.mu.Unlock()
	return h.write(ctx, "", h.clock.Now())
}

func (h *heartbeat) write(ctx context.Context, holder string, now time.Time) error {
	leases := h.client.CoordinationV1().Leases(h.ns)
	spec := coordinationv1.LeaseSpec{
		HolderIdentity:       ptr.To(holder),
		LeaseDurationSeconds: ptr.To(int32((h.timeout + time.Second - 1) / time.Second)),
		RenewTime:            ptr.To(metav1.NewMicroTime(now)),
	}
	lease, err := leases.Get(ctx, h.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: h.name}, Spec: spec}, metav1.CreateOptions{FieldManager: Component})
	case err == nil:
		lease.Spec = spec
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{FieldManager: Component})
	}
	if err != nil {
		return fmt.Errorf("renewing heartbeat lease %s/%s: %w", h.ns, h.name, err)
	}
	return nil
}

// readStop reads the cluster admin's kill switch off the Lease
// (api.ReadStop): the scheduler enforces a stop on its own, as soon as it
// sees it; the controller drains for HoldAndDrain and reports it. While the
// Lease cannot be read, the switch last read holds (none, in a process that
// has read none yet: the scheduler still holds on its own).
func (h *heartbeat) readStop(ctx context.Context) api.Stop {
	lease, err := h.client.CoordinationV1().Leases(h.ns).Get(ctx, h.name, metav1.GetOptions{})
	stop := h.stop
	switch {
	case apierrors.IsNotFound(err):
		stop = api.Stop{}
	case err != nil:
		klog.FromContext(ctx).Error(err, "Reading the kill switch: the one last read holds", "lease", klog.KRef(h.ns, h.name), "stop", stop.Mode)
	default:
		stop = api.ReadStop(lease.Annotations)
	}
	if stop != h.stop {
		if stop.Stopped() {
			klog.FromContext(ctx).Info("The cluster admin stopped lending", "mode", stop.Mode, "reason", stop.Reason, "problem", stop.Problem)
		} else {
			klog.FromContext(ctx).Info("The cluster admin let lending resume")
		}
	}
	h.stop = stop
	for _, m := range []api.StopLending{api.StopHold, api.StopHoldAndDrain} {
		lendingStopped.WithLabelValues(string(m)).Set(b2f(stop.Mode == m))
	}
	return stop
}

// age is how long this process has planned without completing a round; zero
// when it does not plan.
func (h *heartbeat) age() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.planning.IsZero() {
		return 0
	}
	since := h.planning
	if h.last.After(since) {
		since = h.last
	}
	return h.clock.Since(since)
}

// Planning is the readiness check: it fails while this process plans but its
// last round that published every verdict (or its start) is older than the
// heartbeat timeout. A standby that does not plan passes.
func (c *Controller) Planning() error {
	if age := c.heartbeat.age(); age > c.heartbeat.timeout {
		return fmt.Errorf("no planning round has published every verdict for %v (bound %v)", age.Round(time.Second), c.heartbeat.timeout)
	}
	return nil
}
