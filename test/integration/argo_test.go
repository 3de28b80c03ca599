package integration

// Tests of the research-pipeline path (issue: Argo WorkflowTemplates, the
// checkpoint contract and the reference step): the example templates against
// Argo's real CRD schemas in a real apiserver, their retry expression under
// Argo's expression engine, the pipeline's stages run with the reference step
// as Argo would call them, and the step annotating its own pod.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/builtin"
	v1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

const (
	argoPipelineFile   = "examples/argo/research-pipeline.yaml"
	argoEvaluationFile = "examples/argo/evaluation.yaml"
	argoRBACFile       = "examples/argo/rbac.yaml"
)

var argoTemplateFiles = []string{argoPipelineFile, argoEvaluationFile}

// argoCRDDir returns the Argo CRDs kept beside the repository (../shared), or
// skips the test when they are not there.
func argoCRDDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(repoRoot(t), "..", "shared", "argo", "crds")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("Argo CRDs not found at %s (the shared folder beside the repository); they are not vendored into the repo: %v", dir, err)
	}
	return dir
}

func argoReadTemplate(t *testing.T, rel string) *unstructured.Unstructured {
	t.Helper()
	objs := readRepoObjects(t, rel)
	if len(objs) != 1 || objs[0].GetKind() != "WorkflowTemplate" {
		t.Fatalf("%s: want exactly one WorkflowTemplate, got %d objects", rel, len(objs))
	}
	return objs[0]
}

// installArgoCRDs creates Argo's full CRDs (complete OpenAPI schemas, enums,
// CEL rules) and waits until the apiserver serves them.
func installArgoCRDs(t *testing.T, cp *controlPlane, dir string) {
	t.Helper()
	ctx := context.Background()
	client := apiextensionsclient.NewForConfigOrDie(cp.config)
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in %s: %v", dir, err)
	}
	var names []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(data, &crd); err != nil {
			t.Fatalf("decoding %s: %v", f, err)
		}
		// A plain create: client-side apply would store the whole CRD again in
		// an annotation, which exceeds the annotation size limit.
		if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, &crd, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating CRD %s from %s: %v", crd.Name, f, err)
		}
		names = append(names, crd.Name)
	}
	for _, name := range names {
		eventually(t, time.Minute, "CRD "+name+" to be established", func(ctx context.Context) (bool, error) {
			crd, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, c := range crd.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
	}
}

// argoDryRunCreate creates obj with dryRun=All and fieldValidation=Strict: the
// apiserver runs all validation (schema, enums, CEL rules, unknown fields) and
// stores nothing.
func argoDryRunCreate(ctx context.Context, dyn dynamic.Interface, mapper *restmapper.DeferredDiscoveryRESTMapper, ns string, obj *unstructured.Unstructured) error {
	gvk := obj.GroupVersionKind()
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("no resource for %s: %w", gvk, err)
	}
	_, err = dyn.Resource(mapping.Resource).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{
		DryRun:          []string{metav1.DryRunAll},
		FieldValidation: metav1.FieldValidationStrict,
	})
	return err
}

