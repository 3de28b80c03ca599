package evict

import (
	v1 "k8s.io/api/core/v1"
	schedlisters "k8s.io/client-go/listers/scheduling/v1beta1"
	pglisters "sigs.k8s.io/scheduler-plugins/pkg/generated/listers/scheduling/v1alpha1"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// Quorum is the minMember of the PodGroup group in namespace, as groups has
// seen it: 0 when groups is nil, the PodGroup is not seen, or it asks for
// none, and a gang with quorum 0 goes whole. The PodGroup is the tenant's
// own: the most a lie in it can do is have its own gang shed members it
// cannot run without.
func Quorum(groups pglisters.PodGroupLister, namespace, group string) int32 {
	if groups == nil || group == "" {
		return 0
	}
	pg, err := groups.PodGroups(namespace).Get(group)
	if err != nil || pg.Spec.MinMember < 1 {
		return 0
	}
	return pg.Spec.MinMember
}

// NativeQuorum is, for the native PodGroup group in namespace as natives has
// seen it, its gang policy's minCount; 1 for a group with the basic policy,
// whose members run independently, so all but one may be shed one at a time
// as lone pods would be; 0 when natives is nil (the API is not served) or the
// group is not seen, and the gang goes whole.
func NativeQuorum(natives schedlisters.PodGroupLister, namespace, group string) int32 {
	if natives == nil || group == "" {
		return 0
	}
	pg, err := natives.PodGroups(namespace).Get(group)
	if err != nil {
		return 0
	}
	if gang := pg.Spec.SchedulingPolicy.Gang; gang != nil {
		return max(gang.MinCount, 0)
	}
	return 1
}

// GangQuorum is the quorum of pod's gang (api.GangOf), whichever kind of
// PodGroup names it: 0 for a pod in no gang.
func GangQuorum(groups pglisters.PodGroupLister, natives schedlisters.PodGroupLister, pod *v1.Pod) int32 {
	kind, name, ok := api.GangOf(pod)
	switch {
	case !ok:
		return 0
	case kind == api.GangNative:
		return NativeQuorum(natives, pod.Namespace, name)
	default:
		return Quorum(groups, pod.Namespace, name)
	}
}
