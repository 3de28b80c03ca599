package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/kubernetes/pkg/controller/clusterroleaggregation"
	"sigs.k8s.io/yaml"

	"github.com/gleaner-dev/gleaner/internal/chart"
	"github.com/gleaner-dev/gleaner/internal/cli"
	"github.com/gleaner-dev/gleaner/internal/manifests"
	"github.com/gleaner-dev/gleaner/internal/testobj"
	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/api/v1alpha1"
)

// renderInstall renders manifests/shared and manifests/, as an install applies
// them, and decodes every object.
func renderInstall(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	out, err := manifests.RenderInstall(filepath.Join(repoRoot(t), "manifests"))
	if err != nil {
		t.Fatal(err)
	}
	return decodeObjects(t, out, "rendered manifests")
}

// applyStrict creates or updates obj with server-side apply and strict field
// validation, so a misspelt field is an error rather than silently dropped.
func applyStrict(ctx context.Context, cp *controlPlane, mapper *restmapper.DeferredDiscoveryRESTMapper, obj *unstructured.Unstructured) error {
	return apply(ctx, cp, mapper, obj, nil)
}

// applyStrictDryRun is applyStrict that the API server checks and admits but
// does not persist.
func applyStrictDryRun(ctx context.Context, cp *controlPlane, mapper *restmapper.DeferredDiscoveryRESTMapper, obj *unstructured.Unstructured) error {
	return apply(ctx, cp, mapper, obj, []string{metav1.DryRunAll})
}

