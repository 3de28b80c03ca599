package ledger

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gleaner-dev/gleaner/internal/testobj"
	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/api/v1alpha1"
)

var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// The states and timeline of one job through its life.
func TestLedgerFollowsAJob(t *testing.T) {
	l := &Ledger{Threshold: api.DefaultBestEffortPriorityThreshold, GPUResource: api.GPUResource}
	onPool := func(int) bool { return true }
	pod := testobj.BestEffort("research", "train-0", "", 4, time.Time{})
	pod.CreationTimestamp = metav1.NewTime(t0)
	pods := []*v1.Pod{pod}
	job := func() v1alpha1.Job {
		t.Helper()
		st, _ := l.Report("research", t0, nil)
		if len(st.Jobs) != 1 {
			t.Fatalf("%d jobs", len(st.Jobs))
		}
		return st.Jobs[0]
	}
	l.Observe(t0, pods, nil, onPool, 0)
	if j := job(); j.State != v1alpha1.JobWaiting || j.Kind != "Pod" || j.Name != "train-0" || j.Timeline[0].Type != v1alpha1.EventSubmitted {
		t.Fatalf("pending: %+v", j)
	}
	bound := pod.DeepCopy()
	bound.Spec.NodeName = "gpu-1"
	now := t0.Add(time.Minute)
	l.Observe(now, []*v1.Pod{bound}, nil, onPool, 0)
	now = now.Add(10 * time.Second)
	got := l.Observe(now, []*v1.Pod{bound}, nil, onPool, 10*time.Second)
	if got["research"] != 40 {
		t.Errorf("harvested %v GPU-seconds, want 4 GPUs x 10 s", got)
	}
	if j := job(); j.State != v1alpha1.JobRunning || j.HarvestedGPUSeconds != 40 || j.Timeline[1].Type != v1alpha1.EventPlaced || j.Timeline[1].Node != "gpu-1" {
		t.Fatalf("running: %+v", j)
	}
	bound.Annotations = map[string]string{api.AnnotationLastCheckpoint: now.Format(time.RFC3339)}
	l.Observe(now, []*v1.Pod{bound}, nil, onPool, 0)
	l.Observe(now, []*v1.Pod{bound}, nil, onPool, 0) // the same checkpoint: one event
	l.Noticed(now, map[*v1.Pod]NoticeInfo{bound: {At: now.Add(10 * time.Minute), Node: "gpu-1", Why: "needed by chat/llama"}})
	l.Noticed(now, map[*v1.Pod]NoticeInfo{bound: {At: now.Add(10 * time.Minute), Node: "gpu-1", Why: "needed by chat/llama"}})
	if j := job(); j.State != v1alpha1.JobCheckpointing || j.ReclaimNotice == nil || j.LastCheckpoint == nil || len(j.Timeline) != 4 {
		t.Fatalf("noticed: %+v", j)
	}
	l.Evicted(now, bound, "evicted: the GPUs of node gpu-1 are needed by chat/llama", 1200)
	l.Observe(now, nil, nil, onPool, 0) // the pod is gone
	if j := job(); j.State != v1alpha1.JobEvicted || j.Evictions != 1 || j.LostGPUSeconds != 1200 || j.ReclaimNotice != nil {
		t.Fatalf("evicted: %+v", j)
	}
	// Its owner makes it again; it resumes elsewhere and finishes.
	again := testobj.BestEffort("research", "train-0", "gpu-2", 4, time.Time{})
	again.CreationTimestamp = metav1.NewTime(now)
	again.UID = "a-new-pod-of-the-same-name"
	l.Observe(now, []*v1.Pod{again}, nil, onPool, 0)
	done := again.DeepCopy()
	done.Status.Phase = v1.PodSucceeded
	l.Observe(now, []*v1.Pod{done}, nil, onPool, 0)
	j := job()
	var types []string
	for _, e := range j.Timeline {
		types = append(types, string(e.Type))
	}
	if want := "Submitted Placed Checkpointed Noticed Evicted Resumed Finished"; strings.Join(types, " ") != want {
		t.Errorf("timeline %s, want %s", strings.Join(types, " "), want)
	}
	if j.State != v1alpha1.JobSucceeded || j.Pods != 0 {
		t.Errorf("done: %+v", j)
	}
	if n := len(l.namespaces["research"].jobs["Pod/train-0"].pods); n != 1 {
		t.Errorf("the job remembers %d pods, want only the one there is", n)
	}
}

