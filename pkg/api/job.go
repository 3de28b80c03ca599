package api

import (
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LabelWorkflow is the label Argo puts on a workflow's pods: its name.
const LabelWorkflow = "workflows.argoproj.io/workflow"

// JobOf names a pod's job, as people know it: its pod group, its Argo
// workflow, its controller (a Job, a JobSet...), or the pod itself.
func JobOf(p *v1.Pod) (kind, name string) {
	if _, g, ok := GangOf(p); ok {
		return "PodGroup", g
	}
	if w := p.Labels[LabelWorkflow]; w != "" {
		return "Workflow", w
	}
	if ref := metav1.GetControllerOf(p); ref != nil {
		return ref.Kind, ref.Name
	}
	return "Pod", p.Name
}
