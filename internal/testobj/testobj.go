// Package testobj builds the Kubernetes objects Gleaner's tests share: GPU
// nodes of the pool, best-effort and inference pods, inference Deployments and
// the controller's heartbeat Lease. Each builder returns a complete object a
// test may change further.
package testobj

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// GPUs is a resource list of n GPUs.
func GPUs(n int64) v1.ResourceList {
	return v1.ResourceList{api.GPUResource: *resource.NewQuantity(n, resource.DecimalSI)}
}

// Node is a Ready pool node with gpus allocatable GPUs.
func Node(name string, gpus int64) *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{api.LabelPool: api.PoolInference}},
		Status: v1.NodeStatus{
			Capacity:    GPUs(gpus),
			Allocatable: GPUs(gpus),
			Conditions:  []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
		},
	}
}

// Pod is a running pod on node (empty: pending) asking for gpus GPUs at priority.
func Pod(namespace, name, node string, gpus int64, priority int32) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-" + namespace + "-" + name)},
		Spec: v1.PodSpec{
			NodeName:   node,
			Priority:   ptr.To(priority),
			Containers: []v1.Container{{Name: "main", Resources: v1.ResourceRequirements{Requests: GPUs(gpus), Limits: GPUs(gpus)}}},
		},
		Status: v1.PodStatus{Phase: v1.PodRunning},
	}
}

// BestEffortPriority is gleaner-best-effort's value in the shipped manifests.
const BestEffortPriority int32 = -1000

// InferencePriority is gleaner-inference's value in the shipped manifests.
const InferencePriority int32 = 1000000

// BestEffort is a best-effort pod on node, started at start (zero: not started).
func BestEffort(namespace, name, node string, gpus int64, start time.Time) *v1.Pod {
	p := Pod(namespace, name, node, gpus, BestEffortPriority)
	p.Spec.SchedulerName = api.SchedulerName
	p.Spec.PriorityClassName = api.PriorityClassBestEffort
	if !start.IsZero() {
		p.Status.StartTime = ptr.To(metav1.NewTime(start))
	}
	return p
}

// Inference is a vLLM replica of service on node.
func Inference(namespace, name, service, node string, gpus int64) *v1.Pod {
	p := Pod(namespace, name, node, gpus, InferencePriority)
	p.Labels = map[string]string{api.LabelRole: api.RoleInference, api.LabelService: service}
	p.Spec.PriorityClassName = api.PriorityClassInference
	return p
}

// Deployment is an inference Deployment of service with replicas of gpus GPUs.
func Deployment(namespace, service string, replicas int32, gpus int64, annotations map[string]string) *appsv1.Deployment {
	labels := map[string]string{api.LabelRole: api.RoleInference, api.LabelService: service}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: service, Annotations: annotations},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: v1.PodSpec{Containers: []v1.Container{{Name: "vllm",
					Resources: v1.ResourceRequirements{Requests: GPUs(gpus), Limits: GPUs(gpus)}}}},
			},
		},
	}
}

// Lease is the controller's heartbeat Lease held by holder, renewed at renewed.
func Lease(holder string, renewed time.Time, durationSeconds int32) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: api.SystemNamespace, Name: api.HeartbeatLeaseName},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(holder),
			LeaseDurationSeconds: ptr.To(durationSeconds),
			RenewTime:            ptr.To(metav1.NewMicroTime(renewed)),
		},
	}
}