func apply(ctx context.Context, cp *controlPlane, mapper *restmapper.DeferredDiscoveryRESTMapper, obj *unstructured.Unstructured, dryRun []string) error {
	res, err := resourceFor(cp, mapper, obj)
	if err != nil {
		return err
	}
	data, err := runtime.Encode(unstructured.UnstructuredJSONScheme, obj)
	if err != nil {
		return err
	}
	opts := metav1.PatchOptions{FieldManager: "gleaner-install", FieldValidation: "Strict", Force: new(true), DryRun: dryRun}
	if _, err := res.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, opts); err != nil {
		return fmt.Errorf("applying %s %s/%s: %w", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// resourceFor is the dynamic client of obj's resource, in its namespace if it
// has one.
func resourceFor(cp *controlPlane, mapper *restmapper.DeferredDiscoveryRESTMapper, obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	res := dynamic.NewForConfigOrDie(cp.config).Resource(mapping.Resource)
	if ns := obj.GetNamespace(); ns != "" {
		return res.Namespace(ns), nil
	}
	return res, nil
}

// TestInstall applies the rendered install YAML to an apiserver that enforces
// RBAC, checks each ServiceAccount's permissions by impersonating it, and runs
// two replicas of each component, as real processes with their own
// ServiceAccount tokens, from the rendered ConfigMap and flags.
func TestInstall(t *testing.T) {
	// A kubelet's identity is what the Node authorizer and NodeRestriction
	// know it as, as in a real cluster.
	cp := startControlPlane(t, "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction")
	ctx := context.Background()
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cp.client.Discovery()))
	objs := renderInstall(t)

	// The chart with values other than its defaults applies as strictly, dry
	// run (its PriorityClasses' values could not change afterwards).
	createNamespace(t, cp.client, api.SystemNamespace)
	for _, values := range []map[string]any{
		{"bestEffortPriorityThreshold": 100, "gpuResourceName": "amd.com/gpu", "maxReclaimGraceSeconds": 300,
			"priorityClasses": map[string]any{"bestEffort": 50, "keepOnUninstall": false}, "inferenceNamespaces": []any{"llm"},
			"image":      map[string]any{"registry": "registry.example.com/ml", "pullPolicy": "Always"},
			"scheduler":  map[string]any{"image": map[string]any{"digest": "sha256:" + strings.Repeat("0f", 32)}, "replicas": 1, "nodeSelector": map[string]any{"node-role": "system"}, "gpuHarvest": map[string]any{"heartbeatTimeoutSeconds": 45}},
			"controller": map[string]any{"tolerations": []any{map[string]any{"key": "system", "operator": "Exists", "effect": "NoSchedule"}}, "extraArgs": []any{"--forecast-horizon=20m"}},
			"status":     map[string]any{"gpuHourPrice": "2.50", "currency": "EUR", "poolReaders": map[string]any{"groups": []any{"system:authenticated"}, "users": []any{"alice"}}}},
		{"admissionPolicies": map[string]any{"enabled": false}, "imagePullSecrets": []any{"registry"},
			"controller": map[string]any{"resources": map[string]any{"requests": map[string]any{"cpu": "1", "memory": "1Gi"}, "limits": map[string]any{"memory": "2Gi"}}}},
	} {
		c, err := chart.RenderChart(filepath.Join(repoRoot(t), "charts", "gleaner"), values, api.SystemNamespace)
		if err != nil {
			t.Fatal(err)
		}
		rendered := decodeObjects(t, c.YAML(), "the chart with non-default values")
		for _, obj := range rendered {
			if err := applyStrictDryRun(ctx, cp, mapper, obj); err != nil {
				t.Errorf("values %v: %v", values, err)
			}
		}
		t.Logf("applied (dry run) %d objects rendered from the chart with %v", len(rendered), values)
	}

	// Namespaces first, as kubectl orders them.
	for _, pass := range []bool{true, false} {
		for _, obj := range objs {
			if (obj.GetKind() == "Namespace") == pass {
				if err := applyStrict(ctx, cp, mapper, obj); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	t.Logf("applied %d rendered objects", len(objs))

	t.Run("strict validation is real", func(t *testing.T) {
		for _, obj := range objs {
			if obj.GetKind() != "Deployment" {
				continue
			}
			bad := obj.DeepCopy()
			if err := unstructured.SetNestedField(bad.Object, int64(1), "spec", "replica"); err != nil {
				t.Fatal(err)
			}
			err := applyStrict(ctx, cp, mapper, bad)
			if err == nil || !strings.Contains(err.Error(), "replica") {
				t.Fatalf("a Deployment with the misspelt field spec.replica was accepted (err %v)", err)
			}
			return
		}
		t.Fatal("no Deployment rendered")
	})

	t.Run("least privilege", func(t *testing.T) {
		type check struct {
			verb, group, resource, subresource, namespace, name string
			allowed                                             bool
		}
		// Both must not touch Secrets anywhere.
		noSecrets := []check{
			{"get", "", "secrets", "", api.SystemNamespace, "", false},
			{"list", "", "secrets", "", "", "", false},
			{"watch", "", "secrets", "", "kube-system", "", false},
		}
		components := map[string][]check{
			"gleaner-scheduler": append([]check{
				{"create", "", "pods", "binding", "research", "", true},
				{"delete", "", "pods", "", "research", "", true},
				{"patch", "", "pods", "status", "research", "", true},
				{"list", "", "nodes", "", "", "", true},
				{"create", "events.k8s.io", "events", "", "research", "", true},
				{"create", "coordination.k8s.io", "leases", "", api.SystemNamespace, "", true},
				{"update", "coordination.k8s.io", "leases", "", api.SystemNamespace, "gleaner-scheduler", true},
				{"watch", "coordination.k8s.io", "leases", "", api.SystemNamespace, api.HeartbeatLeaseName, true},
				{"get", "", "configmaps", "", "kube-system", "extension-apiserver-authentication", true},
				// Not its objects:
				{"update", "coordination.k8s.io", "leases", "", api.SystemNamespace, api.ControllerLeaseName, false},
				{"update", "coordination.k8s.io", "leases", "", api.SystemNamespace, api.HeartbeatLeaseName, false},
				{"update", "coordination.k8s.io", "leases", "", "kube-system", "kube-scheduler", false},
				{"patch", "", "nodes", "", "", "", false},
				{"delete", "", "nodes", "", "", "", false},
				{"update", "apps", "deployments", "", api.SystemNamespace, "gleaner-controller", false},
				{"update", "", "configmaps", "", api.SystemNamespace, "", false},
				{"create", "", "pods", "eviction", "research", "", false},
			}, noSecrets...),
			"gleaner-controller": append([]check{
				{"patch", "", "nodes", "", "", "gpu-a", true},
				{"watch", "", "pods", "", "", "", true},
				{"watch", "", "namespaces", "", "", "", true},
				{"create", "", "pods", "eviction", "research", "", true},
				{"create", "", "events", "", "research", "", true},
				{"create", "coordination.k8s.io", "leases", "", api.SystemNamespace, "", true},
				{"update", "coordination.k8s.io", "leases", "", api.SystemNamespace, api.ControllerLeaseName, true},
				{"update", "coordination.k8s.io", "leases", "", api.SystemNamespace, api.HeartbeatLeaseName, true},
				// Reclaims through evictions, and deletes (best-effort pods only,
				// by admission policy) what a PodDisruptionBudget holds past the wait;
				// never binds pods.
				{"delete", "", "pods", "", "research", "", true},
				// Elastic gangs: a PodGroup's minMember, read, never written.
				{"watch", "scheduling.x-k8s.io", "podgroups", "", "", "", true},
				{"update", "scheduling.x-k8s.io", "podgroups", "", "research", "", false},
				// What it publishes for people, status only.
				{"patch", "gleaner.dev", "gpupools", "status", "", api.PoolInference, true},
				{"patch", "gleaner.dev", "harvestreports", "status", "research", "gleaner", true},
				{"list", "gleaner.dev", "harvestreports", "", "", "", true},
				{"delete", "gleaner.dev", "harvestreports", "", "research", "gleaner", false},
				// Reclaim notices: patch pods and their status (confined by an
				// admission policy to the notice's annotation and condition).
				{"patch", "", "pods", "", "research", "", true},
				{"patch", "", "pods", "status", "research", "", true},
				{"update", "", "pods", "", "research", "", false},
				{"create", "", "pods", "binding", "research", "", false},
				{"delete", "", "nodes", "", "", "", false},
				{"update", "", "nodes", "status", "", "gpu-a", false},
				{"update", "coordination.k8s.io", "leases", "", api.SystemNamespace, "gleaner-scheduler", false},
				{"update", "", "configmaps", "", api.SystemNamespace, "", false},
				// The scheduler's profile, to check it agrees; no other ConfigMap.
				{"get", "", "configmaps", "", api.SystemNamespace, "gleaner-scheduler-config", true},
				{"get", "", "configmaps", "", api.SystemNamespace, "other", false},
				{"update", "", "configmaps", "", api.SystemNamespace, "gleaner-scheduler-config", false},
			}, noSecrets...),
		}
		for sa, checks := range components {
			impersonated := rest.CopyConfig(cp.config)
			impersonated.Impersonate = rest.ImpersonationConfig{
				UserName: "system:serviceaccount:" + api.SystemNamespace + ":" + sa,
				Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + api.SystemNamespace, "system:authenticated"},
			}
			client := kubernetes.NewForConfigOrDie(impersonated)
			for _, c := range checks {
				review, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
					Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
						Verb: c.verb, Group: c.group, Resource: c.resource, Subresource: c.subresource, Namespace: c.namespace, Name: c.name,
					}},
				}, metav1.CreateOptions{})
				if err != nil {
					t.Fatalf("%s: SelfSubjectAccessReview: %v", sa, err)
				}
				if review.Status.Allowed != c.allowed {
					t.Errorf("%s may %s %s/%s %s in %q named %q: %v, want %v", sa, c.verb, c.resource, c.subresource, c.group, c.namespace, c.name, review.Status.Allowed, c.allowed)
				}
			}
		}
	})

	t.Run("admission policies", func(t *testing.T) {
		// The policies take effect once the API server has loaded them.
		createNamespace(t, cp.client, "vap-tenant")
		optedIn := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vap-serving", Labels: map[string]string{api.LabelInferenceNamespace: "true"}}}
		if _, err := cp.client.CoreV1().Namespaces().Create(ctx, optedIn, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := func(ns, class, scheduler string, grace int64) *v1.Pod {
			return &v1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "vap-"},
				Spec: v1.PodSpec{PriorityClassName: class, SchedulerName: scheduler, TerminationGracePeriodSeconds: &grace,
					Containers: []v1.Container{{Name: "c", Image: "x", Resources: v1.ResourceRequirements{Requests: gpus(1), Limits: gpus(1)}}}},
			}
		}
		// offPool keeps a pod off the pool's nodes; onNode creates it there;
		// toPool asks a scheduler for the pool.
		offPool := func(p *v1.Pod) *v1.Pod {
			p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{
				NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{
					{Key: api.LabelPool, Operator: v1.NodeSelectorOpNotIn, Values: []string{api.PoolInference}}}}}}}}
			return p
		}
		onNode := func(p *v1.Pod, node string) *v1.Pod { p.Spec.NodeName = node; return p }
		toPool := func(p *v1.Pod) *v1.Pod {
			p.Spec.NodeSelector = map[string]string{api.LabelPool: api.PoolInference}
			return p
		}
		noGPUs := func(p *v1.Pod) *v1.Pod { p.Spec.Containers[0].Resources = v1.ResourceRequirements{}; return p }
		const poolGPUs = "reaches the pool (nodes labelled gleaner.dev/pool=inference) only through gleaner-scheduler as best-effort"
		tests := []struct {
			name string
			pod  *v1.Pod
			deny string // "" for allowed
		}{
			{"inference priority in a tenant namespace", offPool(pod("vap-tenant", api.PriorityClassInference, "", 30)), "gleaner-inference is for namespaces the cluster admin opted in"},
			{"inference priority where the admin opted in", pod("vap-serving", api.PriorityClassInference, api.SchedulerName, 30), ""},
			{"inference on the default scheduler, created on a pool node", onNode(pod("vap-serving", api.PriorityClassInference, "", 30), "vap-node"), ""},
			{"a best-effort pod asking for an hour's grace", pod("vap-tenant", api.PriorityClassBestEffort, api.SchedulerName, 3600), "terminationGracePeriodSeconds is at most 120"},
			{"a best-effort pod within the grace cap", pod("vap-tenant", api.PriorityClassBestEffort, api.SchedulerName, 120), ""},
			{"an ordinary pod sent to gleaner-scheduler", offPool(pod("vap-tenant", "", api.SchedulerName, 30)), "use priorityClassName gleaner-best-effort"},
			// No path but gleaner-scheduler's takes a GPU pod onto the pool.
			{"a best-effort pod sent to the default scheduler", pod("vap-tenant", api.PriorityClassBestEffort, "", 30), poolGPUs},
			{"a best-effort pod sent to another scheduler", pod("vap-tenant", api.PriorityClassBestEffort, "other-scheduler", 30), poolGPUs},
			{"a best-effort pod created on a pool node", onNode(pod("vap-tenant", api.PriorityClassBestEffort, api.SchedulerName, 30), "vap-node"), poolGPUs},
			{"an ordinary GPU pod on the default scheduler", pod("vap-tenant", "", "", 3600), poolGPUs},
			{"an ordinary GPU pod asking the default scheduler for the pool", toPool(pod("vap-tenant", "", "", 30)), poolGPUs},
			{"an ordinary GPU pod sent to another scheduler", pod("vap-tenant", "", "other-scheduler", 30), poolGPUs},
			{"an ordinary GPU pod created on a pool node", onNode(pod("vap-tenant", "", "", 30), "vap-node"), poolGPUs},
			{"an ordinary GPU pod kept off the pool", offPool(pod("vap-tenant", "", "other-scheduler", 3600)), ""},
			{"an ordinary GPU pod kept off the pool, created on a node", onNode(offPool(pod("vap-tenant", "", "", 30)), "cpu-node"), ""},
			{"an ordinary pod without GPUs, created on a pool node", onNode(noGPUs(pod("vap-tenant", "", "", 30)), "vap-node"), ""},
		}
		// try, once when it is to be allowed; when it is to be denied, again
		// until it is or 20 s pass, since each policy takes effect once the
		// API server has loaded it (each apart). An allowance may not wait.
		try := func(deny bool, write func() error) error {
			err := write()
			for deadline := time.Now().Add(20 * time.Second); deny && err == nil && time.Now().Before(deadline); err = write() {
				time.Sleep(200 * time.Millisecond)
			}
			return err
		}
		for _, tt := range tests {
			err := try(tt.deny != "", func() error {
				_, err := cp.client.CoreV1().Pods(tt.pod.Namespace).Create(ctx, tt.pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				return err
			})
			switch {
			case tt.deny == "" && err != nil:
				t.Errorf("%s: denied: %v", tt.name, err)
			case tt.deny != "" && (err == nil || !strings.Contains(err.Error(), tt.deny)):
				t.Errorf("%s: %v, want denied with %q", tt.name, err, tt.deny)
			}
		}

		// gleaner-controller may patch Nodes, but only their gleaner.dev/ keys.
		if err := registerGPUNode(ctx, cp.client, "vap-node", 8, map[string]string{api.LabelPool: api.PoolInference}, nil); err != nil {
			t.Fatal(err)
		}
		impersonated := rest.CopyConfig(cp.config)
		impersonated.Impersonate = rest.ImpersonationConfig{
			UserName: "system:serviceaccount:" + api.SystemNamespace + ":gleaner-controller",
			Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + api.SystemNamespace, "system:authenticated"},
		}
		controllerClient := kubernetes.NewForConfigOrDie(impersonated)
		// Dry runs: a patch let through before its policy loaded must not
		// land, or every retry of it would change nothing and be allowed.
		patch := func(body string) error {
			_, err := controllerClient.CoreV1().Nodes().Patch(ctx, "vap-node", types.MergePatchType, []byte(body), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}
		if err := patch(`{"metadata":{"labels":{"gleaner.dev/harvest":"open"},"annotations":{"gleaner.dev/harvestable-gpus":"8","gleaner.dev/availability":"for=1h0m0s,survive-1h=0.50,survive-4h=0.10"}}}`); err != nil {
			t.Errorf("gleaner-controller publishing a verdict: %v", err)
		}
		for _, body := range []string{
			`{"metadata":{"labels":{"team":"mine"}}}`,
			`{"metadata":{"labels":{"gleaner.dev/pool":null}}}`,
			`{"spec":{"unschedulable":true}}`,
		} {
			err := try(true, func() error { return patch(body) })
			if err == nil || !strings.Contains(err.Error(), "gleaner-controller") {
				t.Errorf("gleaner-controller patching %s: %v, want denied", body, err)
			}
		}

		// A kubelet may write its own Node (NodeRestriction keeps it to its
		// own, and off the kubernetes.io labels), but not its verdict; nor may
		// anyone but gleaner-controller, though anyone may remove it.
		nodeVerdicts(t, ctx, cp, try)

		// It may delete a best-effort pod, and no other.
		for _, tt := range []struct {
			class string
			deny  bool
		}{{api.PriorityClassBestEffort, false}, {"", true}} {
			p, err := cp.client.CoreV1().Pods("vap-tenant").Create(ctx, offPool(pod("vap-tenant", tt.class, "", 30)), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			err = try(tt.deny, func() error {
				return controllerClient.CoreV1().Pods("vap-tenant").Delete(ctx, p.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
			})
			if denied := err != nil && strings.Contains(err.Error(), "deletes only best-effort pods"); denied != tt.deny || (err != nil && !denied) {
				t.Errorf("gleaner-controller deleting a pod of class %q: %v, want denied %v", tt.class, err, tt.deny)
			}
		}

		// It may write a reclaim notice (annotation and condition), and the
		// first refusal of its eviction (a condition), on a best-effort pod,
		// nothing else, and on no other pod.
		bestEffort, err := cp.client.CoreV1().Pods("vap-tenant").Create(ctx, offPool(pod("vap-tenant", api.PriorityClassBestEffort, "", 30)), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ordinary, err := cp.client.CoreV1().Pods("vap-tenant").Create(ctx, offPool(pod("vap-tenant", "", "", 30)), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		notice := `{"metadata":{"annotations":{"gleaner.dev/reclaim-notice":"2026-11-30T12:00:00Z"}}}`
		condition := `{"status":{"conditions":[{"type":"gleaner.dev/ReclaimNotice","status":"True","reason":"GleanerReclaimNotice","message":"m"}]}}`
		refused := `{"status":{"conditions":[{"type":"gleaner.dev/EvictionRefused","status":"True","reason":"DisruptionBudget","message":"m","lastTransitionTime":"2026-11-30T12:00:00Z"}]}}`
		for _, tt := range []struct {
			name, pod, body, subresource string
			patchType                    types.PatchType
			deny                         string
		}{
			{"the notice on a best-effort pod", bestEffort.Name, notice, "", types.MergePatchType, ""},
			{"the notice condition on a best-effort pod", bestEffort.Name, condition, "status", types.StrategicMergePatchType, ""},
			{"the first refusal of its eviction on a best-effort pod", bestEffort.Name, refused, "status", types.StrategicMergePatchType, ""},
			{"another annotation", bestEffort.Name, `{"metadata":{"annotations":{"team":"mine"}}}`, "", types.MergePatchType, "changes only a pod's gleaner.dev/reclaim-notice annotation"},
			{"a label", bestEffort.Name, `{"metadata":{"labels":{"team":"mine"}}}`, "", types.MergePatchType, "changes only a pod's gleaner.dev/reclaim-notice annotation"},
			{"another condition", bestEffort.Name, `{"status":{"conditions":[{"type":"Ready","status":"False"}]}}`, "status", types.StrategicMergePatchType, "changes only a pod's gleaner.dev/ReclaimNotice and gleaner.dev/EvictionRefused conditions"},
			{"the phase", bestEffort.Name, `{"status":{"phase":"Failed"}}`, "status", types.MergePatchType, "changes only a pod's gleaner.dev/ReclaimNotice and gleaner.dev/EvictionRefused conditions"},
			{"the notice on a pod that is not best-effort", ordinary.Name, notice, "", types.MergePatchType, "best-effort pods only"},
		} {
			var subresources []string
			if tt.subresource != "" {
				subresources = []string{tt.subresource}
			}
			err := try(tt.deny != "", func() error {
				_, err := controllerClient.CoreV1().Pods("vap-tenant").Patch(ctx, tt.pod, tt.patchType, []byte(tt.body), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, subresources...)
				return err
			})
			switch {
			case tt.deny == "" && err != nil:
				t.Errorf("gleaner-controller writing %s: denied: %v", tt.name, err)
			case tt.deny != "" && (err == nil || !strings.Contains(err.Error(), tt.deny)):
				t.Errorf("gleaner-controller writing %s: %v, want denied with %q", tt.name, err, tt.deny)
			}
		}
	})

	t.Run("components come up healthy and fail over", func(t *testing.T) {
		bin := buildCommands(t, "gleaner-scheduler", "gleaner-controller")
		for _, component := range []string{"gleaner-scheduler", "gleaner-controller"} {
			t.Run(component, func(t *testing.T) {
				deployment := renderedDeployment(t, objs, component)
				kubeconfig := serviceAccountKubeconfig(t, cp, component)
				var metricsURL string
				start := func(name string) *process {
					args, healthURL := processArgs(t, objs, deployment, kubeconfig)
					p := startProcess(t, name, filepath.Join(bin, component), args...)
					waitHealthy(t, p, healthURL)
					metricsURL = strings.TrimSuffix(healthURL, "/healthz") + "/metrics"
					return p
				}
				first := start(component + "-0")
				leader := waitLeaseHolder(t, cp, component, "", 30*time.Second)
				if component == "gleaner-controller" {
					checkMetricsAuthorized(t, cp, metricsURL, "gleaner_controller_sync_duration_seconds", "gleaner_vllm_scrape_duration_seconds")
					// With its own ServiceAccount's rights, it publishes the pool.
					waitGPUPool(t, cp, func(st v1alpha1.GPUPoolStatus) bool { return st.Planning && st.GPUs.Total >= 8 })
				}
				second := start(component + "-1")
				if holder := leaseHolder(t, cp, component); holder != leader {
					t.Fatalf("lease moved from %s to %s when a second replica started", leader, holder)
				}
				leaseDuration := 15 * time.Second
				stopped := time.Now()
				first.stop(t)
				next := waitLeaseHolder(t, cp, component, leader, leaseDuration)
				t.Logf("%s: %s took over %v after the leader stopped (lease duration %v)", component, next, time.Since(stopped).Round(time.Millisecond), leaseDuration)
				if second.exited() {
					t.Fatalf("the standby replica exited: %s", second.output())
				}
				// Every informer has listed by now: a missing permission shows up as "forbidden".
				for _, p := range []*process{first, second} {
					if out := p.output(); strings.Contains(out, "forbidden") {
						t.Errorf("%s ran into missing RBAC permissions:\n%s", p.name, out)
					}
				}
			})
		}

		// Started with a threshold or GPU resource of its own, the controller
		// reads the scheduler's profile and refuses to run.
		deployment := renderedDeployment(t, objs, "gleaner-controller")
		kubeconfig := serviceAccountKubeconfig(t, cp, "gleaner-controller")
		for i, flag := range []string{"--best-effort-priority-threshold=5", "--gpu-resource=amd.com/gpu"} {
			args, _ := processArgs(t, objs, deployment, kubeconfig)
			p := startProcess(t, fmt.Sprintf("gleaner-controller-mismatch-%d", i), filepath.Join(bin, "gleaner-controller"), append(args, flag)...)
			if code := p.wait(t, 30*time.Second); code == 0 {
				t.Errorf("gleaner-controller %s exited 0 against the shipped profile", flag)
			}
			if out := p.output(); !strings.Contains(out, "gleaner-scheduler's profile (ConfigMap gleaner-system/gleaner-scheduler-config) disagrees") {
				t.Errorf("gleaner-controller %s did not say why it stopped:\n%s", flag, p.tail())
			}
		}
	})

	t.Run("who reads what the controller publishes", func(t *testing.T) {
		readersOfPublishedStatus(t, ctx, cp)
	})

	t.Run("the console in-cluster reads its namespaces and nothing else", func(t *testing.T) {
		inClusterConsole(t, ctx, cp, mapper)
	})

	t.Run("an uninstall leaves other teams working", func(t *testing.T) {
		uninstallLeavesOtherTeams(t, ctx, cp, mapper)
	})
}

// inClusterConsole installs the chart's console for one namespace, with the
// cluster's authentication, checks its ServiceAccount may read that
// namespace's jobs and the pool and nothing more, and runs the Deployment's
// command with that ServiceAccount's token: it serves the namespace's page to
// a user who may view that namespace, and nothing to anyone else.
func inClusterConsole(t *testing.T, ctx context.Context, cp *controlPlane, mapper *restmapper.DeferredDiscoveryRESTMapper) {
	const served, other = "console-research", "console-vision"
	createNamespace(t, cp.client, served)
	createNamespace(t, cp.client, other)
	c, err := chart.RenderChart(filepath.Join(repoRoot(t), "charts", "gleaner"),
		map[string]any{"console": map[string]any{"enabled": true, "namespaces": []any{served}, "authentication": map[string]any{"enabled": true}}}, api.SystemNamespace)
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeObjects(t, c.YAML(), "the chart with the console")
	for _, obj := range objs {
		if strings.Contains(obj.GetName(), "gleaner-console") {
			if err := applyStrict(ctx, cp, mapper, obj); err != nil {
				t.Fatal(err)
			}
		}
	}
	impersonated := rest.CopyConfig(cp.config)
	impersonated.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + api.SystemNamespace + ":gleaner-console",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + api.SystemNamespace},
	}
	client := kubernetes.NewForConfigOrDie(impersonated)
	may := func(verb, group, resource, namespace string) bool {
		t.Helper()
		resource, sub, _ := strings.Cut(resource, "/")
		review, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: verb, Group: group, Resource: resource, Subresource: sub, Namespace: namespace}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return review.Status.Allowed
	}
	// The RBAC authorizer sees the new bindings through its informers.
	eventually(t, 20*time.Second, "the console's bindings to take effect", func(context.Context) (bool, error) {
		return may("list", "", "pods", served) && may("watch", v1alpha1.Group, "gpupools", ""), nil
	})
	for _, c := range []struct {
		verb, group, resource, namespace string
		allowed                          bool
	}{
		{"list", "", "pods", served, true},
		{"watch", v1alpha1.Group, "harvestreports", served, true},
		{"watch", v1alpha1.Group, "gpupools", "", true},
		{"list", "", "pods", other, false},
		{"get", v1alpha1.Group, "harvestreports", other, false},
		{"get", "", "secrets", served, false},
		{"get", "", "configmaps", served, false},
		{"create", "", "pods", served, false},
		{"delete", "", "pods", served, false},
		{"get", "", "pods/log", served, false},
		{"patch", v1alpha1.Group, "gpupools", "", false},
		{"list", "", "pods", "", false},
	} {
		if allowed := may(c.verb, c.group, c.resource, c.namespace); allowed != c.allowed {
			t.Errorf("gleaner-console may %s %s in %q: %v, want %v", c.verb, c.resource, c.namespace, allowed, c.allowed)
		}
	}

	// A job in the served namespace, as the controller would publish it.
	writeStatus(t, cp, v1alpha1.HarvestReportResource, served, v1alpha1.HarvestReportName, "HarvestReport", &v1alpha1.HarvestReportStatus{
		ObservedTime: metav1.Now(), HarvestedGPUSeconds: 7200, HarvestedGPUHours: "2.00",
		Jobs: []v1alpha1.Job{{Kind: "Job", Name: "pretrain-in-cluster", State: v1alpha1.JobRunning, GPUs: 4, Pods: 1, HarvestedGPUSeconds: 7200}},
	})

	// The Deployment's command, on a free loopback port, with the
	// ServiceAccount's token as the pod would have it.
	d := renderedDeployment(t, objs, "gleaner-console")
	port := freePort(t)
	args := []string{"--kubeconfig", serviceAccountKubeconfig(t, cp, "gleaner-console")}
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		switch name, _, _ := strings.Cut(a, "="); name {
		case "--address":
			a = "--address=127.0.0.1"
		case "--port":
			a = fmt.Sprintf("--port=%d", port)
		}
		args = append(args, a)
	}
	runCtx, stop := context.WithCancel(ctx)
	var out syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Execute(runCtx, args, genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out}, time.Now)
	}()
	defer func() {
		stop()
		if code := <-done; code != 0 {
			t.Errorf("the console %v exited %d:\n%s", args, code, out.String())
		}
	}()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	// A reader may view the served namespace (the view role's share,
	// gleaner-harvestreport-viewer); a stranger may view nothing.
	for _, sa := range []string{"console-reader", "console-stranger"} {
		if _, err := cp.client.CoreV1().ServiceAccounts(api.SystemNamespace).Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cp.client.RbacV1().RoleBindings(served).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "console-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "gleaner-harvestreport-viewer"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "console-reader", Namespace: api.SystemNamespace}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reader, stranger := serviceAccountToken(t, cp, "console-reader"), serviceAccountToken(t, cp, "console-stranger")
	getAs := func(token, path string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	get := func(path string) (int, string) { return getAs(reader, path) }
	eventually(t, 30*time.Second, "the console to serve /healthz", func(context.Context) (bool, error) {
		select {
		case code := <-done:
			done <- code
			return false, fmt.Errorf("the console exited %d:\n%s", code, out.String())
		default:
		}
		code, _ := getAs("", "/healthz")
		return code == http.StatusOK, nil
	})
	// The RBAC authorizer sees the new bindings through its informers.
	eventually(t, 20*time.Second, "the console to serve the reader", func(context.Context) (bool, error) {
		code, _ := get("/")
		return code == http.StatusOK, nil
	})
	if code, body := get("/"); code != http.StatusOK || !strings.Contains(body, "pretrain-in-cluster") || !strings.Contains(body, "namespace "+served) {
		t.Errorf("the console's page: %d\n%s", code, body)
	}
	for _, tt := range []struct {
		who, token, path string
		want             int
	}{
		{"no token", "", "/", http.StatusUnauthorized},
		{"no token", "", "/events", http.StatusUnauthorized},
		{"no token", "", "/live?namespace=" + other, http.StatusUnauthorized},
		{"a token the cluster does not know", "not-a-token", "/", http.StatusUnauthorized},
		{"a user who may not view the namespace", stranger, "/", http.StatusForbidden},
		{"a user who may not view the namespace", stranger, "/job?kind=Job&name=pretrain-in-cluster", http.StatusForbidden},
	} {
		if code, body := getAs(tt.token, tt.path); code != tt.want || strings.Contains(body, "pretrain-in-cluster") {
			t.Errorf("%s, GET %s: %d, want %d\n%s", tt.who, tt.path, code, tt.want, body)
		}
	}
	if code, body := get("/live?namespace=" + other); code != http.StatusNotFound {
		t.Errorf("the console serves namespace %s: %d\n%s", other, code, body)
	}
	if strings.Contains(out.String(), "forbidden") {
		t.Errorf("the console ran into missing RBAC permissions:\n%s", out.String())
	}
}

// waitGPUPool waits until the controller published a GPUPool whose status
// satisfies ok, and returns it.
func waitGPUPool(t *testing.T, cp *controlPlane, ok func(v1alpha1.GPUPoolStatus) bool) v1alpha1.GPUPool {
	t.Helper()
	pools := dynamic.NewForConfigOrDie(cp.config).Resource(v1alpha1.GPUPoolResource)
	return waitPublished(t, pools, api.PoolInference, "the published GPUPool", 30*time.Second,
		func(p *v1alpha1.GPUPool) bool { return ok(p.Status) })
}

// waitPublished waits until the object name of ri exists and, read as a T,
// satisfies ok; it returns it.
func waitPublished[T any](t *testing.T, ri dynamic.ResourceInterface, name, what string, timeout time.Duration, ok func(*T) bool) T {
	t.Helper()
	var obj T
	eventually(t, timeout, what, func(ctx context.Context) (bool, error) {
		u, err := ri.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		var zero T
		obj = zero
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &obj); err != nil {
			return false, err
		}
		return ok(&obj), nil
	})
	return obj
}

