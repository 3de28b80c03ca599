//go:build kube1.35

package kubecompat

import fwk "k8s.io/kube-scheduler/framework"

// PodGroupCycle is false: Kubernetes 1.35 schedules no pod group in one cycle.
func PodGroupCycle(fwk.CycleState) bool { return false }
