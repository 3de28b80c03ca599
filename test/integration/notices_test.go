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
	"github.com/gleaner-dev/gleaner/pkg/autoscale"
	"github.com/gleaner-dev/gleaner/pkg/controller"
	"github.com/gleaner-dev/gleaner/pkg/demand"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
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

	step := startReferenceStep(env, binary, t.TempDir(), "job", "100000000")
	ctx, cancel := context.WithCancel(env.ctx)
	defer cancel()

	// chat's load climbs a request every 10 s from 6 to 15: once the trend
	// is fitted (6 s, a tenth of its window) the horizon's forecast passes one replica's 16, the
	// lead's about a minute later; the load itself never does.
	go func() {
		for load := 6; ctx.Err() == nil && load <= 15; load++ {
			chat0.set(vllmServing, load, 0, 0.3)
			time.Sleep(10 * time.Second)
		}
	}()
	given, at := step.noticed(90 * time.Second)
	step.checkpointsFor(given, at)
	evicted, stopped := step.evicted(120 * time.Second)
	// The notice's time as last moved before the eviction.
	if final := *step.notice.Load(); evicted.Before(final.Add(-time.Second)) {
		t.Errorf("evicted at %v, before the notice's %v", evicted, final)
	}
	step.resumesWithNothingLost(stopped)
	t.Logf("notice given %v ahead (for %v), checkpoint on it, evicted %v after the noticed time, resumed at step %d",
		at.Sub(given).Round(time.Second), at.Format(time.TimeOnly), evicted.Sub(at).Round(100*time.Millisecond), stopped)
}