// readersOfPublishedStatus: a researcher who may view a namespace reads its
// HarvestReport through the view ClusterRole (aggregated, as
// kube-controller-manager's aggregation controller does), and no other
// namespace's; the GPUPool only once the admin grants gleaner-pool-reader.
func readersOfPublishedStatus(t *testing.T, ctx context.Context, cp *controlPlane) {
	factory := informers.NewSharedInformerFactory(cp.client, 0)
	aggregation := clusterroleaggregation.NewClusterRoleAggregation(factory.Rbac().V1().ClusterRoles(), cp.client.RbacV1())
	aggCtx, stop := context.WithCancel(ctx)
	defer stop()
	factory.Start(aggCtx.Done())
	go aggregation.Run(aggCtx, 1)

	const ns, other = "status-research", "status-elsewhere"
	createNamespace(t, cp.client, ns)
	createNamespace(t, cp.client, other)
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "alice-views"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "alice"}},
	}
	if _, err := cp.client.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	may := func(verb, resource, namespace string) bool {
		t.Helper()
		review, err := cp.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "alice", Groups: []string{"system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: v1alpha1.Group, Resource: resource, Namespace: namespace, Name: "gleaner"},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return review.Status.Allowed
	}
	eventually(t, 20*time.Second, "view to take in harvestreports", func(context.Context) (bool, error) {
		return may("get", "harvestreports", ns), nil
	})
	for _, c := range []struct {
		verb, resource, namespace string
	}{
		{"get", "harvestreports", other},
		{"patch", "harvestreports", ns},
		{"patch", "harvestreports/status", ns},
		{"get", "gpupools", ""},
	} {
		if may(c.verb, c.resource, c.namespace) {
			t.Errorf("alice, a viewer of %s, may %s %s in %q", ns, c.verb, c.resource, c.namespace)
		}
	}
	pool := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "researchers-read-the-pool"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "gleaner-pool-reader"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "system:authenticated"}},
	}
	if _, err := cp.client.RbacV1().ClusterRoleBindings().Create(ctx, pool, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "gleaner-pool-reader to let alice read the pool", func(context.Context) (bool, error) {
		return may("get", "gpupools", ""), nil
	})
	if may("patch", "gpupools/status", "") {
		t.Error("gleaner-pool-reader lets alice write the pool's status")
	}
}

