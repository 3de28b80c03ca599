package demand_test

import (
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/autoscale"
	"github.com/gleaner-dev/gleaner/pkg/demand"
)

// The example inference Deployment that docs/inference.md points to is one
// Gleaner reads without a single problem: every annotation it shows is valid.
func TestExampleInferenceDeploymentIsValid(t *testing.T) {
	raw, err := os.ReadFile("../../examples/inference/vllm-deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var d *appsv1.Deployment
	var ns *v1.Namespace
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "Deployment":
			d = &appsv1.Deployment{}
			err = yaml.UnmarshalStrict([]byte(doc), d)
		case "Namespace":
			ns = &v1.Namespace{}
			err = yaml.UnmarshalStrict([]byte(doc), ns)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if d == nil || ns == nil {
		t.Fatal("the example lacks its Namespace or its Deployment")
	}
	if ns.Labels[api.LabelInferenceNamespace] != "true" || d.Namespace != ns.Name {
		t.Fatalf("the Deployment's namespace %q is not opted in (labels %v)", d.Namespace, ns.Labels)
	}
	if d.Spec.Template.Labels[api.LabelRole] != api.RoleInference || d.Spec.Template.Spec.PriorityClassName != api.PriorityClassInference {
		t.Fatal("the pod template is not marked as inference")
	}
	gpus := api.PodGPUs(&v1.Pod{Spec: d.Spec.Template.Spec}, api.GPUResource)
	s, problems := demand.ParseSettings(d.Annotations, gpus, 8, demand.Defaults{TargetLoad: demand.DefaultTargetLoad, TargetKVCache: demand.DefaultTargetKVCache})
	if len(problems) > 0 || s.GPUsPerReplica != 4 {
		t.Fatalf("settings %+v, problems %v", s, problems)
	}
	if !autoscale.Enabled(d.Annotations) {
		t.Fatal("the example does not show autoscaling")
	}
	if lim, problems := autoscale.ParseLimits(d.Annotations, 64); len(problems) > 0 || lim.Max != 8 {
		t.Fatalf("autoscale limits %+v, problems %v", lim, problems)
	}
}