// TestForecastScaleUpGivesNoticeFirst: chat, a Deployment gleaner-controller
// autoscales, serves on gpu-a with its other 4 GPUs lent to the reference
// step; gpu-b is full of another service. chat's load climbs steadily, so
// the forecast asks for a second replica before the load does. The step gets
// a notice and checkpoints on it; the second replica is created no earlier
// than the noticed time, binds once the step's GPUs are back, and is Ready
// before the load needs it.
func TestForecastScaleUpGivesNoticeFirst(t *testing.T) {
	env := startHarvestEnv(t)
	startWorkloadControllers(t, env.ctx, env)
	binary := buildTrainExampleBinary(t)
	env.stopController()
	env.startControllerWith(func(c *controller.Config) {
		c.Policy.Horizon, c.Policy.ReclaimLead, c.Policy.TrendWindow = 2*time.Minute, 20*time.Second, time.Minute
		c.Policy.NoticeHorizon = c.Policy.Horizon
		c.Policy.Autoscale = autoscale.Config{StableWindow: 6 * time.Second, PanicWindow: 2 * time.Second, MaxScaleDown: 1}
		c.Heartbeat.Identity = "noticing"
	})
	env.waitHeartbeatHolder("noticing")

	embed := env.vllm("embed")
	embed.set(vllmServing, 4, 0, 0.1)
	pod := inferencePod("embed-0", "embed", 8, embed, v1.DefaultSchedulerName)
	pod.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "gpu-b"}
	env.create(pod)
	env.waitBound(servingNS, "embed-0", 30*time.Second)

	srv := env.vllm("llama-chat")
	total := &int64Value{}
	total.set(6)
	env.driveLoad(env.ctx, srv, total)
	d := chatDeployment(1, srv)
	d.Annotations[api.AnnotationMaxReplicas] = "2"
	d.Spec.Template.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "gpu-a"}
	if _, err := env.client.AppsV1().Deployments(servingNS).Create(env.ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.waitVerdict("gpu-a", open(4), 60*time.Second)
	job := bestEffortPod("job", 4)
	// The step's declared save (milliseconds) and reclaim.SavedGrace to exit
	// round up to 11 s, more than this: so the step is held to its notice's
	// time, as a pod whose save outlasts its grace period is (one whose save
	// fits is taken when the lead needs its GPUs: TestPlanEvictsJustInTimeAfterANotice).
	grace := int64(10)
	job.Spec.TerminationGracePeriodSeconds = &grace
	job.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "gpu-a"}
	env.create(job)
	env.waitBound(researchNS, "job", 20*time.Second)
	step := startReferenceStep(env, binary, t.TempDir(), "job", "100000000")

	// The load climbs a request every 10 s, as in the test above: past one
	// replica's 16 (the load arriving) about 110 s from now; the forecast two
	// minutes ahead passes it as soon as the trend is fitted.
	var arrived atomic.Pointer[time.Time]
	go func() {
		for load := int64(6); env.ctx.Err() == nil && load <= 24; load++ {
			total.set(load)
			if load > demand.DefaultTargetLoad && arrived.Load() == nil {
				now := time.Now()
				arrived.Store(&now)
			}
			time.Sleep(10 * time.Second)
		}
	}()
	given, at := step.noticed(90 * time.Second)
	if arrived.Load() != nil {
		t.Fatalf("the notice came %v after the load arrived: it was not the forecast's", given.Sub(*arrived.Load()))
	}
	step.checkpointsFor(given, at)
	evicted, stopped := step.evicted(90 * time.Second)
	env.waitEvent(researchNS, "job", reclaim.ReasonReclaimed, fmt.Sprintf("grace period of %ds to return GPUs", int(reclaim.SavedGrace/time.Second)), 10*time.Second)
	// The notice's time as last moved before the eviction.
	final := *step.notice.Load()
	if evicted.Before(final.Add(-time.Second)) {
		t.Errorf("evicted at %v, before the notice's %v", evicted, final)
	}

	// The second replica: created at or after the noticed time, bound and
	// Ready before the load arrived.
	var second *v1.Pod
	waitFor(t, "a second chat replica Ready", 60*time.Second, func() bool {
		for _, p := range listPods(t, env, servingNS) {
			if p.Labels[api.LabelService] == "chat" && p.DeletionTimestamp == nil && p.Spec.NodeName != "" &&
				podCondition(&p, v1.PodReady) != nil && podCondition(&p, v1.PodReady).Status == v1.ConditionTrue &&
				p.CreationTimestamp.Time.After(given.Add(-time.Second)) {
				second = p.DeepCopy()
				return true
			}
		}
		return false
	})
	created := second.CreationTimestamp.Time
	ready := podCondition(second, v1.PodReady).LastTransitionTime.Time
	if created.Before(final.Add(-time.Second)) { // API times are whole seconds
		t.Errorf("the replica was created at %v, before the noticed time %v", created, final)
	}
	waitFor(t, "the load to arrive", 90*time.Second, func() bool { return arrived.Load() != nil })
	arrival := arrived.Load()
	if ready.After(arrival.Add(time.Second)) {
		t.Errorf("the replica was Ready at %v, %v after the load arrived at %v", ready, ready.Sub(*arrival), arrival)
	}
	step.resumesWithNothingLost(stopped)
	t.Logf("notice given %v ahead, for %v, moved to %v; evicted %v after it; replica created %v after it and Ready %v before the load arrived",
		at.Sub(given).Round(time.Second), at.Format(time.TimeOnly), final.Format(time.TimeOnly), evicted.Sub(final).Round(100*time.Millisecond),
		created.Sub(final).Round(time.Second), arrival.Sub(ready).Round(time.Second))
}

// referenceStep is the reference training step (gleaner-train-example) run as
// the container of a best-effort pod, with the kubelet's part played by the
// test: the pod's annotations in a file, kept current as the downward API
// keeps them, and SIGTERM once the pod is being deleted.
type referenceStep struct {
	env       *harvestEnv
	pod       string
	run       func(steps string) *process
	proc      *process
	evictedAt atomic.Pointer[time.Time]
	// notice is the last reclaim notice seen on the pod before its deletion:
	// the round may move it as the forecast moves.
	notice atomic.Pointer[time.Time]
}