// uninstallLeavesOtherTeams removes Gleaner as `kubectl delete -k manifests`
// and `helm uninstall` would, and checks that another team's PodGroups and an
// inference Deployment's new replicas still work: the CRD and the
// PriorityClasses stay.
func uninstallLeavesOtherTeams(t *testing.T, ctx context.Context, cp *controlPlane, mapper *restmapper.DeferredDiscoveryRESTMapper) {
	const team = "team-elsewhere"
	createNamespace(t, cp.client, team)
	serving := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "uninstall-serving", Labels: map[string]string{api.LabelInferenceNamespace: "true"}}}
	if _, err := cp.client.CoreV1().Namespaces().Create(ctx, serving, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	podGroups := dynamic.NewForConfigOrDie(cp.config).Resource(schema.GroupVersionResource{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Resource: "podgroups"}).Namespace(team)
	pg := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
		"metadata": map[string]any{"name": "their-gang"}, "spec": map[string]any{"minMember": int64(4)},
	}}
	if _, err := podGroups.Create(ctx, pg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	replicas := int32(1)
	labels := map[string]string{"app": "chat", api.LabelRole: api.RoleInference}
	inference := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: serving.Name, Name: "chat"},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: v1.PodSpec{
				PriorityClassName: api.PriorityClassInference,
				Containers:        []v1.Container{{Name: "vllm", Image: "vllm", Resources: v1.ResourceRequirements{Requests: gpus(1), Limits: gpus(1)}}},
			}}},
	}
	if _, err := cp.client.AppsV1().Deployments(serving.Name).Create(ctx, inference, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// What each uninstall deletes: every object of manifests/ (kubectl), and
	// every template the chart renders but those Helm keeps (helm; CRDs in
	// crds/ are never deleted).
	out, err := manifests.Render(filepath.Join(repoRoot(t), "manifests"))
	if err != nil {
		t.Fatal(err)
	}
	doomed := decodeObjects(t, out, "manifests/")
	byHelm, err := chart.RenderChart(filepath.Join(repoRoot(t), "charts", "gleaner"), nil, api.SystemNamespace)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range slices.Sorted(maps.Keys(byHelm.Templates)) {
		for _, obj := range decodeObjects(t, []byte(byHelm.Templates[name]), name) {
			if obj.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
				doomed = append(doomed, obj)
			}
		}
	}
	deleted := 0
	for _, obj := range doomed {
		res, err := resourceFor(cp, mapper, obj)
		if err != nil {
			t.Fatal(err)
		}
		switch err := res.Delete(ctx, obj.GetName(), metav1.DeleteOptions{}); {
		case err == nil:
			deleted++
		case !apierrors.IsNotFound(err):
			t.Fatalf("deleting %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
	t.Logf("uninstall deleted %d objects", deleted)
	if _, err := cp.client.RbacV1().ClusterRoles().Get(ctx, "gleaner-controller", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the uninstall left ClusterRole gleaner-controller: %v", err)
	}

	// The other team's PodGroup is still there and still served, and a new one
	// can be made.
	if _, err := podGroups.Get(ctx, "their-gang", metav1.GetOptions{}); err != nil {
		t.Errorf("another team's PodGroup after the uninstall: %v", err)
	}
	pg.SetName("their-next-gang")
	if _, err := podGroups.Create(ctx, pg, metav1.CreateOptions{}); err != nil {
		t.Errorf("another team creating a PodGroup after the uninstall: %v", err)
	}
	// The inference Deployment's next replica is admitted with its priority.
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: serving.Name, GenerateName: "chat-", Labels: labels}, Spec: *inference.Spec.Template.Spec.DeepCopy()}
	created, err := cp.client.CoreV1().Pods(serving.Name).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a new replica of the inference Deployment after the uninstall: %v", err)
	}
	if created.Spec.Priority == nil || *created.Spec.Priority != testobj.InferencePriority {
		t.Errorf("the new replica's priority is %v, want gleaner-inference's %d", created.Spec.Priority, testobj.InferencePriority)
	}
}

