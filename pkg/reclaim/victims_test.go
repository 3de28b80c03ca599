package reclaim

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

var now = time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)

// pod builds a best-effort pod that started at start (zero: not started) and,
// when checkpoint is non-empty, carries it as its last-checkpoint annotation.
func pod(name string, start time.Time, checkpoint string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml"}}
	if !start.IsZero() {
		st := metav1.NewTime(start)
		p.Status.StartTime = &st
	}
	if checkpoint != "" {
		p.Annotations = map[string]string{api.AnnotationLastCheckpoint: checkpoint}
	}
	return p
}

func rfc(t time.Time) string { return t.Format(time.RFC3339) }

func TestLostWork(t *testing.T) {
	hourAgo := now.Add(-time.Hour)
	tests := []struct {
		name string
		pod  *v1.Pod
		gpus int64
		want float64
	}{
		{"since start", pod("p", hourAgo, ""), 1, 3600},
		{"since start times GPUs", pod("p", hourAgo, ""), 4, 4 * 3600},
		{"zero-GPU pod counts as one GPU", pod("p", hourAgo, ""), 0, 3600},
		{"since a checkpoint after start", pod("p", hourAgo, rfc(now.Add(-10*time.Minute))), 2, 2 * 600},
		{"checkpoint with offset and fraction", pod("p", hourAgo, now.Add(-90*time.Second).In(time.FixedZone("x", 3600)).Format(time.RFC3339Nano)), 1, 90},
		{"checkpoint before start is ignored", pod("p", hourAgo, rfc(now.Add(-2*time.Hour))), 1, 3600},
		{"checkpoint in the future is ignored", pod("p", hourAgo, rfc(now.Add(time.Minute))), 1, 3600},
		{"unparseable checkpoint is ignored", pod("p", hourAgo, "yesterday"), 1, 3600},
		{"non-RFC3339 checkpoint is ignored", pod("p", hourAgo, now.Add(-time.Minute).Format(time.RFC1123)), 1, 3600},
		{"checkpoint exactly now loses nothing", pod("p", hourAgo, rfc(now)), 3, 0},
		{"unstarted pod loses nothing", pod("p", time.Time{}, ""), 4, 0},
		{"start in the future loses nothing", pod("p", now.Add(time.Minute), ""), 1, 0},
		{"start exactly now loses nothing", pod("p", now, ""), 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := LostWork(tt.pod, tt.gpus, now); got != tt.want {
				t.Errorf("LostWork() = %v, want %v", got, tt.want)
			}
		})
	}
}

// A reclaim's grace period: the pod's own, capped; SavedGrace for a pod that
// saved for its notice; the time its saves take and SavedGrace to exit for
// one that declares it, to the whole second. Neither lengthens a grace
// period, and what a tenant writes unreadably changes nothing.
func TestEvictionGrace(t *testing.T) {
	grace := func(seconds int64, save string) *v1.Pod {
		p := pod("job", now, "")
		if seconds >= 0 {
			p.Spec.TerminationGracePeriodSeconds = &seconds
		}
		if save != "" {
			p.Annotations = map[string]string{api.AnnotationSaveDuration: save}
		}
		return p
	}
	for _, tt := range []struct {
		name  string
		pod   *v1.Pod
		saved bool
		want  time.Duration
		why   string
	}{
		{"its own", grace(90, ""), false, 90 * time.Second, ""},
		{"capped", grace(600, ""), false, 120 * time.Second, ""},
		{"unset: the API server's 30 s", grace(-1, ""), false, 30 * time.Second, ""},
		{"saved for its notice", grace(120, ""), true, SavedGrace, "it saved for its reclaim notice"},
		{"saved, with a grace shorter than SavedGrace", grace(3, ""), true, 3 * time.Second, ""},
		{"declares its saves take 22.5 s", grace(120, "22.5s"), false, 33 * time.Second, "its saves take 22.5s, and 10s to exit"},
		{"declares 0 s", grace(120, "0s"), false, SavedGrace, "its saves take 0s, and 10s to exit"},
		{"saved and declares: SavedGrace", grace(120, "22.5s"), true, SavedGrace, "it saved for its reclaim notice"},
		{"declares more than its grace: no longer", grace(120, "5m"), false, 120 * time.Second, ""},
		{"declares more than the cap: the cap", grace(600, "115s"), false, 120 * time.Second, ""},
		{"declares nonsense: its grace", grace(120, "-20s"), false, 120 * time.Second, ""},
		{"declares without a unit: its grace", grace(120, "20"), false, 120 * time.Second, ""},
		{"declares past the bound: its grace", grace(120, "2562047h47m16s"), false, 120 * time.Second, ""},
		{"a gang member declares: its grace, for its gang's save", inGang(grace(120, "5s")), false, 120 * time.Second, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Candidate{Pod: tt.pod, Saved: tt.saved}
			if got := c.EvictionGrace(DefaultMaxGrace); got != tt.want {
				t.Errorf("EvictionGrace = %v, want %v", got, tt.want)
			}
			if got := c.GraceReason(DefaultMaxGrace); got != tt.why {
				t.Errorf("GraceReason = %q, want %q", got, tt.why)
			}
		})
	}
}

