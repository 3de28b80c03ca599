//go:build !kube1.35 && !kube1.36

package kubecompat

import fwk "k8s.io/kube-scheduler/framework"

// AssignedPod is the event resource of bound (and nominated) pods, and
// TargetPod that of the pending pod a hint is asked about, when it changes
// itself: Kubernetes 1.37 split them out of fwk.Pod.
const (
	AssignedPod = fwk.AssignedPod
	TargetPod   = fwk.TargetPod
)