// checkMetricsAuthorized checks that url serves metrics only to a caller the
// API server authorizes: anonymous and unauthorized ServiceAccounts are
// refused, one allowed get on the non-resource URL /metrics reads every metric
// in want.
func checkMetricsAuthorized(t *testing.T, cp *controlPlane, url string, want ...string) {
	t.Helper()
	ctx := context.Background()
	get := func(token string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // the component's self-signed serving certificate
		}}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	token := func(sa string) string {
		if _, err := cp.client.CoreV1().ServiceAccounts(api.SystemNamespace).Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		return serviceAccountToken(t, cp, sa)
	}
	reader := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "prometheus-metrics-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "prometheus", Namespace: api.SystemNamespace}}}
	for _, err := range []error{
		ignoreExists(cp.client.RbacV1().ClusterRoles().Create(ctx, reader, metav1.CreateOptions{})),
		ignoreExists(cp.client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, caller := range []struct{ name, token string }{{"anonymous", ""}, {"a ServiceAccount without the role", token("stranger")}} {
		if code, _ := get(caller.token); code != http.StatusUnauthorized && code != http.StatusForbidden {
			t.Errorf("%s as %s: HTTP %d, want 401 or 403", url, caller.name, code)
		}
	}
	allowed := token("prometheus")
	var code int
	var body string
	// The RoleBinding reaches the authorizer's cache within seconds.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		if code, body = get(allowed); code == http.StatusOK || time.Now().After(deadline) {
			break
		}
	}
	if code != http.StatusOK {
		t.Fatalf("%s as a ServiceAccount allowed get on /metrics: HTTP %d: %s", url, code, body)
	}
	for _, m := range want {
		if !strings.Contains(body, m) {
			t.Errorf("%s does not serve %s", url, m)
		}
	}
}

