package controller

import (
	"context"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/informers"
	"k8s.io/klog/v2"
)

// startNativeGroups starts reading native PodGroups (scheduling.k8s.io/v1beta1),
// whose minCount is a native gang's quorum, when the API server serves them:
// only with its GenericWorkload feature gate on. Otherwise it says so once and
// leaves c.nativeGroups nil: no pod can name a native group then (the API
// server drops spec.schedulingGroup), so there are no native gangs. Like the
// scheduler-plugins PodGroups, its cache is not waited for: a gang whose group
// is not seen yet goes whole. It returns what stops the informer.
func (c *Controller) startNativeGroups(ctx context.Context) (stop func()) {
	logger := klog.FromContext(ctx)
	gv := schedulingv1beta1.SchemeGroupVersion.String()
	served, err := c.servedResources(gv)
	if !served["podgroups"] {
		if err != nil && !apierrors.IsNotFound(err) {
			logger.Info("Could not ask the API server whether it serves native PodGroups; members of native PodGroups are reclaimed as lone pods", "groupVersion", gv, "err", err)
		} else {
			logger.Info("The API server does not serve native PodGroups (its GenericWorkload feature gate is off); only scheduler-plugins PodGroups are gangs", "groupVersion", gv)
		}
		return func() {}
	}
	factory := informers.NewSharedInformerFactory(c.client, 0)
	c.nativeGroups = factory.Scheduling().V1beta1().PodGroups().Lister()
	factory.Start(ctx.Done())
	logger.V(2).Info("Reading native PodGroups for gangs' minCount", "groupVersion", gv)
	return factory.Shutdown
}

// servedResources says which resources of the group version the API server
// serves (none, with the error, when discovery fails; none, with a NotFound
// error, when it does not serve the group version).
func (c *Controller) servedResources(gv string) (map[string]bool, error) {
	resources, err := c.client.Discovery().ServerResourcesForGroupVersion(gv)
	served := map[string]bool{}
	if err == nil {
		for _, r := range resources.APIResources {
			served[r.Name] = true
		}
	}
	return served, err
}