// A pod that ends Failed with a DisruptionTarget (the scheduler's
// preemption) counts as evicted; one the controller evicted is not finished
// again when it ends.
func TestLedgerCountsOtherDisruptions(t *testing.T) {
	l := &Ledger{Threshold: api.DefaultBestEffortPriorityThreshold, GPUResource: api.GPUResource}
	onPool := func(int) bool { return true }
	a := testobj.BestEffort("research", "a", "gpu-1", 2, time.Time{})
	b := testobj.BestEffort("research", "b", "gpu-1", 2, time.Time{})
	l.Observe(t0, []*v1.Pod{a, b}, nil, onPool, 0)
	l.Evicted(t0, a, "evicted: needed by chat", 0)
	for _, p := range []*v1.Pod{a, b} {
		p.Status.Phase = v1.PodFailed
		p.Status.Conditions = []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "PreemptionByScheduler", Message: "preempted by serving/chat-1"}}
	}
	l.Observe(t0.Add(time.Second), []*v1.Pod{a, b}, nil, onPool, 0)
	st, _ := l.Report("research", t0, nil)
	for _, j := range st.Jobs {
		var types []string
		for _, e := range j.Timeline {
			types = append(types, string(e.Type))
		}
		if strings.Join(types, " ") != "Submitted Placed Evicted" || j.Evictions != 1 || j.State != v1alpha1.JobEvicted {
			t.Errorf("%s: %v, %d evictions, %s", j.Name, types, j.Evictions, j.State)
		}
	}
}

// A restarted controller continues from what it published: totals add up,
// and pods already placed are not placed again.
func TestLedgerRestore(t *testing.T) {
	onPool := func(int) bool { return true }
	pod := testobj.BestEffort("research", "p", "gpu-1", 2, time.Time{})
	pod.CreationTimestamp = metav1.NewTime(t0)
	a := &Ledger{Threshold: api.DefaultBestEffortPriorityThreshold, GPUResource: api.GPUResource}
	a.Observe(t0, []*v1.Pod{pod}, nil, onPool, 0)
	a.Observe(t0.Add(time.Hour), []*v1.Pod{pod}, nil, onPool, time.Hour)
	published, _ := a.Report("research", t0.Add(time.Hour), nil)

	b := &Ledger{Threshold: api.DefaultBestEffortPriorityThreshold, GPUResource: api.GPUResource}
	b.Restore("research", published)
	b.Observe(t0.Add(2*time.Hour), []*v1.Pod{pod}, nil, onPool, 0)
	b.Observe(t0.Add(3*time.Hour), []*v1.Pod{pod}, nil, onPool, time.Hour)
	st, _ := b.Report("research", t0.Add(3*time.Hour), &v1alpha1.Price{PerGPUHour: "2.50", Currency: "USD"})
	if st.HarvestedGPUSeconds != 4*3600 || st.Jobs[0].HarvestedGPUSeconds != 4*3600 {
		t.Errorf("harvest %d (job %d), want 2 GPUs x 2 h", st.HarvestedGPUSeconds, st.Jobs[0].HarvestedGPUSeconds)
	}
	if st.Value != "10.00 USD" || st.HarvestedGPUHours != "4.00" {
		t.Errorf("value %q, hours %q", st.Value, st.HarvestedGPUHours)
	}
	if n := len(st.Jobs[0].Timeline); n != 2 {
		t.Errorf("timeline %+v: want Submitted and Placed once", st.Jobs[0].Timeline)
	}
}

