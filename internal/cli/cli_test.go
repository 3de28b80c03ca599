package cli

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/api/v1alpha1"
	"github.com/gleaner-dev/gleaner/pkg/plugins/gang"
	"github.com/gleaner-dev/gleaner/pkg/plugins/gpuharvest"
)

// TestWaitingReasonsAreThePlugins: every reason Gleaner's plugins give for
// not placing a pod reads in Gleaner's words, so that the CLI does not fall
// behind a renamed reason.
func TestWaitingReasonsAreThePlugins(t *testing.T) {
	for _, reason := range []string{
		gpuharvest.ErrReasonNotOpen, gpuharvest.ErrReasonBadVerdict, gpuharvest.ErrReasonNotEnoughGPUs,
		gpuharvest.ErrReasonHeartbeatStale, gpuharvest.ErrReasonNewNode,
		gang.ErrReasonNoPodGroup, gang.ErrReasonTooFewPods, gang.ErrReasonBackingOff, gang.ErrReasonSiblingLost,
	} {
		message := "0/3 nodes are available: 3 " + reason + "."
		if got := WaitingReason(message); got == oneLine(message, 120) {
			t.Errorf("%q is not explained", reason)
		}
	}
	if got := WaitingReason("0/3 nodes are available: 3 Insufficient cpu."); !strings.Contains(got, "Insufficient cpu") {
		t.Errorf("a reason not Gleaner's: %q", got)
	}
}

func TestWhenEnough(t *testing.T) {
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	st := v1alpha1.GPUPoolStatus{GPUs: v1alpha1.GPUCounts{Lent: 4}}
	if got := whenEnough(st, 4, now); got != "no forecast published" {
		t.Errorf("no outlook: %q", got)
	}
	for i, lendable := range []int64{6, 7, 12, 12} {
		st.Outlook = append(st.Outlook, v1alpha1.OutlookPoint{Time: metav1.NewTime(now.Add(time.Duration(i) * time.Hour)), LendableLow: lendable, LendableHigh: lendable})
	}
	for gpus, want := range map[int64]string{
		2:  "enough may open at any time",
		8:  "enough expected open from Mon 14:00 UTC",
		12: "not expected to open within 24h",
	} {
		if got := whenEnough(st, gpus, now); got != want {
			t.Errorf("%d GPUs: %q, want %q", gpus, got, want)
		}
	}
}

func TestGPUBar(t *testing.T) {
	if got := gpuBar(v1alpha1.GPUCounts{Total: 8, Serving: 4, Lent: 2, Headroom: 1, Idle: 1}, 8); got != "[SSSSLLH.]" {
		t.Errorf("8 GPUs: %s", got)
	}
	if got := gpuBar(v1alpha1.GPUCounts{Total: 1000, Serving: 500, Lent: 500}, 10); got != "[SSSSSLLLLL]" {
		t.Errorf("scaled: %s", got)
	}
}

// jobs --watch outlives the API server's end of a watch: it watches again
// from the version it last printed, and from now when that has expired.
func TestJobsWatchResumes(t *testing.T) {
	report := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "gleaner.dev/v1alpha1", "kind": "HarvestReport",
		"metadata": map[string]any{"name": v1alpha1.HarvestReportName, "namespace": "research", "resourceVersion": "7"}}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		v1alpha1.GPUPoolResource: "GPUPoolList", v1alpha1.HarvestReportResource: "HarvestReportList"}, report)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var versions []string
	dyn.PrependWatchReactor("harvestreports", func(action clienttesting.Action) (bool, watch.Interface, error) {
		versions = append(versions, action.(clienttesting.WatchActionImpl).WatchRestrictions.ResourceVersion)
		w := watch.NewFake()
		go func() {
			switch len(versions) {
			case 1: // a change, then the server ends the watch
				w.Modify(report)
				w.Stop()
			case 2: // the version expired
				w.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired})
			default: // the user stops; so does the watch
				cancel()
				w.Stop()
			}
		}()
		return true, w, nil
	})
	var out, errOut strings.Builder
	j := &jobsOptions{options: &options{streams: genericiooptions.IOStreams{Out: &out, ErrOut: &errOut}, now: time.Now}, watch: true}
	if err := j.list(ctx, &clients{dynamic: dyn, kube: kubefake.NewClientset(), namespace: "research"}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"7", "7", ""}; !slices.Equal(versions, want) {
		t.Errorf("watched from versions %q, want %q", versions, want)
	}
	if n := strings.Count(errOut.String(), "No best-effort jobs"); n != 2 {
		t.Errorf("printed %d times, want the first listing and one change:\n%s", n, errOut.String())
	}
}