func TestArgoExamplesPassStrictValidationAgainstArgoCRDs(t *testing.T) {
	crds := argoCRDDir(t)
	cp := startControlPlane(t)
	installArgoCRDs(t, cp, crds)
	ctx := context.Background()
	const ns = "research"
	createNamespace(t, cp.client, ns)
	dyn := dynamic.NewForConfigOrDie(cp.config)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cp.client.Discovery()))

	for _, rel := range append(slices.Clone(argoTemplateFiles), argoRBACFile) {
		for _, obj := range readRepoObjects(t, rel) {
			// A CRD can be Established a moment before discovery lists it.
			var err error
			eventually(t, 30*time.Second, "dry-run create of "+obj.GetKind()+" "+obj.GetName(), func(ctx context.Context) (bool, error) {
				err = argoDryRunCreate(ctx, dyn, mapper, ns, obj.DeepCopy())
				if err != nil && strings.Contains(err.Error(), "no resource for") {
					mapper.Reset()
					return false, nil
				}
				return true, nil
			})
			if err != nil {
				t.Errorf("%s: %s %s rejected: %v", rel, obj.GetKind(), obj.GetName(), err)
			}
		}
	}

	// Dry run stored nothing.
	wftGVR := schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "workflowtemplates"}
	if _, err := dyn.Resource(wftGVR).Namespace(ns).Get(ctx, "gleaner-research-pipeline", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after a dry run the template exists or the lookup failed otherwise: %v", err)
	}

	// What `argo submit --from workflowtemplate/...` creates.
	wf := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
		"metadata": map[string]any{"generateName": "research-"},
		"spec": map[string]any{
			"workflowTemplateRef": map[string]any{"name": "gleaner-research-pipeline"},
			"arguments":           map[string]any{"parameters": []any{map[string]any{"name": "storage-root", "value": "s3://lab/pipelines"}}},
		},
	}}
	if err := argoDryRunCreate(ctx, dyn, mapper, ns, wf); err != nil {
		t.Errorf("a Workflow submitted from the pipeline template was rejected: %v", err)
	}

	// The validation is real: a misspelt field and a bad enum value fail.
	pipeline := argoReadTemplate(t, argoPipelineFile)
	misspelt := pipeline.DeepCopy()
	tmplDefaults := misspelt.Object["spec"].(map[string]any)["templateDefaults"].(map[string]any)
	tmplDefaults["podSpecPach"] = tmplDefaults["podSpecPatch"]
	delete(tmplDefaults, "podSpecPatch")
	err := argoDryRunCreate(ctx, dyn, mapper, ns, misspelt)
	if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), `unknown field "spec.templateDefaults.podSpecPach"`) {
		t.Errorf("a template with the misspelt field podSpecPach: got %v; want a strict-decoding error naming it", err)
	}

	badPolicy := pipeline.DeepCopy()
	if err := unstructured.SetNestedField(badPolicy.Object, "OnPreemption", "spec", "templateDefaults", "retryStrategy", "retryPolicy"); err != nil {
		t.Fatal(err)
	}
	err = argoDryRunCreate(ctx, dyn, mapper, ns, badPolicy)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.templateDefaults.retryStrategy.retryPolicy") || !strings.Contains(err.Error(), "Unsupported value") {
		t.Errorf("retryPolicy OnPreemption: got %v; want Invalid naming spec.templateDefaults.retryStrategy.retryPolicy", err)
	}
}

