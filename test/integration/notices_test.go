package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gleaner-dev/gleaner/internal/testobj"
	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/controller"
	"github.com/gleaner-dev/gleaner/pkg/demand"
)

// TestReclaimNotices: a service whose learned profile peaks in an hour the
// horizon reaches, beyond the reclaim lead, closes the node its lent pods run
// on and gives them notices with the expected eviction time, evicting
// nothing; once the forecast no longer needs their GPUs the notices are
// withdrawn.
func TestReclaimNotices(t *testing.T) {
	env := startHarvestEnv(t)
	env.startChat()
	fillLent(env, "gpu-b", "fill-b")

	// The peak: the first hour that starts at least 20 minutes from now,
	// beyond a 15-minute horizon (the default) and the 5-minute lead.
	now := time.Now().UTC()
	peak := now.Truncate(time.Hour).Add(time.Hour)
	if peak.Sub(now) < 20*time.Minute {
		peak = peak.Add(time.Hour)
	}
	var profile demand.Profile
	profile.Peak[demand.SlotOfWeek(now)], profile.Weeks[demand.SlotOfWeek(now)] = 4, 1
	profile.Peak[demand.SlotOfWeek(peak)], profile.Weeks[demand.SlotOfWeek(peak)] = 100, 1
	stored, err := json.Marshal(profile)
	if err != nil {
		t.Fatal(err)
	}
	d := testobj.Deployment(servingNS, "chat", 1, 4, map[string]string{api.AnnotationDemandProfile: string(stored)})
	d.Spec.Template.Spec.Containers[0].Image = "vllm/vllm-openai"
	if _, err := env.client.AppsV1().Deployments(servingNS).Create(env.ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A controller whose horizon reaches the peak: 100 requests need 7
	// replicas, so every lent GPU is wanted, but not within the lead.
	env.stopController()
	env.startControllerWith(func(c *controller.Config) {
		c.Policy.Horizon, c.Heartbeat.Identity = peak.Sub(now)+30*time.Minute, "far-sighted"
	})
	env.waitHeartbeatHolder("far-sighted")
	var noticed *v1.Pod
	// The annotation and the condition are two writes (metadata, then
	// status): wait for both.
	waitFor(t, "a reclaim notice on fill-b-0", 20*time.Second, func() bool {
		noticed = env.pod(researchNS, "fill-b-0")
		c := podCondition(noticed, api.ConditionReclaimNotice)
		return noticed.Annotations[api.AnnotationReclaimNotice] != "" && c != nil && c.Status == v1.ConditionTrue
	})
	at, err := time.Parse(time.RFC3339, noticed.Annotations[api.AnnotationReclaimNotice])
	if err != nil {
		t.Fatal(err)
	}
	// Evicted once the lead's window touches the peak's hour: 5 minutes
	// before it, found to the minute.
	if due := peak.Add(-5 * time.Minute); at.Before(due) || at.After(due.Add(time.Minute)) {
		t.Errorf("notice at %v, want within a minute after %v", at, due)
	}
	ev := env.waitEvent(researchNS, "fill-b-0", controller.ReasonReclaimNotice, "serving/chat", 10*time.Second)
	time.Sleep(3 * scrapeInterval)
	if _, deleted := env.kubelet.deletionGrace(researchNS, "fill-b-0"); deleted {
		t.Fatal("fill-b-0 was evicted though its GPUs are needed only beyond the lead")
	}
	t.Logf("notice on fill-b-0: %s", ev.Message)

	// A controller whose horizons stop short of the peak (the default
	// 15-minute one, and notices no further ahead) no longer needs the GPUs:
	// the notice is withdrawn.
	env.stopController()
	env.startControllerWith(func(c *controller.Config) {
		c.Policy.NoticeHorizon, c.Heartbeat.Identity = demand.DefaultHorizon, "near-sighted"
	})
	waitFor(t, "the notice withdrawn", 20*time.Second, func() bool {
		p := env.pod(researchNS, "fill-b-0")
		c := podCondition(p, api.ConditionReclaimNotice)
		return p.Annotations[api.AnnotationReclaimNotice] == "" && c != nil && c.Status == v1.ConditionFalse
	})
	env.waitEvent(researchNS, "fill-b-0", controller.ReasonReclaimNoticeWithdrawn, "withdrawn", 10*time.Second)
	env.waitVerdict("gpu-b", open(8), 20*time.Second)
}

// podCondition is the pod's condition of type t, or nil.
func podCondition(p *v1.Pod, t v1.PodConditionType) *v1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// TestReclaimNoticeLetsAJobCheckpointFirst: the reference training step,
// reading its pod's annotations as the downward API would give them, gets a
// notice ahead of its eviction, checkpoints on it (recording the time on its
// pod), is evicted no earlier than the notice said, and resumes with no work
// lost.
func TestReclaimNoticeLetsAJobCheckpointFirst(t *testing.T) {
	env := startHarvestEnv(t)
	chat0 := env.startChat()
	binary := buildTrainExampleBinary(t)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "admin.kubeconfig")
	writeKubeconfig(t, env.cp.config, kubeconfig)

	// A forecast that looks 2 minutes ahead, on a trend fitted to the last
	// minute, warns as far ahead and evicts 20 s ahead.
	env.stopController()
	env.startControllerWith(func(c *controller.Config) {
		c.Policy.Horizon, c.Policy.ReclaimLead, c.Policy.TrendWindow = 2*time.Minute, 20*time.Second, time.Minute
		c.Policy.NoticeHorizon = c.Policy.Horizon
		c.Heartbeat.Identity = "noticing"
	})
	env.waitHeartbeatHolder("noticing")
	lendOnGPUA(env, "job", 10) // with gpu-b full, chat's room is made on gpu-a

	// The kubelet's part: the pod's annotations in a file, kept current, and
	// SIGTERM to the process once the pod is being deleted.
	annotations := filepath.Join(dir, "annotations")
	var evictedAt atomic.Pointer[time.Time]
	ctx, cancel := context.WithCancel(env.ctx)
	defer cancel()
	train := func(steps string) *process {
		return startProcessEnv(t, "gleaner-train-example", binary, []string{"POD_NAME=job", "POD_NAMESPACE=" + researchNS},
			"train", "--checkpoint-dir="+filepath.Join(dir, "checkpoints"), "--steps="+steps, "--checkpoint-every=0",
			"--step-delay=2ms", "--notice-file="+annotations, "--kubeconfig="+kubeconfig)
	}
	proc := train("100000000")
	go func() {
		for ctx.Err() == nil {
			if p, err := env.client.CoreV1().Pods(researchNS).Get(ctx, "job", metav1.GetOptions{}); err == nil {
				writeDownwardAnnotations(t, annotations, p.Annotations)
				if p.DeletionTimestamp != nil && evictedAt.Load() == nil {
					now := time.Now()
					evictedAt.Store(&now)
					_ = proc.cmd.Process.Signal(syscall.SIGTERM)
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()

	// chat's load climbs a request every 10 s from 6 to 15: once the trend
	// is fitted (30 s) the horizon's forecast passes one replica's 16, the
	// lead's about a minute later; the load itself never does.
	go func() {
		for load := 6; ctx.Err() == nil && load <= 15; load++ {
			chat0.set(vllmServing, load, 0, 0.3)
			time.Sleep(10 * time.Second)
		}
	}()
	var noticed *v1.Pod
	waitFor(t, "a reclaim notice on job", 90*time.Second, func() bool {
		noticed = env.pod(researchNS, "job")
		return noticed.Annotations[api.AnnotationReclaimNotice] != ""
	})
	given := time.Now()
	at, err := time.Parse(time.RFC3339, noticed.Annotations[api.AnnotationReclaimNotice])
	if err != nil {
		t.Fatal(err)
	}
	// The step checkpoints before the noticed time (its saves not measured
	// yet, it starts 21 s ahead) and records when on its pod.
	waitFor(t, "a checkpoint recorded after the notice, before its time", time.Until(at)+20*time.Second, func() bool {
		raw := env.pod(researchNS, "job").Annotations[api.AnnotationLastCheckpoint]
		ck, err := time.Parse(time.RFC3339, raw)
		return err == nil && !ck.Before(given.Add(-time.Second)) && ck.Before(at)
	})
	if !strings.Contains(proc.output(), "checkpointing for the reclaim notice") {
		t.Fatalf("the step did not checkpoint for the notice:\n%s", proc.tail())
	}
	waitFor(t, "job evicted", 120*time.Second, func() bool { return evictedAt.Load() != nil })
	evicted := *evictedAt.Load()
	if evicted.Before(at.Add(-time.Second)) {
		t.Errorf("evicted at %v, before the notice's %v", evicted, at)
	}
	if code := proc.wait(t, 30*time.Second); code != 143 {
		t.Fatalf("the evicted step exited %d, want 143:\n%s", code, proc.tail())
	}
	stopped := logStep(t, proc.output(), "interrupted")

	// Its retry resumes where it stopped: nothing lost.
	retry := train(strconv.FormatInt(stopped+10, 10))
	if code := retry.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("the retry exited %d:\n%s", code, retry.tail())
	}
	if resumed := logStep(t, retry.output(), "resuming from checkpoint"); resumed != stopped {
		t.Fatalf("resumed from step %d, the evicted run stopped at %d", resumed, stopped)
	}
	t.Logf("notice given %v ahead (for %v), checkpoint on it, evicted %v after the noticed time, resumed at step %d",
		at.Sub(given).Round(time.Second), at.Format(time.TimeOnly), evicted.Sub(at).Round(100*time.Millisecond), stopped)
}

// writeDownwardAnnotations writes annotations as the downward API does: one
// key="value" line each, sorted, swapped in whole.
func writeDownwardAnnotations(t *testing.T, path string, annotations map[string]string) {
	keys := make([]string, 0, len(annotations))
	for k := range annotations {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%q\n", k, annotations[k])
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		t.Error(err)
		return
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Error(err)
	}
}

// logStep reads step=N from the first log line of output whose message is msg.
func logStep(t *testing.T, output, msg string) int64 {
	t.Helper()
	for _, line := range strings.Split(output, "\n") {
		if !strings.Contains(line, "msg=\""+msg+"\"") && !strings.Contains(line, "msg="+msg+" ") {
			continue
		}
		for _, field := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(field, "step="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
		}
	}
	t.Fatalf("no %q line with a step in:\n%s", msg, output)
	return 0
}
