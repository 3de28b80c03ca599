package controller

import (
	"context"
	"testing"
	"time"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// Native PodGroups are read only where the API server serves them; where it
// does not (GenericWorkload off), the controller carries on without them.
func TestNativeGroupsReadOnlyWhereServed(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	off := &Controller{client: fake.NewClientset()}
	off.startNativeGroups(ctx)()
	if off.nativeGroups != nil {
		t.Fatal("native PodGroups read from an API server that does not serve them")
	}

	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train"}, Spec: schedulingv1beta1.PodGroupSpec{
		SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 2}}}}
	client := fake.NewClientset(pg)
	client.Resources = []*metav1.APIResourceList{{GroupVersion: "scheduling.k8s.io/v1beta1", APIResources: []metav1.APIResource{{Name: "podgroups", Namespaced: true, Kind: "PodGroup"}}}}
	on := &Controller{client: client}
	stop := on.startNativeGroups(ctx)
	// The informer stops when ctx ends; only then may stop wait for it.
	defer func() { cancel(); stop() }()
	if on.nativeGroups == nil {
		t.Fatal("native PodGroups not read from an API server that serves them")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if got, err := on.nativeGroups.PodGroups("ml").Get("train"); err == nil && got.Spec.SchedulingPolicy.Gang.MinCount == 2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the native PodGroup was never seen")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
