package dra

import (
	"context"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

const (
	gpuResource = v1.ResourceName("nvidia.com/gpu")
	driver      = "gpu.nvidia.com"
)

// nvidiaClass is the class NVIDIA's driver ships, with KEP-5004's extended
// resource name: full GPUs only.
func nvidiaClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu.nvidia.com", UID: "class-gpu", ResourceVersion: "1"},
		Spec: resourceapi.DeviceClassSpec{
			ExtendedResourceName: ptr.To(string(gpuResource)),
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: `device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "gpu"`,
			}}},
		},
	}
}

func device(name, kind string) resourceapi.Device {
	return resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"type": {StringValue: ptr.To(kind)},
	}}
}

// slice publishes devices of one node's pool, one slice of count.
func slice(node string, count int64, devices ...resourceapi.Device) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + driver, UID: types.UID("slice-" + node), ResourceVersion: "1"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   driver,
			Pool:     resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: count},
			NodeName: ptr.To(node),
			Devices:  devices,
		},
	}
}

func gpus(n int) []resourceapi.Device {
	var out []resourceapi.Device
	for i := range n {
		out = append(out, device(fmt.Sprintf("gpu-%d", i), "gpu"))
	}
	return out
}

// claim is allocated the devices on node's pool and reserved for the pods.
func claim(name, node string, devices []string, holders ...types.UID) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "serving"}}
	a := &resourceapi.AllocationResult{}
	for _, d := range devices {
		a.Devices.Results = append(a.Devices.Results, resourceapi.DeviceRequestAllocationResult{Request: "gpus", Driver: driver, Pool: node, Device: d})
	}
	c.Status.Allocation = a
	for _, uid := range holders {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: string(uid), UID: uid})
	}
	return c
}

func TestCountsWhatTheGPUClassSelects(t *testing.T) {
	c := NewCounter(gpuResource)
	// Another driver's device on the node: the class's driver test
	// short-circuits before it reads an attribute the device lacks.
	nics := slice("gpu-a", 1, resourceapi.Device{Name: "nic-0"})
	nics.UID, nics.Spec.Driver = "slice-nic", "nic.example.com"
	facts := Facts{
		Classes: []*resourceapi.DeviceClass{nvidiaClass()},
		Slices: []*resourceapi.ResourceSlice{
			slice("gpu-a", 1, gpus(8)...),
			nics,
			slice("gpu-b", 1, gpus(4)...),
		},
		Claims: []*resourceapi.ResourceClaim{
			claim("chat-0-gpu", "gpu-a", []string{"gpu-0", "gpu-1"}, "chat-0"),
			// Shared by two pods: held once.
			claim("shared", "gpu-a", []string{"gpu-2"}, "eval-1", "eval-0"),
			// Allocated, reserved for no pod yet.
			claim("pending", "gpu-b", []string{"gpu-0", "gpu-1", "gpu-2"}),
			// Not allocated.
			{ObjectMeta: metav1.ObjectMeta{Name: "waiting"}},
		},
	}
	got := c.Count(context.Background(), facts, nil)
	if len(got.Problems) > 0 {
		t.Fatalf("problems: %v", got.Problems)
	}
	// Held by device, whoever the claim is reserved for, if anyone.
	if a, b := got.Nodes["gpu-a"], got.Nodes["gpu-b"]; a != (Node{GPUs: 8, Held: 3}) || b != (Node{GPUs: 4, Held: 3}) {
		t.Errorf("nodes: gpu-a %+v, gpu-b %+v", a, b)
	}
	if got.Held["chat-0"] != 2 || got.Held["eval-0"] != 1 || got.Held["eval-1"] != 0 {
		t.Errorf("held: %v", got.Held)
	}

	// A class that no longer selects gpu-b's devices is read again, though
	// the slices did not change.
	narrower := nvidiaClass()
	narrower.ResourceVersion = "2"
	narrower.Spec.Selectors = append(narrower.Spec.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: `device.attributes["gpu.nvidia.com"].type == "none"`}})
	facts.Classes = []*resourceapi.DeviceClass{narrower}
	if got := c.Count(context.Background(), facts, nil); got.Nodes["gpu-b"].GPUs != 0 {
		t.Errorf("after the class changed, gpu-b still counts %+v", got.Nodes["gpu-b"])
	}
}

