package integration

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/restmapper"
	"k8s.io/kubernetes/pkg/controller/clusterroleaggregation"
	"k8s.io/kubernetes/pkg/controller/job"
	"k8s.io/utils/ptr"

	"github.com/gleaner-dev/gleaner/internal/chart"
	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/api/v1alpha1"
)

// TestResearcherWalkthrough follows docs/researchers.md with kubectl gleaner
// alone: a training image is submitted, runs on harvested GPUs, checkpoints,
// is evicted when inference needs its GPUs, resumes from its checkpoint when
// they open again (its Job makes the pod again: an eviction is no failure),
// and is reported with its GPU-hours. The Job controller runs in-process, as
// kube-controller-manager's would.
func TestResearcherWalkthrough(t *testing.T) {
	env := startHarvestEnv(t)
	factory := informers.NewSharedInformerFactory(env.client, 0)
	jobs, err := job.NewController(env.ctx, env.client, factory.Core().V1().Pods(), factory.Batch().V1().Jobs(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(env.ctx.Done())
	go jobs.Run(env.ctx, 2)
	chat0 := env.startChat()
	// Another team's jobs fill gpu-b: ours can only go to gpu-a, beside chat.
	fillLent(env, "gpu-b", "their")

	// 3. Submit it (with the suite's short grace period instead of 120 s).
	code, stdout, stderr := kubectlGleaner(t, env.cp, "submit", "train-llama", "-n", researchNS, "--image", "registry.example.com/me/train:1",
		"--gpus", "4", "--checkpoint-uri", "s3://my-bucket/llama", "--checkpoint-interval", "30m", "--grace", "3s", "--", "python", "train.py", "--epochs", "3")
	if code != 0 || !strings.Contains(stdout, "job.batch/train-llama created") {
		t.Fatalf("submit: exit %d\n%s%s", code, stdout, stderr)
	}
	first := waitJobPod(t, env, "train-llama", "")
	if node := env.waitBound(researchNS, first, 30*time.Second); node != "gpu-a" {
		t.Fatalf("the job's pod bound to %s, want gpu-a (gpu-b is full)", node)
	}
	// 2. The step checkpoints and records it, as the guide's record_checkpoint does.
	time.Sleep(2 * time.Second)
	patch := []byte(`{"metadata":{"annotations":{"` + api.AnnotationLastCheckpoint + `":"` + time.Now().UTC().Format(time.RFC3339) + `"}}}`)
	if _, err := env.client.CoreV1().Pods(researchNS).Patch(context.Background(), first, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	// Inference needs gpu-a's lent GPUs: the job is evicted, and its Job
	// makes a new pod, which waits.
	chat0.set(vllmServing, 16, 5, 0.9)
	env.waitGone(researchNS, first, 30*time.Second)
	second := waitJobPod(t, env, "train-llama", first)
	// Demand falls: gpu-a opens again and the job resumes there.
	chat0.set(vllmServing, 4, 0, 0.3)
	if node := env.waitBound(researchNS, second, 60*time.Second); node == "" {
		t.Fatal("the job's second pod was never placed")
	}

	// 4. Follow it: its timeline, its GPU-hours, the namespace's harvest.
	var job v1alpha1.Job
	eventually(t, 20*time.Second, "the job's resume in its report", func(context.Context) (bool, error) {
		code, stdout, stderr := kubectlGleaner(t, env.cp, "describe", "Job/train-llama", "-n", researchNS, "-o", "json")
		if code != 0 {
			t.Fatalf("describe: exit %d: %s", code, stderr)
		}
		job = v1alpha1.Job{}
		if err := json.Unmarshal([]byte(stdout), &job); err != nil {
			return false, err
		}
		return job.State == v1alpha1.JobRunning && job.Evictions == 1, nil
	})
	var seen []string
	for _, e := range job.Timeline {
		seen = append(seen, string(e.Type))
	}
	if !inOrder(seen, "Submitted", "Placed", "Checkpointed", "Evicted", "Resumed") {
		t.Errorf("the timeline %v lacks Submitted, Placed, Checkpointed, Evicted, Resumed in order", seen)
	}
	if job.HarvestedGPUSeconds <= 0 || job.LastCheckpoint == nil {
		t.Errorf("the job reports %d GPU-seconds, last checkpoint %v", job.HarvestedGPUSeconds, job.LastCheckpoint)
	}
	code, stdout, stderr = kubectlGleaner(t, env.cp, "describe", "Job/train-llama", "-n", researchNS)
	if code != 0 || !strings.Contains(stdout, "evicted: the GPUs of node gpu-a are needed by serving/chat") {
		t.Errorf("describe does not say who needed the GPUs: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = kubectlGleaner(t, env.cp, "status", "-n", researchNS)
	if code != 0 || !strings.Contains(stdout, "\nresearch ") {
		t.Errorf("status does not report research's harvest: exit %d\n%s%s", code, stdout, stderr)
	}
	t.Logf("the job's timeline: %v; %d GPU-seconds harvested", seen, job.HarvestedGPUSeconds)
}

// waitJobPod waits for a pod of the Job other than not, and returns its name.
func waitJobPod(t *testing.T, env *harvestEnv, jobName, not string) string {
	t.Helper()
	var name string
	eventually(t, 30*time.Second, "a pod of Job "+jobName, func(ctx context.Context) (bool, error) {
		pods, err := env.client.CoreV1().Pods(researchNS).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + jobName})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.Name != not && p.DeletionTimestamp == nil && p.Status.Phase != v1.PodFailed {
				name = p.Name
				return true, nil
			}
		}
		return false, nil
	})
	return name
}

// inOrder says whether want appear in got in that order (others between).
func inOrder(got []string, want ...string) bool {
	for _, g := range got {
		if len(want) > 0 && g == want[0] {
			want = want[1:]
		}
	}
	return len(want) == 0
}

// TestTeamOnboardingWalkthrough follows docs/install.md's "Give a team
// access" against an API server that enforces RBAC, with
// kube-controller-manager's role aggregation running: a user with edit in a
// namespace cannot submit a gang until Gleaner is installed (and is told what
// was refused: creating a PodGroup), then can; a team onboarded with the
// chart's teams value submits a gang and reads status with the pool, a user
// with edit alone reads status without it, and the chart's helm test passes
// as its own ServiceAccount only while gleaner-controller's heartbeat moves.
func TestTeamOnboardingWalkthrough(t *testing.T) {
	cp := startControlPlane(t, "--authorization-mode=RBAC")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	factory := informers.NewSharedInformerFactory(cp.client, 0)
	aggregation := clusterroleaggregation.NewClusterRoleAggregation(factory.Rbac().V1().ClusterRoles(), cp.client.RbacV1())
	factory.Start(ctx.Done())
	go aggregation.Run(ctx, 1)

	// nlp is onboarded with the chart's teams value; erin has edit in vision
	// by a binding of the admin's own.
	const nlp, vision, nlpGroup = "team-nlp", "team-vision", "nlp-researchers"
	for _, ns := range []string{nlp, vision, api.SystemNamespace} {
		createNamespace(t, cp.client, ns)
	}
	for _, crd := range []string{"podgroups.yaml", "gleaner.dev_gpupools.yaml", "gleaner.dev_harvestreports.yaml"} {
		installCRD(t, cp, "charts/gleaner/crds/"+crd)
	}
	editor := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: vision, Name: "erin-edits"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "erin"}},
	}
	if _, err := cp.client.RbacV1().RoleBindings(vision).Create(ctx, editor, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	may := func(user string, groups []string, verb, group, resource, ns string) bool {
		t.Helper()
		review, err := cp.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: append([]string{"system:authenticated"}, groups...),
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource, Namespace: ns},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return review.Status.Allowed
	}
	eventually(t, 10*time.Second, "erin's edit binding", func(context.Context) (bool, error) {
		return may("erin", nil, "create", "batch", "jobs", vision), nil
	})
	gang := func(ns string, as ...string) (int, string, string) {
		args := append([]string{"submit", "pretrain", "-n", ns, "--image", "registry.example.com/team/train:1", "--gpus", "1", "--gang", "2",
			"--service-account", "gleaner-research-step", "--checkpoint-uri", "s3://team/pretrain"}, as...)
		return kubectlGleaner(t, cp, append(args, "--", "torchrun", "train.py")...)
	}

	// The chart with nlp as a team, and other values an admin might set.
	values := map[string]any{
		"teams":            []any{map[string]any{"namespace": nlp, "groups": []any{nlpGroup}}},
		"imagePullSecrets": []any{map[string]any{"name": "registry"}},
		"controller":       map[string]any{"podAnnotations": map[string]any{"team": "platform"}},
		"scheduler": map[string]any{"topologySpreadConstraints": []any{map[string]any{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
			"whenUnsatisfiable": "ScheduleAnyway", "labelSelector": map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/name": "gleaner-scheduler"}}}}},
	}
	c, err := chart.RenderChart(filepath.Join(repoRoot(t), "charts", "gleaner"), values, api.SystemNamespace)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cp.client.Discovery()))
	templates := &chart.Chart{Templates: c.Templates}
	objs := decodeObjects(t, templates.YAML(), "the chart")
	var testPod *unstructured.Unstructured
	for _, text := range c.Tests {
		for _, o := range decodeObjects(t, []byte(text), "the chart's tests") {
			if o.GetKind() == "Pod" {
				testPod = o // helm test runs it; here its command runs in the test
				continue
			}
			objs = append(objs, o)
		}
	}
	// Gleaner's shared objects without its roles (as installs before them
	// had it): edit says nothing of PodGroups, and the refusal names the
	// create that was refused, and who grants it.
	for _, obj := range objs {
		if obj.GetKind() == "PriorityClass" {
			if err := applyStrict(ctx, cp, mapper, obj); err != nil {
				t.Fatal(err)
			}
		}
	}
	code, stdout, stderr := gang(vision, "--as", "erin")
	if code != 1 || !strings.Contains(stderr, "you may not create PodGroup pretrain in namespace "+vision) || !strings.Contains(stderr, "ClusterRole edit") ||
		strings.Contains(stderr, "may not read") {
		t.Fatalf("a gang without PodGroup rights: exit %d\n%s%s", code, stdout, stderr)
	}
	t.Logf("a gang without PodGroup rights: %s", stderr)

	// Install the rest, as strictly as kubectl would (with the helm test's
	// objects, which helm test makes).
	for _, obj := range objs {
		if obj.GetKind() == "PriorityClass" {
			continue // applied above
		}
		if err := applyStrict(ctx, cp, mapper, obj); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("applied %d objects", len(objs))
	eventually(t, 20*time.Second, "edit and view to take in PodGroups", func(context.Context) (bool, error) {
		return may("erin", nil, "create", "scheduling.x-k8s.io", "podgroups", vision) && may("dana", []string{nlpGroup}, "create", "scheduling.x-k8s.io", "podgroups", nlp), nil
	})
	for _, c := range []struct {
		user                            string
		groups                          []string
		verb, group, resource, ns, want string
	}{
		{"dana", []string{nlpGroup}, "create", "batch", "jobs", nlp, "allowed"},
		{"dana", []string{nlpGroup}, "get", "gleaner.dev", "harvestreports", nlp, "allowed"},
		{"dana", []string{nlpGroup}, "get", "gleaner.dev", "gpupools", "", "allowed"},
		{"dana", []string{nlpGroup}, "create", "scheduling.x-k8s.io", "podgroups", vision, "denied"},
		{"erin", nil, "get", "gleaner.dev", "gpupools", "", "denied"},
		{"system:serviceaccount:" + nlp + ":gleaner-research-step", nil, "patch", "", "pods", nlp, "allowed"},
		{"system:serviceaccount:" + nlp + ":gleaner-research-step", nil, "patch", "", "pods", vision, "denied"},
		{"system:serviceaccount:" + nlp + ":gleaner-research-step", nil, "create", "scheduling.x-k8s.io", "podgroups", nlp, "denied"},
	} {
		if got := map[bool]string{true: "allowed", false: "denied"}[may(c.user, c.groups, c.verb, c.group, c.resource, c.ns)]; got != c.want {
			t.Errorf("%s %s %s.%s in %q: %s, want %s", c.user, c.verb, c.resource, c.group, c.ns, got, c.want)
		}
	}
	// A viewer reads PodGroups and makes none.
	viewer := editor.DeepCopy()
	viewer.Name, viewer.RoleRef.Name, viewer.Subjects[0].Name = "victor-views", "view", "victor"
	if _, err := cp.client.RbacV1().RoleBindings(vision).Create(ctx, viewer, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "view to take in PodGroups", func(context.Context) (bool, error) {
		return may("victor", nil, "list", "scheduling.x-k8s.io", "podgroups", vision), nil
	})
	if may("victor", nil, "create", "scheduling.x-k8s.io", "podgroups", vision) {
		t.Error("a viewer may create PodGroups")
	}

	// The onboarded team, and erin with edit alone, submit the gang.
	for _, s := range []struct {
		ns string
		as []string
	}{{nlp, []string{"--as", "dana", "--as-group", nlpGroup}}, {vision, []string{"--as", "erin"}}} {
		code, stdout, stderr := gang(s.ns, s.as...)
		if code != 0 || !strings.Contains(stdout, "podgroup.scheduling.x-k8s.io/pretrain created") || !strings.Contains(stdout, "job.batch/pretrain created") {
			t.Fatalf("submit --gang in %s %v: exit %d\n%s%s", s.ns, s.as, code, stdout, stderr)
		}
		pg, err := podGroupClient(cp).SchedulingV1alpha1().PodGroups(s.ns).Get(ctx, "pretrain", metav1.GetOptions{})
		if err != nil || pg.Spec.MinMember != 2 {
			t.Errorf("the gang's PodGroup in %s: %+v, %v", s.ns, pg, err)
		}
	}

	// gleaner-controller would publish the pool; here the test does.
	writeStatus(t, cp, v1alpha1.GPUPoolResource, "", api.PoolInference, "GPUPool", &v1alpha1.GPUPoolStatus{
		ObservedTime: at(-5 * time.Second), Planning: true, Nodes: v1alpha1.NodeCounts{Open: 2},
		GPUs: v1alpha1.GPUCounts{Total: 16, Serving: 8, Lent: 4, Headroom: 2, Idle: 2, Lendable: 6},
	})
	// The team reads the pool; erin, not a pool reader, reads her own
	// namespace's harvest and is told what is left out and who grants it.
	code, stdout, stderr = kubectlGleaner(t, cp, "status", "-n", nlp, "--as", "dana", "--as-group", nlpGroup)
	if code != 0 || !strings.Contains(stdout, "Pool inference: planning") || !strings.Contains(stdout, "16 in all: 8 serving, 4 lent, 2 headroom, 2 idle; 6 lendable") ||
		!strings.Contains(stdout, "Harvest: namespace "+nlp+" has run no best-effort job yet.") {
		t.Errorf("status for the onboarded team: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = kubectlGleaner(t, cp, "status", "-n", vision, "--as", "erin")
	if code != 0 || !strings.HasPrefix(stdout, "Pool inference: not shown: you may not read GPUPool inference (ask your cluster admin to grant you the ClusterRole gleaner-pool-reader)") ||
		!strings.Contains(stdout, "Harvest: namespace "+vision+" has run no best-effort job yet.") || strings.Contains(stdout, "16 in all") {
		t.Errorf("status with edit alone: exit %d\n%s%s", code, stdout, stderr)
	}
	t.Logf("status with edit alone:\n%s", stdout)

	// helm test: its pod's command, as its ServiceAccount, passes while the
	// heartbeat Lease is renewed and fails once it is not.
	if testPod == nil {
		t.Fatal("the chart has no helm test pod")
	}
	containers, _, _ := unstructured.NestedSlice(testPod.Object, "spec", "containers")
	args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	sa, _, _ := unstructured.NestedString(testPod.Object, "spec", "serviceAccountName")
	helmTest := append(args, "--as", "system:serviceaccount:"+api.SystemNamespace+":"+sa)
	leases := cp.client.CoordinationV1().Leases(api.SystemNamespace)
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: api.HeartbeatLeaseName},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("gleaner-controller-0"), LeaseDurationSeconds: ptr.To(int32(2)), RenewTime: ptr.To(metav1.NewMicroTime(time.Now()))}}
	if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	renewing, stopRenewing := context.WithCancel(ctx)
	go func() {
		for renewing.Err() == nil {
			time.Sleep(300 * time.Millisecond)
			l, err := leases.Get(renewing, api.HeartbeatLeaseName, metav1.GetOptions{})
			if err == nil {
				l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
				_, _ = leases.Update(renewing, l, metav1.UpdateOptions{})
			}
		}
	}()
	code, stdout, stderr = kubectlGleaner(t, cp, helmTest...)
	if code != 0 || !strings.Contains(stderr, "Check passed") {
		t.Errorf("helm test's %v with the heartbeat renewed: exit %d\n%s%s", helmTest, code, stdout, stderr)
	}
	stopRenewing()
	code, stdout, stderr = kubectlGleaner(t, cp, helmTest...)
	if code != 1 || !strings.Contains(stderr, "did not renew its heartbeat Lease gleaner-system/gleaner-controller-heartbeat") {
		t.Errorf("helm test's %v with the heartbeat stopped: exit %d\n%s%s", helmTest, code, stdout, stderr)
	}
}
