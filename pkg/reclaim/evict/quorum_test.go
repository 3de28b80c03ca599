package evict

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	pglisters "sigs.k8s.io/scheduler-plugins/pkg/generated/listers/scheduling/v1alpha1"
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
