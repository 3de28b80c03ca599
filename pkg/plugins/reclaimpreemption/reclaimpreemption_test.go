package reclaimpreemption

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/plugins/pluginargs"
)

var now = time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)

// runningPod started `ran` ago, optionally with a checkpoint `ckpt` ago (0: none).
func runningPod(name string, priority int32, gpus int64, ran, ckpt time.Duration) *v1.Pod {
	start := metav1.NewTime(now.Add(-ran))
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "research", Annotations: map[string]string{}},
		Spec: v1.PodSpec{
			Priority: &priority,
			Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{
				api.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI),
			}}}},
		},
		Status: v1.PodStatus{StartTime: &start},
	}
	if ckpt > 0 {
		p.Annotations[api.AnnotationLastCheckpoint] = now.Add(-ckpt).Format(time.RFC3339)
	}
	return p
}

func victim(t *testing.T, pods ...*v1.Pod) preemption.Victim {
	t.Helper()
	var infos []fwk.PodInfo
	var prio int32
	for _, p := range pods {
		pi, err := framework.NewPodInfo(p)
		if err != nil {
			t.Fatal(err)
		}
		infos = append(infos, pi)
		prio = *p.Spec.Priority
	}
	kind := fwk.PodKeyType
	if len(pods) > 1 {
		kind = fwk.PodGroupKeyType
	}
	v, err := preemption.NewVictim(infos, prio, kind)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func testPlugin() *ReclaimPreemption {
	return &ReclaimPreemption{threshold: 0, gpu: api.GPUResource, clock: clocktesting.NewFakePassiveClock(now)}
}

func TestBestEffortPodsNeverPreempt(t *testing.T) {
	pl := testPlugin()
	// The embedded DefaultPreemption is nil: reaching it would panic, so this also
	// shows the refusal happens before any preemption work.
	_, st := pl.PostFilter(context.Background(), framework.NewCycleState(), runningPod("train", -1000, 4, 0, 0), nil)
	if st.Code() != fwk.Unschedulable || !strings.Contains(st.Message(), ErrReasonBestEffort) {
		t.Fatalf("PostFilter for a best-effort pod = %v %q, want Unschedulable %q", st.Code(), st.Message(), ErrReasonBestEffort)
	}
}

func TestEligibleVictims(t *testing.T) {
	pl := testPlugin()
	tests := []struct {
		name string
		v    preemption.Victim
		want bool
	}{
		{"best-effort pod", victim(t, runningPod("a", -1000, 4, time.Hour, 0)), true},
		{"whole best-effort gang", victim(t, runningPod("g-0", -1000, 4, time.Hour, 0), runningPod("g-1", -1000, 4, time.Hour, 0)), true},
		{"ordinary pod at priority 0", victim(t, runningPod("web", 0, 0, time.Hour, 0)), false},
		{"inference pod", victim(t, runningPod("vllm", 1000000, 4, time.Hour, 0)), false},
		{"group holding a non-best-effort member", victim(t, runningPod("g-0", -1000, 4, time.Hour, 0), runningPod("g-1", 0, 4, time.Hour, 0)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pl.isEligibleVictim(nil, tt.v, nil); got != tt.want {
				t.Fatalf("isEligibleVictim = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestVictimOrderIsLeastLostWorkFirst(t *testing.T) {
	pl := testPlugin()
	tests := []struct {
		name string
		a, b *v1.Pod
		// aMoreImportant: a has more work to lose, so the Evaluator spares a first.
		aMoreImportant bool
	}{
		{"longer since start", runningPod("a", -1000, 4, 2*time.Hour, 0), runningPod("b", -1000, 4, time.Hour, 0), true},
		{"recent checkpoint cuts lost work", runningPod("a", -1000, 4, 2*time.Hour, time.Minute), runningPod("b", -1000, 4, time.Hour, 0), false},
		{"more GPUs, same time", runningPod("a", -1000, 8, time.Hour, 0), runningPod("b", -1000, 2, time.Hour, 0), true},
		{"fewer GPU-seconds despite more GPUs", runningPod("a", -1000, 8, time.Minute, 0), runningPod("b", -1000, 1, time.Hour, 0), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			va, vb := victim(t, tt.a), victim(t, tt.b)
			if got := pl.moreImportantVictim(va, vb); got != tt.aMoreImportant {
				t.Fatalf("moreImportantVictim(a, b) = %v, want %v", got, tt.aMoreImportant)
			}
			if got := pl.moreImportantVictim(vb, va); got == tt.aMoreImportant {
				t.Fatalf("moreImportantVictim(b, a) = %v, want %v", got, !tt.aMoreImportant)
			}
		})
	}
}

func TestArgs(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		wantErr string
	}{
		{"defaults", "", ""},
		{"valid", `{"minCandidateNodesPercentage":20,"minCandidateNodesAbsolute":10}`, ""},
		{"percentage over 100", `{"minCandidateNodesPercentage":120}`, "pluginConfig[ReclaimPreemption].args.minCandidateNodesPercentage"},
		{"both zero", `{"minCandidateNodesPercentage":0,"minCandidateNodesAbsolute":0}`, "minCandidateNodesAbsolute"},
		{"memory is not a GPU", `{"gpuResourceName":"memory"}`, "gpuResourceName"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var obj runtime.Object
			if tt.raw != "" {
				obj = &runtime.Unknown{Raw: []byte(tt.raw), ContentType: runtime.ContentTypeJSON}
			}
			var a Args
			err := pluginargs.Decode(Name, obj, &a)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if *a.MinCandidateNodesAbsolute <= 0 && *a.MinCandidateNodesPercentage <= 0 {
					t.Fatalf("defaults not applied: %+v", a)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want one naming %q", err, tt.wantErr)
			}
		})
	}
}

// The index of terminating pods follows the pod store: a pod enters when its
// deletion starts on a node, and leaves when it is gone or finished; nodes
// without terminating pods are not listed.
func TestTerminatingPodsIndex(t *testing.T) {
	store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{terminatingOn: terminatingIndex})
	pl := &ReclaimPreemption{pods: store}
	pod := func(name, node string, deleting bool) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID(name)}, Spec: v1.PodSpec{NodeName: node}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{Time: now}
		}
		return p
	}
	mustDo := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mustDo(store.Add(pod("running", "n1", false)))
	mustDo(store.Add(pod("pending", "", true)))
	if got := pl.nodesWithTerminatingPods(); len(got) != 0 {
		t.Fatalf("nodes = %v with nothing terminating", got)
	}
	a, b, c := pod("a", "n2", true), pod("b", "n1", true), pod("c", "n1", true)
	for _, p := range []*v1.Pod{a, b, c} {
		mustDo(store.Add(p))
	}
	if got := pl.nodesWithTerminatingPods(); !slices.Equal(got, []string{"n1", "n2"}) {
		t.Fatalf("nodes = %v, want [n1 n2]", got)
	}
	mustDo(store.Delete(a))
	finished := b.DeepCopy()
	finished.Status.Phase = v1.PodSucceeded
	mustDo(store.Update(finished))
	if got := pl.nodesWithTerminatingPods(); !slices.Equal(got, []string{"n1"}) {
		t.Fatalf("nodes = %v after a and b left, want [n1]", got)
	}
	mustDo(store.Delete(c))
	if got := pl.nodesWithTerminatingPods(); len(got) != 0 {
		t.Fatalf("nodes = %v after every pod left", got)
	}
}