func startReferenceStep(env *harvestEnv, binary, dir, pod, steps string) *referenceStep {
	kubeconfig := filepath.Join(dir, "admin.kubeconfig")
	writeKubeconfig(env.t, env.cp.config, kubeconfig)
	annotations := filepath.Join(dir, "annotations")
	s := &referenceStep{env: env, pod: pod}
	s.run = func(steps string) *process {
		return startProcessEnv(env.t, "gleaner-train-example", binary, []string{"POD_NAME=" + pod, "POD_NAMESPACE=" + researchNS},
			"train", "--checkpoint-dir="+filepath.Join(dir, "checkpoints"), "--steps="+steps, "--checkpoint-every=0",
			"--step-delay=2ms", "--notice-file="+annotations, "--kubeconfig="+kubeconfig)
	}
	s.proc = s.run(steps)
	ctx, cancel := context.WithCancel(env.ctx)
	env.t.Cleanup(cancel)
	go func() {
		for ctx.Err() == nil {
			if p, err := env.client.CoreV1().Pods(researchNS).Get(ctx, pod, metav1.GetOptions{}); err == nil {
				writeDownwardAnnotations(env.t, annotations, p.Annotations)
				if at, ok := api.ReclaimNotice(p); ok && p.DeletionTimestamp == nil {
					s.notice.Store(&at)
				}
				if p.DeletionTimestamp != nil && s.evictedAt.Load() == nil {
					now := time.Now()
					s.evictedAt.Store(&now)
					_ = s.proc.cmd.Process.Signal(syscall.SIGTERM)
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	return s
}

// noticed waits for a reclaim notice on the pod, and returns when it was
// seen and the time it gives.
func (s *referenceStep) noticed(timeout time.Duration) (given, at time.Time) {
	s.env.t.Helper()
	var raw string
	waitFor(s.env.t, "a reclaim notice on "+s.pod, timeout, func() bool {
		raw = s.env.pod(researchNS, s.pod).Annotations[api.AnnotationReclaimNotice]
		return raw != ""
	})
	given = time.Now()
	at, err := time.Parse(time.RFC3339, raw)
	if err != nil {
		s.env.t.Fatal(err)
	}
	return given, at
}

// checkpointsFor waits for the step to checkpoint for the notice given at
// given for at: before the noticed time (its saves not measured yet, it
// starts 21 s ahead), recorded on its pod. A notice moves as the forecast is
// refitted, and the step follows it, so the checkpoint is judged against the
// noticed time as it last stood.
func (s *referenceStep) checkpointsFor(given, at time.Time) {
	s.env.t.Helper()
	noticed := func() time.Time {
		if n := s.notice.Load(); n != nil {
			return *n
		}
		return at
	}
	for {
		raw := s.env.pod(researchNS, s.pod).Annotations[api.AnnotationLastCheckpoint]
		ck, err := time.Parse(time.RFC3339, raw)
		if err == nil && !ck.Before(given.Add(-time.Second)) && ck.Before(noticed()) {
			break
		}
		if time.Now().After(noticed().Add(20 * time.Second)) {
			s.env.t.Fatalf("waited until 20s past the noticed time %v (first %v) for a checkpoint recorded after the notice, before its time; last checkpoint %q",
				noticed().Format(time.TimeOnly), at.Format(time.TimeOnly), raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(s.proc.output(), "checkpointing for the reclaim notice") {
		s.env.t.Fatalf("the step did not checkpoint for the notice:\n%s", s.proc.tail())
	}
}

// evicted waits for the pod's deletion and the step's exit with 143, and
// returns when the deletion was seen and the step it stopped at.
func (s *referenceStep) evicted(timeout time.Duration) (time.Time, int64) {
	s.env.t.Helper()
	waitFor(s.env.t, s.pod+" evicted", timeout, func() bool { return s.evictedAt.Load() != nil })
	if code := s.proc.wait(s.env.t, 30*time.Second); code != 143 {
		s.env.t.Fatalf("the evicted step exited %d, want 143:\n%s", code, s.proc.tail())
	}
	return *s.evictedAt.Load(), logStep(s.env.t, s.proc.output(), "interrupted")
}

// resumesWithNothingLost runs the step again (its retry) and fails unless it
// resumes at the step the evicted run stopped at.
func (s *referenceStep) resumesWithNothingLost(stopped int64) {
	s.env.t.Helper()
	retry := s.run(strconv.FormatInt(stopped+10, 10))
	if code := retry.wait(s.env.t, 60*time.Second); code != 0 {
		s.env.t.Fatalf("the retry exited %d:\n%s", code, retry.tail())
	}
	if resumed := logStep(s.env.t, retry.output(), "resuming from checkpoint"); resumed != stopped {
		s.env.t.Fatalf("resumed from step %d, the evicted run stopped at %d", resumed, stopped)
	}
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
