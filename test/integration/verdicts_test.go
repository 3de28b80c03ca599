package integration

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// nodeVerdicts checks, against the shipped admission policies, that only
// gleaner-controller writes a Node's verdict: vap-node's kubelet (its own
// identity, system:node:vap-node in system:nodes, which the Node authorizer
// and NodeRestriction know) may change its own Node, but not the verdict,
// through the Node or its status, nor register a Node carrying one; neither
// may the cluster admin. Anyone may remove it. try retries a write meant to
// be denied until the policy has loaded.
func nodeVerdicts(t *testing.T, ctx context.Context, cp *controlPlane, try func(deny bool, write func() error) error) {
	t.Helper()
	const denied = "only gleaner-controller sets a Node's verdict"
	as := func(user string, groups ...string) kubernetes.Interface {
		cfg := rest.CopyConfig(cp.config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
		return kubernetes.NewForConfigOrDie(cfg)
	}
	kubelet := as("system:node:vap-node", "system:nodes", "system:authenticated")
	dryRun := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	patch := func(client kubernetes.Interface, body string, subresources ...string) func() error {
		return func() error {
			_, err := client.CoreV1().Nodes().Patch(ctx, "vap-node", types.MergePatchType, []byte(body), dryRun, subresources...)
			return err
		}
	}
	verdict := `{"metadata":{"labels":{"gleaner.dev/harvest":"open"},"annotations":{"gleaner.dev/harvestable-gpus":"8"}}}`
	for _, tt := range []struct {
		name  string
		write func() error
		deny  bool
	}{
		// The kubelet's identity works: a label of its own goes through.
		{"the kubelet labelling its Node example.com/rack", patch(kubelet, `{"metadata":{"labels":{"example.com/rack":"r1"}}}`), false},
		{"the kubelet opening its Node", patch(kubelet, `{"metadata":{"labels":{"gleaner.dev/harvest":"open"}}}`), true},
		{"the kubelet raising its harvestable GPUs", patch(kubelet, `{"metadata":{"annotations":{"gleaner.dev/harvestable-gpus":"8"}}}`), true},
		{"the kubelet writing its availability", patch(kubelet, `{"metadata":{"annotations":{"gleaner.dev/availability":"for=1h0m0s,survive-1h=0.99,survive-4h=0.99"}}}`), true},
		{"the kubelet opening its Node through its status", patch(kubelet, `{"metadata":{"labels":{"gleaner.dev/harvest":"open"}}}`, "status"), true},
		{"the kubelet registering a Node that carries a verdict", func() error {
			node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "vap-node-2", Labels: map[string]string{api.LabelPool: api.PoolInference, api.LabelHarvest: "open"}}}
			_, err := as("system:node:vap-node-2", "system:nodes", "system:authenticated").CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}, true},
		{"the cluster admin opening a Node", patch(cp.client, verdict), true},
	} {
		err := try(tt.deny, tt.write)
		switch {
		case !tt.deny && err != nil:
			t.Errorf("%s: denied: %v", tt.name, err)
		case tt.deny && (err == nil || !strings.Contains(err.Error(), denied)):
			t.Errorf("%s: %v, want denied with %q", tt.name, err, denied)
		}
	}
	// gleaner-controller publishes it; then anyone may take it away, which
	// closes the node.
	impersonated := rest.CopyConfig(cp.config)
	impersonated.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + api.SystemNamespace + ":gleaner-controller",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + api.SystemNamespace, "system:authenticated"},
	}
	published, err := kubernetes.NewForConfigOrDie(impersonated).CoreV1().Nodes().Patch(ctx, "vap-node", types.MergePatchType, []byte(verdict), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("gleaner-controller publishing a verdict: %v", err)
	}
	if published.Labels[api.LabelHarvest] != "open" {
		t.Fatalf("the verdict was not published: %v", published.Labels)
	}
	for _, tt := range []struct {
		name   string
		client kubernetes.Interface
	}{{"the kubelet", kubelet}, {"the cluster admin", cp.client}} {
		if err := patch(tt.client, `{"metadata":{"labels":{"gleaner.dev/harvest":null},"annotations":{"gleaner.dev/harvestable-gpus":null}}}`)(); err != nil {
			t.Errorf("%s removing the verdict: %v", tt.name, err)
		}
		// Leaving it as it is (a status update, say) is no change.
		if err := patch(tt.client, `{"metadata":{"labels":{"example.com/rack":"r2"}}}`)(); err != nil {
			t.Errorf("%s labelling a Node that carries a verdict: %v", tt.name, err)
		}
	}
	if err := patch(kubelet, `{"metadata":{"labels":{"gleaner.dev/harvest":"draining"}}}`)(); err == nil || !strings.Contains(err.Error(), denied) {
		t.Errorf("the kubelet changing a published verdict: %v, want denied", err)
	}
}
