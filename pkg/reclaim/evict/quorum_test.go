package evict

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedlisters "k8s.io/client-go/listers/scheduling/v1beta1"
	"k8s.io/client-go/tools/cache"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	pglisters "sigs.k8s.io/scheduler-plugins/pkg/generated/listers/scheduling/v1alpha1"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// A PodGroup is the tenant's own: what it says of its quorum is read only
// when it asks for at least one member; anything else keeps the gang whole.
func TestQuorum(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for name, min := range map[string]int32{"elastic": 2, "zero": 0, "negative": -3} {
		if err := indexer.Add(&schedv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name}, Spec: schedv1alpha1.PodGroupSpec{MinMember: min}}); err != nil {
			t.Fatal(err)
		}
	}
	groups := pglisters.NewPodGroupLister(indexer)
	for _, tt := range []struct {
		groups          pglisters.PodGroupLister
		namespace, name string
		want            int32
	}{
		{groups, "ml", "elastic", 2},
		{groups, "other", "elastic", 0}, // another namespace's PodGroup is not this gang's
		{groups, "ml", "zero", 0},
		{groups, "ml", "negative", 0},
		{groups, "ml", "missing", 0},
		{groups, "ml", "", 0},
		{nil, "ml", "elastic", 0},
	} {
		if got := Quorum(tt.groups, tt.namespace, tt.name); got != tt.want {
			t.Errorf("Quorum(%s/%s) = %d, want %d", tt.namespace, tt.name, got, tt.want)
		}
	}
}

// A native PodGroup's quorum is its gang policy's minCount; a basic-policy
// group's members run on their own, so it keeps one; an unseen group, or no
// lister (the API not served), keeps the gang whole. A pod's gang quorum is
// read from the kind of group it names, its native group first.
func TestNativeQuorum(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, pg := range []*schedulingv1beta1.PodGroup{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "gang"}, Spec: schedulingv1beta1.PodGroupSpec{
			SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 3}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "basic"}, Spec: schedulingv1beta1.PodGroupSpec{
			SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Basic: &schedulingv1beta1.BasicSchedulingPolicy{}}}},
	} {
		if err := indexer.Add(pg); err != nil {
			t.Fatal(err)
		}
	}
	natives := schedlisters.NewPodGroupLister(indexer)
	for _, tt := range []struct {
		natives         schedlisters.PodGroupLister
		namespace, name string
		want            int32
	}{
		{natives, "ml", "gang", 3},
		{natives, "ml", "basic", 1},
		{natives, "other", "gang", 0},
		{natives, "ml", "missing", 0},
		{nil, "ml", "gang", 0},
	} {
		if got := NativeQuorum(tt.natives, tt.namespace, tt.name); got != tt.want {
			t.Errorf("NativeQuorum(%s/%s) = %d, want %d", tt.namespace, tt.name, got, tt.want)
		}
	}

	pgIndexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if err := pgIndexer.Add(&schedv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "gang"}, Spec: schedv1alpha1.PodGroupSpec{MinMember: 2}}); err != nil {
		t.Fatal(err)
	}
	groups := pglisters.NewPodGroupLister(pgIndexer)
	name := "gang"
	pod := func(label bool, nativeGroup bool) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "p", Labels: map[string]string{}}}
		if label {
			p.Labels[api.LabelPodGroup] = name
		}
		if nativeGroup {
			p.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: &name}
		}
		return p
	}
	for _, tt := range []struct {
		label, native bool
		want          int32
	}{{false, false, 0}, {true, false, 2}, {false, true, 3}, {true, true, 3}} {
		if got := GangQuorum(groups, natives, pod(tt.label, tt.native)); got != tt.want {
			t.Errorf("GangQuorum(label %v, native %v) = %d, want %d", tt.label, tt.native, got, tt.want)
		}
	}
}
