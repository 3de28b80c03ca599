package evict

import (
	v1 "k8s.io/api/core/v1"
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

// GangQuorum is the quorum of pod's gang (api.GangOf), whichever kind of
// PodGroup names it: 0 for a pod in no gang.
func GangQuorum(groups pglisters.PodGroupLister, natives NativeGroups, pod *v1.Pod) int32 {
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
