package integration

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/controller"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
)

// TestFaults drives the whole system (a real etcd and kube-apiserver, both
// schedulers, gleaner-controller, real HTTP vLLM endpoints, a stand-in
// kubelet) through faults a hostile tenant or a bad day brings, and checks
// the invariants, not just survival: nothing lent where it should not be,
// inference never waiting past the budget. Each scenario logs one "fault:"
// line with what it measured; `make test-faults` prints them.
func TestFaults(t *testing.T) {
	env := startHarvestEnv(t)
	// gleaner-controller with a reclaim grace cap of 2 s, so that a test can
	// watch a tenant's hour-long grace period being capped.
	const graceCap = 2 * time.Second
	env.stopController()
	env.startControllerWith(func(c *controller.Config) { c.MaxReclaimGrace = graceCap })

	chat0 := env.vllm("llama-chat")
	pod := inferencePod("chat-0", "chat", 4, chat0, v1.DefaultSchedulerName)
	pod.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "gpu-a"}
	env.create(pod)
	env.waitBound(servingNS, "chat-0", 30*time.Second)
	env.waitVerdict("gpu-a", open(4), 30*time.Second)
	env.waitVerdict("gpu-b", open(8), 10*time.Second)

	t.Run("forged demand from a namespace not opted in moves nothing", func(t *testing.T) {
		env := env.in(t)
		env.create(bestEffortPod("lent-b", 8))
		if node := env.waitBound(researchNS, "lent-b", 20*time.Second); node != "gpu-b" {
			t.Fatalf("lent-b bound to %s, want gpu-b", node)
		}
		// A tenant's pod calls itself inference and reports an absurd queue.
		forged := env.vllm("forged")
		forged.set(vllmServing, 1_000_000, 1_000_000_000, 1)
		fake := inferencePod("forged-0", "forged", 0, forged, v1.DefaultSchedulerName)
		fake.Namespace, fake.Spec.PriorityClassName = researchNS, ""
		env.create(fake)
		env.waitBound(researchNS, "forged-0", 20*time.Second)
		before := env.kubelet.deleted()
		time.Sleep(4 * scrapeInterval) // several planning rounds
		if got := env.verdict("gpu-b"); got != open(8) {
			t.Fatalf("gpu-b verdict %+v after forged demand, want open with 8", got)
		}
		if after := env.kubelet.deleted(); len(after) != len(before) {
			t.Fatalf("pods deleted after forged demand: %v (before %v)", after, before)
		}
		t.Logf("fault: forged demand (1e9 waiting requests) from a tenant namespace: 0 verdicts moved, 0 evictions over %v", 4*scrapeInterval)
		env.deleteNow(researchNS, "forged-0")
		env.deleteNow(researchNS, "lent-b")
	})

	t.Run("a tenant's hour-long grace period is capped", func(t *testing.T) {
		env := env.in(t)
		slow := bestEffortPod("slow", 4)
		hour := int64(3600)
		slow.Spec.TerminationGracePeriodSeconds = &hour
		slow.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "gpu-a"}
		env.create(slow)
		env.waitBound(researchNS, "slow", 20*time.Second)
		// gpu-b lends all it has, so the room chat needs must come from gpu-a.
		fillLent(env, "gpu-b", "fill-b")

		start := time.Now()
		chat0.set(vllmServing, 16, 5, 0.9) // waiting requests: one more replica
		env.waitEvent(researchNS, "slow", reclaim.ReasonReclaimed, "grace period of 2s", 15*time.Second)
		if grace, deleted := env.kubelet.deletionGrace(researchNS, "slow"); !deleted || grace != int64(graceCap/time.Second) {
			t.Fatalf("slow deleted=%v with grace %ds, want the cap %v", deleted, grace, graceCap)
		}
		chat1 := env.vllm("llama-chat")
		p := inferencePod("chat-1", "chat", 4, chat1, v1.DefaultSchedulerName)
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "gpu-a"}
		env.create(p)
		env.waitBound(servingNS, "chat-1", 30*time.Second)
		took, budget := time.Since(start), scrapeInterval+graceCap+5*time.Second
		t.Logf("fault: best-effort pod with a 3600 s grace period: evicted with %v, inference waited %v (budget %v)", graceCap, took.Round(time.Millisecond), budget)
		if took > budget {
			t.Fatalf("inference waited %v, budget %v", took, budget)
		}
		env.deleteNow(servingNS, "chat-1")
		for _, p := range listPods(t, env, researchNS) {
			env.deleteNow(researchNS, p.Name)
		}
		chat0.set(vllmServing, 4, 0, 0.3)
		env.waitVerdict("gpu-a", open(4), 20*time.Second)
	})

	t.Run("a pending inference replica drains a node at once", func(t *testing.T) {
		env := env.in(t)
		lentA := bestEffortPod("lent-a", 4)
		lentA.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "gpu-a"}
		env.create(lentA)
		env.waitBound(researchNS, "lent-a", 20*time.Second)
		env.waitVerdict("gpu-b", open(8), 10*time.Second)
		// A replica of chat that no scheduler can place yet (its node is not
		// there): it is demand all the same, and its room is kept now.
		start := time.Now()
		unscraped := env.vllm("llama-chat")
		pending := inferencePod("chat-pending", "chat", 8, unscraped, v1.DefaultSchedulerName)
		pending.Spec.NodeSelector = map[string]string{"example.com/not-yet": "true"}
		env.create(pending)
		// 8 GPUs of headroom fit only on gpu-b: it closes; nothing there was lent.
		env.waitVerdict("gpu-b", harvest.Verdict{State: api.HarvestClosed}, 15*time.Second)
		t.Logf("fault: inference replica pending: its 8 GPUs kept %v after it appeared", time.Since(start).Round(time.Millisecond))
		env.deleteNow(servingNS, "chat-pending")
		env.waitVerdict("gpu-b", open(8), 20*time.Second)
	})
}
