package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	pgclientset "sigs.k8s.io/scheduler-plugins/pkg/generated/clientset/versioned"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
)

// installPodGroupCRD creates the PodGroup CRD shipped in the chart (and manifests/shared) and waits until it is served.
func installPodGroupCRD(t *testing.T, cp *controlPlane) {
	installCRD(t, cp, "charts/gleaner/crds/podgroups.yaml")
}

// installCRD creates the CRD of a file of the repository (it must hold that
// alone) and waits until it is served.
func installCRD(t *testing.T, cp *controlPlane, file string) {
	t.Helper()
	objs := readRepoObjects(t, file)
	if len(objs) != 1 {
		t.Fatalf("%s holds %d objects, want the CRD alone", file, len(objs))
	}
	var crd apiextensionsv1.CustomResourceDefinition
	fromUnstructured(t, objs[0], &crd)
	client := apiextensionsclient.NewForConfigOrDie(cp.config)
	if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(context.Background(), &crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "CRD "+crd.Name+" to be established", func(ctx context.Context) (bool, error) {
		got, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// podGroupClient is a PodGroup client of the control plane (CRDs do not speak protobuf).
func podGroupClient(cp *controlPlane) pgclientset.Interface {
	cfg := rest.CopyConfig(cp.config)
	cfg.ContentType = "application/json"
	return pgclientset.NewForConfigOrDie(cfg)
}

// createPodGroup creates a PodGroup in the research namespace.
func (e *harvestEnv) createPodGroup(name string, minMember int32, timeoutSeconds *int32) {
	e.t.Helper()
	if _, err := podGroupClient(e.cp).SchedulingV1alpha1().PodGroups(researchNS).Create(context.Background(), &schedv1alpha1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: researchNS},
		Spec:       schedv1alpha1.PodGroupSpec{MinMember: minMember, ScheduleTimeoutSeconds: timeoutSeconds},
	}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// TestPodGroupCRDMatchesModule: the CRD shipped in the chart is the one of the
// scheduler-plugins version in go.mod.
func TestPodGroupCRDMatchesModule(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/scheduler-plugins").Output()
	if err != nil {
		t.Fatalf("locating sigs.k8s.io/scheduler-plugins: %v", err)
	}
	upstream, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "bases", "scheduling.x-k8s.io_podgroups.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := os.ReadFile(filepath.Join(repoRoot(t), "charts", "gleaner", "crds", "podgroups.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(shipped, upstream) {
		t.Fatal("charts/gleaner/crds/podgroups.yaml differs from the module's CRD: copy it again (keeping the header)")
	}
}

// TestGangAllOrNothing: a two-member PodGroup whose members need a whole node
// each binds only when both fit; while one cannot, the other holds its node only
// until the group's timeout, and then a lone job can use it.
func TestGangAllOrNothing(t *testing.T) {
	env := startHarvestEnv(t)
	env.waitVerdict("gpu-a", open(8), 30*time.Second)
	env.waitVerdict("gpu-b", open(8), 10*time.Second)

	// One node is taken by a lone job, so only one member can be placed.
	env.create(bestEffortPod("blocker", 8))
	blockerNode := env.waitBound(researchNS, "blocker", 20*time.Second)

	timeout := int32(3)
	env.createPodGroup("train-2x8", 2, &timeout)
	for _, name := range []string{"worker-0", "worker-1"} {
		p := bestEffortPod(name, 8)
		p.Labels = map[string]string{api.LabelPodGroup: "train-2x8"}
		env.create(p)
	}
	// One member reserves the free node and waits at Permit for the other, so a
	// 4-GPU job cannot use that node until the group's timeout releases it.
	time.Sleep(time.Second)
	env.create(bestEffortPod("lone", 4))
	env.assertStaysPending(researchNS, "lone", 1500*time.Millisecond)
	loneNode := env.waitBound(researchNS, "lone", 20*time.Second)
	if loneNode == blockerNode {
		t.Fatalf("lone job bound to %s, which the blocker fills", loneNode)
	}
	// No member was ever bound alone.
	env.assertStaysPending(researchNS, "worker-0", 500*time.Millisecond)
	env.assertStaysPending(researchNS, "worker-1", 500*time.Millisecond)

	// Room for both members: the group binds, one member per node.
	env.deleteNow(researchNS, "blocker")
	env.deleteNow(researchNS, "lone")
	start := time.Now()
	a := env.waitBound(researchNS, "worker-0", 30*time.Second)
	b := env.waitBound(researchNS, "worker-1", 30*time.Second)
	t.Logf("pod group bound %v after room appeared (backoff %ds)", time.Since(start).Round(time.Millisecond), timeout)
	if a == b {
		t.Fatalf("both members bound to %s", a)
	}
}

// TestReclaimPreemptionPolicy: inference pods that use gleaner-scheduler take
// gangs whole, and evict nobody while GPUs already on their way back suffice.
func TestReclaimPreemptionPolicy(t *testing.T) {
	env := startHarvestEnv(t)
	env.waitVerdict("gpu-a", open(8), 30*time.Second)
	env.waitVerdict("gpu-b", open(8), 10*time.Second)
	inference := func(name string) *v1.Pod {
		return inferencePod(name, name, 8, env.vllm("llama"), api.SchedulerName)
	}

	t.Run("pods already terminating are waited for, not added to", func(t *testing.T) {
		env := env.in(t)
		env.create(bestEffortPod("fill-a", 8))
		env.create(bestEffortPod("fill-b", 8))
		nodeA := env.waitBound(researchNS, "fill-a", 20*time.Second)
		env.waitBound(researchNS, "fill-b", 20*time.Second)
		// As the reclaimer would: an eviction with the pod's grace period.
		if err := env.client.CoreV1().Pods(researchNS).Delete(context.Background(), "fill-a", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		env.create(inference("vllm-0"))
		if node := env.waitBound(servingNS, "vllm-0", 30*time.Second); node != nodeA {
			t.Fatalf("vllm-0 bound to %s; want %s, where fill-a was leaving", node, nodeA)
		}
		if _, deleted := env.kubelet.deletionGrace(researchNS, "fill-b"); deleted {
			t.Fatal("fill-b was preempted although fill-a's GPUs were already coming back")
		}
		env.deleteNow(servingNS, "vllm-0")
		env.deleteNow(researchNS, "fill-b")
	})

	t.Run("a gang is evicted whole", func(t *testing.T) {
		env := env.in(t)
		env.waitVerdict("gpu-a", open(8), 30*time.Second)
		env.waitVerdict("gpu-b", open(8), 10*time.Second)
		env.createPodGroup("ddp", 2, nil)
		for _, name := range []string{"ddp-0", "ddp-1"} {
			p := bestEffortPod(name, 8)
			p.Labels = map[string]string{api.LabelPodGroup: "ddp"}
			env.create(p)
		}
		if a, b := env.waitBound(researchNS, "ddp-0", 30*time.Second), env.waitBound(researchNS, "ddp-1", 30*time.Second); a == b {
			t.Fatalf("both gang members on %s", a)
		}
		env.create(inference("vllm-1"))
		env.waitBound(servingNS, "vllm-1", 30*time.Second)
		for _, name := range []string{"ddp-0", "ddp-1"} {
			if grace, deleted := env.kubelet.deletionGrace(researchNS, name); !deleted || grace != graceSeconds {
				t.Fatalf("%s deleted=%v grace=%d: want the whole gang evicted with its grace period", name, deleted, grace)
			}
		}
	})
}

// TestElasticGangShrinksAndGrowsBack: a gang of 4 whose PodGroup needs 2
// loses the 2 members on the node inference takes back and keeps running on
// the other 2; the members its job recreates wait while no GPUs are open,
// then bind one by one (the gang is past its quorum) when the node opens again.
func TestElasticGangShrinksAndGrowsBack(t *testing.T) {
	env := startHarvestEnv(t)
	chat0 := env.startChat() // gpu-a lends 4 GPUs, gpu-b 8
	env.createPodGroup("elastic", 2, nil)
	member := func(name, node string) *v1.Pod {
		p := bestEffortPod(name, 2)
		p.Labels = map[string]string{api.LabelPodGroup: "elastic"}
		if node != "" {
			p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		}
		return p
	}
	for i, node := range []string{"gpu-a", "gpu-a", "gpu-b", "gpu-b"} {
		env.create(member(fmt.Sprintf("elastic-%d", i), node))
	}
	for i := range 4 {
		env.waitBound(researchNS, fmt.Sprintf("elastic-%d", i), 30*time.Second)
	}
	// gpu-b's other 4 GPUs go to a lone job, so nothing is open when gpu-a closes.
	fillLent(env, "gpu-b", "lone")

	// Chat needs another replica: gpu-a must return its 4 lent GPUs, the two
	// members there. The gang keeps its quorum on gpu-b.
	chat0.set(vllmServing, 16, 5, 0.9)
	for _, name := range []string{"elastic-0", "elastic-1"} {
		env.waitEvent(researchNS, name, reclaim.ReasonReclaimed, "must return 4 GPUs", 20*time.Second)
	}
	time.Sleep(3 * scrapeInterval)
	for _, name := range []string{"elastic-2", "elastic-3", "lone-0"} {
		if _, deleted := env.kubelet.deletionGrace(researchNS, name); deleted {
			t.Fatalf("%s was evicted; want only the members on gpu-a shed, the gang above its quorum", name)
		}
	}

	// The job replaces its lost members: they wait while no GPUs are open.
	env.waitGone(researchNS, "elastic-0", 20*time.Second)
	env.waitGone(researchNS, "elastic-1", 20*time.Second)
	for _, name := range []string{"elastic-4", "elastic-5"} {
		env.create(member(name, ""))
	}
	env.assertStaysPending(researchNS, "elastic-4", 3*time.Second)

	// Load recedes: gpu-a opens, and the gang grows back to 4.
	chat0.set(vllmServing, 0, 0, 0)
	env.waitVerdict("gpu-a", open(4), 30*time.Second)
	for _, name := range []string{"elastic-4", "elastic-5"} {
		if node := env.waitBound(researchNS, name, 30*time.Second); node != "gpu-a" {
			t.Fatalf("%s bound to %s; want gpu-a, the GPUs that opened", name, node)
		}
	}
	for _, name := range []string{"elastic-2", "elastic-3"} {
		if p := env.pod(researchNS, name); p.DeletionTimestamp != nil {
			t.Fatalf("%s is terminating; the gang should have kept running", name)
		}
	}
}
