package gpuharvest

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/tools/cache"
)

// LeaseFresh says whether a controller Lease was renewed within timeout of now,
// or, when timeout is 0, within its own leaseDurationSeconds. It returns nil
// when fresh, otherwise why not.
func LeaseFresh(lease *coordinationv1.Lease, now time.Time, timeout time.Duration) error {
	if lease == nil {
		return fmt.Errorf("lease not found")
	}
	if lease.Spec.RenewTime == nil || (lease.Spec.LeaseDurationSeconds == nil && timeout == 0) {
		return fmt.Errorf("lease %s/%s has no renewTime or leaseDurationSeconds", lease.Namespace, lease.Name)
	}
	if timeout == 0 {
		timeout = time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
	}
	expires := lease.Spec.RenewTime.Add(timeout)
	if now.After(expires) {
		return fmt.Errorf("lease %s/%s last renewed %s ago", lease.Namespace, lease.Name, now.Sub(lease.Spec.RenewTime.Time).Round(time.Second))
	}
	return nil
}

// heartbeat watches the one Lease that is the controller's heartbeat, with an
// informer of its own so the scheduler does not watch every Lease in the cluster.
type heartbeat struct {
	ref     LeaseRef
	timeout time.Duration // 0: the Lease's own duration
	lister  coordinationlisters.LeaseLister
	synced  cache.InformerSynced
}

func startHeartbeat(ctx context.Context, client kubernetes.Interface, ref LeaseRef, timeout time.Duration, onChange func(old, cur *coordinationv1.Lease)) (*heartbeat, error) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(ref.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", ref.Name).String()
		}))
	informer := factory.Coordination().V1().Leases()
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if l, ok := obj.(*coordinationv1.Lease); ok {
				onChange(nil, l)
			}
		},
		UpdateFunc: func(oldObj, newObj interface{}) {
			o, ok1 := oldObj.(*coordinationv1.Lease)
			n, ok2 := newObj.(*coordinationv1.Lease)
			if ok1 && ok2 {
				onChange(o, n)
			}
		},
	}); err != nil {
		return nil, err
	}
	hb := &heartbeat{ref: ref, timeout: timeout, lister: informer.Lister(), synced: informer.Informer().HasSynced}
	factory.Start(ctx.Done())
	return hb, nil
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
	return LeaseFresh(lease, now, h.timeout)
}