// TestLostWorkUnstartedWithCheckpoint pins LostWork's doc comment, "A pod that
// has not started loses nothing", for a pod that carries a checkpoint annotation
// (e.g. copied from its template by a job that resumes from a checkpoint) but has
// no status.startTime yet.
// inGang makes p a member of gang "train".
func inGang(p *v1.Pod) *v1.Pod {
	p.Labels = map[string]string{api.LabelPodGroup: "train"}
	return p
}

func TestLostWorkUnstartedWithCheckpoint(t *testing.T) {
	p := pod("p", time.Time{}, rfc(now.Add(-time.Hour)))
	if got := LostWork(p, 2, now); got != 0 {
		t.Errorf("LostWork() = %v for an unstarted pod, want 0", got)
	}
}

func gpuPod(name string, gpus int64, start time.Time) *v1.Pod {
	p := pod(name, start, "")
	p.Spec.Containers = []v1.Container{{
		Name: "train",
		Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{api.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)},
			Limits:   v1.ResourceList{api.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)},
		},
	}}
	return p
}

func TestNewCandidate(t *testing.T) {
	tests := []struct {
		name     string
		pod      *v1.Pod
		wantGPUs int64
		wantLost float64
	}{
		{"4-GPU pod", gpuPod("a", 4, now.Add(-time.Minute)), 4, 4 * 60},
		{"pod without GPUs", pod("b", now.Add(-time.Minute), ""), 0, 60},
		{"unstarted pod", gpuPod("c", 2, time.Time{}), 2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCandidate(tt.pod, api.GPUResource, now, DefaultMaxGrace, nil)
			if c.Pod != tt.pod {
				t.Errorf("Pod = %p, want %p", c.Pod, tt.pod)
			}
			if c.GPUs != tt.wantGPUs {
				t.Errorf("GPUs = %d, want %d", c.GPUs, tt.wantGPUs)
			}
			if c.LostWork != tt.wantLost {
				t.Errorf("LostWork = %v, want %v", c.LostWork, tt.wantLost)
			}
		})
	}
}

// A candidate saves in its grace period when its declared save and
// SavedGrace to exit fit its own grace period, capped.
func TestSavesInGrace(t *testing.T) {
	for _, tt := range []struct {
		grace int64 // seconds; -1: unset (30 s)
		save  string
		want  bool
	}{
		{120, "22.5s", true}, {120, "110s", true}, {120, "110.5s", false}, {600, "115s", false},
		{-1, "20s", true}, {-1, "21s", false}, {120, "", false}, {120, "soon", false},
	} {
		p := gpuPod("a", 1, now.Add(-time.Minute))
		if tt.grace >= 0 {
			p.Spec.TerminationGracePeriodSeconds = &tt.grace
		}
		if tt.save != "" {
			p.Annotations = map[string]string{api.AnnotationSaveDuration: tt.save}
		}
		if got := NewCandidate(p, api.GPUResource, now, DefaultMaxGrace, nil).SavesInGrace; got != tt.want {
			t.Errorf("grace %d s, saves in %q: SavesInGrace = %v, want %v", tt.grace, tt.save, got, tt.want)
		}
	}
}

func names(cs []Candidate) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.Pod.Namespace+"/"+c.Pod.Name)
	}
	return out
}
