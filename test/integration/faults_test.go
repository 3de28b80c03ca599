package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/controller"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
	"github.com/gleaner-dev/gleaner/pkg/vllm"
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
	// usual configures the controller every scenario starts from and returns to.
	usual := func(c *controller.Config) { c.MaxReclaimGrace = graceCap }
	env.stopController()
	env.startControllerWith(usual)

	controller.RegisterMetrics() // as the binary does: scenarios read the controller's metrics
	chat0 := env.startChat()
	// quiet removes what a scenario created and lets chat's load fall back,
	// so the next one starts from the idle pool: with the fault cleared,
	// every node is open again and nothing is owed.
	quiet := func(env *harvestEnv) {
		env.deleteNow(servingNS, "chat-1")
		for _, p := range listPods(env.t, env, researchNS) {
			env.deleteNow(researchNS, p.Name)
		}
		chat0.set(vllmServing, 4, 0, 0.3)
		env.waitVerdict("gpu-a", open(4), 20*time.Second)
		env.waitVerdict("gpu-b", open(8), 20*time.Second)
	}
	// unfinalize lets go of a pod a scenario held with a finalizer.
	unfinalize := []byte(`{"metadata":{"finalizers":null}}`)
	// scenario runs one scenario as a subtest. When it fails part-way, it
	// may leave a controller of its own, a never-Ready replica or a pod held
	// by a finalizer behind: the baseline is restored (the usual controller,
	// nothing but chat-0 running, chat idle) so that one failure is reported
	// once instead of failing every scenario after it.
	//
	// Whatever its fault, every scenario is audited for the invariants no
	// fault may break (auditor): inference waits for lent GPUs at most the
	// usual budget unless the scenario allows more for its fault.
	budget := scrapeInterval + graceCap + 5*time.Second
	audit := startAudit(t, env.ctx, env.client, budget)
	scenario := func(name string, f func(t *testing.T)) {
		audit.begin(budget)
		if t.Run(name, func(t *testing.T) { f(t); audit.check(t) }) {
			return
		}
		t.Logf("scenario %q failed: restoring the baseline for the next one", name)
		env.stopController()
		for _, ns := range []string{servingNS, researchNS} {
			for _, p := range listPods(t, env, ns) {
				if ns == servingNS && p.Name == "chat-0" {
					continue
				}
				_, _ = env.client.CoreV1().Pods(ns).Patch(env.ctx, p.Name, types.MergePatchType, unfinalize, metav1.PatchOptions{})
				env.deleteNow(ns, p.Name)
			}
		}
		env.startControllerWith(usual)
		quiet(env)
	}

	// The audit itself, on two breaches made on purpose with no controller
	// to undo them: a pod bound by spec.nodeName to a node whose verdict
	// lends nothing (the shipped admission policy, which would refuse it, is
	// not in force here), and an inference replica left waiting for lent GPUs.
	scenario("the audit sees a pod bound past its verdict and a replica kept waiting", func(t *testing.T) {
		env := env.in(t)
		// A minute's grace: the default scheduler's preemption, which
		// nothing caps without the controller, would free it only then.
		lent, minute := bestEffortPod("lent-b", 8), int64(60)
		lent.Spec.TerminationGracePeriodSeconds = &minute
		env.create(lent)
		if node := env.waitBound(researchNS, "lent-b", 20*time.Second); node != "gpu-b" {
			t.Fatalf("lent-b bound to %s, want gpu-b", node)
		}
		env.stopController()
		if _, err := env.client.CoreV1().Nodes().Patch(env.ctx, "gpu-a", types.MergePatchType, harvest.Closed.MergePatch(), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		replica := inferencePod("chat-1", "chat", 4, chat0, v1.DefaultSchedulerName)
		replica.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "gpu-b"}
		env.create(replica)
		time.Sleep(slack + 100*time.Millisecond) // gpu-a's open verdict out of the audit's slack
		squatter := bestEffortPod("squatter", 1)
		squatter.Spec.NodeName = "gpu-a"
		env.create(squatter)
		time.Sleep(budget) // chat-1 waits past the budget
		breaches := audit.take(time.Now())
		t.Logf("audit: on purpose, %d breaches seen: %q", len(breaches), breaches)
		if len(breaches) != 2 || !strings.HasPrefix(breaches[0], "pod research/squatter bound to gpu-a") || !strings.HasPrefix(breaches[1], "inference replica serving/chat-1 waited") {
			t.Errorf("the audit saw %q, want the squatter on gpu-a and chat-1's wait", breaches)
		}
		for _, p := range []struct{ ns, name string }{{servingNS, "chat-1"}, {researchNS, "squatter"}, {researchNS, "lent-b"}} {
			env.deleteNow(p.ns, p.name)
		}
		_ = audit.take(time.Now())
		env.startControllerWith(usual)
		quiet(env)
	})

	scenario("forged demand from a namespace not opted in moves nothing", func(t *testing.T) {
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

	scenario("no path but gleaner-scheduler's puts a pod on the pool's GPUs", func(t *testing.T) {
		poolPaths(t, env.in(t))
		quiet(env)
	})

	scenario("a tenant's hour-long grace period is capped", func(t *testing.T) {
		env := env.in(t)
		lendOnGPUA(env, "slow", 3600)

		start := time.Now()
		chat0.set(vllmServing, 16, 5, 0.9) // waiting requests: one more replica
		env.waitEvent(researchNS, "slow", reclaim.ReasonReclaimed, "grace period of 2s", 15*time.Second)
		if grace, deleted := env.kubelet.deletionGrace(researchNS, "slow"); !deleted || grace != int64(graceCap/time.Second) {
			t.Fatalf("slow deleted=%v with grace %ds, want the cap %v", deleted, grace, graceCap)
		}
		env.createChatReplica("chat-1", env.vllm("llama-chat"))
		took, budget := time.Since(start), scrapeInterval+graceCap+5*time.Second
		t.Logf("fault: best-effort pod with a 3600 s grace period: evicted with %v, inference waited %v (budget %v)", graceCap, took.Round(time.Millisecond), budget)
		if took > budget {
			t.Fatalf("inference waited %v, budget %v", took, budget)
		}
		quiet(env)
	})

	scenario("a tenant's own day-long deletion grace is capped", func(t *testing.T) {
		env := env.in(t)
		lendOnGPUA(env, "slow", graceSeconds)
		others := map[string]types.UID{} // the other tenants' pods lent GPUs
		for _, p := range listPods(t, env, researchNS) {
			if p.Name != "slow" {
				others[p.Name] = p.UID
			}
		}
		// Its owner deletes it asking a day to stop (on a notice, say), as
		// chat's load rises and needs gpu-a's lent GPUs.
		day := int64(24 * 3600)
		if err := env.client.CoreV1().Pods(researchNS).Delete(env.ctx, "slow", metav1.DeleteOptions{GracePeriodSeconds: &day}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		chat0.set(vllmServing, 16, 5, 0.9)
		gone := func() bool {
			_, err := env.client.CoreV1().Pods(researchNS).Get(env.ctx, "slow", metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}
		othersEvicted := func() (names []string) {
			for name, uid := range others {
				p, err := env.client.CoreV1().Pods(researchNS).Get(env.ctx, name, metav1.GetOptions{})
				if err != nil || p.UID != uid || p.DeletionTimestamp != nil {
					names = append(names, name)
				}
			}
			return names
		}
		deadline := time.Now().Add(20 * time.Second)
		for !gone() && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if !gone() {
			t.Fatalf("fault: a best-effort pod deleted by its owner with a %d s grace period still holds gpu-a's GPUs %v later; evicted in its place: %v",
				day, time.Since(start).Round(time.Millisecond), othersEvicted())
		}
		goneAfter := time.Since(start)
		grace, _ := env.kubelet.deletionGrace(researchNS, "slow")
		env.createChatReplica("chat-1", env.vllm("llama-chat"))
		took, budget := time.Since(start), scrapeInterval+graceCap+5*time.Second
		evicted := othersEvicted()
		t.Logf("fault: best-effort pod deleted by its owner with a %d s grace period as inference needs its GPUs: asked again with %d s, gone %v after its owner's deletion, %d other pods evicted; inference waited %v (budget %v)",
			day, grace, goneAfter.Round(time.Millisecond), len(evicted), took.Round(time.Millisecond), budget)
		if grace != int64(graceCap/time.Second) {
			t.Errorf("slow ran out a grace period of %d s, want the cap %v", grace, graceCap)
		}
		if len(evicted) > 0 {
			t.Errorf("other tenants' pods evicted while slow held the GPUs: %v", evicted)
		}
		if took > budget {
			t.Errorf("inference waited %v, budget %v", took, budget)
		}
		quiet(env)
	})

	// Budgets live in the tenants' namespaces: whatever they hold, a pod
	// keeps its GPUs from inference for PDBWait at most. One budget that
	// allows no disruption gets 429s; two that select the same pod get a 500
	// from the API server whatever they allow, for ever.
	const pdbWait = 2 * time.Second
	for _, tc := range []struct {
		name, pod, what string
		budgets         map[string]int32 // name: maxUnavailable, and as many disruptions allowed
	}{
		{name: "a PodDisruptionBudget shields a pod only for the wait", pod: "shielded", what: "a maxUnavailable: 0 budget",
			budgets: map[string]int32{"never": 0}},
		{name: "two PodDisruptionBudgets on one pod shield it only for the wait", pod: "twice", what: "two budgets that each allow a disruption",
			budgets: map[string]int32{"twice-1": 1, "twice-2": 1}},
	} {
		scenario(tc.name, func(t *testing.T) {
			env := env.in(t)
			env.stopController()
			env.startControllerWith(func(c *controller.Config) {
				c.MaxReclaimGrace, c.PDBWait, c.Heartbeat.Identity = graceCap, pdbWait, "pdb-"+tc.pod
			})
			env.waitHeartbeatHolder("pdb-" + tc.pod)
			for name, allowed := range tc.budgets {
				maxUnavailable := intstr.FromInt32(allowed)
				pdb := &policyv1.PodDisruptionBudget{
					ObjectMeta: metav1.ObjectMeta{Namespace: researchNS, Name: name},
					Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &maxUnavailable,
						Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": tc.pod}}},
				}
				created, err := env.client.PolicyV1().PodDisruptionBudgets(researchNS).Create(env.ctx, pdb, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				// Its status as the disruption controller would keep it.
				created.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: created.Generation, DisruptionsAllowed: allowed,
					CurrentHealthy: 1, DesiredHealthy: 1 - allowed, ExpectedPods: 1}
				if _, err := env.client.PolicyV1().PodDisruptionBudgets(researchNS).UpdateStatus(env.ctx, created, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			shielded := bestEffortPod(tc.pod, 4)
			shielded.Labels = map[string]string{"app": tc.pod}
			shielded.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "gpu-a"}
			env.create(shielded)
			env.waitBound(researchNS, tc.pod, 20*time.Second)
			fillLent(env, "gpu-b", "fill-b") // nowhere else to take GPUs from

			start := time.Now()
			chat0.set(vllmServing, 16, 5, 0.9)
			env.waitEvent(researchNS, tc.pod, reclaim.ReasonReclaimBlocked, "refused", 15*time.Second)
			env.waitEvent(researchNS, tc.pod, reclaim.ReasonReclaimForced, "without its PodDisruptionBudget's check", 15*time.Second)
			blocked := 0
			for _, e := range env.events(researchNS, tc.pod) {
				if e.Reason == reclaim.ReasonReclaimBlocked {
					blocked += int(max(e.Count, 1))
				}
			}
			if blocked != 1 {
				t.Errorf("%d GleanerReclaimBlocked events, want the refusal reported once", blocked)
			}
			env.createChatReplica("chat-1", env.vllm("llama-chat"))
			took, budget := time.Since(start), scrapeInterval+pdbWait+graceCap+5*time.Second
			audit.allow(budget) // this fault adds to the usual budget
			t.Logf("fault: best-effort pod under %s: refusal reported %d time(s), deleted after the %v wait, inference waited %v (budget scrape + wait + cap + 5 s = %v)", tc.what, blocked, pdbWait, took.Round(time.Millisecond), budget)
			if took > budget {
				t.Fatalf("inference waited %v, budget %v", took, budget)
			}
			quiet(env)
		})
	}

	scenario("a PodDisruptionBudget's wait survives a controller restart", func(t *testing.T) {
		env := env.in(t)
		// A longer wait than above, so that a restart part-way through it
		// shows: the replacement counts from the first refusal, kept on the
		// pod, not from its own first look.
		const wait = 8 * time.Second
		start := func(identity string) {
			env.startControllerWith(func(c *controller.Config) {
				c.MaxReclaimGrace, c.PDBWait, c.Heartbeat.Identity = graceCap, wait, identity
			})
			env.waitHeartbeatHolder(identity)
		}
		env.stopController()
		start("pdb-restart-1")
		zero := intstr.FromInt32(0)
		pdb := &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Namespace: researchNS, Name: "never-restart"},
			Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &zero,
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "shielded-restart"}}},
		}
		created, err := env.client.PolicyV1().PodDisruptionBudgets(researchNS).Create(env.ctx, pdb, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = env.client.PolicyV1().PodDisruptionBudgets(researchNS).Delete(env.ctx, "never-restart", metav1.DeleteOptions{})
		})
		created.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: created.Generation, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
		if _, err := env.client.PolicyV1().PodDisruptionBudgets(researchNS).UpdateStatus(env.ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		shielded := bestEffortPod("shielded-restart", 4)
		shielded.Labels = map[string]string{"app": "shielded-restart"}
		shielded.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "gpu-a"}
		env.create(shielded)
		env.waitBound(researchNS, "shielded-restart", 20*time.Second)
		fillLent(env, "gpu-b", "fill-b") // nowhere else to take GPUs from

		begin := time.Now()
		chat0.set(vllmServing, 16, 5, 0.9)
		env.waitEvent(researchNS, "shielded-restart", reclaim.ReasonReclaimBlocked, "refused", 15*time.Second)
		refused := time.Now()
		// Half-way through the wait the controller is replaced (its Lease
		// not released: the replacement waits for it to expire).
		time.Sleep(wait / 2)
		env.stopController()
		start("pdb-restart-2")
		up := time.Since(refused) // the replacement has planned
		env.waitEvent(researchNS, "shielded-restart", reclaim.ReasonReclaimForced, "without its PodDisruptionBudget's check", 20*time.Second)
		forced := time.Since(refused)
		env.createChatReplica("chat-1", env.vllm("llama-chat"))
		took := time.Since(begin)
		// The restart costs the Lease's expiry (3 s) and the first scrape
		// (1.5 s) on top of the budget for one budget's wait.
		budget := scrapeInterval + wait + graceCap + 5*time.Second + 3*time.Second + 3*time.Second/2
		audit.allow(budget) // this fault adds to the usual budget
		t.Logf("fault: best-effort pod under a maxUnavailable: 0 budget, the controller replaced %v into its %v wait (the replacement planning %v after the first refusal): deleted %v after the first refusal, inference waited %v (budget %v)",
			wait/2, wait, up.Round(time.Millisecond), forced.Round(time.Millisecond), took.Round(time.Millisecond), budget)
		if forced > max(wait, up)+2*time.Second {
			t.Errorf("deleted %v after the first refusal: the replacement started the %v wait again", forced.Round(time.Millisecond), wait)
		}
		if took > budget {
			t.Errorf("inference waited %v, budget %v", took, budget)
		}
		env.stopController()
		env.startControllerWith(usual)
		quiet(env)
	})

	scenario("a pending inference replica drains a node at once", func(t *testing.T) {
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
		quiet(env)
		env.waitVerdict("gpu-b", open(8), 20*time.Second)
	})

	scenario("200 hanging endpoints beside 50 healthy ones", func(t *testing.T) {
		env := env.in(t)
		const ns = "endpoints"
		createNamespace(t, env.client, ns)
		// A node of their own, outside the pool: 250 pods would fill another's pod slots.
		createGPUNode(t, env.client, "endpoints", 0, nil)
		serve := func(h http.HandlerFunc) int {
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			return srv.Listener.Addr().(*net.TCPAddr).Port
		}
		hang := func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
		healthy := func() http.HandlerFunc {
			render := simExposition()
			return func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(render(1)) }
		}
		create := func(name string, h http.HandlerFunc) {
			env.create(&v1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
					Labels:      map[string]string{api.LabelRole: api.RoleInference},
					Annotations: map[string]string{api.AnnotationMetricsPort: strconv.Itoa(serve(h))}},
				Spec: v1.PodSpec{NodeName: "endpoints", Containers: []v1.Container{{Name: "vllm", Image: "vllm/vllm-openai"}}},
			})
		}
		for i := range 200 {
			create(fmt.Sprintf("hanging-%03d", i), hang)
		}
		for i := range 50 {
			create(fmt.Sprintf("healthy-%03d", i), healthy())
		}
		// The informer gleaner-controller runs, on its own (the controller
		// itself leaves them alone: their namespace is not opted in).
		inf := vllm.NewInformer(env.client, vllm.Options{Namespaces: []string{ns}, Interval: scrapeInterval, Timeout: 500 * time.Millisecond, StaleAfter: 3 * time.Second})
		ctx, cancel := context.WithCancel(env.ctx)
		defer cancel()
		go func() { _ = inf.Run(ctx) }()
		waitFor(t, "every endpoint scraped once", 60*time.Second, func() bool {
			n := 0
			for _, p := range inf.Snapshot() {
				if !p.ScrapedAt.IsZero() || p.LastError != nil {
					n++
				}
			}
			return n == 250
		})
		worst := 50
		for range 10 {
			time.Sleep(500 * time.Millisecond)
			fresh := 0
			for _, p := range inf.Snapshot() {
				switch {
				case p.Fresh && strings.HasPrefix(p.Name, "healthy-"):
					fresh++
				case p.Fresh:
					t.Fatalf("hanging endpoint %s reads fresh", p.Name)
				}
			}
			worst = min(worst, fresh)
		}
		t.Logf("fault: 200 hanging endpoints beside 50 healthy ones: at least %d/50 healthy fresh at every look over 5 s, 0/200 hanging fresh", worst)
		if worst != 50 {
			t.Fatalf("only %d of 50 healthy endpoints stayed fresh", worst)
		}
		// gleaner-controller still plans: its heartbeat stays fresh.
		env.create(bestEffortPod("still-lending", 1))
		env.waitBound(researchNS, "still-lending", 20*time.Second)
		cancel()
		for _, p := range listPods(t, env, ns) {
			env.deleteNow(ns, p.Name)
		}
		quiet(env)
	})

	scenario("a tenant's labelled pods in a namespace not opted in are never scraped", func(t *testing.T) {
		squatting(t, env.in(t), func() { env.startControllerWith(usual) })
	})

	scenario("Node writes failing or hanging stop all lending within the heartbeat timeout", func(t *testing.T) {
		env := env.in(t)
		const timeout = 3 * time.Second
		for _, fault := range []struct {
			name string
			mode apiFault
		}{
			{"answered 503", apiFails},
			// A black-holed connection: the call never returns. Each round is
			// cut at the heartbeat timeout, so the controller recovers by itself.
			{"hanging until the caller gives up", apiHangs},
		} {
			var mode atomic.Int32
			cfg := withFault(env.cp.config, nodePatches, &mode)
			identity := "faulty-writes-" + strconv.Itoa(int(fault.mode))
			env.stopController()
			env.startControllerOn(kubernetes.NewForConfigOrDie(cfg), func(c *controller.Config) {
				c.MaxReclaimGrace, c.Heartbeat.Timeout, c.Heartbeat.Identity = graceCap, timeout, identity
			})
			env.waitHeartbeatHolder(identity)
			env.waitVerdict("gpu-b", open(8), 20*time.Second)
			env.create(bestEffortPod("before", 1))
			env.waitBound(researchNS, "before", 20*time.Second)

			// Every Node patch now fails, and the load changes so that verdicts must.
			mode.Store(int32(fault.mode))
			chat0.set(vllmServing, 16, 5, 0.9)
			// Within the timeout the scheduler may still lend on the last verdicts;
			// past it, nothing.
			wait := timeout + 2*scrapeInterval
			time.Sleep(wait)
			env.create(bestEffortPod("during", 1))
			ev := env.waitEvent(researchNS, "during", "FailedScheduling", "heartbeat is stale", 10*time.Second)
			env.assertStaysPending(researchNS, "during", 2*time.Second)
			// The verdicts on the Nodes still say open: only the heartbeat stopped lending.
			if got := env.verdict("gpu-b"); got.State != api.HarvestOpen {
				t.Fatalf("gpu-b verdict %+v: the failing patches reached the API", got)
			}
			t.Logf("fault: every Node patch %s: a best-effort pod created %v later is refused (heartbeat timeout %v): %s", fault.name, wait, timeout, ev.Message)

			mode.Store(int32(apiPasses))
			cleared := time.Now()
			chat0.set(vllmServing, 4, 0, 0.3)
			if node := env.waitBound(researchNS, "during", 30*time.Second); node == "" {
				t.Fatal("during never bound once Node writes succeeded again")
			}
			t.Logf("fault: every Node patch %s, cleared: lending resumed %v later", fault.name, time.Since(cleared).Round(time.Millisecond))
			for _, p := range listPods(t, env, researchNS) {
				env.deleteNow(researchNS, p.Name)
			}
		}
	})

	scenario("a node watch that stops delivering stops all lending", func(t *testing.T) {
		env := env.in(t)
		const timeout, bound = 3 * time.Second, 4 * time.Second
		var mode atomic.Int32
		env.stopController()
		env.startControllerOn(kubernetes.NewForConfigOrDie(withFault(env.cp.config, nodeWatches, &mode)), func(c *controller.Config) {
			c.MaxReclaimGrace, c.Heartbeat.Timeout, c.Heartbeat.Identity, c.WatchProgressBound = graceCap, timeout, "stalled-watch", bound
		})
		env.waitHeartbeatHolder("stalled-watch")
		env.waitVerdict("gpu-a", open(4), 20*time.Second)
		// Quiet is not stalled: no node changes for several bounds, and the
		// controller keeps planning.
		time.Sleep(3 * bound)
		env.create(bestEffortPod("quiet", 1))
		env.waitBound(researchNS, "quiet", 10*time.Second)

		// The node watch holds its stream open and delivers nothing; gpu-a
		// is cordoned, which closes it, and the controller does not see it.
		mode.Store(int32(apiStalls))
		stalled := time.Now()
		cordon := func(on bool) {
			patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
			if _, err := env.client.CoreV1().Nodes().Patch(env.ctx, "gpu-a", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		cordon(true)
		wait := bound + bound/4 + timeout + 2*scrapeInterval
		time.Sleep(wait)
		if got := env.verdict("gpu-a"); got.State != api.HarvestOpen {
			t.Fatalf("gpu-a verdict %+v: the controller saw the cordon through a stalled watch", got)
		}
		env.create(bestEffortPod("during", 1))
		ev := env.waitEvent(researchNS, "during", "FailedScheduling", "heartbeat is stale", 10*time.Second)
		env.assertStaysPending(researchNS, "during", 2*time.Second)
		t.Logf("fault: the node watch stalled, gpu-a cordoned unseen: a best-effort pod created %v later is refused (bound %v, heartbeat timeout %v): %s",
			time.Since(stalled).Round(100*time.Millisecond), bound, timeout, ev.Message)

		mode.Store(int32(apiPasses))
		cleared := time.Now()
		env.waitVerdict("gpu-a", harvest.Closed, 20*time.Second)
		cordon(false)
		if node := env.waitBound(researchNS, "during", 30*time.Second); node == "" {
			t.Fatal("during never bound once the watch delivered again")
		}
		t.Logf("fault: the node watch delivering again: gpu-a closed for its cordon and lending resumed %v later", time.Since(cleared).Round(time.Millisecond))
		env.stopController()
		env.startControllerWith(usual)
		quiet(env)
	})

	scenario("a node NotReady, without GPUs, or back with stale labels lends nothing meanwhile", func(t *testing.T) {
		env := env.in(t)
		closed := harvest.Verdict{State: api.HarvestClosed}
		pinned := func(name string) *v1.Pod {
			p := bestEffortPod(name, 1)
			p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "gpu-b"}
			return p
		}
		// Each fault is injected, a pod pinned to gpu-b must stay pending while
		// it lasts, and binds once it clears.
		for _, fault := range []struct {
			name         string
			inject, heal func()
		}{{
			name: "NotReady",
			inject: func() {
				env.setNodeStatus("gpu-b", func(s *v1.NodeStatus) { s.Conditions[0].Status = v1.ConditionFalse })
			},
			heal: func() {
				env.setNodeStatus("gpu-b", func(s *v1.NodeStatus) { s.Conditions[0].Status = v1.ConditionTrue })
			},
		}, {
			name: "0 allocatable GPUs",
			inject: func() {
				env.setNodeStatus("gpu-b", func(s *v1.NodeStatus) { s.Allocatable[api.GPUResource] = *resource.NewQuantity(0, resource.DecimalSI) })
			},
			heal: func() {
				env.setNodeStatus("gpu-b", func(s *v1.NodeStatus) { s.Allocatable[api.GPUResource] = *resource.NewQuantity(8, resource.DecimalSI) })
			},
		}, {
			// It left the pool and came back under the same name, still carrying
			// its old open verdict: the scheduler must not trust a verdict no
			// round that saw this node has published.
			name: "deleted and re-added outside the pool with its stale open verdict",
			inject: func() {
				stale := env.node("gpu-b")
				if err := env.client.CoreV1().Nodes().Delete(env.ctx, "gpu-b", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				waitFor(t, "gpu-b deleted", 10*time.Second, func() bool {
					_, err := env.client.CoreV1().Nodes().Get(env.ctx, "gpu-b", metav1.GetOptions{})
					return apierrors.IsNotFound(err)
				})
				delete(stale.Labels, api.LabelPool)
				if err := registerGPUNode(env.ctx, env.client, "gpu-b", 8, stale.Labels, stale.Annotations); err != nil {
					t.Fatal(err)
				}
			},
			heal: func() {
				patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, api.LabelPool, api.PoolInference)
				if _, err := env.client.CoreV1().Nodes().Patch(env.ctx, "gpu-b", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
					t.Fatal(err)
				}
			},
		}} {
			env.waitVerdict("gpu-b", open(8), 20*time.Second)
			fault.inject()
			healed := false
			defer func() {
				if !healed { // the scenario failed half-way: leave the node as it found it
					fault.heal()
					env.deleteNow(researchNS, "pinned")
				}
			}()
			// The scheduler's node informer sees the change within
			// milliseconds; a pod created before that may still bind.
			time.Sleep(time.Second)
			start := time.Now()
			env.create(pinned("pinned"))
			env.assertStaysPending(researchNS, "pinned", 3*scrapeInterval)
			env.waitVerdict("gpu-b", closed, 20*time.Second)
			env.assertStaysPending(researchNS, "pinned", scrapeInterval)
			pending := time.Since(start)
			fault.heal()
			healed = true
			healedAt := time.Now()
			env.waitBound(researchNS, "pinned", 30*time.Second)
			t.Logf("fault: gpu-b %s: a pod pinned there stayed pending %v (verdict closed), bound %v after the fault cleared",
				fault.name, pending.Round(time.Millisecond), time.Since(healedAt).Round(time.Millisecond))
			env.deleteNow(researchNS, "pinned")
		}
	})

	scenario("a controller killed mid-drain is replaced and the drain completes", func(t *testing.T) {
		env := env.in(t)
		bin := buildCommands(t, "gleaner-controller")
		kubeconfig := filepath.Join(t.TempDir(), "controller.kubeconfig")
		writeKubeconfig(t, env.cp.config, kubeconfig)
		const killCap = 5 * time.Second
		start := func(name string) *process { return startControllerProcess(t, bin, name, kubeconfig, killCap, nil) }
		env.stopController()
		before := env.heartbeatHolder()
		first := start("gleaner-controller-0")
		waitFor(t, "the first process to renew the heartbeat", 30*time.Second, func() bool { h := env.heartbeatHolder(); return h != "" && h != before })
		killed := env.heartbeatHolder()

		lendOnGPUA(env, "slow", 3600)
		evictedBefore := env.kubelet.deleted()

		// Demand rises; as soon as the eviction is asked for, the controller is
		// killed: no release of its Leases, no last write.
		rise := time.Now()
		chat0.set(vllmServing, 16, 5, 0.9)
		env.waitEvent(researchNS, "slow", reclaim.ReasonReclaimed, "grace period of 5s", 15*time.Second)
		if err := first.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-first.done
		killedAt := time.Now()
		second := start("gleaner-controller-1")
		t.Cleanup(func() { second.stop(t) })

		// Inference gets its GPUs within the budget, controller or not: the
		// eviction already carries the capped grace.
		env.createChatReplica("chat-1", env.vllm("llama-chat"))
		took, budget := time.Since(rise), scrapeInterval+killCap+5*time.Second
		audit.allow(budget) // this fault adds to the usual budget
		// The replacement takes over once the killed one's Lease expires, and
		// plans again: the heartbeat is its own.
		waitFor(t, "the replacement to renew the heartbeat", 30*time.Second, func() bool { h := env.heartbeatHolder(); return h != "" && h != killed })
		takeover := time.Since(killedAt)
		// Nothing else was evicted: the replacement counted the pod already
		// terminating as returning its GPUs.
		for key := range env.kubelet.deleted() {
			if _, ok := evictedBefore[key]; !ok && key != researchNS+"/slow" {
				t.Errorf("%s was deleted too; only slow had to go", key)
			}
		}
		t.Logf("fault: controller SIGKILLed mid-drain: inference waited %v (budget %v), the replacement renewed the heartbeat %v after the kill, 1 pod evicted", took.Round(time.Millisecond), budget, takeover.Round(time.Millisecond))
		if took > budget {
			t.Fatalf("inference waited %v, budget %v", took, budget)
		}
		quiet(env)
		second.stop(t)
		env.startControllerWith(usual)
	})

	scenario("a controller stuck before its first round lends nothing", func(t *testing.T) {
		env := env.in(t)
		const timeout = 3 * time.Second
		// A planning controller with a short heartbeat timeout, then a
		// successor that wins the election but whose pod informer never
		// syncs: every LIST of pods is answered 503.
		env.stopController()
		env.startControllerWith(func(c *controller.Config) {
			c.MaxReclaimGrace, c.Heartbeat.Timeout, c.Heartbeat.Identity = graceCap, timeout, "before-stuck"
		})
		env.waitHeartbeatHolder("before-stuck")
		var mode atomic.Int32
		mode.Store(int32(apiFails))
		podLists := func(r *http.Request) bool { return r.Method == http.MethodGet && r.URL.Path == "/api/v1/pods" }
		env.stopController()
		env.startControllerOn(kubernetes.NewForConfigOrDie(withFault(env.cp.config, podLists, &mode)), func(c *controller.Config) {
			c.MaxReclaimGrace, c.Heartbeat.Timeout, c.Heartbeat.Identity = graceCap, timeout, "stuck"
		})
		time.Sleep(timeout + time.Second)
		env.create(bestEffortPod("while-stuck", 1))
		ev := env.waitEvent(researchNS, "while-stuck", "FailedScheduling", "heartbeat", 10*time.Second)
		env.assertStaysPending(researchNS, "while-stuck", 5*time.Second)
		if h := env.heartbeatHolder(); h == "stuck" {
			t.Fatal("the stuck controller renewed the heartbeat without a planning round")
		}
		mode.Store(int32(apiPasses))
		cleared := time.Now()
		env.waitHeartbeatHolder("stuck")
		env.waitBound(researchNS, "while-stuck", 60*time.Second)
		t.Logf("fault: controller elected but its pod informer never synced (every LIST of pods 503): a best-effort pod stayed pending 5 s (%q); placed %v after the fault cleared",
			ev.Message, time.Since(cleared).Round(time.Millisecond))
		env.deleteNow(researchNS, "while-stuck")
		env.stopController()
		env.startControllerWith(usual)
	})

	scenario("forged demand from an opted-in namespace is bounded by what its service could run", func(t *testing.T) {
		env := env.in(t)
		// An autoscaled Deployment of one 1-GPU replica, allowed 2, whose
		// replica reports a billion waiting requests. Nothing runs its
		// ReplicaSets here: the replica is created by hand.
		greedySrv := env.vllm("greedy")
		greedySrv.set(vllmServing, 1_000_000, 1_000_000_000, 1)
		replica := inferencePod("greedy-0", "greedy", 1, greedySrv, v1.DefaultSchedulerName)
		replica.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "gpu-a"}
		one := int32(1)
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: servingNS, Name: "greedy", Annotations: map[string]string{
				api.AnnotationAutoscale: "true", api.AnnotationMaxReplicas: "2"}},
			Spec: appsv1.DeploymentSpec{Replicas: &one,
				Selector: &metav1.LabelSelector{MatchLabels: replica.Labels},
				Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: replica.Labels}, Spec: replica.Spec}},
		}
		if _, err := env.client.AppsV1().Deployments(servingNS).Create(env.ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = env.client.AppsV1().Deployments(servingNS).Delete(env.ctx, "greedy", metav1.DeleteOptions{})
			env.deleteNow(servingNS, "greedy-0")
			quiet(env)
		})
		env.create(replica)
		env.waitBound(servingNS, "greedy-0", 20*time.Second)
		before := env.kubelet.deleted()
		// gpu-a: chat-0's 4 GPUs and greedy-0's 1; the room for greedy's one
		// more replica (1 GPU) is all a billion requests may keep.
		env.waitVerdict("gpu-a", open(2), 20*time.Second)
		time.Sleep(4 * scrapeInterval)
		if got := env.verdict("gpu-a"); got != open(2) {
			t.Fatalf("gpu-a verdict %+v, want open with 2: one more 1-GPU replica kept", got)
		}
		if got := env.verdict("gpu-b"); got != open(8) {
			t.Fatalf("gpu-b verdict %+v, want open with 8", got)
		}
		needed := gatheredValue(t, "gleaner_demand_replicas", map[string]string{"namespace": servingNS, "service": "greedy", "kind": "needed"})
		if after := env.kubelet.deleted(); len(after) != len(before) {
			t.Fatalf("pods deleted: %v (before %v)", after, before)
		}
		// The controller kept planning: lending goes on.
		env.create(bestEffortPod("beside-greedy", 8))
		env.waitBound(researchNS, "beside-greedy", 20*time.Second)
		t.Logf("fault: forged demand (1e9 waiting requests) from an opted-in namespace, max-replicas 2: needed replicas %v, 1 GPU kept, 0 evictions, lending went on", needed)
		if needed != 2 {
			t.Fatalf("needed replicas %v, want 2 (max-replicas)", needed)
		}
	})

	scenario("surge replicas above max-replicas keep their room", func(t *testing.T) {
		env := env.in(t)
		// An autoscaled Deployment allowed one 1-GPU replica, mid-rollout:
		// its old replica runs on gpu-a and its surge replica is pending.
		// Nothing runs its ReplicaSets here: the replicas are created by hand.
		srv := env.vllm("surge")
		srv.set(vllmServing, 0, 0, 0.1)
		replica := inferencePod("surge-0", "surge", 1, srv, v1.DefaultSchedulerName)
		replica.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "gpu-a"}
		one := int32(1)
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: servingNS, Name: "surge", Annotations: map[string]string{
				api.AnnotationAutoscale: "true", api.AnnotationMaxReplicas: "1"}},
			Spec: appsv1.DeploymentSpec{Replicas: &one,
				Selector: &metav1.LabelSelector{MatchLabels: replica.Labels},
				Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: replica.Labels}, Spec: replica.Spec}},
		}
		if _, err := env.client.AppsV1().Deployments(servingNS).Create(env.ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = env.client.AppsV1().Deployments(servingNS).Delete(env.ctx, "surge", metav1.DeleteOptions{})
			env.deleteNow(servingNS, "surge-0")
			env.deleteNow(servingNS, "surge-1")
			quiet(env)
		})
		env.create(replica)
		env.waitBound(servingNS, "surge-0", 20*time.Second)
		// At its maximum already: no room kept beyond chat's; every spare
		// GPU lent.
		env.waitVerdict("gpu-a", open(3), 20*time.Second)
		fillLent(env, "gpu-a", "fill-a")
		fillLent(env, "gpu-b", "fill-b")
		before := env.kubelet.deleted()
		start := time.Now()
		surge := inferencePod("surge-1", "surge", 1, env.vllm("surge"), v1.DefaultSchedulerName)
		surge.Spec.NodeSelector = map[string]string{"example.com/rolling": "true"} // pending while the test looks
		env.create(surge)
		// Its GPU is taken back from a lent pod, though load asks for no
		// more than the one replica allowed.
		var took time.Duration
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if len(env.kubelet.deleted()) > len(before) {
				took = time.Since(start)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		a, b := env.verdict("gpu-a"), env.verdict("gpu-b")
		if took == 0 {
			t.Fatalf("fault: a surge replica above max-replicas 1 pending: nothing taken back for it in 10 s (gpu-a %+v, gpu-b %+v)", a, b)
		}
		t.Logf("fault: a surge replica above max-replicas 1 pending, every spare GPU lent: a lent pod evicted for it %v after it appeared (gpu-a %s/%d, gpu-b %s/%d)",
			took.Round(time.Millisecond), a.State, a.HarvestableGPUs, b.State, b.HarvestableGPUs)
	})

	scenario("a gang member waiting at Permit holds no GPUs inference needs", func(t *testing.T) {
		env := env.in(t)
		// A gang of two whose second member can never be placed: the first
		// waits at Permit on gpu-a, holding 4 GPUs in gleaner-scheduler, for
		// the group's timeout (600 s asked; 15 minutes is the most allowed).
		timeout := int32(600)
		env.createPodGroup("permit-wait", 2, &timeout)
		t.Cleanup(func() {
			_ = podGroupClient(env.cp).SchedulingV1alpha1().PodGroups(researchNS).Delete(env.ctx, "permit-wait", metav1.DeleteOptions{})
		})
		// The member that never fits first, and seen by the scheduler, so
		// that the other finds its group complete at PreFilter.
		for i, sel := range []map[string]string{{"example.com/never": "true"}, {"kubernetes.io/hostname": "gpu-a"}} {
			p := bestEffortPod("permit-"+strconv.Itoa(1-i), 4)
			p.Labels = map[string]string{api.LabelPodGroup: "permit-wait"}
			p.Spec.NodeSelector = sel
			env.create(p)
			if i == 0 {
				waitFor(t, "permit-1 tried by the scheduler", 20*time.Second, func() bool {
					return len(env.events(researchNS, "permit-1")) > 0
				})
			}
		}
		reserved := func() bool { return env.pod(researchNS, "permit-0").Status.NominatedNodeName == "gpu-a" }
		for deadline := time.Now().Add(20 * time.Second); !reserved() && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
		}
		if !reserved() {
			for _, name := range []string{"permit-0", "permit-1"} {
				for _, ev := range env.events(researchNS, name) {
					t.Logf("event on %s: %s: %s", name, ev.Reason, ev.Message)
				}
				p := env.pod(researchNS, name)
				t.Logf("%s: node %q, nominated %q, conditions %+v", name, p.Spec.NodeName, p.Status.NominatedNodeName, p.Status.Conditions)
			}
			t.Fatal("permit-0 was not reserved on gpu-a in 20 s")
		}
		fillLent(env, "gpu-b", "fill-b") // nowhere else to take GPUs from
		start := time.Now()
		chat0.set(vllmServing, 16, 5, 0.9) // waiting requests: one more replica, on gpu-a
		budget := scrapeInterval + graceCap + 5*time.Second
		deadline := time.Now().Add(budget)
		for time.Now().Before(deadline) {
			if _, err := env.client.CoreV1().Pods(researchNS).Get(env.ctx, "permit-0", metav1.GetOptions{}); apierrors.IsNotFound(err) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if p, err := env.client.CoreV1().Pods(researchNS).Get(env.ctx, "permit-0", metav1.GetOptions{}); err == nil {
			t.Fatalf("fault: a gang member waiting at Permit on gpu-a still holds its 4 GPUs %v after inference needed them (nominated %q, verdict %+v)",
				time.Since(start).Round(time.Millisecond), p.Status.NominatedNodeName, env.verdict("gpu-a"))
		}
		released := time.Since(start)
		env.createChatReplica("chat-1", env.vllm("llama-chat"))
		took := time.Since(start)
		t.Logf("fault: a gang member waiting at Permit (timeout 600 s) on GPUs inference needs: evicted %v after the load rose, inference waited %v (budget %v)",
			released.Round(time.Millisecond), took.Round(time.Millisecond), budget)
		if took > budget {
			t.Fatalf("inference waited %v, budget %v", took, budget)
		}
		quiet(env)
	})

	scenario("a replica bound but never Ready keeps its service's room after the startup deadline", func(t *testing.T) {
		env := env.in(t)
		const deadline = 4 * time.Second
		env.stopController()
		env.startControllerWith(func(c *controller.Config) {
			c.MaxReclaimGrace, c.StartupDeadline, c.Heartbeat.Identity = graceCap, deadline, "startup"
		})
		env.waitHeartbeatHolder("startup")
		env.waitVerdict("gpu-a", open(4), 20*time.Second)
		// chat scales out onto gpu-b; the new replica's containers run but it
		// never passes its readiness probe (a model that never loads).
		stuck := inferencePod("chat-stuck", "chat", 4, env.vllm("llama-chat"), v1.DefaultSchedulerName)
		stuck.Labels[labelNeverReady] = "true"
		stuck.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "gpu-b"}
		start := time.Now()
		env.create(stuck)
		env.waitBound(servingNS, "chat-stuck", 20*time.Second)
		// Past the deadline it counts as a saturated replica: chat needs one
		// more, and its 4 GPUs are kept on gpu-a (beside chat-0).
		env.waitVerdict("gpu-a", harvest.Verdict{State: api.HarvestClosed}, deadline+10*time.Second)
		took := time.Since(start)
		// The deadline runs from the pod's creationTimestamp, which the API
		// keeps in whole seconds: it may start up to a second before start.
		if took < deadline-time.Second {
			t.Fatalf("gpu-a closed %v after the replica appeared, before the %v deadline (less the second creationTimestamp truncates)", took, deadline)
		}
		t.Logf("fault: inference replica bound but never Ready: counted as starting, then saturated; a replica's 4 GPUs kept %v after it appeared (startup deadline %v from its creationTimestamp, in whole seconds)", took.Round(time.Millisecond), deadline)
		env.deleteNow(servingNS, "chat-stuck")
		quiet(env)
		env.stopController()
		env.startControllerWith(usual)
	})

	scenario("a pod stuck terminating on a finalizer: the room is made elsewhere", func(t *testing.T) {
		env := env.in(t)
		// held holds gpu-a's lent GPUs and never leaves once deleted; gpu-b is
		// full of ordinary lent pods.
		held := bestEffortPod("held", 4)
		held.Finalizers = []string{"example.com/never-released"}
		held.Labels = map[string]string{labelUnkillable: "true"}
		held.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "gpu-a"}
		env.create(held)
		env.waitBound(researchNS, "held", 20*time.Second)
		fillLent(env, "gpu-b", "fill-b")
		t.Cleanup(func() {
			_, _ = env.client.CoreV1().Pods(researchNS).Patch(env.ctx, "held", types.MergePatchType, unfinalize, metav1.PatchOptions{})
		})

		start := time.Now()
		chat0.set(vllmServing, 16, 5, 0.9) // one more 4-GPU replica
		env.waitEvent(researchNS, "held", reclaim.ReasonReclaimed, "grace period of 2s", 15*time.Second)
		// Past its capped grace held is stuck: the controller takes gpu-b's
		// pods for the room instead, before any replica asks for it.
		env.waitEvent(researchNS, "fill-b-0", reclaim.ReasonReclaimed, "gpu-b", 20*time.Second)
		if stuck := gatheredValue(t, "gleaner_gpus", map[string]string{"state": "stuck"}); stuck != 4 {
			t.Errorf("gleaner_gpus{state=stuck} = %v, want held's 4", stuck)
		}
		replica := inferencePod("chat-1", "chat", 4, env.vllm("llama-chat"), v1.DefaultSchedulerName)
		replica.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "gpu-b"}
		env.create(replica)
		env.waitBound(servingNS, "chat-1", 30*time.Second)
		// held's GPUs never come back: the wait is held's cap and the 5 s a
		// kubelet is given to kill it, then the next victims' cap.
		const killSlack = 5 * time.Second
		took, budget := time.Since(start), scrapeInterval+graceCap+killSlack+graceCap+5*time.Second
		audit.allow(budget) // this fault adds to the usual budget
		t.Logf("fault: best-effort pod stuck terminating on a finalizer: counted stuck %v after its eviction (cap + 5 s to be killed), gpu-b's pods reclaimed instead; inference waited %v (budget scrape + cap + 5 s + cap + 5 s = %v)", graceCap+killSlack, took.Round(time.Millisecond), budget)
		if took > budget {
			t.Fatalf("inference waited %v, budget %v", took, budget)
		}
		if _, err := env.client.CoreV1().Pods(researchNS).Patch(env.ctx, "held", types.MergePatchType, unfinalize, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		quiet(env)
	})

	scenario("a congested link and a throttled API slow the controller but keep inference first", func(t *testing.T) {
		env := env.in(t)
		// Every chunk between the controller and the apiserver held 50 ms,
		// and every third call answered 429 (Retry-After: 1), as API Priority
		// and Fairness answers a client over its share; leader election's
		// Lease calls excepted (an admin gives them a priority level of their
		// own, as kube-controller-manager's have).
		proxy := startTCPProxy(t, env.cp.config)
		proxy.setDelay(50 * time.Millisecond)
		var mode atomic.Int32
		mode.Store(int32(apiThrottles))
		var calls atomic.Int64
		everyThird := func(r *http.Request) bool {
			return !strings.HasSuffix(r.URL.Path, "/leases/"+api.ControllerLeaseName) && calls.Add(1)%3 == 0
		}
		env.stopController()
		env.startControllerOn(kubernetes.NewForConfigOrDie(withFault(proxy.config(env.cp.config), everyThird, &mode)), func(c *controller.Config) {
			c.MaxReclaimGrace, c.Heartbeat.Identity = graceCap, "throttled"
		})
		env.waitHeartbeatHolder("throttled")
		lendOnGPUA(env, "slow", 3600)

		start := time.Now()
		chat0.set(vllmServing, 16, 5, 0.9)
		env.waitEvent(researchNS, "slow", reclaim.ReasonReclaimed, "grace period of 2s", 30*time.Second)
		env.createChatReplica("chat-1", env.vllm("llama-chat"))
		// The round's two writes on the way (the verdict, then the eviction)
		// may each wait out one Retry-After.
		const retryAfter = time.Second
		took, budget := time.Since(start), scrapeInterval+graceCap+5*time.Second+2*retryAfter
		audit.allow(budget) // this fault adds to the usual budget
		t.Logf("fault: controller behind a link delaying every chunk 50 ms, every third call but leader election's answered 429: inference waited %v (budget scrape + cap + 5 s + 2 Retry-After = %v), %d calls throttled",
			took.Round(time.Millisecond), budget, calls.Load()/3)
		if took > budget {
			t.Fatalf("inference waited %v, budget %v", took, budget)
		}
		mode.Store(int32(apiPasses))
		proxy.setDelay(0)
		quiet(env)
		env.stopController()
		env.startControllerWith(usual)
	})

	scenario("an old leader partitioned from the API while a new one takes over", func(t *testing.T) {
		env := env.in(t)
		bin := buildCommands(t, "gleaner-controller")
		proxy := startTCPProxy(t, env.cp.config)
		dir := t.TempDir()
		viaProxy, direct := filepath.Join(dir, "via-proxy.kubeconfig"), filepath.Join(dir, "direct.kubeconfig")
		writeKubeconfig(t, proxy.config(env.cp.config), viaProxy)
		writeKubeconfig(t, env.cp.config, direct)
		const capped = 5 * time.Second
		env.stopController()
		before := env.heartbeatHolder()
		old := startControllerProcess(t, bin, "gleaner-controller-old", viaProxy, capped, nil)
		t.Cleanup(func() { old.stop(t) })
		waitFor(t, "the old leader to renew the heartbeat", 30*time.Second, func() bool { h := env.heartbeatHolder(); return h != "" && h != before })
		oldID := env.heartbeatHolder()
		standby := startControllerProcess(t, bin, "gleaner-controller-new", direct, capped, nil)
		t.Cleanup(func() { standby.stop(t) })
		lendOnGPUA(env, "slow", 3600)

		// The old leader's every connection is cut and every new one refused.
		proxy.partition()
		cut := time.Now()
		waitFor(t, "the standby to take over", 30*time.Second, func() bool { h := env.heartbeatHolder(); return h != "" && h != oldID })
		takeover := time.Since(cut)
		waitFor(t, "the old leader to stop", 30*time.Second, old.exited)
		stopped := time.Since(cut)

		// The new leader plans: demand rises, and inference gets its room
		// within the budget.
		rise := time.Now()
		chat0.set(vllmServing, 16, 5, 0.9)
		env.waitEvent(researchNS, "slow", reclaim.ReasonReclaimed, "grace period of 5s", 15*time.Second)
		env.createChatReplica("chat-1", env.vllm("llama-chat"))
		took, budget := time.Since(rise), scrapeInterval+capped+5*time.Second
		audit.allow(budget) // this fault adds to the usual budget
		proxy.heal()
		time.Sleep(2 * time.Second)
		if h := env.heartbeatHolder(); h == oldID {
			t.Fatal("the old leader holds the heartbeat again after the partition healed")
		}
		t.Logf("fault: old leader partitioned from the API server: it stopped %v after the cut (renew deadline 2 s), the new leader renewed the heartbeat %v after it; inference then waited %v (budget %v)",
			stopped.Round(time.Millisecond), takeover.Round(time.Millisecond), took.Round(time.Millisecond), budget)
		if took > budget {
			t.Fatalf("inference waited %v, budget %v", took, budget)
		}
		quiet(env)
		standby.stop(t)
		env.startControllerWith(usual)
	})

	scenario("gleaner-scheduler failing over while binding, and two binding at once", func(t *testing.T) {
		env := env.in(t)
		bin := buildCommands(t, "gleaner-scheduler")
		kubeconfig := filepath.Join(t.TempDir(), "scheduler.kubeconfig")
		writeKubeconfig(t, env.cp.config, kubeconfig)
		env.stopScheduler()
		defer env.startScheduler()
		for _, tc := range []struct {
			name        string
			leaderElect bool
		}{
			// Two replicas with leader election; the leader is SIGKILLed once
			// it has bound some of a burst.
			{"the leader killed while binding", true},
			// Two replicas both scheduling (leader election off): each binds
			// from a cache that has not yet seen the other's bindings.
			{"two replicas binding at once", false},
		} {
			env.waitVerdict("gpu-a", open(4), 20*time.Second)
			env.waitVerdict("gpu-b", open(8), 20*time.Second)
			a := startSchedulerProcess(t, bin, "gleaner-scheduler-a", kubeconfig, tc.leaderElect, nil)
			b := startSchedulerProcess(t, bin, "gleaner-scheduler-b", kubeconfig, tc.leaderElect, nil)
			var leaderID string
			if tc.leaderElect {
				leaderID = waitLeaseHolder(t, env.cp, "gleaner-scheduler", "", 30*time.Second)
			}
			refusedBefore := len(env.kubelet.refusedPods())
			// A burst of 1-GPU pods, one every 200 ms: exactly the 12 GPUs the
			// pool lends.
			const burst = 12
			created := make(chan struct{})
			go func() {
				defer close(created)
				for i := range burst {
					pod := bestEffortPod(fmt.Sprintf("burst-%02d", i), 1)
					if _, err := env.client.CoreV1().Pods(researchNS).Create(env.ctx, pod, metav1.CreateOptions{}); err != nil {
						t.Errorf("creating %s: %v", pod.Name, err)
					}
					time.Sleep(200 * time.Millisecond)
				}
			}()
			defer func() { <-created }()
			bound := func() (n int) {
				for _, p := range listPods(t, env, researchNS) {
					if p.Spec.NodeName != "" {
						n++
					}
				}
				return n
			}
			var boundAtKill int
			var killed time.Time
			if tc.leaderElect {
				waitFor(t, "some of the burst bound", 30*time.Second, func() bool { return bound() >= 4 })
				leader := a
				if strings.Contains(b.output(), "Successfully acquired lease") {
					leader = b
				}
				if err := leader.cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
				killed, boundAtKill = time.Now(), bound()
				waitLeaseHolder(t, env.cp, "gleaner-scheduler", leaderID, 30*time.Second)
			}
			<-created
			waitFor(t, "the whole burst bound", 60*time.Second, func() bool { return bound() == burst })
			// Nothing lent beyond what each node's verdict allows, and nothing
			// refused by the kubelet for want of GPUs.
			lent := map[string]int64{}
			for _, p := range listPods(t, env, researchNS) {
				if p.Status.Phase != v1.PodFailed {
					lent[p.Spec.NodeName] += api.PodGPUs(&p, api.GPUResource)
				}
			}
			refused := env.kubelet.refusedPods()[refusedBefore:]
			switch {
			case tc.leaderElect:
				t.Logf("fault: gleaner-scheduler %s: %d of %d pods bound before the kill, the rest %v after it (lease 3 s); lent gpu-a %d/4, gpu-b %d/8, %d refused by the kubelet",
					tc.name, boundAtKill, burst, time.Since(killed).Round(time.Millisecond), lent["gpu-a"], lent["gpu-b"], len(refused))
			default:
				t.Logf("fault: gleaner-scheduler %s: %d pods bound; lent gpu-a %d/4, gpu-b %d/8; %d refused by the kubelet for want of GPUs %v",
					tc.name, burst, lent["gpu-a"], lent["gpu-b"], len(refused), refused)
			}
			if lent["gpu-a"] > 4 || lent["gpu-b"] > 8 {
				t.Errorf("lent beyond the verdicts: %v", lent)
			}
			if tc.leaderElect && len(refused) > 0 {
				t.Errorf("pods refused by the kubelet after a failover: %v", refused)
			}
			for _, p := range []*process{a, b} {
				if !p.exited() {
					p.stop(t)
				}
			}
			for _, p := range listPods(t, env, researchNS) {
				env.deleteNow(researchNS, p.Name)
			}
		}
	})

	scenario("nodes, namespaces and pod groups churned: heaps stay flat", func(t *testing.T) {
		churn(t, env.in(t), func() { env.startControllerWith(usual) })
	})

	scenario("clocks skewed by 30 seconds or five minutes either way change nothing", func(t *testing.T) {
		env := env.in(t)
		for _, skew := range []time.Duration{30 * time.Second, -30 * time.Second, 5 * time.Minute, -5 * time.Minute} {
			name := "skew-" + map[bool]string{true: "ahead-", false: "behind-"}[skew > 0] + strconv.Itoa(int(skew.Abs().Seconds()))
			env.stopController()
			env.startControllerWith(func(c *controller.Config) {
				c.MaxReclaimGrace, c.Heartbeat.Timeout, c.Heartbeat.Identity = graceCap, 3*time.Second, name
				c.Clock = skewedClock(skew)
			})
			// Once the skewed controller holds the heartbeat, and longer than the
			// timeout after, only its own renewals can keep lending going.
			env.waitHeartbeatHolder(name)
			time.Sleep(4 * time.Second)
			start := time.Now()
			env.create(bestEffortPod(name, 1))
			env.waitBound(researchNS, name, 30*time.Second)
			t.Logf("fault: controller clock %+v off the scheduler's: a best-effort pod placed %v after creation", skew, time.Since(start).Round(time.Millisecond))
			env.deleteNow(researchNS, name)
		}
	})

	// Across every scenario: no reclaim gave a pod more than the largest
	// grace cap any controller here ran with (the test's own deletions give 0).
	key, longest, deletions := env.kubelet.longestGrace()
	t.Logf("fault: all scenarios: %d pod deletions, the longest grace period %d s (%s); every cap is 5 s or less", deletions, longest, key)
	if longest > 5 {
		t.Errorf("%s was deleted with a grace period of %d s, over every cap", key, longest)
	}
}

