//go:build !kube1.35 && !kube1.36

package kubecompat

import fwk "k8s.io/kube-scheduler/framework"

// AssignedPod and UnscheduledPod are the event resources of bound and of
// pending pods (Kubernetes 1.37 split them out of fwk.Pod).
const (
	AssignedPod    = fwk.AssignedPod
	UnscheduledPod = fwk.UnscheduledPod
)
