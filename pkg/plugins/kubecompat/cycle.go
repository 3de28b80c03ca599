//go:build !kube1.35

package kubecompat

import fwk "k8s.io/kube-scheduler/framework"

// PodGroupCycle says whether state is a pod group's scheduling cycle, in which
// the framework assumes the group's members in the snapshot.
func PodGroupCycle(state fwk.CycleState) bool { return state.IsPodGroupSchedulingCycle() }