// A namespace running more jobs than a report holds keeps the same newest
// MaxJobs round after round: the others are not made and dropped again each
// round, which would rewrite its HarvestReport every round for nothing. A
// newer job takes the oldest one's place; an older one finds none.
func TestLedgerOverTheCapIsSteady(t *testing.T) {
	l := &Ledger{Threshold: api.DefaultBestEffortPriorityThreshold, GPUResource: api.GPUResource}
	onPool := func(int) bool { return true }
	job := func(name string, created time.Time) *v1.Pod {
		p := testobj.BestEffort("tenant", name, "gpu-1", 1, created)
		p.CreationTimestamp = metav1.NewTime(created)
		return p
	}
	var pods []*v1.Pod
	for i := range 3 * v1alpha1.MaxJobs {
		pods = append(pods, job(fmt.Sprintf("p%d", i), t0.Add(time.Duration(i)*time.Second)))
	}
	names := func(st v1alpha1.HarvestReportStatus) []string {
		var out []string
		for _, j := range st.Jobs {
			out = append(out, j.Name)
		}
		slices.Sort(out)
		return out
	}
	l.Observe(t0.Add(time.Hour), pods, nil, onPool, 0)
	first, _ := l.Report("tenant", t0.Add(time.Hour), nil)
	l.Published("tenant")
	for round := range 3 {
		now := t0.Add(time.Hour + time.Duration(round+1)*5*time.Second)
		l.Observe(now, pods, nil, onPool, 5*time.Second)
		st, changed := l.Report("tenant", now, nil)
		if changed {
			t.Fatalf("round %d: the report changed with no pod changed", round+2)
		}
		if got, want := names(st), names(first); !slices.Equal(got, want) {
			t.Fatalf("round %d: jobs %v, want the same %d as the first round's", round+2, got, len(want))
		}
	}
	newest, oldest := job("newest", t0.Add(time.Hour)), job("oldest", t0.Add(-time.Hour))
	now := t0.Add(2 * time.Hour)
	l.Observe(now, append(pods, newest, oldest), nil, onPool, 0)
	st, changed := l.Report("tenant", now, nil)
	got := names(st)
	if !changed || len(got) != v1alpha1.MaxJobs || !slices.Contains(got, "newest") || slices.Contains(got, "oldest") ||
		slices.Contains(got, fmt.Sprintf("p%d", 2*v1alpha1.MaxJobs)) || !slices.Contains(got, fmt.Sprintf("p%d", 2*v1alpha1.MaxJobs+1)) {
		t.Fatalf("after a newer and an older job: changed=%v, jobs %v", changed, got)
	}
}

// A tenant's pods cannot grow what is published: jobs, events and messages
// are bounded, and a checkpoint time in the future is not believed.
func TestLedgerBounds(t *testing.T) {
	l := &Ledger{Threshold: api.DefaultBestEffortPriorityThreshold, GPUResource: api.GPUResource}
	onPool := func(int) bool { return true }
	var pods []*v1.Pod
	for i := range 3 * v1alpha1.MaxJobs {
		p := testobj.BestEffort("tenant", fmt.Sprintf("p%d", i), "", 1, time.Time{})
		p.CreationTimestamp = metav1.NewTime(t0.Add(time.Duration(i) * time.Second))
		pods = append(pods, p)
	}
	l.Observe(t0, pods, nil, onPool, 0)
	st, _ := l.Report("tenant", t0, nil)
	if len(st.Jobs) != v1alpha1.MaxJobs || st.Jobs[0].Name != fmt.Sprintf("p%d", 3*v1alpha1.MaxJobs-1) {
		t.Fatalf("%d jobs, newest %s", len(st.Jobs), st.Jobs[0].Name)
	}

	p := testobj.BestEffort("tenant", "chatty", "gpu-1", 1, time.Time{})
	p.CreationTimestamp = metav1.NewTime(t0)
	for i := range 200 {
		p = p.DeepCopy()
		p.Annotations = map[string]string{api.AnnotationLastCheckpoint: t0.Add(time.Duration(i) * time.Second).Format(time.RFC3339)}
		l.Observe(t0.Add(time.Hour), []*v1.Pod{p}, nil, onPool, 0)
	}
	future := p.DeepCopy()
	future.Annotations = map[string]string{api.AnnotationLastCheckpoint: t0.Add(48 * time.Hour).Format(time.RFC3339)}
	l.Observe(t0.Add(time.Hour), []*v1.Pod{future}, nil, onPool, 0)
	l.Evicted(t0.Add(time.Hour), future, strings.Repeat("é", 1000), 0)
	st, _ = l.Report("tenant", t0.Add(time.Hour), nil)
	var chatty v1alpha1.Job
	for _, j := range st.Jobs {
		if j.Name == "chatty" {
			chatty = j
		}
	}
	if n := len(chatty.Timeline); n != v1alpha1.MaxEvents || chatty.Timeline[0].Type != v1alpha1.EventSubmitted {
		t.Fatalf("timeline of %d events, first %v", n, chatty.Timeline[0].Type)
	}
	if chatty.LastCheckpoint == nil || !chatty.LastCheckpoint.Equal(&metav1.Time{Time: t0.Add(199 * time.Second)}) {
		t.Errorf("last checkpoint %v: a time in the future was believed", chatty.LastCheckpoint)
	}
	last := chatty.Timeline[len(chatty.Timeline)-1]
	if len(last.Message) > v1alpha1.MaxMessage || !strings.HasSuffix(last.Message, "…") {
		t.Errorf("message of %d bytes", len(last.Message))
	}
}