// The examples carry Gleaner's names and the contract's settings, so they
// cannot drift from pkg/api or quietly lose what makes preempted steps retry.
func TestArgoExamplesFollowTheContract(t *testing.T) {
	for _, rel := range argoTemplateFiles {
		t.Run(filepath.Base(rel), func(t *testing.T) {
			spec := argoReadTemplate(t, rel).Object["spec"].(map[string]any)
			str := func(path ...string) string {
				v, _, _ := unstructured.NestedString(spec, path...)
				return v
			}
			if got := str("templateDefaults", "schedulerName"); got != api.SchedulerName {
				t.Errorf("templateDefaults.schedulerName = %q, want %q", got, api.SchedulerName)
			}
			if got := str("templateDefaults", "priorityClassName"); got != api.PriorityClassBestEffort {
				t.Errorf("templateDefaults.priorityClassName = %q, want %q", got, api.PriorityClassBestEffort)
			}
			if got := str("podPriorityClassName"); got != api.PriorityClassBestEffort {
				t.Errorf("podPriorityClassName = %q, want %q", got, api.PriorityClassBestEffort)
			}
			for _, kind := range []string{"requests", "limits"} {
				if _, ok, _ := unstructured.NestedFieldNoCopy(spec, "templateDefaults", "container", "resources", kind, string(api.GPUResource)); !ok {
					t.Errorf("templateDefaults.container.resources.%s has no %s", kind, api.GPUResource)
				}
			}
			if patch := str("templateDefaults", "podSpecPatch"); !strings.Contains(patch, `"terminationGracePeriodSeconds": {{workflow.parameters.grace-period-seconds}}`) {
				t.Errorf("podSpecPatch %q does not set terminationGracePeriodSeconds from the grace-period-seconds parameter", patch)
			}
			if _, found, _ := unstructured.NestedFieldNoCopy(spec, "templateDefaults", "retryStrategy", "backoff", "maxDuration"); found {
				t.Error("retryStrategy.backoff.maxDuration is set; Argo turns it into the pods' active deadline")
			}
			if _, found, _ := unstructured.NestedFieldNoCopy(spec, "templateDefaults", "retryStrategy", "limit"); found {
				t.Error("retryStrategy.limit is set; a step must survive any number of preemptions")
			}
			env, _, _ := unstructured.NestedSlice(spec, "templateDefaults", "container", "env")
			for _, want := range []struct{ name, field string }{{"POD_NAME", "metadata.name"}, {"POD_NAMESPACE", "metadata.namespace"}} {
				if !slices.ContainsFunc(env, func(e any) bool {
					m := e.(map[string]any)
					f, _, _ := unstructured.NestedString(m, "valueFrom", "fieldRef", "fieldPath")
					return m["name"] == want.name && f == want.field
				}) {
					t.Errorf("templateDefaults.container.env lacks %s from the downward API (%s)", want.name, want.field)
				}
			}
		})
	}

	// The pipeline's shape: preprocess -> pretrain -> sft -> rl -> eval, eval fanned out.
	spec := argoReadTemplate(t, argoPipelineFile).Object["spec"].(map[string]any)
	tasks := argoDAGTasks(t, spec)
	for task, dep := range map[string]string{"pretrain": "preprocess", "sft": "pretrain", "rl": "sft", "eval": "rl"} {
		if got := tasks[task]["depends"]; got != dep {
			t.Errorf("task %s depends on %v, want %s", task, got, dep)
		}
	}
	if _, ok := tasks["preprocess"]; !ok {
		t.Error("no preprocess task")
	}
	if got := tasks["eval"]["withParam"]; got != "{{workflow.parameters.eval-benchmarks}}" {
		t.Errorf("eval fans out over %v, want the eval-benchmarks parameter", got)
	}
}

func argoDAGTasks(t *testing.T, spec map[string]any) map[string]map[string]any {
	t.Helper()
	entry := spec["entrypoint"]
	for _, tmpl := range spec["templates"].([]any) {
		tm := tmpl.(map[string]any)
		if tm["name"] != entry {
			continue
		}
		tasks := map[string]map[string]any{}
		list, _, _ := unstructured.NestedSlice(tm, "dag", "tasks")
		for _, task := range list {
			m := task.(map[string]any)
			tasks[m["name"].(string)] = m
		}
		return tasks
	}
	t.Fatalf("entrypoint template %v not found", entry)
	return nil
}

// argoRetryDecision evaluates a retryStrategy the way Argo's controller does
// (workflow/controller/operator.go processNodeRetries): the policy decides by
// node phase, the expression by lastRetry.*, and both must allow a retry. The
// variables and asInt (expr's int) are what Argo puts in the expression's
// environment; lastRetry.exitCode is a string, "-1" when there is none.
func argoRetryDecision(t *testing.T, policy, expression, exitCode, phase, message string) bool {
	t.Helper()
	var policyAllows bool
	switch policy {
	case "Always":
		policyAllows = true
	case "OnFailure":
		policyAllows = phase == "Failed"
	case "OnError":
		policyAllows = phase == "Error"
	default:
		t.Fatalf("retryPolicy %q not modelled here", policy)
	}
	env := map[string]any{
		"lastRetry": map[string]any{"exitCode": exitCode, "status": phase, "duration": "42", "message": message},
		"asInt":     builtin.Int,
	}
	program, err := expr.Compile(expression, expr.Env(env), expr.AsBool())
	if err != nil {
		t.Fatalf("retry expression does not compile: %v\n%s", err, expression)
	}
	out, err := expr.Run(program, env)
	if err != nil {
		t.Fatalf("retry expression failed on exitCode=%s message=%q: %v", exitCode, message, err)
	}
	return policyAllows && out.(bool)
}

