package controller

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gleaner-dev/gleaner/internal/testobj"
	"github.com/gleaner-dev/gleaner/pkg/api"
)

// TestSlimObjectKeepsWhatTheControllerReads runs a pod dressed as a real
// cluster's through the informers' transform: what is heavy and never read
// goes, and everything the controller decides from reads the same after.
func TestSlimObjectKeepsWhatTheControllerReads(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	pod := testobj.BestEffort("research", "job-0", "gpu-1", 2, t0)
	pod.Annotations = map[string]string{
		"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 64<<10),
	}
	pod.Annotations[api.AnnotationCheckpointInterval] = "10m"
	pod.Annotations[api.AnnotationLastCheckpoint] = api.FormatTime(t0)
	pod.Annotations[api.AnnotationReclaimNotice] = api.FormatTime(t0.Add(time.Minute))
	pod.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{}}`)}}}
	always := v1.ContainerRestartPolicyAlways
	c := &pod.Spec.Containers[0]
	c.Env = []v1.EnvVar{{Name: "HUGE", Value: strings.Repeat("y", 4096)}}
	c.Command = []string{"python", "train.py"}
	c.VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	c.LivenessProbe = &v1.Probe{InitialDelaySeconds: 5}
	c.Resources.Requests[v1.ResourceCPU] = resource.MustParse("8")
	c.Resources.Limits = v1.ResourceList{v1.ResourceCPU: resource.MustParse("8")}
	pod.Spec.InitContainers = []v1.Container{{Name: "sidecar", RestartPolicy: &always,
		Resources: v1.ResourceRequirements{Requests: v1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}, Env: c.Env}}
	pod.Spec.Volumes = []v1.Volume{{Name: "data"}}
	pod.Spec.Tolerations = []v1.Toleration{{Key: "gpu", Operator: v1.TolerationOpExists}}
	pod.Status.ContainerStatuses = []v1.ContainerStatus{{Name: c.Name, Ready: true}}
	pod.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}
	// What the DRA count reads (pkg/dra).
	pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpus", ResourceClaimName: ptr.To("chat-0-gpus")}}
	pod.Status.ExtendedResourceClaimStatus = &v1.PodExtendedResourceClaimStatus{ResourceClaimName: "chat-0-extended",
		RequestMappings: []v1.ContainerExtendedResourceRequest{{ContainerName: c.Name, ResourceName: "nvidia.com/gpu", RequestName: "container-0-request-0"}}}
	before := pod.DeepCopy()

	gpu := v1.ResourceName("nvidia.com/gpu")
	transform := slimObjects(gpu)
	out, err := transform(pod)
	if err != nil {
		t.Fatal(err)
	}
	slim := out.(*v1.Pod)
	if slim.ManagedFields != nil || slim.Spec.Volumes != nil || slim.Status.ContainerStatuses != nil ||
		slim.Spec.Containers[0].Env != nil || slim.Spec.Containers[0].Command != nil ||
		slim.Spec.Containers[0].VolumeMounts != nil || slim.Spec.Containers[0].LivenessProbe != nil ||
		slim.Spec.InitContainers[0].Env != nil || slim.Spec.Containers[0].Resources.Limits != nil ||
		len(slim.Spec.Containers[0].Resources.Requests) != 1 {
		t.Errorf("the transform kept what the controller never reads: %+v", slim)
	}
	if _, kept := slim.Annotations["kubectl.kubernetes.io/last-applied-configuration"]; kept {
		t.Error("a 64 KiB annotation of no concern to Gleaner was kept")
	}
	for _, key := range []string{api.AnnotationCheckpointInterval, api.AnnotationLastCheckpoint, api.AnnotationReclaimNotice} {
		if slim.Annotations[key] != before.Annotations[key] {
			t.Errorf("annotation %s = %q, want %q", key, slim.Annotations[key], before.Annotations[key])
		}
	}
	if got, want := api.PodGPUs(slim, gpu), api.PodGPUs(before, gpu); got != want || want != 3 {
		t.Errorf("the pod counts %d GPUs after the transform, %d before (want 3: two and a GPU sidecar)", got, want)
	}
	if !equality.Semantic.DeepEqual(slim.Labels, before.Labels) || !equality.Semantic.DeepEqual(slim.OwnerReferences, before.OwnerReferences) ||
		!equality.Semantic.DeepEqual(slim.Spec.Tolerations, before.Spec.Tolerations) || slim.Spec.NodeName != before.Spec.NodeName ||
		slim.Spec.PriorityClassName != before.Spec.PriorityClassName || !equality.Semantic.DeepEqual(slim.Status.Conditions, before.Status.Conditions) ||
		!equality.Semantic.DeepEqual(slim.Spec.ResourceClaims, before.Spec.ResourceClaims) ||
		!equality.Semantic.DeepEqual(slim.Status.ExtendedResourceClaimStatus, before.Status.ExtendedResourceClaimStatus) {
		t.Errorf("the transform changed what the controller reads:\nbefore %+v\nafter  %+v", before, slim)
	}

	node := testobj.Node("gpu-1", 8)
	node.Status.Images = []v1.ContainerImage{{Names: []string{"registry/vllm:latest"}, SizeBytes: 1 << 34}}
	node.ManagedFields = pod.ManagedFields
	out, _ = transform(node)
	if n := out.(*v1.Node); n.Status.Images != nil || n.ManagedFields != nil || !n.Status.Allocatable[gpu].Equal(resource.MustParse("8")) {
		t.Errorf("node after the transform: images %v, managed fields %v, allocatable %v", n.Status.Images, n.ManagedFields, n.Status.Allocatable)
	}
}

// A claim is a tenant's to write: the cache keeps what the DRA count reads.
func TestSlimClaimKeepsWhatTheCountReads(t *testing.T) {
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "team", UID: "u", ResourceVersion: "7",
		Annotations: map[string]string{"big": strings.Repeat("x", 1<<16), resourceapi.ExtendedResourceClaimAnnotation: "true"}}}
	claim.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "gpus", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu", Count: 2}}}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "p"}}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpus", Driver: "gpu.example.com", Pool: "node-a", Device: "gpu-0", AdminAccess: ptr.To(true)}}}}
	out, err := slimObjects("nvidia.com/gpu")(claim.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	slim := out.(*resourceapi.ResourceClaim)
	if len(slim.Annotations) != 1 || slim.Spec.Devices.Requests != nil || slim.UID != claim.UID || slim.ResourceVersion != claim.ResourceVersion ||
		!equality.Semantic.DeepEqual(slim.Status.ReservedFor, claim.Status.ReservedFor) ||
		!equality.Semantic.DeepEqual(slim.Status.Allocation.Devices.Results, claim.Status.Allocation.Devices.Results) {
		t.Errorf("slim claim %+v", slim)
	}
}
