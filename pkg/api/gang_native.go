//go:build !kube1.35 && !kube1.36

package api

import v1 "k8s.io/api/core/v1"

// NativeGroupOf is the native PodGroup pod names in spec.schedulingGroup, or "".
func NativeGroupOf(pod *v1.Pod) string {
	if g := pod.Spec.SchedulingGroup; g != nil && g.PodGroupName != nil {
		return *g.PodGroupName
	}
	return ""
}
