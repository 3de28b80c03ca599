package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/api/v1alpha1"
	"github.com/gleaner-dev/gleaner/pkg/controller"
	"github.com/gleaner-dev/gleaner/pkg/plugins/gpuharvest"
)

// The cluster admin's kill switch, set and lifted with kubectl gleaner alone:
// pause stops all lending at once (a pod created after it is refused with
// the admin's reason, while the job already lent runs on), resume lends
// again at once, pause --drain takes the lent GPUs back, and resume after it
// lends again. (TestKubectlGleaner shows that a researcher may not throw it.)
func TestKillSwitch(t *testing.T) {
	controller.RegisterMetrics() // unregistered metrics record nothing
	env := startHarvestEnv(t)
	env.startChat()
	env.create(bestEffortPod("running", 4))
	env.waitBound(researchNS, "running", 20*time.Second)

	t.Run("pause stops lending and keeps what runs", func(t *testing.T) {
		env := env.in(t)
		code, stdout, stderr := kubectlGleaner(t, env.cp, "pause", "--reason", "driver upgrade")
		if code != 0 || !strings.Contains(stdout, "Lending stopped (Hold)") {
			t.Fatalf("pause: exit %d, %q %q", code, stdout, stderr)
		}
		paused := time.Now()
		// The switch reaches the scheduler on the Lease's watch, apart from
		// the pods': a pod created before that event is delivered may still
		// be placed, as after a cordon.
		eventually(t, 10*time.Second, "the scheduler sees the pause", func(context.Context) (bool, error) {
			v, err := gathered("gleaner_scheduler_lending_stopped", nil)
			return v == 1, err
		})
		t.Logf("the scheduler saw the pause %v after kubectl returned", time.Since(paused).Round(time.Millisecond))
		env.create(bestEffortPod("after-pause", 2))
		ev := env.waitEvent(researchNS, "after-pause", "FailedScheduling", gpuharvest.ErrReasonLendingStopped, 10*time.Second)
		t.Logf("a pod created after pause was refused %v after it: %s", time.Since(paused).Round(time.Millisecond), ev.Message)
		if !strings.Contains(ev.Message, "driver upgrade") {
			t.Errorf("refusal %q does not say the admin's reason", ev.Message)
		}
		// gpu-b still lends 4 GPUs on its verdict: only the switch keeps the pod out.
		if v := env.verdict("gpu-b"); v.HarvestableGPUs < 2 {
			t.Fatalf("gpu-b verdict %+v: the refusal would not show the switch", v)
		}
		env.assertStaysPending(researchNS, "after-pause", 3*time.Second)
		if p := env.pod(researchNS, "running"); p.DeletionTimestamp != nil {
			t.Fatal("Hold evicted the running job; only a drain may")
		}
		pool := waitGPUPool(t, env.cp, func(st v1alpha1.GPUPoolStatus) bool { return st.LendingStopped == string(api.StopHold) })
		if pool.Status.LendingStoppedReason != "driver upgrade" {
			t.Errorf("GPUPool reason %q", pool.Status.LendingStoppedReason)
		}
		if got := gatheredValue(t, "gleaner_lending_stopped", map[string]string{"mode": "Hold"}); got != 1 {
			t.Errorf("gleaner_lending_stopped{mode=Hold} = %v, want 1", got)
		}
		_, stdout, _ = kubectlGleaner(t, env.cp, "status")
		if !strings.Contains(stdout, "Lending stopped by the cluster admin (Hold): driver upgrade. Nothing new is lent.") {
			t.Errorf("status does not say lending is stopped:\n%s", stdout)
		}
	})

	t.Run("resume after a hold lends at once", func(t *testing.T) {
		env := env.in(t)
		if code, stdout, stderr := kubectlGleaner(t, env.cp, "resume"); code != 0 || !strings.Contains(stdout, "Lending resumes") {
			t.Fatalf("resume: exit %d, %q %q", code, stdout, stderr)
		}
		resumed := time.Now()
		eventually(t, 10*time.Second, "the scheduler sees the resume", func(context.Context) (bool, error) {
			v, err := gathered("gleaner_scheduler_lending_stopped", nil)
			return v == 0, err
		})
		// No verdict changed under the hold: only lifting the switch sends
		// the refused pod back to the queue.
		node := env.waitBound(researchNS, "after-pause", 10*time.Second)
		t.Logf("the refused pod bound to %s %v after resume", node, time.Since(resumed).Round(time.Millisecond))
		waitGPUPool(t, env.cp, func(st v1alpha1.GPUPoolStatus) bool { return st.LendingStopped == "" && st.Planning })
	})

	t.Run("pause --drain takes every lent GPU back", func(t *testing.T) {
		env := env.in(t)
		if code, stdout, stderr := kubectlGleaner(t, env.cp, "pause", "--drain"); code != 0 {
			t.Fatalf("pause --drain: exit %d, %q %q", code, stdout, stderr)
		}
		drained := time.Now()
		for _, name := range []string{"running", "after-pause"} {
			env.waitGone(researchNS, name, 30*time.Second)
			if grace, deleted := env.kubelet.deletionGrace(researchNS, name); !deleted || grace != graceSeconds {
				t.Errorf("%s deleted=%v with grace %ds; want an eviction with its %ds grace period", name, deleted, grace, graceSeconds)
			}
		}
		t.Logf("both lent jobs were gone %v after pause --drain (grace %ds)", time.Since(drained).Round(time.Millisecond), graceSeconds)
		for _, node := range []string{"gpu-a", "gpu-b"} {
			if v := env.verdict(node); v.HarvestableGPUs != 0 {
				t.Errorf("%s verdict %+v during a drain, want nothing harvestable", node, v)
			}
		}
		if p := env.pod(servingNS, "chat-0"); p.DeletionTimestamp != nil {
			t.Fatal("the drain touched inference")
		}
	})

	t.Run("resume after a drain lends again", func(t *testing.T) {
		env := env.in(t)
		if code, stdout, stderr := kubectlGleaner(t, env.cp, "resume"); code != 0 {
			t.Fatalf("resume: exit %d, %q %q", code, stdout, stderr)
		}
		env.create(bestEffortPod("after-resume", 2))
		node := env.waitBound(researchNS, "after-resume", 30*time.Second)
		t.Logf("a pod created after resume bound to %s", node)
		lease, err := env.client.CoordinationV1().Leases(api.SystemNamespace).Get(context.Background(), api.HeartbeatLeaseName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := lease.Annotations[api.AnnotationStopLending]; ok {
			t.Errorf("resume left the switch on the Lease: %v", lease.Annotations)
		}
	})
}
