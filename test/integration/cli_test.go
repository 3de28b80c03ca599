package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/restmapper"
	jobcontroller "k8s.io/kubernetes/pkg/controller/job"

	"github.com/gleaner-dev/gleaner/internal/cli"
	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/api/v1alpha1"
)

// cliNow is the clock of the CLI's golden outputs.
var cliNow = time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)

// kubectlGleaner runs kubectl gleaner against the control plane as the admin
// (or as another user with --as) and returns its exit code and outputs.
func kubectlGleaner(t *testing.T, cp *controlPlane, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = cli.Execute(context.Background(), append([]string{"--kubeconfig", cp.kubeconfig}, args...),
		genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, func() time.Time { return cliNow })
	return code, out.String(), errOut.String()
}

// golden compares got with testdata/cli/name; UPDATE_GOLDEN=1 rewrites it.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "cli", name)
	if os.Getenv("UPDATE_GOLDEN") != "" {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (UPDATE_GOLDEN=1 writes it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs (UPDATE_GOLDEN=1 rewrites it):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// writeStatus creates an object of gvr and sets its status, as the
// controller publishes it.
func writeStatus(t *testing.T, cp *controlPlane, gvr schema.GroupVersionResource, ns, name, kind string, st any) {
	t.Helper()
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(st)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": v1alpha1.Group + "/" + v1alpha1.Version, "kind": kind,
		"metadata": map[string]any{"name": name}}}
	var ri dynamic.ResourceInterface = dynamic.NewForConfigOrDie(cp.config).Resource(gvr)
	if ns != "" {
		u.SetNamespace(ns)
		ri = dynamic.NewForConfigOrDie(cp.config).Resource(gvr).Namespace(ns)
	}
	created, err := ri.Create(context.Background(), u, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Object["status"] = content
	if _, err := ri.UpdateStatus(context.Background(), created, metav1.UpdateOptions{FieldValidation: "Strict"}); err != nil {
		t.Fatal(err)
	}
}

func at(d time.Duration) metav1.Time { return metav1.NewTime(cliNow.Add(d)) }

func atp(d time.Duration) *metav1.Time { t := at(d); return &t }

// TestKubectlGleaner: each subcommand's output for jobs in each state, as
// published, against the real apiserver; and its errors without Gleaner and
// without rights.
func TestKubectlGleaner(t *testing.T) {
	cp := startControlPlane(t, "--authorization-mode=RBAC")
	ctx := context.Background()
	createNamespace(t, cp.client, researchNS)

	t.Run("no Gleaner", func(t *testing.T) {
		code, _, stderr := kubectlGleaner(t, cp, "status")
		if code != 1 || !strings.Contains(stderr, "Gleaner is not installed on this cluster") {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
	})
	jobs := publishFixture(t, cp)
	createNamespace(t, cp.client, servingNS)
	publishServingFixture(t, cp)

	for _, c := range []struct {
		golden string
		args   []string
	}{
		{"service-list.txt", []string{"service", "-n", servingNS}},
		{"service-list-wide.txt", []string{"service", "-n", servingNS, "-o", "wide", "--days", "30"}},
		{"service-chat.txt", []string{"service", "chat", "-n", servingNS}},
		{"service-chat-30d.txt", []string{"service", "chat", "-n", servingNS, "--days", "30"}},
		{"service-quiet.txt", []string{"services", "summarize", "-n", servingNS}},
		{"status.txt", []string{"status", "-n", researchNS}},
		{"status-wide.txt", []string{"status", "-n", researchNS, "-o", "wide", "--days", "30"}},
		{"jobs.txt", []string{"jobs", "-n", researchNS}},
		{"jobs-wide.txt", []string{"jobs", "-n", researchNS, "-o", "wide"}},
		{"describe-evicted.txt", []string{"describe", "sft-x7k2p", "-n", researchNS}},
		{"describe-checkpointing.txt", []string{"describe", "PodGroup/pretrain", "-n", researchNS}},
	} {
		t.Run(c.golden, func(t *testing.T) {
			code, stdout, stderr := kubectlGleaner(t, cp, c.args...)
			if code != 0 {
				t.Fatalf("kubectl gleaner %v: exit %d: %s", c.args, code, stderr)
			}
			golden(t, c.golden, stdout)
		})
	}

	t.Run("jobs -o json", func(t *testing.T) {
		code, stdout, stderr := kubectlGleaner(t, cp, "jobs", "-n", researchNS, "-o", "json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var got []v1alpha1.Job
		if err := json.Unmarshal([]byte(stdout), &got); err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(jobs)
		if have, _ := json.Marshal(got); string(have) != string(want) {
			t.Errorf("-o json:\n%s\nwant\n%s", have, want)
		}
	})

	t.Run("submit", func(t *testing.T) {
		installPodGroupCRD(t, cp)
		// submit has the API server admit a pod of the Job before creating it:
		// the PriorityClasses must exist.
		(&harvestEnv{t: t, client: cp.client}).installPriorityClasses()
		code, stdout, stderr := kubectlGleaner(t, cp, "submit", "train-llama", "-n", researchNS, "--image", "registry.example.com/me/train:1",
			"--gpus", "2", "--checkpoint-uri", "s3://bucket/llama", "--checkpoint-interval", "30m", "-e", "EPOCHS=3", "--", "python", "train.py")
		if code != 0 || !strings.Contains(stdout, "job.batch/train-llama created") || !strings.Contains(stdout, "kubectl gleaner describe Job/train-llama") {
			t.Fatalf("submit: exit %d\n%s%s", code, stdout, stderr)
		}
		job, err := cp.client.BatchV1().Jobs(researchNS).Get(ctx, "train-llama", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ps := job.Spec.Template.Spec
		c := ps.Containers[0]
		if ps.SchedulerName != api.SchedulerName || ps.PriorityClassName != api.PriorityClassBestEffort || *ps.TerminationGracePeriodSeconds != 120 ||
			c.Resources.Limits.Name(api.GPUResource, resource.DecimalSI).Value() != 2 || strings.Join(c.Command, " ") != "python train.py" ||
			job.Spec.Template.Annotations[api.AnnotationCheckpointInterval] != "30m0s" {
			t.Errorf("the Job's pods are not set up for Gleaner: %+v", job.Spec.Template)
		}
		if r := job.Spec.PodFailurePolicy.Rules; len(r) != 1 || r[0].Action != batchv1.PodFailurePolicyActionIgnore || r[0].OnPodConditions[0].Type != v1.DisruptionTarget {
			t.Errorf("an eviction would count as the Job's failure: %+v", job.Spec.PodFailurePolicy)
		}

		code, _, stderr = kubectlGleaner(t, cp, "submit", "pretrain", "-n", researchNS, "--image", "img", "--gpus", "4", "--gang", "2")
		if code != 0 {
			t.Fatalf("submit --gang: exit %d: %s", code, stderr)
		}
		gang, err := cp.client.BatchV1().Jobs(researchNS).Get(ctx, "pretrain", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pg, err := podGroupClient(cp).SchedulingV1alpha1().PodGroups(researchNS).Get(ctx, "pretrain", metav1.GetOptions{})
		if err != nil || pg.Spec.MinMember != 2 || *gang.Spec.Parallelism != 2 || gang.Spec.Template.Labels[api.LabelPodGroup] != "pretrain" {
			t.Errorf("gang: PodGroup %+v (%v), Job parallelism %d, labels %v", pg, err, *gang.Spec.Parallelism, gang.Spec.Template.Labels)
		}

		for _, c := range []struct {
			golden string
			args   []string
		}{
			{"submit-dry-run.yaml", []string{"submit", "eval", "-n", researchNS, "--image", "img", "--gpus", "1", "--dry-run=client", "-o", "yaml", "--", "python", "eval.py"}},
			{"submit-workflow.yaml", []string{"submit", "-n", researchNS, "--from", "workflowtemplate/gleaner-evaluation", "-p", "model=s3://m", "-p", "data=s3://d", "--dry-run=client", "-o", "yaml"}},
		} {
			code, stdout, stderr := kubectlGleaner(t, cp, c.args...)
			if code != 0 {
				t.Fatalf("%v: exit %d: %s", c.args, code, stderr)
			}
			golden(t, c.golden, stdout)
		}
		for _, c := range []struct {
			args []string
			says string
		}{
			{[]string{"submit", "x"}, "--image is required"},
			{[]string{"submit", "x", "--image", "i", "--gpus", "0"}, "--gpus 0: a job on harvested GPUs asks for at least 1"},
			{[]string{"submit", "x", "--image", "i", "--gang", "1"}, "--gang 1"},
			{[]string{"submit", "x", "--image", "i", "-p", "a=b"}, "-p is for --from"},
			{[]string{"submit", "X_y", "--image", "i"}, `NAME "X_y"`},
			{[]string{"submit", "x", "--image", "i", "-e", "novalue"}, `--env "novalue"`},
			{[]string{"submit", "--from", "workflowtemplate/t", "-p", "novalue"}, `-p "novalue": want NAME=VALUE`},
			{[]string{"submit", "--from", "job/t"}, "want workflowtemplate/NAME"},
			{[]string{"submit", "-n", researchNS, "--from", "workflowtemplate/t"}, "this cluster serves no Argo Workflows"},
			{[]string{"submit", "x", "-n", researchNS, "--image", "i", "--as", "bob"}, "you may not create Job x in namespace research"},
			{[]string{"submit", "x", "-n", researchNS, "--image", "i", "--checkpoint-pvc", "missing"}, "--checkpoint-pvc missing: no such PersistentVolumeClaim in namespace research"},
			{[]string{"submit", "x", "-n", researchNS, "--image", "i", "--checkpoint-uri", "my-bucket"}, `--checkpoint-uri "my-bucket": want SCHEME://BUCKET/PREFIX`},
		} {
			code, _, stderr := kubectlGleaner(t, cp, c.args...)
			if code != 1 || !strings.Contains(stderr, c.says) {
				t.Errorf("kubectl gleaner %v: exit %d, stderr %q; want 1 and %q", c.args, code, stderr, c.says)
			}
		}
	})

	t.Run("submit refuses what the cluster would refuse", func(t *testing.T) {
		submitRefusesWhatTheClusterRefuses(t, cp)
	})

	t.Run("status without the pool reader", func(t *testing.T) {
		// carol may read research's report but was not granted the pool:
		// status shows her harvest and says what it leaves out, as the
		// console does.
		grantReportReader(t, cp, "carol")
		code, stdout, stderr := kubectlGleaner(t, cp, "status", "-n", researchNS, "--as", "carol")
		if code != 0 || !strings.Contains(stdout, "Pool inference: not shown: you may not read GPUPool inference (ask your cluster admin to grant you the ClusterRole gleaner-pool-reader)") ||
			!strings.Contains(stdout, "\nresearch ") || strings.Contains(stdout, "Lendable GPUs") {
			t.Errorf("status without the pool reader: exit %d\n%s%s", code, stdout, stderr)
		}
		code, stdout, stderr = kubectlGleaner(t, cp, "status", "-n", researchNS, "--as", "carol", "-o", "json")
		var got struct {
			Pool      *v1alpha1.GPUPool        `json:"pool"`
			PoolError string                   `json:"poolError"`
			Reports   []v1alpha1.HarvestReport `json:"harvestReports"`
		}
		if err := json.Unmarshal([]byte(stdout), &got); code != 0 || err != nil || got.Pool != nil || !strings.Contains(got.PoolError, "gleaner-pool-reader") || len(got.Reports) != 1 {
			t.Errorf("status -o json without the pool reader: exit %d, %v: %+v\n%s", code, err, got, stderr)
		}
	})

	t.Run("errors a user can act on", func(t *testing.T) {
		for _, c := range []struct {
			args []string
			says string
		}{
			{[]string{"status", "--as", "bob"}, "you may not read the HarvestReport of namespace default"},
			{[]string{"jobs", "-n", researchNS, "--as", "bob"}, "you may not read the HarvestReport of namespace research"},
			{[]string{"pause", "--as", "bob"}, "you may not patch Lease gleaner-system/gleaner-controller-heartbeat: the kill switch is the cluster admin's"},
			{[]string{"pause", "--reason", strings.Repeat("x", 300)}, "--reason is 300 bytes: at most 256"},
			{[]string{"describe", "nothing-like-it", "-n", researchNS}, `no best-effort job "nothing-like-it" in namespace research`},
			{[]string{"jobs", "-o", "table"}, `--output "table": want json, yaml or wide`},
			{[]string{"status", "--server", "https://127.0.0.1:1"}, "cannot reach the cluster at https://127.0.0.1:1"},
			{[]string{"service", "-n", researchNS}, "namespace research has no inference service Gleaner keeps room for: it is not opted in as inference"},
			{[]string{"service", "chat", "-n", researchNS}, `no inference service "chat" in namespace research: the namespace is not opted in as inference`},
			{[]string{"service", "nope", "-n", servingNS}, `no inference service "nope" in namespace serving (kubectl gleaner service -n serving lists them)`},
			{[]string{"service", "chat", "-n", servingNS, "--days", "32"}, "--days 32: want 1 to 31"},
		} {
			code, _, stderr := kubectlGleaner(t, cp, c.args...)
			if code != 1 || !strings.Contains(stderr, c.says) {
				t.Errorf("kubectl gleaner %v: exit %d, stderr %q; want 1 and %q", c.args, code, stderr, c.says)
			}
		}
	})
}

// grantReportReader lets user read research's HarvestReports, and nothing of the pool.
func grantReportReader(t *testing.T, cp *controlPlane, user string) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "report-reader"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{v1alpha1.Group}, Resources: []string{"harvestreports"}, Verbs: []string{"get", "list", "watch"},
	}}}
	if _, err := cp.client.RbacV1().Roles(researchNS).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "report-reader-" + user},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}},
	}
	if _, err := cp.client.RbacV1().RoleBindings(researchNS).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The API server's authorizer reads RBAC from its own informers: wait
	// until it has seen the grant.
	eventually(t, 10*time.Second, user+"'s grant in force", func(ctx context.Context) (bool, error) {
		review, err := cp.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: researchNS, Verb: "get", Group: v1alpha1.Group, Resource: "harvestreports"},
		}}, metav1.CreateOptions{})
		return err == nil && review.Status.Allowed, err
	})
}

