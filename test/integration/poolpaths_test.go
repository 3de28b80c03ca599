package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// poolPaths tries, with the shipped gleaner-pool-gpus admission policy in
// force, every way but gleaner-scheduler's of putting a pod on the pool's
// GPUs: a best-effort pod sent to the default scheduler, an ordinary pod with
// a node selector for the pool (and a day's grace period), one sent to
// another scheduler that binds it to a pool node, and one created with
// spec.nodeName. None may run there; a best-effort pod through
// gleaner-scheduler still does.
func poolPaths(t *testing.T, env *harvestEnv) {
	t.Helper() // its lines are the fault scenario's: make test-faults shows them
	defer installAdmissionPolicies(t, env, nil, "gleaner-pool-gpus")()
	grace := int64(24 * 3600)
	ordinary := func(name string) *v1.Pod {
		return &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: researchNS},
			Spec: v1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []v1.Container{{
				Name: "train", Image: "example.com/train", Resources: v1.ResourceRequirements{Requests: gpus(1), Limits: gpus(1)}}}},
		}
	}
	viaDefault := bestEffortPod("best-effort-default", 1)
	viaDefault.Spec.SchedulerName = v1.DefaultSchedulerName
	withSelector := ordinary("selector-for-the-pool")
	withSelector.Spec.NodeSelector = map[string]string{api.LabelPool: api.PoolInference}
	viaOther := ordinary("another-scheduler")
	viaOther.Spec.SchedulerName = "other-scheduler"
	preset := ordinary("preset-node")
	preset.Spec.NodeName = "gpu-b"
	attempts := []*v1.Pod{viaDefault, withSelector, viaOther, preset}

	// The API server enforces a policy once it has loaded it.
	waitFor(t, "the policy in force", 20*time.Second, func() bool {
		_, err := env.client.CoreV1().Pods(researchNS).Create(env.ctx, preset, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err) || apierrors.IsInvalid(err)
	})
	refused := 0
	var created []string
	for _, p := range attempts {
		_, err := env.client.CoreV1().Pods(researchNS).Create(env.ctx, p, metav1.CreateOptions{})
		switch {
		case err != nil && strings.Contains(err.Error(), "reaches the pool (nodes labelled gleaner.dev/pool=inference) only through gleaner-scheduler"):
			refused++
			continue
		case err != nil:
			t.Fatalf("creating %s: %v", p.Name, err)
		}
		created = append(created, p.Name)
		if p == viaOther { // what another scheduler does with it
			binding := &v1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: researchNS}, Target: v1.ObjectReference{Kind: "Node", Name: "gpu-b"}}
			if err := env.client.CoreV1().Pods(researchNS).Bind(env.ctx, binding, metav1.CreateOptions{}); err != nil {
				t.Errorf("binding %s to gpu-b: %v", p.Name, err)
			}
		}
	}
	defer func() {
		for _, name := range created {
			env.deleteNow(researchNS, name)
		}
	}()
	// Whatever was admitted gets its time to be placed and started.
	landed := map[string]string{}
	waitFor(t, "the pods admitted to start", 15*time.Second, func() bool {
		for _, name := range created {
			p, err := env.client.CoreV1().Pods(researchNS).Get(context.Background(), name, metav1.GetOptions{})
			if err == nil && p.Status.Phase == v1.PodRunning && (p.Spec.NodeName == "gpu-a" || p.Spec.NodeName == "gpu-b") {
				landed[name] = p.Spec.NodeName
			}
		}
		return len(landed) == len(created)
	})
	// Gleaner's own path still lends.
	env.create(bestEffortPod("through-gleaner", 1))
	env.waitBound(researchNS, "through-gleaner", 20*time.Second)
	env.deleteNow(researchNS, "through-gleaner")
	var where []string
	for name, node := range landed {
		where = append(where, fmt.Sprintf("%s on %s", name, node))
	}
	t.Logf("fault: pods sent to the pool's GPUs past gleaner-scheduler (a best-effort pod on the default scheduler, an ordinary pod selecting the pool with a day's grace, one bound by another scheduler, one created with spec.nodeName): %d of %d refused by the API server, %d running on pool GPUs %v; a best-effort pod through gleaner-scheduler still placed",
		refused, len(attempts), len(landed), where)
	if len(landed) > 0 || refused != len(attempts) {
		t.Errorf("%d of %d refused; running on pool GPUs not lent to them: %v", refused, len(attempts), where)
	}
}