func ignoreExists[T any](_ T, err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// renderedDeployment finds a component's Deployment in the rendered objects.
func renderedDeployment(t *testing.T, objs []*unstructured.Unstructured, name string) *appsv1.Deployment {
	t.Helper()
	for _, obj := range objs {
		if obj.GetKind() == "Deployment" && obj.GetName() == name {
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &d); err != nil {
				t.Fatal(err)
			}
			return &d
		}
	}
	t.Fatalf("no Deployment %s rendered", name)
	return nil
}

// processArgs turns a rendered container's args into a local process's: files
// mounted from ConfigMaps are written to disk (with the kubeconfig the pod
// would get in-cluster), and ports are made free ones. It returns the args and
// the URL of the process's /healthz.
func processArgs(t *testing.T, objs []*unstructured.Unstructured, d *appsv1.Deployment, kubeconfig string) ([]string, string) {
	t.Helper()
	c := d.Spec.Template.Spec.Containers[0]
	dir := t.TempDir()
	port := freePort(t)
	var args []string
	scheme := "http"
	for _, a := range c.Args {
		name, value, _ := strings.Cut(a, "=")
		switch name {
		case "--config":
			args = append(args, "--config="+writeMountedConfig(t, objs, d, value, kubeconfig, dir))
			continue
		case "--secure-port":
			scheme = "https"
			value = fmt.Sprint(port)
		case "--cert-dir":
			value = dir
		}
		args = append(args, name+"="+value)
	}
	if d.Name == "gleaner-controller" {
		args = append(args, "--kubeconfig="+kubeconfig)
	}
	return args, fmt.Sprintf("%s://127.0.0.1:%d/healthz", scheme, port)
}

