//go:build kube1.35 || kube1.36

package kubecompat

import fwk "k8s.io/kube-scheduler/framework"

// AssignedPod and UnscheduledPod are both fwk.Pod before Kubernetes 1.37:
// every hint registered for either sees every pod's events, so each checks
// whether the pod is bound itself.
const (
	AssignedPod    = fwk.Pod
	UnscheduledPod = fwk.Pod
)
