//go:build !kube1.35 && !kube1.36

package evict

import (
	"k8s.io/client-go/informers"
	schedlisters "k8s.io/client-go/listers/scheduling/v1beta1"
)

// NativeGroups reads native PodGroups (scheduling.k8s.io/v1beta1).
type NativeGroups = schedlisters.PodGroupLister

// NativeGroupsFrom is the lister of factory's native PodGroups; the informer
// is started and synced with the factory's others.
func NativeGroupsFrom(factory informers.SharedInformerFactory) NativeGroups {
	return factory.Scheduling().V1beta1().PodGroups().Lister()
}

// NativeQuorum is, for the native PodGroup group in namespace as natives has
// seen it, its gang policy's minCount; 1 for a group with the basic policy,
// whose members run independently, so all but one may be shed one at a time
// as lone pods would be; 0 when natives is nil (the API is not served) or the
// group is not seen, and the gang goes whole.
func NativeQuorum(natives NativeGroups, namespace, group string) int32 {
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
