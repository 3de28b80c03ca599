package controller

import (
	"context"

	"k8s.io/klog/v2"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
)

// capTerminations asks every best-effort pod holding GPUs on a pool node
// that was asked to stop with a grace period over the reclaim cap to stop
// again within the cap. Admission keeps a best-effort pod's own
// terminationGracePeriodSeconds within the cap, but a deletion may ask for
// any grace period: a tenant deleting its pod with --grace-period=86400 would
// keep its GPUs for a day while Gleaner, counting them as returning for the
// cap and then as stuck, took other tenants' GPUs in their place. A pod is
// asked once: the API server then holds it to the shorter grace period.
func (c *Controller) capTerminations(ctx context.Context, o observed) []error {
	threshold := *c.cfg.BestEffortPriorityThreshold
	var errs []error
	for i, p := range o.pods {
		if p.DeletionTimestamp == nil || !o.onPool(i) || !api.IsBestEffort(p, threshold) || o.gpus[i] == 0 ||
			!reclaim.OverGrace(p, c.cfg.MaxReclaimGrace) {
			continue
		}
		if err := c.evictor.CapGrace(ctx, p); err != nil {
			errs = append(errs, err)
			continue
		}
		klog.FromContext(ctx).Info("Asked a pod terminating with a grace period over the cap to stop within it", "pod", klog.KObj(p), "node", p.Spec.NodeName)
	}
	return errs
}