// Preemption is retried however it shows up; a step's own failure is not.
func TestArgoRetryStrategyRetriesPreemptionOnly(t *testing.T) {
	cases := []struct {
		what                     string
		exitCode, phase, message string
		retry                    bool
	}{
		{"SIGTERM, checkpointed, exit 143", "143", "Failed", "main: Error (exit code 143)", true},
		{"grace period ran out, SIGKILL", "137", "Failed", "main: Error (exit code 137)", true},
		{"pod gone before Argo saw its status", "-1", "Error", "pod deleted", true},
		{"the step's own failure", "1", "Failed", "main: Error (exit code 1)", false},
		{"out of memory", "137", "Failed", "main: OOMKilled (exit code 137)", false},
		{"a failed DAG (the template defaults apply to it too)", "-1", "Failed", "child 'research-x-123' failed", false},
	}
	for _, rel := range argoTemplateFiles {
		spec := argoReadTemplate(t, rel).Object["spec"].(map[string]any)
		policy, _, _ := unstructured.NestedString(spec, "templateDefaults", "retryStrategy", "retryPolicy")
		expression, _, _ := unstructured.NestedString(spec, "templateDefaults", "retryStrategy", "expression")
		for _, c := range cases {
			if got := argoRetryDecision(t, policy, expression, c.exitCode, c.phase, c.message); got != c.retry {
				t.Errorf("%s: %s: retried = %v, want %v", rel, c.what, got, c.retry)
			}
		}
		// Why retryPolicy must not be OnError: a preempted step is Failed.
		if argoRetryDecision(t, "OnError", expression, "143", "Failed", "main: Error (exit code 143)") {
			t.Error("model check: OnError should not retry a Failed node")
		}
	}
}

// buildTrainExampleBinary builds cmd/gleaner-train-example into a directory that
// the test puts first on PATH, so the templates' command parameter resolves
// to it as it would in the step image.
func buildTrainExampleBinary(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "gleaner-train-example"), "./cmd/gleaner-train-example")
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building gleaner-train-example: %v\n%s", err, out)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return filepath.Join(dir, "gleaner-train-example")
}

var argoVar = regexp.MustCompile(`{{\s*([^{}]+?)\s*}}`)

// argoSubstitute replaces {{name}} the way Argo does for the variables these
// templates use; an unknown variable (a typo in a parameter name) fails.
func argoSubstitute(t *testing.T, s string, scope map[string]string) string {
	t.Helper()
	return argoVar.ReplaceAllStringFunc(s, func(m string) string {
		name := argoVar.FindStringSubmatch(m)[1]
		v, ok := scope[name]
		if !ok {
			t.Fatalf("%q refers to %s, which is not defined here", s, name)
		}
		return v
	})
}

// argoStep is one pod's main container: command and arguments after substitution.
type argoStep struct {
	name string
	argv []string
}

// argoPodArgv resolves a container template's command and args for a task.
func argoPodArgv(t *testing.T, spec map[string]any, templateName string, scope map[string]string) []string {
	t.Helper()
	for _, tmpl := range spec["templates"].([]any) {
		tm := tmpl.(map[string]any)
		if tm["name"] != templateName {
			continue
		}
		command, _, _ := unstructured.NestedStringSlice(tm, "container", "command")
		args, _, _ := unstructured.NestedStringSlice(tm, "container", "args")
		var argv []string
		for _, a := range append(command, args...) {
			argv = append(argv, argoSubstitute(t, a, scope))
		}
		return argv
	}
	t.Fatalf("template %s not found", templateName)
	return nil
}