// describe takes a job's name as kubectl spells kinds, and as submit prints
// it (job.batch/NAME).
func TestFindJobTakesKubectlKinds(t *testing.T) {
	jobs := []v1alpha1.Job{{Kind: "Job", Name: "train"}, {Kind: "PodGroup", Name: "train"}, {Kind: "Workflow", Name: "wf-x"}}
	for ref, want := range map[string]string{
		"job.batch/train": "Job", "Job/train": "Job", "jobs/train": "Job", "jobs.batch/train": "Job",
		"PodGroup/train": "PodGroup", "podgroup.scheduling.x-k8s.io/train": "PodGroup", "pg/train": "PodGroup",
		"workflow.argoproj.io/wf-x": "Workflow", "wf/wf-x": "Workflow", "wf-x": "Workflow",
	} {
		got, err := findJob(jobs, "research", ref)
		if err != nil || got.Kind != want {
			t.Errorf("%s: %+v, %v; want the %s", ref, got, err, want)
		}
	}
	for ref, says := range map[string]string{
		"train":             `"train" names 2 jobs: say which, one of Job/train, PodGroup/train`,
		"deployment/train":  `no best-effort job "deployment/train"`,
		"job.batch/another": `no best-effort job "job.batch/another"`,
	} {
		if _, err := findJob(jobs, "research", ref); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: %v, want %q", ref, err, says)
		}
	}
}

func TestRefusalSaysWhatToChange(t *testing.T) {
	got := refusal(`Error creating: pods "train-x7k2p" is forbidden: ValidatingAdmissionPolicy 'gleaner-best-effort-grace' with binding 'gleaner-best-effort-grace' denied request: a gleaner-best-effort pod's terminationGracePeriodSeconds is at most 120: a reclaim gives it no longer to checkpoint`)
	if want := "the cluster refuses its pods: a gleaner-best-effort pod's terminationGracePeriodSeconds is at most 120: a reclaim gives it no longer to checkpoint"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	got = refusal(`Error creating: pods "train-x7k2p" is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=4`)
	if !strings.HasSuffix(got, `is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=4`) {
		t.Errorf("a quota's refusal: %q", got)
	}
}

func TestSubmitCheckpointFlags(t *testing.T) {
	for _, c := range []struct {
		s    submitOptions
		says string
	}{
		{submitOptions{checkpointPVC: "ckpt", checkpointURI: "s3://b/p", checkpointDir: "/ckpt"}, "choose one"},
		{submitOptions{checkpointPVC: "Bad_Name", checkpointDir: "/ckpt"}, `--checkpoint-pvc "Bad_Name" is not a PersistentVolumeClaim name`},
		{submitOptions{checkpointPVC: "ckpt", checkpointDir: "ckpt"}, `--checkpoint-dir "ckpt": want an absolute directory`},
		{submitOptions{checkpointPVC: "ckpt", checkpointDir: "/etc"}, `--checkpoint-dir "/etc"`},
		{submitOptions{checkpointPVC: "ckpt", checkpointDir: "/etc/podinfo/x"}, `--checkpoint-dir "/etc/podinfo/x"`},
		{submitOptions{checkpointDir: "/data", checkpointDirSet: true}, "give --checkpoint-pvc too"},
		{submitOptions{checkpointURI: "my-bucket/llama", checkpointDir: "/ckpt"}, "want SCHEME://BUCKET/PREFIX"},
		{submitOptions{checkpointPVC: "ckpt", checkpointDir: "/data/ckpt/", checkpointDirSet: true}, ""},
		{submitOptions{checkpointURI: "s3://my-bucket/llama", checkpointDir: "/ckpt"}, ""},
	} {
		err := c.s.checkCheckpointFlags()
		if (c.says == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.says)) {
			t.Errorf("%+v: %v, want %q", c.s, err, c.says)
		}
	}
}

// A refusal names what the user tried (create, not read) and who grants it.
func TestRefusedAccessNamesTheVerb(t *testing.T) {
	c := &clients{namespace: "research"}
	forbidden := apierrors.NewForbidden(podGroupResource.GroupResource(), "pretrain",
		errors.New(`User "erin" cannot create resource "podgroups" in API group "scheduling.x-k8s.io" in the namespace "research"`))
	got := c.explain(forbidden, "create", "PodGroup pretrain in namespace research", podGroupResource).Error()
	for _, want := range []string{"you may not create PodGroup pretrain in namespace research", "ClusterRole edit", `cannot create resource "podgroups"`} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "read") {
		t.Errorf("%q names reading, not creating", got)
	}
	pool := apierrors.NewForbidden(v1alpha1.GPUPoolResource.GroupResource(), "inference", errors.New("no"))
	if got := c.explain(pool, "read", "GPUPool inference", v1alpha1.GPUPoolResource).Error(); !strings.HasPrefix(got, "you may not read GPUPool inference (ask your cluster admin to grant you the ClusterRole gleaner-pool-reader)") {
		t.Errorf("the pool's refusal: %q", got)
	}
	if !apierrors.IsForbidden(c.explain(forbidden, "create", "PodGroup pretrain", podGroupResource)) {
		t.Error("the explained error hides the API error")
	}
}

