//go:build kube1.35 || kube1.36

package kubecompat

import fwk "k8s.io/kube-scheduler/framework"

// AssignedPod and TargetPod are both fwk.Pod before Kubernetes 1.37: a
// hint registered for either sees the events of every pod the queue sends,
// so each checks which pod changed.
const (
	AssignedPod = fwk.Pod
	TargetPod   = fwk.Pod
)