// The pipeline as written runs end to end with the reference step: every
// argument resolves, each stage finds what the previous one wrote under
// STORAGE-ROOT/WORKFLOW-UID, and a pretrain pod preempted mid-run exits 143,
// is retried by the template's own retry strategy and resumes.
func TestArgoPipelineRunsWithTheReferenceStep(t *testing.T) {
	buildTrainExampleBinary(t)
	spec := argoReadTemplate(t, argoPipelineFile).Object["spec"].(map[string]any)
	storage := t.TempDir()
	const uid = "5f0c3e2a-1111-4b7c-9d55-0123456789ab"

	// Workflow scope: the template's parameters, overridden as `argo submit -p` would.
	scope := map[string]string{"workflow.uid": uid}
	params, _, _ := unstructured.NestedSlice(spec, "arguments", "parameters")
	for _, p := range params {
		m := p.(map[string]any)
		v, _ := m["value"].(string)
		scope["workflow.parameters."+m["name"].(string)] = v
	}
	overrides := map[string]string{
		"storage-root":     storage,
		"eval-benchmarks":  `["mmlu", "gsm8k"]`,
		"pretrain-hparams": `{"steps": 3000, "lr": 0.01, "checkpoint-every": 500, "step-delay": "1ms"}`,
		"sft-hparams":      `{"steps": 300, "lr": 0.005}`,
		"rl-hparams":       `{"steps": 300, "lr": 0.002}`,
	}
	for k, v := range overrides {
		if _, ok := scope["workflow.parameters."+k]; !ok {
			t.Fatalf("the pipeline has no parameter %s", k)
		}
		scope["workflow.parameters."+k] = v
	}

	var steps []argoStep
	tasks := argoDAGTasks(t, spec)
	for _, name := range []string{"preprocess", "pretrain", "sft", "rl", "eval"} {
		task := tasks[name]
		items := []string{""}
		if wp, ok := task["withParam"].(string); ok {
			if err := json.Unmarshal([]byte(argoSubstitute(t, wp, scope)), &items); err != nil {
				t.Fatalf("withParam of %s: %v", name, err)
			}
		}
		for _, item := range items {
			taskScope := argoMergeScope(scope, map[string]string{"item": item})
			args, _, _ := unstructured.NestedSlice(task, "arguments", "parameters")
			for _, a := range args {
				m := a.(map[string]any)
				taskScope["inputs.parameters."+m["name"].(string)] = argoSubstitute(t, m["value"].(string), taskScope)
			}
			steps = append(steps, argoStep{name: name + "(" + item + ")", argv: argoPodArgv(t, spec, task["template"].(string), taskScope)})
		}
	}

	policy, _, _ := unstructured.NestedString(spec, "templateDefaults", "retryStrategy", "retryPolicy")
	expression, _, _ := unstructured.NestedString(spec, "templateDefaults", "retryStrategy", "expression")
	for _, step := range steps {
		if strings.HasPrefix(step.name, "pretrain") {
			// First attempt: preempted mid-run.
			p := startArgoStep(t, step)
			time.Sleep(700 * time.Millisecond)
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			code := p.wait(t, 30*time.Second)
			if code != 143 {
				t.Fatalf("preempted %s exited %d, want 143:\n%s", step.name, code, p.tail())
			}
			if !argoRetryDecision(t, policy, expression, "143", "Failed", "main: Error (exit code 143)") {
				t.Fatal("the template would not retry the preempted pretrain step")
			}
		}
		p := startArgoStep(t, step)
		if code := p.wait(t, 2*time.Minute); code != 0 {
			t.Fatalf("%s exited %d:\n%s", step.name, code, p.tail())
		}
		if strings.HasPrefix(step.name, "pretrain") && !strings.Contains(p.output(), "resuming from checkpoint") {
			t.Fatalf("the retried pretrain step did not resume from its checkpoint:\n%s", p.tail())
		}
	}

	root := filepath.Join(storage, uid)
	for _, f := range []string{"data/dataset.json", "pretrain/model/model.json", "sft/model/model.json", "rl/model/model.json"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("stage output %s missing: %v", f, err)
		}
	}
	for _, b := range []string{"mmlu", "gsm8k"} {
		var r struct {
			Benchmark string  `json:"benchmark"`
			MSE       float64 `json:"mse"`
		}
		data, err := os.ReadFile(filepath.Join(root, "eval", b, "result.json"))
		if err == nil {
			err = json.Unmarshal(data, &r)
		}
		if err != nil || r.Benchmark != b || !(r.MSE < 0.1) {
			t.Errorf("eval result for %s: %+v, %v; want a small MSE (the toy model fits)", b, r, err)
		}
	}
}

