package api

import v1 "k8s.io/api/core/v1"

// A pod is a member of at most one gang, named one of two ways:
//   - a native PodGroup (scheduling.k8s.io/v1beta1, feature gate
//     GenericWorkload): the pod's spec.schedulingGroup.podGroupName, the field
//     the in-tree GangScheduling plugin reads;
//   - a scheduler-plugins PodGroup (scheduling.x-k8s.io/v1alpha1): the label
//     LabelPodGroup, which Gleaner's Gang plugin reads.
//
// A pod that names both is refused by gleaner-scheduler; wherever else it is
// met (a pod placed by another scheduler), the native group wins, as it is the
// one the API server and the in-tree scheduler know it by.

// GangKind says which PodGroup API a gang's group is.
type GangKind string

const (
	// GangNative is a scheduling.k8s.io PodGroup, minCount its quorum.
	GangNative GangKind = "scheduling.k8s.io"
	// GangPodGroup is a scheduling.x-k8s.io PodGroup, minMember its quorum.
	GangPodGroup GangKind = "scheduling.x-k8s.io"
)

// GangOf is the gang pod belongs to (its PodGroup's kind and name in the
// pod's namespace), or ok false for a pod in no gang.
func GangOf(pod *v1.Pod) (kind GangKind, name string, ok bool) {
	if g := NativeGroupOf(pod); g != "" {
		return GangNative, g, true
	}
	if g := pod.Labels[LabelPodGroup]; g != "" {
		return GangPodGroup, g, true
	}
	return "", "", false
}

// GangKey is a key for pod's gang unique in the cluster, or "" for a pod in
// no gang: two pods share it exactly when they are members of one gang.
func GangKey(pod *v1.Pod) string {
	kind, name, ok := GangOf(pod)
	if !ok {
		return ""
	}
	if kind == GangNative {
		return pod.Namespace + "/" + string(kind) + "/podgroups=" + name
	}
	// The key the reclaimer has always used for scheduler-plugins gangs.
	return pod.Namespace + "/" + LabelPodGroup + "=" + name
}
