package controller

import (
	"context"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/gleaner-dev/gleaner/pkg/dra"
)

// ReasonGPUsNotCounted is the Event on a node whose DRA GPUs Gleaner cannot
// count: nothing is lent there.
const ReasonGPUsNotCounted = "GPUsNotCounted"

// draGPUs reads the GPUs Dynamic Resource Allocation publishes
// (resource.k8s.io/v1), when the API server serves it. The round counts a
// node's GPUs as its extended resource plus its DRA GPUs, and those its
// claims hold as serving (pkg/dra); a replica's size includes what its
// claims hold.
type draGPUs struct {
	classes resourcelisters.DeviceClassLister
	slices  resourcelisters.ResourceSliceLister
	claims  resourcelisters.ResourceClaimLister
	// taintRules is nil where DeviceTaintRules are not served.
	taintRules resourcelisters.DeviceTaintRuleLister
	counter    *dra.Counter
	// reported are the problems last reported, by node ("" for the fleet's).
	reported map[string]string
}

// startDRA starts reading DRA's objects when the API server serves
// resource.k8s.io/v1, and returns what the first round waits for and what
// stops the informers. Unlike native PodGroups, the round waits: until the
// claims are read, GPUs that inference holds through them would look idle.
func (c *Controller) startDRA(ctx context.Context) ([]cache.InformerSynced, func()) {
	logger := klog.FromContext(ctx)
	gv := resourceapi.SchemeGroupVersion.String()
	served, err := c.servedResources(gv)
	if !served["resourceslices"] || !served["resourceclaims"] || !served["deviceclasses"] {
		if err != nil && !apierrors.IsNotFound(err) {
			// Fail closed: a DRA GPU not read is a GPU lent while held.
			logger.Error(err, "Could not ask the API server whether it serves DRA; waiting to read it before planning", "groupVersion", gv)
		} else {
			logger.Info("The API server does not serve DRA; only GPUs advertised as an extended resource are counted", "groupVersion", gv)
			return nil, func() {}
		}
	}
	factory := informers.NewSharedInformerFactoryWithOptions(c.client, 0, informers.WithTransform(slimObjects(c.cfg.GPUResource)))
	r := factory.Resource().V1()
	// Claims are tenants' to write: each is cut to what the count reads.
	c.dra = &draGPUs{
		classes:  r.DeviceClasses().Lister(),
		slices:   r.ResourceSlices().Lister(),
		claims:   r.ResourceClaims().Lister(),
		counter:  dra.NewCounter(c.cfg.GPUResource),
		reported: map[string]string{},
	}
	synced := []cache.InformerSynced{r.DeviceClasses().Informer().HasSynced, r.ResourceSlices().Informer().HasSynced, r.ResourceClaims().Informer().HasSynced}
	if served["devicetaintrules"] {
		c.dra.taintRules = r.DeviceTaintRules().Lister()
		synced = append(synced, r.DeviceTaintRules().Informer().HasSynced)
	}
	factory.Start(ctx.Done())
	logger.V(2).Info("Counting GPUs that DRA publishes", "groupVersion", gv, "gpuResource", c.cfg.GPUResource)
	return synced, factory.Shutdown
}

// count counts the DRA GPUs (an empty count when DRA is not served). A
// lister that fails fails the round: nothing is planned on a partial count.
func (d *draGPUs) count(ctx context.Context, pods []*v1.Pod) (dra.Count, error) {
	if d == nil {
		return dra.Count{}, nil
	}
	var f dra.Facts
	var err error
	if f.Classes, err = d.classes.List(labels.Everything()); err != nil {
		return dra.Count{}, err
	}
	if f.Slices, err = d.slices.List(labels.Everything()); err != nil {
		return dra.Count{}, err
	}
	if f.Claims, err = d.claims.List(labels.Everything()); err != nil {
		return dra.Count{}, err
	}
	if d.taintRules != nil {
		if f.TaintRules, err = d.taintRules.List(labels.Everything()); err != nil {
			return dra.Count{}, err
		}
	}
	return d.counter.Count(ctx, f, pods), nil
}

// reportDRA says, once per change, why a node's (or the fleet's) DRA GPUs are
// not counted: in the log, and as an Event on the node.
func (c *Controller) reportDRA(ctx context.Context, count dra.Count, nodes map[string]*v1.Node) {
	if c.dra == nil {
		return
	}
	logger := klog.FromContext(ctx)
	now := map[string]string{"": strings.Join(count.Problems, "; ")}
	for name, n := range count.Nodes {
		if n.Problem != "" {
			now[name] = n.Problem
		}
	}
	for name, problem := range now {
		if problem == c.dra.reported[name] {
			continue
		}
		switch {
		case name == "":
			logger.Info("GPUs published through DRA that Gleaner does not count", "problems", problem)
		default:
			logger.Info("Lending nothing on a node whose DRA GPUs Gleaner cannot count", "node", name, "problem", problem)
			if node := nodes[name]; node != nil {
				c.recorder.Eventf(node, v1.EventTypeWarning, ReasonGPUsNotCounted, "Gleaner lends nothing here: %s", problem)
			}
		}
	}
	for name := range c.dra.reported {
		if _, ok := now[name]; !ok && name != "" {
			logger.Info("A node's DRA GPUs are counted again", "node", name)
		}
	}
	c.dra.reported = now
}