// writeMountedConfig writes the ConfigMap file the container reads at path,
// pointing its clientConnection at kubeconfig, and returns the file's path.
func writeMountedConfig(t *testing.T, objs []*unstructured.Unstructured, d *appsv1.Deployment, path, kubeconfig, dir string) string {
	t.Helper()
	c := d.Spec.Template.Spec.Containers[0]
	for _, m := range c.VolumeMounts {
		if !strings.HasPrefix(path, m.MountPath+"/") {
			continue
		}
		for _, vol := range d.Spec.Template.Spec.Volumes {
			if vol.Name != m.Name || vol.ConfigMap == nil {
				continue
			}
			for _, obj := range objs {
				if obj.GetKind() != "ConfigMap" || obj.GetName() != vol.ConfigMap.Name {
					continue
				}
				data, _, _ := unstructured.NestedStringMap(obj.Object, "data")
				raw, ok := data[strings.TrimPrefix(path, m.MountPath+"/")]
				if !ok {
					t.Fatalf("ConfigMap %s has no key for %s", obj.GetName(), path)
				}
				var doc map[string]any
				if err := yaml.Unmarshal([]byte(raw), &doc); err != nil {
					t.Fatal(err)
				}
				doc["clientConnection"] = map[string]any{"kubeconfig": kubeconfig}
				out, _ := yaml.Marshal(doc)
				file := filepath.Join(dir, "config.yaml")
				if err := os.WriteFile(file, out, 0o600); err != nil {
					t.Fatal(err)
				}
				return file
			}
		}
	}
	t.Fatalf("%s is not mounted from a rendered ConfigMap", path)
	return ""
}

