package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/resourceclaim"
	"k8s.io/utils/ptr"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/controller"
	"github.com/gleaner-dev/gleaner/pkg/plugins/gpuharvest"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
)

// draDriver stands in for a GPU driver: the test writes its ResourceSlices,
// as upstream's scheduler tests do.
const draDriver = "gpu.example.com"

// TestDRAGPUsInOnePool: a node whose GPUs are published as ResourceSlices
// sits in one pool with device-plugin nodes. Its GPUs are counted from the
// slices, an inference pod's from the claim the real DynamicResources plugin
// allocated it, and a best-effort pod's from its nvidia.com/gpu request,
// which the scheduler backs with devices through the DeviceClass's
// extendedResourceName (KEP-5004). A node whose GPUs cannot be counted
// lends nothing and says why.
func TestDRAGPUsInOnePool(t *testing.T) {
	env := startHarvestEnv(t)
	ctx := env.ctx
	startResourceClaimController(t, ctx, env.client)
	env.startChat() // gpu-a: 4 serving, open(4); gpu-b: open(8)
	var embed *vllmServer
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: draDriver},
		Spec: resourceapi.DeviceClassSpec{
			ExtendedResourceName: ptr.To(string(api.GPUResource)),
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf("device.driver == %q && device.attributes[%q].type == \"gpu\"", draDriver, draDriver),
			}}},
		},
	}
	if _, err := env.client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	publish := func(node string, gpus int, slices int64) {
		t.Helper()
		createGPUNode(t, env.client, node, 0, map[string]string{api.LabelPool: api.PoolInference})
		s := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus"},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:   draDriver,
				Pool:     resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: slices},
				NodeName: ptr.To(node),
			},
		}
		for i := range gpus {
			s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: fmt.Sprintf("gpu-%d", i),
				Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"type": {StringValue: ptr.To("gpu")}}})
		}
		if _, err := env.client.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("a node's GPUs published as ResourceSlices are lent", func(t *testing.T) {
		env := env.in(t)
		publish("dra-c", 8, 1)
		env.waitVerdict("dra-c", open(8), 30*time.Second)
	})

	t.Run("an inference pod's claim counts as serving, as its request would", func(t *testing.T) {
		env := env.in(t)
		embed = env.vllm("embed")
		pod := env.claimedReplica("embed-0", embed)
		pod.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "dra-c"}
		env.create(pod)
		if node := env.waitBound(servingNS, "embed-0", 30*time.Second); node != "dra-c" {
			t.Fatalf("embed-0 bound to %s", node)
		}
		// As gpu-a with chat-0's 4 GPUs.
		env.waitVerdict("dra-c", open(4), 30*time.Second)
	})

	t.Run("a best-effort pod's extended request is placed on DRA GPUs and not counted twice", func(t *testing.T) {
		env := env.in(t)
		pod := bestEffortPod("train-dra", 4)
		pod.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "dra-c"}
		env.create(pod)
		if node := env.waitBound(researchNS, "train-dra", 30*time.Second); node != "dra-c" {
			t.Fatalf("train-dra bound to %s", node)
		}
		p := env.pod(researchNS, "train-dra")
		if p.Status.ExtendedResourceClaimStatus == nil {
			t.Fatal("train-dra bound without the claim the scheduler makes for an extended request backed by DRA")
		}
		special, err := env.client.ResourceV1().ResourceClaims(researchNS).Get(ctx, p.Status.ExtendedResourceClaimStatus.ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		inference, err := env.client.ResourceV1().ResourceClaims(servingNS).Get(ctx, "embed-0-gpus", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		held := map[string]string{}
		for _, c := range []*resourceapi.ResourceClaim{inference, special} {
			if c.Status.Allocation == nil || len(c.Status.Allocation.Devices.Results) != 4 {
				t.Fatalf("claim %s/%s allocation %+v; want 4 devices", c.Namespace, c.Name, c.Status.Allocation)
			}
			for _, r := range c.Status.Allocation.Devices.Results {
				if other, ok := held[r.Device]; ok {
					t.Fatalf("device %s allocated to %s and %s", r.Device, other, c.Name)
				}
				held[r.Device] = c.Name
			}
		}
		// Were the special claim's GPUs counted besides the request, the
		// node would owe 4 and train-dra be evicted.
		deadline := time.Now().Add(3 * scrapeInterval)
		for time.Now().Before(deadline) {
			if v := env.verdict("dra-c"); v != open(4) {
				t.Fatalf("dra-c's verdict became %+v with train-dra on it; want open(4)", v)
			}
			if p := env.pod(researchNS, "train-dra"); p.DeletionTimestamp != nil {
				t.Fatal("train-dra was evicted: its GPUs were counted twice")
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Logf("train-dra holds %d devices on dra-c beside embed-0's %d; verdict %+v", 4, 4, env.verdict("dra-c"))
	})

	t.Run("a best-effort pod with ResourceClaims of its own is refused", func(t *testing.T) {
		env := env.in(t)
		// A claim that exists: without it the pod would wait before any plugin.
		claim := gpuClaim(researchNS, "train-claims-gpus", 1)
		if _, err := env.client.ResourceV1().ResourceClaims(researchNS).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := bestEffortPod("train-claims", 0)
		pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpus", ResourceClaimName: ptr.To(claim.Name)}}
		pod.Spec.Containers[0].Resources = v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpus"}}}
		env.create(pod)
		ev := env.waitEvent(researchNS, "train-claims", "FailedScheduling", "ResourceClaims", 15*time.Second)
		if !strings.Contains(ev.Message, gpuharvest.ErrReasonResourceClaims) {
			t.Errorf("refusal %q does not say why", ev.Message)
		}
	})

	t.Run("inference that takes GPUs through claims takes lent DRA GPUs back", func(t *testing.T) {
		env := env.in(t)
		start := time.Now()
		embed.set(vllmServing, 16, 5, 0.9)
		// The replica its autoscaler adds, with a claim of its own: it
		// waits, pending, for GPUs of its kind.
		env.create(env.claimedReplica("embed-1", embed))
		// It can only use DRA GPUs: its room is kept on dra-c, where
		// train-dra holds the 4 not serving, though gpu-b has 8 idle
		// device-plugin GPUs.
		env.waitEvent(researchNS, "train-dra", reclaim.ReasonReclaimed, "must return 4 GPUs", 15*time.Second)
		if v := env.verdict("gpu-b"); v != open(8) {
			t.Errorf("gpu-b %+v: embed's room went to GPUs it cannot use", v)
		}
		env.waitBoundWithinBudget(servingNS, "embed-1", "dra-c", start)
		embed.set(vllmServing, 4, 0, 0.3)
	})

	t.Run("a node whose GPUs cannot be counted lends nothing and says why", func(t *testing.T) {
		env := env.in(t)
		publish("dra-d", 8, 2) // the driver has published one slice of two
		var msg string
		eventually(t, 30*time.Second, "a GPUsNotCounted Event on dra-d", func(ctx context.Context) (bool, error) {
			list, err := env.client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
				FieldSelector: fields.Set{"involvedObject.name": "dra-d", "reason": controller.ReasonGPUsNotCounted}.AsSelector().String()})
			if err != nil || len(list.Items) == 0 {
				return false, err
			}
			msg = list.Items[0].Message
			return true, nil
		})
		if !strings.Contains(msg, "pool dra-d of driver gpu.example.com is not fully published") {
			t.Errorf("event %q", msg)
		}
		// A round later it is still closed.
		time.Sleep(2 * scrapeInterval)
		if v := env.verdict("dra-d"); v.State != api.HarvestClosed || v.HarvestableGPUs != 0 {
			t.Errorf("dra-d's verdict %+v; want it closed", v)
		}
		t.Logf("dra-d: %s", msg)
		// The driver publishes the rest of its pool: dra-d lends.
		rest := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: "dra-d-gpus-2"},
			Spec: resourceapi.ResourceSliceSpec{Driver: draDriver, Pool: resourceapi.ResourcePool{Name: "dra-d", Generation: 1, ResourceSliceCount: 2},
				NodeName: ptr.To("dra-d"), Devices: []resourceapi.Device{{Name: "gpu-8",
					Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"type": {StringValue: ptr.To("gpu")}}}}},
		}
		if _, err := env.client.ResourceV1().ResourceSlices().Create(ctx, rest, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "dra-d to lend", func(context.Context) (bool, error) {
			v := env.verdict("dra-d")
			return v.State == api.HarvestOpen && v.HarvestableGPUs > 0, nil
		})
		t.Logf("with its pool whole, dra-d lends: %+v", env.verdict("dra-d"))
	})
}

