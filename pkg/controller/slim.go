package controller

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// slimObject is the controller's informers' transform: it drops, before an
// object is cached, the parts the controller never reads and that weigh most
// on a real cluster. Every object's managedFields; a node's list of images; a
// pod's environment, commands, probes, mounts and volumes, its containers'
// statuses, and every annotation but Gleaner's own. What the controller does
// read (labels, owners, requests, placement, phase, conditions, deletion) is
// kept as it came. Nothing is written back from the cache (verdicts, notices
// and evictions are patches and subresources), so nothing dropped here can be
// lost on the server.
func slimObject(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	switch o := obj.(type) {
	case *v1.Pod:
		o.Annotations = gleanerAnnotations(o.Annotations)
		slimPodSpec(&o.Spec)
		o.Status.ContainerStatuses = nil
		o.Status.InitContainerStatuses = nil
		o.Status.EphemeralContainerStatuses = nil
	case *v1.Node:
		o.Status.Images = nil
	case *appsv1.Deployment:
		// Its annotations are the service's settings; its template is read
		// for the GPUs a replica asks for.
		slimPodSpec(&o.Spec.Template.Spec)
	}
	return obj, nil
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

func slimPodSpec(spec *v1.PodSpec) {
	spec.Volumes = nil
	spec.EphemeralContainers = nil
	slimContainers(spec.Containers)
	slimContainers(spec.InitContainers)
}

// slimContainers keeps each container's name, ports, resources and restart
// policy (what a pod's requests are counted from).
func slimContainers(cs []v1.Container) {
	for i := range cs {
		c := &cs[i]
		cs[i] = v1.Container{Name: c.Name, Image: c.Image, Ports: c.Ports, Resources: c.Resources,
			ResizePolicy: c.ResizePolicy, RestartPolicy: c.RestartPolicy, RestartPolicyRules: c.RestartPolicyRules}
	}
}