// serviceAccountKubeconfig writes a kubeconfig holding a token of the
// component's ServiceAccount, so the process runs with exactly its RBAC.
func serviceAccountKubeconfig(t *testing.T, cp *controlPlane, sa string) string {
	t.Helper()
	cfg := &rest.Config{Host: cp.config.Host, BearerToken: serviceAccountToken(t, cp, sa)}
	cfg.TLSClientConfig = rest.TLSClientConfig{CAData: cp.config.TLSClientConfig.CAData, CAFile: cp.config.TLSClientConfig.CAFile, ServerName: cp.config.TLSClientConfig.ServerName}
	path := filepath.Join(t.TempDir(), sa+".kubeconfig")
	writeKubeconfig(t, cfg, path)
	return path
}

// serviceAccountToken is an hour-long token of ServiceAccount sa in gleaner-system.
func serviceAccountToken(t *testing.T, cp *controlPlane, sa string) string {
	t.Helper()
	tr, err := cp.client.CoreV1().ServiceAccounts(api.SystemNamespace).CreateToken(context.Background(), sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s: %v", sa, err)
	}
	return tr.Status.Token
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// buildCommands builds the named commands once into a temporary directory;
// gleaner-scheduler is the older minor's, when one is tested (minorBin).
func buildCommands(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	args := []string{"build", "-o", dir + "/"}
	for _, n := range names {
		if n == "gleaner-scheduler" && minorBin() != "" {
			if err := os.Symlink(filepath.Join(minorBin(), n), filepath.Join(dir, n)); err != nil {
				t.Fatal(err)
			}
			continue
		}
		args = append(args, "./cmd/"+n)
	}
	if len(args) == 3 {
		return dir
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return dir
}

// syncBuffer is a bytes.Buffer written from one goroutine and read from another.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// process is a component running as a child process.
type process struct {
	name string
	cmd  *exec.Cmd
	out  syncBuffer
	done chan struct{}
}

// output is everything the process wrote to stdout and stderr.
func (p *process) output() string { return p.out.String() }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, as the kubelet does, and waits for the process to exit.
func (p *process) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		t.Fatalf("%s did not stop within 20s of SIGTERM", p.name)
	}
}

func startProcess(t *testing.T, name, binary string, args ...string) *process {
	t.Helper()
	return startProcessEnv(t, name, binary, nil, args...)
}

// startProcessEnv is startProcess with env added to the process's environment.
func startProcessEnv(t *testing.T, name, binary string, env []string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	return startCommand(t, name, cmd)
}

// startCommand starts cmd as a child process whose output is kept, and kills it
// when the test ends (printing the output's tail if the test failed).
func startCommand(t *testing.T, name string, cmd *exec.Cmd) *process {
	t.Helper()
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s output (tail):\n%s", name, p.tail())
		}
	})
	return p
}

// tail is the last 4000 bytes of the process's output.
func (p *process) tail() string {
	out := p.output()
	if len(out) > 4000 {
		out = "..." + out[len(out)-4000:]
	}
	return out
}

// wait waits for the process to exit on its own and returns its exit code.
func (p *process) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		t.Fatalf("%s did not exit within %v:\n%s", p.name, timeout, p.tail())
		return -1
	}
}

func waitHealthy(t *testing.T, p *process, url string) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		// The scheduler serves a self-signed certificate.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	eventually(t, 60*time.Second, p.name+" to report healthy at "+url, func(context.Context) (bool, error) {
		if p.exited() {
			return false, fmt.Errorf("%s exited:\n%s", p.name, p.output())
		}
		resp, err := client.Get(url)
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

func leaseHolder(t *testing.T, cp *controlPlane, name string) string {
	t.Helper()
	lease, err := cp.client.CoordinationV1().Leases(api.SystemNamespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

// waitLeaseHolder waits until the Lease is held by someone other than not.
func waitLeaseHolder(t *testing.T, cp *controlPlane, name, not string, timeout time.Duration) string {
	t.Helper()
	var holder string
	eventually(t, timeout, "lease "+name+" to be held by a replica other than "+fmt.Sprintf("%q", not), func(context.Context) (bool, error) {
		holder = leaseHolder(t, cp, name)
		return holder != "" && holder != not, nil
	})
	return holder
}
