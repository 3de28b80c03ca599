package integration

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// standInKubelet does the little of a kubelet's work that Gleaner depends on:
// it marks bound pods Running and Ready with a pod IP of 127.0.0.1 (so the
// metrics informer reaches the test's vLLM servers on the pods' metrics ports),
// and finishes a graceful deletion once the pod's grace period has passed (a
// pod deleted again with a shorter one, as a kubelet does, by the shorter). Its
// containers ignore SIGTERM: each runs out its whole grace period and is
// killed at its end, the worst case for a reclaim. Like a kubelet, it admits
// a pod only if its GPUs fit beside those of the pods it already runs, and
// fails it otherwise (two schedulers may both bind to the same free GPUs).
type standInKubelet struct {
	t      *testing.T
	client kubernetes.Interface
	mu     sync.Mutex
	// graceSeen records the deletion grace period each pod was deleted with
	// (the shortest, when deleted again).
	graceSeen map[string]int64
	// longest is the longest grace period a pod ran out before it was
	// killed, of how many deletions.
	longest struct {
		key   string
		grace int64
		count int
	}
	pending map[string]int64 // by UID: deletions being played out, with their grace periods (killed: -1)
	// admitted holds the GPUs of the pods started on each node, by UID, until
	// they are gone: a pod that does not fit beside them is refused.
	admitted map[string]map[types.UID]int64
	refused  []string // pods refused, as namespace/name
}

// killed marks, in standInKubelet.pending, a pod whose grace period ran out.
const killed = -1

// labelNeverReady marks a pod whose containers run but never pass their
// readiness probe.
const labelNeverReady = "test.gleaner.dev/never-ready"

// labelUnkillable marks a pod whose containers do not die when it is
// deleted (a process stuck in the kernel, a volume that will not unmount):
// it stays Running, holding its GPUs, for as long as a finalizer keeps it.
const labelUnkillable = "test.gleaner.dev/unkillable"

func startStandInKubelet(ctx context.Context, t *testing.T, client kubernetes.Interface) *standInKubelet {
	k := &standInKubelet{t: t, client: client, graceSeen: map[string]int64{}, pending: map[string]int64{}, admitted: map[string]map[types.UID]int64{}}
	factory := informers.NewSharedInformerFactory(client, 0)
	pods := factory.Core().V1().Pods().Informer()
	handle := func(obj interface{}) {
		if p, ok := obj.(*v1.Pod); ok {
			k.reconcile(ctx, p)
		}
	}
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    handle,
		UpdateFunc: func(_, obj interface{}) { handle(obj) },
		DeleteFunc: func(obj interface{}) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if p, ok := obj.(*v1.Pod); ok {
				k.mu.Lock()
				delete(k.admitted[p.Spec.NodeName], p.UID)
				k.mu.Unlock()
			}
		},
	}); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	return k
}

func (k *standInKubelet) reconcile(ctx context.Context, pod *v1.Pod) {
	key := pod.Namespace + "/" + pod.Name
	switch {
	case pod.DeletionTimestamp != nil:
		var grace int64
		if pod.DeletionGracePeriodSeconds != nil {
			grace = *pod.DeletionGracePeriodSeconds
		}
		// By UID: a pod re-created under the same name is another pod.
		wait := time.Duration(grace) * time.Second
		k.mu.Lock()
		if playing, ok := k.pending[string(pod.UID)]; ok {
			if playing == killed || grace >= playing {
				k.mu.Unlock()
				return
			}
			// Deleted again with a shorter grace period: the API server moved
			// the deadline to when it was first asked plus the shorter one.
			wait = min(wait, max(0, time.Until(pod.DeletionTimestamp.Time)))
		} else {
			k.longest.count++
		}
		k.pending[string(pod.UID)] = grace
		k.graceSeen[key] = grace
		k.mu.Unlock()
		// Play a container that checkpoints for the whole grace period, then exits.
		go func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			k.mu.Lock()
			if k.pending[string(pod.UID)] != grace {
				k.mu.Unlock()
				return // a shorter grace period took over
			}
			if grace > k.longest.grace {
				k.longest.key, k.longest.grace = key, grace
			}
			k.pending[string(pod.UID)] = killed // its removal below is no new deletion
			k.mu.Unlock()
			// Its containers are gone: their GPUs are free, even if a
			// finalizer keeps the object.
			k.mu.Lock()
			delete(k.admitted[pod.Spec.NodeName], pod.UID)
			k.mu.Unlock()
			// As a kubelet does, the pod ends Failed (its conditions, such as
			// an eviction's DisruptionTarget, kept) before it is removed: a
			// Job's controller judges it by its end.
			if cur, err := k.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); err == nil && cur.UID == pod.UID &&
				cur.Labels[labelUnkillable] == "" && cur.Status.Phase != v1.PodSucceeded && cur.Status.Phase != v1.PodFailed {
				cur.Status.Phase = v1.PodFailed
				_, _ = k.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
			}
			zero := int64(0)
			_ = k.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &pod.UID}})
		}()
	case pod.Spec.NodeName != "" && (pod.Status.Phase == "" || pod.Status.Phase == v1.PodPending):
		now := metav1.Now()
		p := pod.DeepCopy()
		if !k.admit(ctx, pod) {
			p.Status.Phase = v1.PodFailed
			p.Status.Reason = "OutOf" + string(api.GPUResource)
			p.Status.Message = "Pod was rejected: node didn't have enough resource: " + string(api.GPUResource)
			if _, err := k.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
				k.t.Logf("stand-in kubelet: refusing %s: %v", key, err)
			}
			return
		}
		p.Status.Phase = v1.PodRunning
		p.Status.PodIP = "127.0.0.1"
		p.Status.PodIPs = []v1.PodIP{{IP: "127.0.0.1"}}
		p.Status.StartTime = &now
		ready := v1.ConditionTrue
		if pod.Labels[labelNeverReady] != "" {
			ready = v1.ConditionFalse
		}
		p.Status.Conditions = []v1.PodCondition{
			{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: now},
			{Type: v1.PodReady, Status: ready, LastTransitionTime: now},
			{Type: v1.ContainersReady, Status: ready, LastTransitionTime: now},
		}
		if _, err := k.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
			k.t.Logf("stand-in kubelet: starting %s: %v (will retry on next update)", key, err)
		}
	}
}

