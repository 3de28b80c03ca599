package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/kubernetes/pkg/controller/job"

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
