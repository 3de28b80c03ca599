package integration

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gleaner-dev/gleaner/internal/chart"
	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
)

// installAdmissionPolicies creates the chart's admission policies named, as
// rendered with values over the defaults, and returns what deletes them. The
// API server enforces each once it has loaded it: the caller waits for that.
func installAdmissionPolicies(t *testing.T, env *harvestEnv, values map[string]any, names ...string) (remove func()) {
	t.Helper()
	rendered, err := chart.RenderChart(filepath.Join(repoRoot(t), "charts", "gleaner"), values, api.SystemNamespace)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	reg := env.client.AdmissionregistrationV1()
	created := 0
	for _, obj := range decodeObjects(t, []byte(rendered.Templates["admission/policies.yaml"]), "admission policies") {
		if !want[obj.GetName()] {
			continue
		}
		switch obj.GetKind() {
		case "ValidatingAdmissionPolicy":
			var p admissionregistrationv1.ValidatingAdmissionPolicy
			fromUnstructured(t, obj, &p)
			if _, err := reg.ValidatingAdmissionPolicies().Create(env.ctx, &p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			created++
		case "ValidatingAdmissionPolicyBinding":
			var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
			fromUnstructured(t, obj, &b)
			if _, err := reg.ValidatingAdmissionPolicyBindings().Create(env.ctx, &b, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if created != len(names) {
		t.Fatalf("the chart renders %d of the policies %v", created, names)
	}
	return func() {
		for _, n := range names {
			_ = reg.ValidatingAdmissionPolicyBindings().Delete(env.ctx, n, metav1.DeleteOptions{})
			_ = reg.ValidatingAdmissionPolicies().Delete(env.ctx, n, metav1.DeleteOptions{})
		}
	}
}

// Opting a namespace out of Gleaner (gleaner.dev/inference=false) leaves its
// running replicas alone and admits their scale-outs, while Gleaner stops
// planning for it; the label cannot be removed while it says true, which
// would refuse the next replica. With the chart's inferenceNamespaces set,
// the policies admit what the controller plans for: the listed namespaces
// (and one opting out), not those merely labelled.
func TestOptingOutLeavesRunningServicesAlone(t *testing.T) {
	env := startHarvestEnv(t)
	chat0 := env.startChat()
	policies := []string{"gleaner-inference-priority", "gleaner-pool-gpus", "gleaner-inference-opt-out"}
	remove := installAdmissionPolicies(t, env, nil, policies...)
	for _, ns := range []string{"listed", "unlisted"} {
		createNamespace(t, env.client, ns)
	}
	replica := func(ns, name string) *v1.Pod {
		p := inferencePod(name, "chat", 4, chat0, v1.DefaultSchedulerName)
		p.Namespace = ns
		return p
	}
	dryRun := func(p *v1.Pod) error {
		_, err := env.client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	// The policies are in force once a pod in a namespace nobody opted in is refused.
	waitFor(t, "the policies in force", 20*time.Second, func() bool { return dryRun(replica("unlisted", "probe")) != nil })
	err := dryRun(replica("unlisted", "chat-y"))
	if err == nil || !strings.Contains(err.Error(), "opted in (labelled gleaner.dev/inference=true, or =false while opting out)") {
		t.Errorf("a replica in a namespace nobody labelled: %v, want refused", err)
	}

	label := func(ns, value string) error {
		patch := `{"metadata":{"labels":{"gleaner.dev/inference":` + value + `}}}`
		_, err := env.client.CoreV1().Namespaces().Patch(context.Background(), ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}
	// Removing the label outright would refuse chat's next replica.
	if err := label(servingNS, "null"); err == nil || !strings.Contains(err.Error(), "gleaner.dev/inference=false --overwrite") {
		t.Fatalf("removing serving's opt-in: %v, want refused with the way out", err)
	}
	// Load that asks for another replica: gpu-a's free half is kept for it.
	chat0.set(vllmServing, 16, 8, 0.9)
	env.waitVerdict("gpu-a", harvest.Verdict{State: api.HarvestClosed}, 15*time.Second)
	if err := label(servingNS, `"false"`); err != nil {
		t.Fatalf("opting serving out: %v", err)
	}
	optedOut := time.Now()
	// Gleaner stops planning for chat: no room is kept for it any more.
	env.waitVerdict("gpu-a", open(4), 15*time.Second)
	t.Logf("gpu-a lent its free half %v after serving opted out", time.Since(optedOut).Round(time.Millisecond))
	env.assertVerdictHolds("gpu-a", open(4), 3*time.Second)
	// ...its running replica is left alone, and its scale-out is admitted and binds.
	if p := env.pod(servingNS, "chat-0"); p.DeletionTimestamp != nil || p.Spec.NodeName != "gpu-a" {
		t.Fatalf("chat-0 was disturbed by the opt-out: node %q, deleting %v", p.Spec.NodeName, p.DeletionTimestamp)
	}
	env.create(replica(servingNS, "chat-1"))
	node := env.waitBound(servingNS, "chat-1", 20*time.Second)
	t.Logf("after opting out, chat-1 (gleaner-inference) was admitted and bound to %s %v later", node, time.Since(optedOut).Round(time.Millisecond))

	// From false the label may go; then the namespace is out altogether.
	if err := label(servingNS, "null"); err != nil {
		t.Fatalf("removing serving's label after opting out: %v", err)
	}
	// The API server reads namespaces for its policies from its own cache:
	// the label's removal reaches it within moments.
	waitFor(t, "a gleaner-inference replica refused in a namespace with no opt-in left", 10*time.Second,
		func() bool { return dryRun(replica(servingNS, "chat-2")) != nil })

	// The chart with inferenceNamespaces: [listed].
	remove()
	defer installAdmissionPolicies(t, env, map[string]any{"inferenceNamespaces": []any{"listed"}}, policies...)()
	if err := label("unlisted", `"true"`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the listing policies in force", 20*time.Second, func() bool {
		err := dryRun(replica("unlisted", "probe"))
		return err != nil && strings.Contains(err.Error(), "listed in inferenceNamespaces")
	})
	if err := dryRun(replica("listed", "chat-x")); err != nil {
		t.Errorf("a replica in a namespace the chart lists: %v", err)
	}
	if err := label("listed", `"false"`); err != nil {
		t.Fatal(err)
	}
	if err := dryRun(replica("listed", "chat-x")); err != nil {
		t.Errorf("a replica in a listed namespace opting out: %v", err)
	}
}

// assertVerdictHolds fails if the node's verdict leaves want within period.
func (e *harvestEnv) assertVerdictHolds(node string, want harvest.Verdict, period time.Duration) {
	e.t.Helper()
	for end := time.Now().Add(period); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if got := e.verdict(node); got != want {
			e.t.Fatalf("%s verdict %+v, want it to stay %+v", node, got, want)
		}
	}
}
