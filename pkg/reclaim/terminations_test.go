package reclaim

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// deleting is a pod the API server says was asked to stop at asked (on its
// clock) with grace.
func deleting(name string, asked time.Time, grace time.Duration) *v1.Pod {
	p := pod(name, now.Add(-time.Hour), "")
	p.UID = types.UID("uid-" + name)
	p.DeletionTimestamp = ptr.To(metav1.NewTime(asked.Add(grace)))
	p.DeletionGracePeriodSeconds = ptr.To(int64(grace / time.Second))
	return p
}

// A pod's termination counts on the observer's clock: the API server's word
// is kept between the observer's last look and the one that saw the pod
// terminating. Only at its first look, with no last one, does the API
// server's word count alone (unless later than now).
func TestTerminationsOnTheObserversClock(t *testing.T) {
	before := now.Add(-5 * time.Second) // the observer's previous look
	for _, tt := range []struct {
		name       string
		apiAsked   time.Time // on the API server's clock; grace 30 s
		since      time.Time // zero: the first look
		at         time.Time // when Returning is asked, on the observer's clock
		want, says bool      // by Terminations, by the API server's word alone
	}{
		{"clocks agree: the API server's word", now.Add(-2 * time.Second), before, now.Add(33 * time.Second), true, true},
		{"clocks agree, past the grace and the slack", now.Add(-2 * time.Second), before, now.Add(34 * time.Second), false, false},
		{"the API server 130 s behind: asked since the last look, returning", now.Add(-130 * time.Second), before, now.Add(20 * time.Second), true, false},
		{"the API server 5 minutes ahead: stuck once its 30 s and the slack are gone", now.Add(5 * time.Minute), before, now.Add(40 * time.Second), false, true},
		{"terminating at the first look: the API server's word, 10 minutes ago", now.Add(-10 * time.Minute), time.Time{}, now, false, false},
		{"terminating at the first look, by a clock 5 minutes ahead: from now", now.Add(5 * time.Minute), time.Time{}, now.Add(20 * time.Second), true, true},
	} {
		var terms Terminations
		p := deleting("job", tt.apiAsked, 30*time.Second)
		terms.Saw(p, tt.since, now)
		terms.Saw(p, now, now.Add(time.Minute)) // seen again: counts from the first time
		if got := terms.Returning(p, tt.at, DefaultMaxGrace); got != tt.want {
			t.Errorf("%s: Returning = %v, want %v", tt.name, got, tt.want)
		}
		if got := (*Terminations)(nil).Returning(p, tt.at, DefaultMaxGrace); got != tt.says {
			t.Errorf("%s: by the API server's word, Returning = %v, want %v", tt.name, got, tt.says)
		}
		if got := NewCandidate(p, "nvidia.com/gpu", tt.at, DefaultMaxGrace, &terms).Overdue; got == tt.want {
			t.Errorf("%s: candidate Overdue = %v, want %v", tt.name, got, !tt.want)
		}
		terms.Drop(p.UID)
		if got := terms.Returning(p, tt.at, DefaultMaxGrace); got != tt.says {
			t.Errorf("%s: dropped, Returning = %v, want the API server's word %v", tt.name, got, tt.says)
		}
	}
	var none *Terminations
	if p := deleting("job", now.Add(-130*time.Second), 30*time.Second); none.Returning(p, now, DefaultMaxGrace) {
		t.Error("a nil Terminations does not take the API server's word")
	}
}

// A pod deleted again with a shorter grace period was asked again: it counts
// from the second time, not the first.
func TestTerminationsAskedAgainWithAShorterGrace(t *testing.T) {
	var terms Terminations
	first := deleting("job", now, time.Hour)
	terms.Saw(first, now.Add(-5*time.Second), now)
	second := deleting("job", now.Add(100*time.Second), 30*time.Second)
	terms.Saw(second, now.Add(95*time.Second), now.Add(100*time.Second))
	if !terms.Returning(second, now.Add(130*time.Second), DefaultMaxGrace) {
		t.Error("30 s after it was deleted again with 30 s, the pod counts as stuck: its first deletion, an hour's grace, was the one counted")
	}
	if terms.Returning(second, now.Add(136*time.Second), DefaultMaxGrace) {
		t.Error("past the second grace and the slack, the pod still counts as returning")
	}
	terms.Forget(func(types.UID) bool { return false })
	if got := terms.AskedToStop(second); !got.Equal(now.Add(100 * time.Second)) {
		t.Errorf("forgotten: asked at %v, want the API server's word", got)
	}
}

// Without an observer of its own, a terminating pod's GPUs return within
// its grace period, capped, on the API server's word.
func TestReturningOnTheAPIServersWord(t *testing.T) {
	deleting := func(askedAgo, grace time.Duration) *v1.Pod {
		p := pod("job", now.Add(-time.Hour), "")
		p.DeletionTimestamp = ptr.To(metav1.NewTime(now.Add(-askedAgo).Add(grace)))
		p.DeletionGracePeriodSeconds = ptr.To(int64(grace / time.Second))
		return p
	}
	for _, tt := range []struct {
		name string
		pod  *v1.Pod
		want bool
	}{
		{"not terminating", pod("job", now, ""), false},
		{"within its grace period", deleting(20*time.Second, 30*time.Second), true},
		{"just past it, still being killed", deleting(33*time.Second, 30*time.Second), true},
		{"stuck past its grace period (a finalizer)", deleting(10*time.Minute, 30*time.Second), false},
		{"an hour's grace, asked 2 minutes ago: within the cap", deleting(110*time.Second, time.Hour), true},
		{"an hour's grace, asked 3 minutes ago: past the cap, owed", deleting(3*time.Minute, time.Hour), false},
	} {
		if got := (*Terminations)(nil).Returning(tt.pod, now, DefaultMaxGrace); got != tt.want {
			t.Errorf("%s: Returning = %v, want %v", tt.name, got, tt.want)
		}
	}
}
