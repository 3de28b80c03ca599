package controller

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// slimObjects is the controller's informers' transform: it drops, before an
// object is cached, the parts the controller never reads and that weigh most
// on a real cluster. Every object's managedFields; a node's list of images; a
// pod's environment, commands, probes, mounts and volumes, its containers'
// statuses, every annotation but Gleaner's own, and every resource but the
// requests of gpu (api.PodGPUs is all that reads them). What the controller
// does read (labels, owners, GPU requests, placement, phase, conditions,
// deletion) is kept as it came. Nothing is written back from the cache
// (verdicts, notices and evictions are patches and subresources), so nothing
// dropped here can be lost on the server.
func slimObjects(gpu v1.ResourceName) cache.TransformFunc {
	return func(obj any) (any, error) {
		if m, ok := obj.(metav1.Object); ok {
			m.SetManagedFields(nil)
		}
		switch o := obj.(type) {
		case *resourceapi.ResourceClaim:
			return slimClaim(o), nil
		case *v1.Pod:
			o.Annotations = gleanerAnnotations(o.Annotations)
			slimPodSpec(&o.Spec, gpu)
			o.Status.ContainerStatuses = nil
			o.Status.InitContainerStatuses = nil
			o.Status.EphemeralContainerStatuses = nil
		case *v1.Node:
			o.Status.Images = nil
		case *appsv1.Deployment:
			// Its annotations are the service's settings; its template is
			// read for the GPUs a replica asks for.
			slimPodSpec(&o.Spec.Template.Spec, gpu)
		}
		return obj, nil
	}
}

// gleanerAnnotations keeps the annotations under Gleaner's prefix: a
// tenant's pod may carry up to 256 KiB of others (last-applied
// configurations, tooling), none of which the controller reads.
func gleanerAnnotations(in map[string]string) map[string]string {
	var out map[string]string
	for k, v := range in {
		if strings.HasPrefix(k, api.Prefix) {
			if out == nil {
				out = make(map[string]string, 2)
			}
			out[k] = v
		}
	}
	return out
}

func slimPodSpec(spec *v1.PodSpec, gpu v1.ResourceName) {
	spec.Volumes = nil
	spec.EphemeralContainers = nil
	spec.Overhead = gpuOnly(spec.Overhead, gpu)
	slimContainers(spec.Containers, gpu)
	slimContainers(spec.InitContainers, gpu)
}

// slimContainers keeps each container's name, image, its request of gpu and
// its restart policy (what api.PodGPUs counts from).
func slimContainers(cs []v1.Container, gpu v1.ResourceName) {
	for i := range cs {
		c := &cs[i]
		cs[i] = v1.Container{Name: c.Name, Image: c.Image, RestartPolicy: c.RestartPolicy,
			Resources: v1.ResourceRequirements{Requests: gpuOnly(c.Resources.Requests, gpu)}}
	}
}

// gpuOnly is list's entry for name alone, nil when it has none.
func gpuOnly(list v1.ResourceList, name v1.ResourceName) v1.ResourceList {
	q, ok := list[name]
	if !ok {
		return nil
	}
	return v1.ResourceList{name: q}
}

// slimClaim keeps of a ResourceClaim what the DRA count reads (pkg/dra): its
// names, the annotation that marks the scheduler's claim for an extended
// request, and its allocation's results and consumers. A claim is a tenant's
// to write: its spec and annotations may be large, and are dropped.
func slimClaim(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	out := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{
		Name: c.Name, Namespace: c.Namespace, UID: c.UID, ResourceVersion: c.ResourceVersion,
	}}
	if v, ok := c.Annotations[resourceapi.ExtendedResourceClaimAnnotation]; ok {
		out.Annotations = map[string]string{resourceapi.ExtendedResourceClaimAnnotation: v}
	}
	out.Status.ReservedFor = c.Status.ReservedFor
	if a := c.Status.Allocation; a != nil {
		out.Status.Allocation = &resourceapi.AllocationResult{}
		results := make([]resourceapi.DeviceRequestAllocationResult, len(a.Devices.Results))
		for i, r := range a.Devices.Results {
			results[i] = resourceapi.DeviceRequestAllocationResult{Request: r.Request, Driver: r.Driver, Pool: r.Pool, Device: r.Device, AdminAccess: r.AdminAccess}
		}
		out.Status.Allocation.Devices.Results = results
	}
	return out
}
