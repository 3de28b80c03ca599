package api

import (
	"encoding/json"
	"math/rand/v2"

	"strings"
	"testing"
	"time"
	"unicode/utf8"

	resourcehelper "k8s.io/component-helpers/resource"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A pod's declared checkpoint interval is read only when it is a positive
// duration of at most a week: anything else a tenant writes there is ignored.
func TestCheckpointInterval(t *testing.T) {
	for raw, want := range map[string]time.Duration{
		"45m": 45 * time.Minute, "2h30m": 150 * time.Minute, "168h": MaxCheckpointInterval,
		"0s": 0, "-5m": 0, "169h": 0, "soon": 0, "": 0, "1h" + string(make([]byte, 40)): 0,
	} {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationCheckpointInterval: raw}}}
		got, ok := CheckpointInterval(pod)
		if got != want || ok != (want > 0) {
			t.Errorf("%q: %v, %v; want %v", raw, got, ok, want)
		}
	}
	if _, ok := CheckpointInterval(&v1.Pod{}); ok {
		t.Error("a pod without the annotation declares an interval")
	}
}

// A pod's declared save duration is read only when it is a duration of at
// most a day, in at most 32 characters: anything else is ignored, and what
// CheckpointPatch writes reads back, rounded up to a tenth of a second.
func TestSaveDuration(t *testing.T) {
	for raw, want := range map[string]time.Duration{
		"25s": 25 * time.Second, "1.5s": 1500 * time.Millisecond, "0s": 0, "3m": 3 * time.Minute,
		"24h": MaxSaveDuration, "-1s": -1, "soon": -1, "": -1, "25": -1, "24h0m0.1s": -1,
		// Readable, but past the bound, and one that would overflow when added to.
		"2562047h47m16s": -1, strings.Repeat("1s", 17): -1,
	} {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationSaveDuration: raw}}}
		got, ok := SaveDuration(pod)
		if ok != (want >= 0) || ok && got != want {
			t.Errorf("%q: %v, %v; want %v", raw, got, ok, want)
		}
	}
	if _, ok := SaveDuration(&v1.Pod{}); ok {
		t.Error("a pod without the annotation declares a save duration")
	}
	at := time.Date(2026, 12, 7, 6, 30, 0, 0, time.UTC)
	for took, want := range map[time.Duration]time.Duration{
		22500 * time.Millisecond: 22500 * time.Millisecond, 1234 * time.Millisecond: 1300 * time.Millisecond,
		0: 0, -time.Second: 0, 2 * time.Minute: 2 * time.Minute,
	} {
		var patched struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := json.Unmarshal(CheckpointPatch(at, took), &patched); err != nil {
			t.Fatal(err)
		}
		pod := &v1.Pod{ObjectMeta: patched.Metadata}
		if got, ok := SaveDuration(pod); !ok || got != want {
			t.Errorf("CheckpointPatch(%v) reads back as %v, %v; want %v", took, got, ok, want)
		}
		if got, ok := LastCheckpoint(pod); !ok || !got.Equal(at) {
			t.Errorf("CheckpointPatch(%v) records the checkpoint at %v, %v; want %v", took, got, ok, at)
		}
	}
}