// startControllerProcess runs the gleaner-controller binary from bin with the
// test's scrape timing, a reclaim grace cap and a 3 s leader-election lease.
// env adds to its environment; extra flags come last, so they override.
func startControllerProcess(t *testing.T, bin, name, kubeconfig string, graceCap time.Duration, env []string, extra ...string) *process {
	args := append([]string{"--kubeconfig=" + kubeconfig,
		"--secure-port=0", "--scrape-interval=1s", "--scrape-timeout=500ms", "--open-after=0s",
		"--max-reclaim-grace=" + graceCap.String(), "--leader-elect-lease-duration=3s",
		"--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=500ms"}, extra...)
	return startProcessEnv(t, name, filepath.Join(bin, "gleaner-controller"), env, args...)
}

// startSchedulerProcess runs the gleaner-scheduler binary from bin with the
// shipped configuration, pointed at kubeconfig, with a 3 s leader-election
// lease or none. env adds to its environment; extra flags come last, so they
// override.
func startSchedulerProcess(t *testing.T, bin, name, kubeconfig string, leaderElect bool, env []string, extra ...string) *process {
	t.Helper()
	// The shipped Lease's name and namespace, with a 3 s lease.
	config := writeSchedulerConfig(t, shippedSchedulerConfig(t), kubeconfig, map[string]any{
		"leaderElect": leaderElect, "resourceNamespace": api.SystemNamespace, "resourceName": "gleaner-scheduler",
		"leaseDuration": "3s", "renewDeadline": "2s", "retryPeriod": "500ms"})
	p := startProcessEnv(t, name, filepath.Join(bin, "gleaner-scheduler"), env, append([]string{"--config=" + config, "--secure-port=0"}, extra...)...)
	t.Cleanup(func() {
		if !p.exited() {
			p.stop(t)
		}
	})
	return p
}