// submitRefusesWhatTheClusterRefuses: with Gleaner's admission policies
// installed, a grace period above the cap is refused at submit, creating
// nothing; a Job made with one anyway (by hand, or before the admin lowered
// the cap) has every pod refused, and jobs and describe say so and why.
func submitRefusesWhatTheClusterRefuses(t *testing.T, cp *controlPlane) {
	ctx := context.Background()
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cp.client.Discovery()))
	for _, obj := range readRepoObjects(t, "manifests/base/admission/policies.yaml") {
		if err := applyStrict(ctx, cp, mapper, obj); err != nil {
			t.Fatalf("applying %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
	// A policy takes effect a moment after it is created.
	eventually(t, 30*time.Second, "submit --grace 300s to be refused", func(context.Context) (bool, error) {
		code, _, _ := kubectlGleaner(t, cp, "submit", "long-grace", "-n", researchNS, "--image", "i", "--grace", "300s", "--dry-run=server")
		return code == 1, nil
	})
	code, stdout, stderr := kubectlGleaner(t, cp, "submit", "long-grace", "-n", researchNS, "--image", "i", "--grace", "300s")
	if code != 1 || !strings.Contains(stderr, "the cluster would refuse the job's pods, so nothing was created") ||
		!strings.Contains(stderr, "terminationGracePeriodSeconds is at most 120") || !strings.Contains(stderr, "(--grace sets it)") {
		t.Errorf("submit --grace 300s: exit %d\n%s%s", code, stdout, stderr)
	}
	if _, err := cp.client.BatchV1().Jobs(researchNS).Get(ctx, "long-grace", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("submit refused the job, yet it exists (%v)", err)
	}

	// The same Job made without submit: the Job controller's pods are refused.
	code, stdout, stderr = kubectlGleaner(t, cp, "submit", "long-grace", "-n", researchNS, "--image", "i", "--gpus", "2", "--dry-run=client", "-o", "json")
	if code != 0 {
		t.Fatalf("submit --dry-run=client: exit %d: %s", code, stderr)
	}
	var list struct{ Items []batchv1.Job }
	if err := json.Unmarshal([]byte(stdout), &list); err != nil || len(list.Items) != 1 {
		t.Fatalf("submit --dry-run=client -o json: %v\n%s", err, stdout)
	}
	job := &list.Items[0]
	job.Spec.Template.Spec.TerminationGracePeriodSeconds = new(int64(300))
	if _, err := cp.client.BatchV1().Jobs(researchNS).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	jctx, cancel := context.WithCancel(ctx)
	defer cancel()
	factory := informers.NewSharedInformerFactory(cp.client, 0)
	jc, err := jobcontroller.NewController(jctx, cp.client, factory.Core().V1().Pods(), factory.Batch().V1().Jobs(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(jctx.Done())
	go jc.Run(jctx, 1)
	eventually(t, 30*time.Second, "jobs to show long-grace refused", func(context.Context) (bool, error) {
		code, stdout, stderr = kubectlGleaner(t, cp, "jobs", "-n", researchNS)
		return code == 0 && strings.Contains(stdout, "Refused (the cluster refuses its pods: a gleaner-best-effort pod's terminationGracePeriodSeconds is at most 120"), nil
	})
	code, stdout, stderr = kubectlGleaner(t, cp, "describe", "job.batch/long-grace", "-n", researchNS)
	if code != 0 || !strings.Contains(stdout, "State:") || !strings.Contains(stdout, "Refused: the cluster refuses its pods") || !strings.Contains(stdout, "2 (0 pods)") {
		t.Errorf("describe job.batch/long-grace: exit %d\n%s%s", code, stdout, stderr)
	}
}

// publishServingFixture publishes serving's report as the controller would
// for a namespace opted in as inference: chat, whose replicas waited, one of
// them over the budget nine days ago and one pending now; and summarize,
// whose replicas have not been scheduled since the controller began counting.
func publishServingFixture(t *testing.T, cp *controlPlane) {
	t.Helper()
	waits := func(scheduled, over, ms int64, pod string, when time.Duration) v1alpha1.WaitCounts {
		return v1alpha1.WaitCounts{Scheduled: scheduled, OverBudget: over, LongestMilliseconds: ms, LongestPod: pod, LongestAt: atp(when)}
	}
	day := func(d time.Duration, c v1alpha1.WaitCounts) v1alpha1.DailyWaits {
		return v1alpha1.DailyWaits{Date: cliNow.Add(d).Format(time.DateOnly), WaitCounts: c}
	}
	writeStatus(t, cp, v1alpha1.HarvestReportResource, servingNS, v1alpha1.HarvestReportName, "HarvestReport", &v1alpha1.HarvestReportStatus{
		ObservedTime: at(-3 * time.Second), HarvestedGPUHours: "0.00", ReclaimBudgetMilliseconds: 130000,
		Services: []v1alpha1.ServiceWaits{
			{Name: "chat", Since: at(-10 * 24 * time.Hour), Replicas: 3, Pending: 1, PendingSince: atp(-40 * time.Second),
				Waits: waits(41, 1, 142300, "chat-5f6d8-k2x9q", -9*24*time.Hour),
				Daily: []v1alpha1.DailyWaits{
					day(-9*24*time.Hour, waits(5, 1, 142300, "chat-5f6d8-k2x9q", -9*24*time.Hour)),
					day(-3*24*time.Hour, waits(20, 0, 8200, "chat-5f6d8-abcde", -3*24*time.Hour)),
					day(-24*time.Hour, waits(12, 0, 31400, "chat-5f6d8-p8r2m", -20*time.Hour)),
					day(-time.Hour, waits(4, 0, 2100, "chat-7c9f4-x1y2z", -time.Hour)),
				}},
			{Name: "summarize", Since: at(-3 * 24 * time.Hour), Replicas: 1},
		},
	})
}

// publishFixture installs Gleaner's CRDs and publishes a pool and research's
// report as the controller would, with jobs in every state and the pods that
// wait; it returns the jobs.
func publishFixture(t *testing.T, cp *controlPlane) []v1alpha1.Job {
	t.Helper()
	ctx := context.Background()
	installCRD(t, cp, "charts/gleaner/crds/gleaner.dev_gpupools.yaml")
	installCRD(t, cp, "charts/gleaner/crds/gleaner.dev_harvestreports.yaml")

	outlook := make([]v1alpha1.OutlookPoint, 24)
	for i := range outlook {
		low := int64(4)
		if i >= 3 && i < 8 {
			low = 12
		}
		outlook[i] = v1alpha1.OutlookPoint{Time: at(time.Duration(i) * time.Hour), Serving: 8, LendableLow: low, LendableHigh: low + 2}
	}
	var history []v1alpha1.PoolSample
	for m := 24 * 60; m > 0; m -= 10 { // a day: inference peaks at noon, jobs take the rest
		hour := float64((cliNow.Add(-time.Duration(m)*time.Minute).Hour()+12)%24) - 12
		inference := int64(4 + 8*(1-hour*hour/144))
		history = append(history, v1alpha1.PoolSample{Time: at(-time.Duration(m) * time.Minute), Serving: inference, Lent: min(16-inference-2, 12), Lendable: 16 - inference - 2})
	}
	writeStatus(t, cp, v1alpha1.GPUPoolResource, "", api.PoolInference, "GPUPool", &v1alpha1.GPUPoolStatus{
		ObservedTime: at(-3 * time.Second), Planning: true,
		Nodes: v1alpha1.NodeCounts{Open: 1, Draining: 1},
		GPUs:  v1alpha1.GPUCounts{Total: 16, Serving: 6, Lent: 6, Headroom: 2, Idle: 2, Lendable: 8},
		NodeStates: []v1alpha1.NodeState{
			{Name: "gpu-a", Verdict: "draining", GPUCounts: v1alpha1.GPUCounts{Total: 8, Serving: 4, Lent: 2, Headroom: 2}},
			{Name: "gpu-b", Verdict: "open", GPUCounts: v1alpha1.GPUCounts{Total: 8, Serving: 2, Lent: 4, Idle: 2, Lendable: 8}},
		},
		History: history, Outlook: outlook, HarvestedGPUSeconds: 90000,
	})
	price := &v1alpha1.Price{PerGPUHour: "2.00", Currency: "USD"}
	jobs := []v1alpha1.Job{
		{Kind: "Pod", Name: "sweep-3", State: v1alpha1.JobWaiting, GPUs: 8, Pods: 1, Timeline: []v1alpha1.JobEvent{
			{Time: at(-2 * time.Minute), Type: v1alpha1.EventSubmitted, Pod: "sweep-3", GPUs: 8, Message: "submitted"}}},
		{Kind: "PodGroup", Name: "pretrain", State: v1alpha1.JobCheckpointing, GPUs: 8, Pods: 2, HarvestedGPUSeconds: 57600,
			LastCheckpoint: atp(-20 * time.Minute), ReclaimNotice: atp(6 * time.Minute), Timeline: []v1alpha1.JobEvent{
				{Time: at(-2 * time.Hour), Type: v1alpha1.EventSubmitted, Pod: "pretrain-0", GPUs: 4, Message: "submitted"},
				{Time: at(-2 * time.Hour), Type: v1alpha1.EventPlaced, Pod: "pretrain-0", Node: "gpu-a", GPUs: 4, Message: "placed on gpu-a with 4 GPUs"},
				{Time: at(-2 * time.Hour), Type: v1alpha1.EventPlaced, Pod: "pretrain-1", Node: "gpu-b", GPUs: 4, Message: "placed on gpu-b with 4 GPUs"},
				{Time: at(-20 * time.Minute), Type: v1alpha1.EventCheckpointed, Pod: "pretrain-0", Node: "gpu-a", Message: "checkpoint reported"},
				{Time: at(-time.Minute), Type: v1alpha1.EventNoticed, Pod: "pretrain-0", Node: "gpu-a", Message: "Expected to be evicted at 2026-03-02T12:06:00Z: the GPUs of node gpu-a are forecast to be needed by serving/chat"},
			}},
		{Kind: "Workflow", Name: "sft-x7k2p", State: v1alpha1.JobEvicted, GPUs: 4, Pods: 1, HarvestedGPUSeconds: 14400, LostGPUSeconds: 1800, Evictions: 2,
			LastCheckpoint: atp(-90 * time.Minute), Timeline: []v1alpha1.JobEvent{
				{Time: at(-3 * time.Hour), Type: v1alpha1.EventSubmitted, Pod: "sft-x7k2p-1", GPUs: 4, Message: "submitted"},
				{Time: at(-3 * time.Hour), Type: v1alpha1.EventPlaced, Pod: "sft-x7k2p-1", Node: "gpu-b", GPUs: 4, Message: "placed on gpu-b with 4 GPUs"},
				{Time: at(-2 * time.Hour), Type: v1alpha1.EventEvicted, Pod: "sft-x7k2p-1", Node: "gpu-b", GPUs: 4, Message: "evicted: the GPUs of node gpu-b are needed by serving/chat"},
				{Time: at(-100 * time.Minute), Type: v1alpha1.EventResumed, Pod: "sft-x7k2p-2", Node: "gpu-a", GPUs: 4, Message: "resumed on gpu-a with 4 GPUs after 1 eviction(s)"},
				{Time: at(-90 * time.Minute), Type: v1alpha1.EventCheckpointed, Pod: "sft-x7k2p-2", Node: "gpu-a", Message: "checkpoint reported"},
				{Time: at(-time.Hour), Type: v1alpha1.EventEvicted, Pod: "sft-x7k2p-2", Node: "gpu-a", GPUs: 4, Message: "evicted: the GPUs of node gpu-a are needed by serving/summarize"},
			}},
		{Kind: "Job", Name: "eval-gsm8k", State: v1alpha1.JobRunning, GPUs: 2, Pods: 1, HarvestedGPUSeconds: 3600, Timeline: []v1alpha1.JobEvent{
			{Time: at(-time.Hour), Type: v1alpha1.EventSubmitted, Pod: "eval-gsm8k-abcde", GPUs: 2, Message: "submitted"},
			{Time: at(-time.Hour), Type: v1alpha1.EventPlaced, Pod: "eval-gsm8k-abcde", Node: "gpu-b", GPUs: 2, Message: "placed on gpu-b with 2 GPUs"}}},
		{Kind: "Pod", Name: "tokenize", State: v1alpha1.JobSucceeded, HarvestedGPUSeconds: 3600, Timeline: []v1alpha1.JobEvent{
			{Time: at(-5 * time.Hour), Type: v1alpha1.EventSubmitted, Pod: "tokenize", GPUs: 1, Message: "submitted"},
			{Time: at(-5 * time.Hour), Type: v1alpha1.EventPlaced, Pod: "tokenize", Node: "gpu-b", GPUs: 1, Message: "placed on gpu-b with 1 GPUs"},
			{Time: at(-4 * time.Hour), Type: v1alpha1.EventFinished, Pod: "tokenize", Node: "gpu-b", Message: "succeeded"}}},
	}
	writeStatus(t, cp, v1alpha1.HarvestReportResource, researchNS, v1alpha1.HarvestReportName, "HarvestReport", &v1alpha1.HarvestReportStatus{
		ObservedTime: at(-3 * time.Second), HarvestedGPUSeconds: 79200, HarvestedGPUHours: "22.00", Value: "44.00 USD", Price: price,
		Daily: []v1alpha1.DailyHarvest{{Date: "2026-02-20", GPUSeconds: 7200}, {Date: "2026-03-01", GPUSeconds: 36000}, {Date: "2026-03-02", GPUSeconds: 36000}},
		Jobs:  jobs,
	})
	// The pods that wait, with the scheduler's reasons.
	for _, p := range []struct{ name, job, message string }{
		{"sweep-3", "", "0/2 nodes are available: 1 node(s) didn't have enough harvestable GPUs, 1 node(s) were not open for harvest."},
		{"sft-x7k2p-3", "sft-x7k2p", "0/2 nodes are available: 2 node(s) didn't have enough harvestable GPUs."},
	} {
		pod := bestEffortPod(p.name, 4)
		if p.job != "" {
			pod.Labels = map[string]string{"workflows.argoproj.io/workflow": p.job}
		}
		pod.Spec.PriorityClassName, pod.Spec.Priority = "", nil
		created, err := cp.client.CoreV1().Pods(researchNS).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse, Reason: "Unschedulable", Message: p.message}}
		if _, err := cp.client.CoreV1().Pods(researchNS).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	return jobs
}