// The claim the scheduler makes for a pod's nvidia.com/gpu request is
// counted from the request (api.PodGPUs), not again from the claim; its
// requests for other resources are counted from the claim.
func TestExtendedResourceClaimCountedOnce(t *testing.T) {
	c := NewCounter(gpuResource)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "research", UID: "train"}}
	pod.Status.ExtendedResourceClaimStatus = &v1.PodExtendedResourceClaimStatus{
		ResourceClaimName: "train-extended-resources-abc",
		RequestMappings: []v1.ContainerExtendedResourceRequest{
			{ContainerName: "trainer", ResourceName: string(gpuResource), RequestName: "container-0-request-0"},
		},
	}
	special := claim("train-extended-resources-abc", "gpu-a", nil, "train")
	special.Annotations = map[string]string{resourceapi.ExtendedResourceClaimAnnotation: "true"}
	for i, req := range []string{"container-0-request-0", "container-0-request-0", "container-0-request-1"} {
		special.Status.Allocation.Devices.Results = append(special.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: req, Driver: driver, Pool: "gpu-a", Device: fmt.Sprintf("gpu-%d", i)})
	}
	facts := Facts{Classes: []*resourceapi.DeviceClass{nvidiaClass()}, Slices: []*resourceapi.ResourceSlice{slice("gpu-a", 1, gpus(8)...)}, Claims: []*resourceapi.ResourceClaim{special}}
	if got := c.Count(context.Background(), facts, []*v1.Pod{pod}); got.Held["train"] != 1 || got.Nodes["gpu-a"].Held != 1 {
		t.Errorf("held through the claim besides the request: %d (node %+v), want 1 (the request not mapped to %s)", got.Held["train"], got.Nodes["gpu-a"], gpuResource)
	}
	// Before the pod's status names the claim, every device counts: more
	// held, never less.
	pod.Status.ExtendedResourceClaimStatus.ResourceClaimName = "other"
	if got := c.Count(context.Background(), facts, []*v1.Pod{pod}); got.Held["train"] != 3 {
		t.Errorf("held %d, want 3", got.Held["train"])
	}
}

func TestGPUsGleanerCannotCountCloseTheirNode(t *testing.T) {
	mig := device("gpu-0-mig-1g", "gpu")
	mig.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-0", Counters: map[string]resourceapi.Counter{}}}
	shared := device("gpu-0", "gpu")
	shared.AllowMultipleAllocations = ptr.To(true)
	broken := nvidiaClass()
	broken.Spec.Selectors[0].CEL.Expression = `device.attributes["gpu.nvidia.com"].type ==`
	failing := nvidiaClass()
	failing.Spec.Selectors[0].CEL.Expression = `device.attributes["gpu.nvidia.com"].memory.isGreaterThan(quantity("1Gi"))`
	incomplete := slice("gpu-a", 2, gpus(4)...)
	extra := slice("gpu-a", 1, device("gpu-9", "gpu"))
	extra.UID = "slice-gpu-a-extra"
	twice := slice("gpu-a", 1, append(gpus(2), device("gpu-0", "gpu"))...)
	for _, tc := range []struct {
		name   string
		class  *resourceapi.DeviceClass
		slices []*resourceapi.ResourceSlice
		want   string
	}{
		{"a MIG partition", nvidiaClass(), []*resourceapi.ResourceSlice{slice("gpu-a", 1, append(gpus(1), mig)...)}, "is a partition"},
		{"a GPU several claims may share", nvidiaClass(), []*resourceapi.ResourceSlice{slice("gpu-a", 1, shared)}, "may be shared by several claims"},
		{"a pool not fully published", nvidiaClass(), []*resourceapi.ResourceSlice{incomplete}, "not fully published"},
		{"a pool with a slice too many", nvidiaClass(), []*resourceapi.ResourceSlice{slice("gpu-a", 1, gpus(2)...), extra}, "not fully published"},
		{"a device published twice", nvidiaClass(), []*resourceapi.ResourceSlice{twice}, "publishes device gpu-0 twice"},
		{"a selector that does not compile", broken, []*resourceapi.ResourceSlice{slice("gpu-a", 1, gpus(2)...)}, "does not compile"},
		{"a selector that fails on a device", failing, []*resourceapi.ResourceSlice{slice("gpu-a", 1, gpus(2)...)}, "selector failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := NewCounter(gpuResource).Count(context.Background(), Facts{Classes: []*resourceapi.DeviceClass{tc.class}, Slices: tc.slices}, nil)
			if p := got.Nodes["gpu-a"].Problem; !strings.Contains(p, tc.want) {
				t.Errorf("gpu-a's problem %q, want it to say %q (count %+v)", p, tc.want, got)
			}
		})
	}

	// Devices published with no class naming the GPU resource are not GPUs
	// to Gleaner, and it says so.
	got := NewCounter(gpuResource).Count(context.Background(), Facts{Slices: []*resourceapi.ResourceSlice{slice("gpu-a", 1, gpus(2)...)}}, nil)
	if got.Nodes["gpu-a"].GPUs != 0 || len(got.Problems) != 1 || !strings.Contains(got.Problems[0], "no DeviceClass has extendedResourceName nvidia.com/gpu") {
		t.Errorf("no GPU class: %+v", got)
	}
}

