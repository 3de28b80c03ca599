package reclaim

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// A pod's termination counts on the observer's clock from when it first saw
// it, whatever the API server's clock says; only a pod already terminating
// at the observer's first look takes the API server's word (unless later
// than now).
func TestTerminationsOnTheObserversClock(t *testing.T) {
	// asked is when the API server's clock says the pod was asked to stop,
	// with a grace period of 30 s.
	deleting := func(name string, asked time.Time) *v1.Pod {
		p := pod(name, now.Add(-time.Hour), "")
		p.UID = types.UID("uid-" + name)
		p.DeletionTimestamp = ptr.To(metav1.NewTime(asked.Add(30 * time.Second)))
		p.DeletionGracePeriodSeconds = ptr.To(int64(30))
		return p
	}
	for _, tt := range []struct {
		name       string
		apiAsked   time.Time // on the API server's clock
		initial    bool
		at         time.Time // when Returning is asked, on the observer's clock
		want, says bool      // by Terminations, by the API server's word alone
	}{
		{"the API server 130 s behind: asked a moment ago, returning", now.Add(-130 * time.Second), false, now.Add(20 * time.Second), true, false},
		{"the API server 5 minutes ahead: stuck once its 30 s and the slack are gone", now.Add(5 * time.Minute), false, now.Add(40 * time.Second), false, true},
		{"terminating at the first look: the API server's word, 10 minutes ago", now.Add(-10 * time.Minute), true, now, false, false},
		{"terminating at the first look, by a clock 5 minutes ahead: from now", now.Add(5 * time.Minute), true, now.Add(20 * time.Second), true, true},
	} {
		var terms Terminations
		p := deleting("job", tt.apiAsked)
		terms.Saw(p, now, tt.initial)
		terms.Saw(p, now.Add(time.Minute), false) // seen again: counts from the first time
		if got := terms.Returning(p, tt.at, DefaultMaxGrace); got != tt.want {
			t.Errorf("%s: Returning = %v, want %v", tt.name, got, tt.want)
		}
		if got := Returning(p, tt.at, DefaultMaxGrace); got != tt.says {
			t.Errorf("%s: by the API server's word, Returning = %v, want %v", tt.name, got, tt.says)
		}
		if got := NewCandidate(p, "nvidia.com/gpu", tt.at, DefaultMaxGrace, &terms).Overdue; got == tt.want {
			t.Errorf("%s: candidate Overdue = %v, want %v", tt.name, got, !tt.want)
		}
		terms.Forget(func(types.UID) bool { return false })
		if got := terms.Returning(p, tt.at, DefaultMaxGrace); got != tt.says {
			t.Errorf("%s: forgotten, Returning = %v, want the API server's word %v", tt.name, got, tt.says)
		}
	}
	var none *Terminations
	if p := deleting("job", now.Add(-130*time.Second)); none.Returning(p, now, DefaultMaxGrace) {
		t.Error("a nil Terminations does not take the API server's word")
	}
}