// claimedReplica creates a claim for 4 GPUs of the test driver's class, and
// returns a replica of service embed that takes its GPUs through it.
func (e *harvestEnv) claimedReplica(name string, srv *vllmServer) *v1.Pod {
	e.t.Helper()
	claim := gpuClaim(servingNS, name+"-gpus", 4)
	if _, err := e.client.ResourceV1().ResourceClaims(servingNS).Create(e.ctx, claim, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	pod := inferencePod(name, "embed", 0, srv, v1.DefaultSchedulerName)
	pod.Spec.Containers[0].Resources = v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpus"}}}
	pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpus", ResourceClaimName: ptr.To(claim.Name)}}
	return pod
}

// gpuClaim asks for n GPUs of the test driver's class.
func gpuClaim(ns, name string, n int64) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name:    "gpus",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: draDriver, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: n},
		}}}},
	}
}

// startResourceClaimController runs kube-controller-manager's ResourceClaim
// controller, which every cluster with DRA runs: it frees the claims of pods
// that are gone, the scheduler's claims for extended requests included.
func startResourceClaimController(t *testing.T, ctx context.Context, client kubernetes.Interface) {
	t.Helper()
	factory := informers.NewSharedInformerFactory(client, 0)
	rc, err := resourceclaim.NewController(klog.FromContext(ctx), client, factory.Core().V1().Pods(), factory.Scheduling().V1beta1().PodGroups(),
		factory.Resource().V1().ResourceClaims(), factory.Resource().V1().ResourceClaimTemplates())
	if err != nil {
		t.Fatalf("resourceclaim controller: %v", err)
	}
	factory.Start(ctx.Done())
	go rc.Run(ctx, 2)
}