// Only a pool's newest generation counts: a driver that republished its
// pool leaves the old slices behind until it deletes them.
func TestOnlyTheNewestGenerationCounts(t *testing.T) {
	old := slice("gpu-a", 1, gpus(8)...)
	cur := slice("gpu-a", 1, gpus(6)...)
	cur.UID, cur.Spec.Pool.Generation = "slice-gpu-a-2", 2
	got := NewCounter(gpuResource).Count(context.Background(), Facts{Classes: []*resourceapi.DeviceClass{nvidiaClass()}, Slices: []*resourceapi.ResourceSlice{cur, old}}, nil)
	if n := got.Nodes["gpu-a"]; n != (Node{GPUs: 6}) {
		t.Errorf("gpu-a %+v, want 6 GPUs of generation 2", n)
	}
}

// What the allocator would not give a best-effort pod is held: a device a
// taint keeps from pods, whether the slice or a DeviceTaintRule sets it. A
// result with admin access holds nothing, as the allocator counts it: a
// monitoring agent watching every GPU must not make them all look busy.
func TestTaintsAndAdminAccess(t *testing.T) {
	devs := gpus(4)
	devs[0].Taints = []resourceapi.DeviceTaint{{Key: "gpu.example.com/unhealthy", Effect: resourceapi.DeviceTaintEffectNoExecute}}
	devs[1].Taints = []resourceapi.DeviceTaint{{Key: "note", Effect: resourceapi.DeviceTaintEffectNone}}
	monitor := claim("dcgm", "gpu-a", []string{"gpu-0", "gpu-1", "gpu-2", "gpu-3"}, "dcgm-exporter")
	for i := range monitor.Status.Allocation.Devices.Results {
		monitor.Status.Allocation.Devices.Results[i].AdminAccess = ptr.To(true)
	}
	rule := &resourceapi.DeviceTaintRule{Spec: resourceapi.DeviceTaintRuleSpec{
		DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: ptr.To(driver), Device: ptr.To("gpu-3")},
		Taint:          resourceapi.DeviceTaint{Key: "maintenance", Effect: resourceapi.DeviceTaintEffectNoSchedule},
	}}
	got := NewCounter(gpuResource).Count(context.Background(), Facts{
		Classes: []*resourceapi.DeviceClass{nvidiaClass()}, Slices: []*resourceapi.ResourceSlice{slice("gpu-a", 1, devs...)},
		Claims: []*resourceapi.ResourceClaim{monitor}, TaintRules: []*resourceapi.DeviceTaintRule{rule},
	}, nil)
	if n := got.Nodes["gpu-a"]; n != (Node{GPUs: 4, Held: 2}) {
		t.Errorf("gpu-a %+v; want 4 GPUs, 2 held by taints (gpu-0 by the slice, gpu-3 by a rule), none by admin access", n)
	}
}

// A claim that holds a device of a pool no longer published (a driver
// restarting) closes its holder's node: what is held there is not known.
func TestAClaimOnAVanishedPoolClosesItsNode(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "chat-0", UID: "chat-0"}, Spec: v1.PodSpec{NodeName: "gpu-a"}}
	got := NewCounter(gpuResource).Count(context.Background(), Facts{
		Classes: []*resourceapi.DeviceClass{nvidiaClass()},
		Claims:  []*resourceapi.ResourceClaim{claim("chat-0-gpus", "gpu-a", []string{"gpu-0"}, "chat-0")},
	}, []*v1.Pod{pod})
	if p := got.Nodes["gpu-a"].Problem; !strings.Contains(p, "no longer published") {
		t.Errorf("gpu-a's problem %q", p)
	}
}