// lendOnGPUA places best-effort pod name (4 GPUs, a grace period of grace
// seconds) on gpu-a and fills gpu-b with lent pods, so the room chat needs
// next must come from name.
func lendOnGPUA(env *harvestEnv, name string, grace int64) {
	env.t.Helper()
	pod := bestEffortPod(name, 4)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	pod.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "gpu-a"}
	env.create(pod)
	env.waitBound(researchNS, name, 20*time.Second)
	fillLent(env, "gpu-b", "fill-b")
}

// apiFault is what faultyAPI does to the calls it matches.
type apiFault int32

const (
	apiPasses    apiFault = iota
	apiFails              // answered 503
	apiHangs              // never answered: held until the caller gives up
	apiThrottles          // answered 429 with Retry-After: 1, as API Priority and Fairness does
	apiStalls             // a watch's stream stays open and delivers nothing
)

// faultyAPI injects mode's fault into every call match selects, in the
// client's own transport (the apiserver sees nothing of the failed calls).
type faultyAPI struct {
	rt    http.RoundTripper
	match func(*http.Request) bool
	mode  *atomic.Int32
}

// withFault returns a copy of cfg whose calls that match get mode's fault.
func withFault(cfg *rest.Config, match func(*http.Request) bool, mode *atomic.Int32) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return faultyAPI{rt, match, mode} })
	return cfg
}