func TestReadStop(t *testing.T) {
	long := strings.Repeat("é", 200)
	for _, tt := range []struct {
		name        string
		annotations map[string]string
		want        Stop
	}{
		{"no annotations", nil, Stop{}},
		{"a reason alone stops nothing", map[string]string{AnnotationStopLendingReason: "x"}, Stop{}},
		{"hold", map[string]string{AnnotationStopLending: "Hold", AnnotationStopLendingReason: "upgrade"}, Stop{Mode: StopHold, Reason: "upgrade"}},
		{"drain", map[string]string{AnnotationStopLending: "HoldAndDrain"}, Stop{Mode: StopHoldAndDrain}},
		{"empty value holds", map[string]string{AnnotationStopLending: ""}, Stop{Mode: StopHold, Problem: `value "" is neither Hold nor HoldAndDrain, so it holds`}},
		{"misspelt drain holds, it does not drain", map[string]string{AnnotationStopLending: "drain"}, Stop{Mode: StopHold, Problem: `value "drain" is neither Hold nor HoldAndDrain, so it holds`}},
		{"a long reason is cut", map[string]string{AnnotationStopLending: "Hold", AnnotationStopLendingReason: long}, Stop{Mode: StopHold, Reason: Truncate(long, MaxStopReason)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := ReadStop(tt.annotations)
			if got != tt.want {
				t.Fatalf("ReadStop = %+v, want %+v", got, tt.want)
			}
			if len(got.Reason) > MaxStopReason || !utf8.ValidString(got.Reason) {
				t.Fatalf("reason of %d bytes, valid UTF-8 %v", len(got.Reason), utf8.ValidString(got.Reason))
			}
			if got.Stopped() != (tt.want.Mode != LendingOn) || got.Drain() != (tt.want.Mode == StopHoldAndDrain) {
				t.Fatalf("Stopped %v Drain %v for %+v", got.Stopped(), got.Drain(), got)
			}
		})
	}
}

// PodGPUs counts what the scheduler's own helper counts, for random pods of
// containers, init containers, sidecars and overhead, the resource asked for
// or not.
func TestPodGPUsCountsAsTheScheduler(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	quantities := []string{"0", "1", "2", "4", "8", "1500m"}
	container := func() v1.Container {
		c := v1.Container{Resources: v1.ResourceRequirements{Requests: v1.ResourceList{}}}
		if rng.IntN(4) > 0 {
			c.Resources.Requests[GPUResource] = resource.MustParse(quantities[rng.IntN(len(quantities))])
		}
		if rng.IntN(2) == 0 {
			c.Resources.Requests[v1.ResourceCPU] = resource.MustParse("3")
		}
		return c
	}
	always := v1.ContainerRestartPolicyAlways
	for i := range 5000 {
		pod := &v1.Pod{}
		for range rng.IntN(4) {
			pod.Spec.Containers = append(pod.Spec.Containers, container())
		}
		for range rng.IntN(4) {
			c := container()
			if rng.IntN(2) == 0 {
				c.RestartPolicy = &always
			}
			pod.Spec.InitContainers = append(pod.Spec.InitContainers, c)
		}
		if rng.IntN(3) == 0 {
			pod.Spec.Overhead = v1.ResourceList{GPUResource: resource.MustParse(quantities[rng.IntN(len(quantities))])}
		}
		want := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})[GPUResource]
		if got := PodGPUs(pod, GPUResource); got != want.Value() {
			t.Fatalf("pod %d %+v: PodGPUs %d, the scheduler's helper %d", i, pod.Spec, got, want.Value())
		}
	}
}

// TestPodMemoReadsEachObjectOnce: an object seen the round before is not
// read again; a new object (a changed pod) is; one a round did not see is
// forgotten.
func TestPodMemoReadsEachObjectOnce(t *testing.T) {
	var m PodMemo[string]
	reads := 0
	read := func(p *v1.Pod) string { reads++; return p.Labels["job"] }
	a := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"job": "a"}}}
	b := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"job": "b"}}}
	if m.Get(a, read) != "a" || m.Get(b, read) != "b" || reads != 2 {
		t.Fatalf("first round: %d reads, want 2", reads)
	}
	m.Next()
	changed := a.DeepCopy()
	changed.Labels["job"] = "a2"
	if m.Get(changed, read) != "a2" || m.Get(b, read) != "b" || reads != 3 {
		t.Fatalf("second round: %d reads, want 3 (only the changed pod's new object)", reads)
	}
	m.Next()
	if m.Get(a, read) != "a" || reads != 4 {
		t.Fatalf("third round: %d reads, want 4 (a, unseen a round, read again)", reads)
	}
}