// admit records the pod's GPUs on its node if they fit beside those of the
// pods already admitted there (a pod admitted before, seen again, fits).
func (k *standInKubelet) admit(ctx context.Context, pod *v1.Pod) bool {
	node, err := k.client.CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		return true // a node this test never made: nothing to count against
	}
	allocatable := node.Status.Allocatable[api.GPUResource]
	k.mu.Lock()
	defer k.mu.Unlock()
	onNode := k.admitted[pod.Spec.NodeName]
	if onNode == nil {
		onNode = map[types.UID]int64{}
		k.admitted[pod.Spec.NodeName] = onNode
	}
	if _, ok := onNode[pod.UID]; ok {
		return true
	}
	gpus := api.PodGPUs(pod, api.GPUResource)
	if st := pod.Status.ExtendedResourceClaimStatus; st != nil {
		// As a kubelet does, a request the scheduler backed with DRA
		// devices is not counted against the device plugin's GPUs.
		for _, m := range st.RequestMappings {
			if m.ResourceName == string(api.GPUResource) {
				gpus = 0
			}
		}
	}
	var used int64
	for _, g := range onNode {
		used += g
	}
	if used+gpus > allocatable.Value() {
		k.refused = append(k.refused, pod.Namespace+"/"+pod.Name)
		return false
	}
	onNode[pod.UID] = gpus
	return true
}

// refusedPods returns the pods refused for want of GPUs so far.
func (k *standInKubelet) refusedPods() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.refused)
}

// longestGrace returns the pod that ran out the longest grace period before
// it was killed, that period, and how many deletions were seen.
func (k *standInKubelet) longestGrace() (key string, grace int64, deletions int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.longest.key, k.longest.grace, k.longest.count
}

// deletionGrace returns the grace period a pod was deleted with, and whether it was deleted.
func (k *standInKubelet) deletionGrace(namespace, name string) (int64, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	g, ok := k.graceSeen[namespace+"/"+name]
	return g, ok
}

// deleted returns a copy of every pod deleted so far, with its grace period.
func (k *standInKubelet) deleted() map[string]int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[string]int64, len(k.graceSeen))
	for key, g := range k.graceSeen {
		out[key] = g
	}
	return out
}

// createGPUNode creates a Ready node with gpus allocatable GPUs, as a kubelet would register it.
func createGPUNode(t *testing.T, client kubernetes.Interface, name string, gpus int64, nodeLabels map[string]string) {
	t.Helper()
	if err := registerGPUNode(context.Background(), client, name, gpus, nodeLabels, nil); err != nil {
		t.Fatal(err)
	}
}

// registerGPUNode creates the node and then reports it Ready, as a kubelet does.
func registerGPUNode(ctx context.Context, client kubernetes.Interface, name string, gpus int64, nodeLabels, annotations map[string]string) error {
	lbls := map[string]string{"kubernetes.io/hostname": name}
	for k, v := range nodeLabels {
		lbls[k] = v
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls, Annotations: annotations}}
	created, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating node %s: %w", name, err)
	}
	capacity := v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse("64"),
		v1.ResourceMemory: resource.MustParse("512Gi"),
		v1.ResourcePods:   resource.MustParse("110"),
		api.GPUResource:   *resource.NewQuantity(gpus, resource.DecimalSI),
	}
	created.Status = v1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Phase:       v1.NodeRunning,
		Conditions: []v1.NodeCondition{{
			Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
		}},
	}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("setting status of node %s: %w", name, err)
	}
	return nil
}