// status --check passes only while the pool is planned, has GPUs and the
// heartbeat Lease is seen renewed within its duration.
func TestStatusCheck(t *testing.T) {
	planned := &v1alpha1.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "inference"}, Status: v1alpha1.GPUPoolStatus{Planning: true, GPUs: v1alpha1.GPUCounts{Total: 8}}}
	lease := func(holder string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: api.SystemNamespace, Name: api.HeartbeatLeaseName},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To(int32(1)), RenewTime: ptr.To(metav1.NewMicroTime(time.Now()))}}
	}
	for _, tt := range []struct {
		name    string
		pool    *v1alpha1.GPUPool
		poolErr error
		lease   *coordinationv1.Lease
		renew   bool
		want    string
	}{
		{"renewed", planned, nil, lease("gleaner-controller-0"), true, ""},
		{"not renewed", planned, nil, lease("gleaner-controller-0"), false, "did not renew its heartbeat Lease gleaner-system/gleaner-controller-heartbeat within its duration (1s)"},
		{"released", planned, nil, lease(""), true, "released its heartbeat Lease"},
		{"no lease", planned, nil, nil, false, "gleaner-controller-heartbeat"},
		{"not planning", &v1alpha1.GPUPool{ObjectMeta: planned.ObjectMeta, Status: v1alpha1.GPUPoolStatus{GPUs: planned.Status.GPUs}}, nil, lease("a"), true, "not planning"},
		{"no GPUs", &v1alpha1.GPUPool{ObjectMeta: planned.ObjectMeta, Status: v1alpha1.GPUPoolStatus{Planning: true}}, nil, lease("a"), true, "label the nodes Gleaner may lend gleaner.dev/pool=inference"},
		{"no pool", nil, errors.New("you may not read GPUPool inference"), lease("a"), true, "check failed: you may not read GPUPool inference"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			kube := kubefake.NewClientset()
			if tt.lease != nil {
				if _, err := kube.CoordinationV1().Leases(api.SystemNamespace).Create(context.Background(), tt.lease, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.renew && tt.lease != nil {
				go func() {
					for ctx.Err() == nil {
						time.Sleep(100 * time.Millisecond)
						l := tt.lease.DeepCopy()
						l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
						_, _ = kube.CoordinationV1().Leases(api.SystemNamespace).Update(ctx, l, metav1.UpdateOptions{})
					}
				}()
			}
			var errOut strings.Builder
			s := &statusOptions{options: &options{streams: genericiooptions.IOStreams{Out: &errOut, ErrOut: &errOut}, now: time.Now}, pool: api.PoolInference}
			err := s.checkLending(ctx, &clients{kube: kube, namespace: "research"}, tt.pool, tt.poolErr)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("failed: %v", err)
			case tt.want == "" && !strings.Contains(errOut.String(), "Check passed"):
				t.Errorf("passed without saying so: %q", errOut.String())
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("got %v, want an error saying %q", err, tt.want)
			}
		})
	}
}

// A bad -o or --days is refused before anything is read, after a wrong number
// of arguments and -o before --days; good ones go on to the kubeconfig.
func TestFlagsRefusedBeforeReading(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"jobs", "-o", "table"}, `--output "table": want json, yaml or wide`},
		{[]string{"describe", "train", "-o", "table"}, `--output "table": want json, yaml or wide`},
		{[]string{"describe", "-o", "table"}, "accepts 1 arg(s), received 0"},
		{[]string{"status", "-o", "table", "--days", "0"}, `--output "table": want json, yaml or wide`},
		{[]string{"status", "--days", "0"}, "--days 0: want 1 to"},
		{[]string{"service", "chat", "--days", "1000"}, "--days 1000: want 1 to"},
		{[]string{"service", "chat", "-o", "wide", "--days", "30"}, "kubeconfig"},
	} {
		var out, errOut strings.Builder
		args := append(tc.args, "--kubeconfig", t.TempDir()+"/none")
		code := Execute(context.Background(), args, genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, time.Now)
		if code != 1 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want 1 and %q", tc.args, code, errOut.String(), tc.want)
		}
	}
}