func argoMergeScope(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func startArgoStep(t *testing.T, step argoStep, env ...string) *process {
	t.Helper()
	return startProcessEnv(t, step.name, step.argv[0], env, step.argv[1:]...)
}

// The reference step records each checkpoint's time on its own pod in the
// real apiserver, with a merge patch that leaves the pod's other annotations
// alone, including the checkpoint it writes on SIGTERM.
func TestTrainExampleRecordsLastCheckpointOnItsPod(t *testing.T) {
	binary := buildTrainExampleBinary(t)
	cp := startControlPlane(t)
	ctx := context.Background()
	const ns = "research"
	createNamespace(t, cp.client, ns)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pretrain-1234", Namespace: ns, Annotations: map[string]string{"team": "llm"}},
		Spec: v1.PodSpec{
			SchedulerName: api.SchedulerName,
			Containers:    []v1.Container{{Name: "main", Image: "gleaner-train-example"}},
		},
	}
	if _, err := cp.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lastCheckpoint := func(ctx context.Context) (time.Time, bool, error) {
		p, err := cp.client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return time.Time{}, false, err
		}
		if p.Annotations["team"] != "llm" {
			return time.Time{}, false, fmt.Errorf("the pod's other annotation was lost: %v", p.Annotations)
		}
		raw, ok := p.Annotations[api.AnnotationLastCheckpoint]
		if !ok {
			return time.Time{}, false, nil
		}
		ts, err := time.Parse(time.RFC3339, raw)
		if err != nil {
			return time.Time{}, false, fmt.Errorf("%s=%q is not RFC 3339: %v", api.AnnotationLastCheckpoint, raw, err)
		}
		return ts, true, nil
	}

	started := time.Now().Truncate(time.Second)
	step := argoStep{name: "pretrain", argv: []string{binary, "pretrain",
		"--checkpoint-dir", t.TempDir(), "--steps", "100000", "--checkpoint-every", "200", "--step-delay", "1ms",
		"--kubeconfig", cp.kubeconfig}}
	p := startArgoStep(t, step, "POD_NAME="+pod.Name, "POD_NAMESPACE="+ns)
	var first time.Time
	eventually(t, 30*time.Second, "the step to record a periodic checkpoint on its pod", func(ctx context.Context) (bool, error) {
		ts, ok, err := lastCheckpoint(ctx)
		first = ts
		return ok, err
	})
	if first.Before(started) || first.After(time.Now()) {
		t.Fatalf("recorded checkpoint time %v is outside the run (started %v)", first, started)
	}

	time.Sleep(1100 * time.Millisecond) // the annotation has whole seconds
	sent := time.Now().Truncate(time.Second)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != 143 {
		t.Fatalf("exit %d after SIGTERM, want 143:\n%s", code, p.tail())
	}
	last, ok, err := lastCheckpoint(ctx)
	if err != nil || !ok || last.Before(sent) {
		t.Fatalf("after the SIGTERM checkpoint the annotation says %v (%v, %v); want a time at or after %v", last, ok, err, sent)
	}
	if strings.Contains(p.output(), "could not record") {
		t.Fatalf("the step reported a failed annotation:\n%s", p.tail())
	}
}

// Each example's usage comment passes every parameter that has no default:
// otherwise Argo refuses the submission a reader copies from it.
func TestArgoExampleUsagePassesRequiredParameters(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "examples", "argo", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, file := range files {
		rel, _ := filepath.Rel(repoRoot(t), file)
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var usage strings.Builder
		for _, line := range strings.Split(string(raw), "\n") {
			if !strings.HasPrefix(line, "#") {
				break
			}
			usage.WriteString(line + "\n")
		}
		for _, obj := range readRepoObjects(t, rel) {
			if obj.GetKind() != "WorkflowTemplate" {
				continue
			}
			params, _, _ := unstructured.NestedSlice(obj.Object, "spec", "arguments", "parameters")
			for _, p := range params {
				p := p.(map[string]any)
				if _, hasDefault := p["value"]; hasDefault {
					continue
				}
				checked++
				if !strings.Contains(usage.String(), "-p "+p["name"].(string)+"=") {
					t.Errorf("%s: the usage comment does not pass -p %s=, which has no default", rel, p["name"])
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no required parameter found in examples/argo")
	}
}
