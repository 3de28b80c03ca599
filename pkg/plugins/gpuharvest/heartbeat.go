package gpuharvest

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/plugins/pluginmetrics"
)

// heartbeat judges gleaner-controller's heartbeat Lease, which the controller
// renews after every planning round that published every verdict. It is judged
// on this scheduler's own clock, as client-go's leader election judges a
// Lease: fresh only while a renewal (a new holder or renew time) was seen
// within the timeout. The times the controller writes are never compared with
// this clock, so skew between the two machines moves nothing.
//
// An admin stops all lending by annotating the Lease (api.ReadStop): the
// informer delivers it within a watch event, so nothing more is placed from
// then on, whatever the controller is doing.
//
// Fail closed: the first sight of the Lease (at start, or when it is created)
// is not a renewal, so a scheduler that starts beside a dead controller lends
// nothing, while a live controller's next round makes it fresh. A Lease with
// no holder was released by a stopping controller and is stale at once.
type heartbeat struct {
	ref     LeaseRef
	timeout time.Duration // 0: the Lease's own duration
	clock   clock.PassiveClock
	lister  coordinationlisters.LeaseLister
	synced  cache.InformerSynced

	mu       sync.Mutex
	seenAt   time.Time // when this scheduler last saw the Lease renewed
	renewals uint64    // renewals seen since this scheduler started
}

// startHeartbeat watches the Lease; onRenew, if set, runs after each renewal
// seen, with the renewals counted so far and whether it made a stale
// heartbeat fresh.
func startHeartbeat(ctx context.Context, client kubernetes.Interface, ref LeaseRef, timeout time.Duration, clk clock.PassiveClock, onRenew func(renewals uint64, becameFresh bool)) (*heartbeat, error) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(ref.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", ref.Name).String()
		}))
	informer := factory.Coordination().V1().Leases()
	hb := &heartbeat{ref: ref, timeout: timeout, clock: clk, lister: informer.Lister(), synced: informer.Informer().HasSynced}
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if l, ok := obj.(*coordinationv1.Lease); ok {
				showStop(l)
			}
		},
		// A deleted Lease carries no switch (and a missing heartbeat lends
		// nothing anyway).
		DeleteFunc: func(interface{}) { pluginmetrics.LendingStopped.Set(0) },
		UpdateFunc: func(oldObj, newObj interface{}) {
			o, ok1 := oldObj.(*coordinationv1.Lease)
			n, ok2 := newObj.(*coordinationv1.Lease)
			if !ok1 || !ok2 {
				return
			}
			showStop(n)
			if renewals, becameFresh := hb.observe(o, n); renewals > 0 && onRenew != nil {
				onRenew(renewals, becameFresh)
			}
		},
	}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	return hb, nil
}

// showStop publishes whether the Lease as seen now carries the kill switch.
func showStop(l *coordinationv1.Lease) {
	stopped := 0.0
	if api.ReadStop(l.Annotations).Stopped() {
		stopped = 1
	}
	pluginmetrics.LendingStopped.Set(stopped)
}

// observe records a change of the Lease seen now. For a renewal it returns
// the renewals seen so far and whether it turned the heartbeat from stale to
// fresh; for the kill switch lifted from a fresh heartbeat, the renewals and
// true; for anything else, 0.
func (h *heartbeat) observe(old, cur *coordinationv1.Lease) (uint64, bool) {
	if !renewed(old, cur) {
		// The admin lifting the kill switch is no renewal, but it turns a
		// fresh heartbeat's lending back on: the pods it kept pending go
		// back to the queue.
		if api.ReadStop(old.Annotations).Stopped() && !api.ReadStop(cur.Annotations).Stopped() && h.judge(cur, h.clock.Now()) == nil {
			return h.renewalCount(), true
		}
		return 0, false
	}
	now := h.clock.Now()
	wasStale := h.judge(old, now) != nil
	h.mu.Lock()
	h.seenAt = now
	h.renewals++
	renewals := h.renewals
	h.mu.Unlock()
	return renewals, wasStale && h.judge(cur, now) == nil
}

// renewalCount is how many renewals this scheduler has seen.
func (h *heartbeat) renewalCount() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.renewals
}

// renewed: the holder or the renew time changed (a relist that delivers the
// same object again is no renewal).
func renewed(old, cur *coordinationv1.Lease) bool {
	if old.ResourceVersion == cur.ResourceVersion && old.ResourceVersion != "" {
		return false
	}
	holder := func(l *coordinationv1.Lease) string {
		if l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	renew := func(l *coordinationv1.Lease) time.Time {
		if l.Spec.RenewTime == nil {
			return time.Time{}
		}
		return l.Spec.RenewTime.Time
	}
	return holder(old) != holder(cur) || !renew(old).Equal(renew(cur))
}

// check returns nil when the controller's heartbeat is fresh at now. Until the
// informer has synced the state is unknown, which counts as stale.
func (h *heartbeat) check(now time.Time) error {
	if !h.synced() {
		return fmt.Errorf("lease %s/%s not yet observed", h.ref.Namespace, h.ref.Name)
	}
	lease, err := h.lister.Leases(h.ref.Namespace).Get(h.ref.Name)
	if err != nil {
		return fmt.Errorf("lease %s/%s: %w", h.ref.Namespace, h.ref.Name, err)
	}
	return h.judge(lease, now)
}

// stoppedError is a heartbeat an admin stopped lending on (api.ReadStop).
type stoppedError struct{ stop api.Stop }

func (e stoppedError) Error() string { return e.stop.String() }

// judge says whether lease, last seen renewed at seenAt, is fresh at now. A
// Lease carrying the kill switch lends nothing, however fresh.
func (h *heartbeat) judge(lease *coordinationv1.Lease, now time.Time) error {
	if stop := api.ReadStop(lease.Annotations); stop.Stopped() {
		return stoppedError{stop}
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		return fmt.Errorf("lease %s/%s was released: no controller is planning", lease.Namespace, lease.Name)
	}
	timeout := h.timeout
	if timeout == 0 {
		if lease.Spec.LeaseDurationSeconds == nil {
			return fmt.Errorf("lease %s/%s has no leaseDurationSeconds and no heartbeat timeout is configured", lease.Namespace, lease.Name)
		}
		timeout = time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
	}
	h.mu.Lock()
	seenAt := h.seenAt
	h.mu.Unlock()
	if seenAt.IsZero() {
		return fmt.Errorf("lease %s/%s not seen renewed since this scheduler started", lease.Namespace, lease.Name)
	}
	if age := now.Sub(seenAt); age > timeout {
		return fmt.Errorf("lease %s/%s last seen renewed %s ago (timeout %s)", lease.Namespace, lease.Name, age.Round(time.Second), timeout)
	}
	return nil
}