func nodeWatches(r *http.Request) bool {
	return r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes" && r.URL.Query().Get("watch") == "true"
}

// stallingBody withholds what a watch's stream delivers while its fault is
// apiStalls, and passes it on once the fault clears.
type stallingBody struct {
	io.ReadCloser
	ctx  context.Context
	mode *atomic.Int32
}

func (b stallingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	for apiFault(b.mode.Load()) == apiStalls && b.ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	return n, err
}

func nodePatches(r *http.Request) bool {
	return r.Method == http.MethodPatch && strings.HasPrefix(r.URL.Path, "/api/v1/nodes/")
}

func (f faultyAPI) RoundTrip(r *http.Request) (*http.Response, error) {
	if !f.match(r) {
		return f.rt.RoundTrip(r)
	}
	status := func(code int, reason string, header http.Header) (*http.Response, error) {
		body := fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected fault","reason":%q,"code":%d}`, reason, code)
		header.Set("Content-Type", "application/json")
		return &http.Response{StatusCode: code, Header: header, Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
	}
	switch apiFault(f.mode.Load()) {
	case apiFails:
		return status(http.StatusServiceUnavailable, "ServiceUnavailable", http.Header{})
	case apiThrottles:
		return status(http.StatusTooManyRequests, "TooManyRequests", http.Header{"Retry-After": {"1"}})
	case apiHangs:
		<-r.Context().Done() // even after the fault clears, as a dead connection would
		return nil, r.Context().Err()
	}
	resp, err := f.rt.RoundTrip(r)
	if err == nil && r.URL.Query().Get("watch") == "true" {
		resp.Body = stallingBody{resp.Body, r.Context(), f.mode}
	}
	return resp, err
}

// skewedClock is the real clock, off by a fixed amount.
type skewedClock time.Duration

func (s skewedClock) Now() time.Time                  { return time.Now().Add(time.Duration(s)) }
func (s skewedClock) Since(t time.Time) time.Duration { return s.Now().Sub(t) }

// node reads a Node.
func (e *harvestEnv) node(name string) *v1.Node {
	e.t.Helper()
	n, err := e.client.CoreV1().Nodes().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// setNodeStatus changes a Node's status, as its kubelet would report it.
func (e *harvestEnv) setNodeStatus(name string, change func(*v1.NodeStatus)) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := e.node(name)
		change(&n.Status)
		_, err := e.client.CoreV1().Nodes().UpdateStatus(e.ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

// heartbeatHolder is the holder of the heartbeat Lease ("" when none).
func (e *harvestEnv) heartbeatHolder() string {
	l, err := e.client.CoordinationV1().Leases(api.SystemNamespace).Get(e.ctx, api.HeartbeatLeaseName, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// waitHeartbeatHolder waits until the controller named holder has renewed the
// heartbeat: from then on, the heartbeat is its own.
func (e *harvestEnv) waitHeartbeatHolder(holder string) {
	e.t.Helper()
	waitFor(e.t, "controller "+holder+" to renew the heartbeat", 30*time.Second, func() bool { return e.heartbeatHolder() == holder })
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", timeout, what)
		}
	}
}
