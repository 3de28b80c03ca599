package reclaim

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Terminations tells when each terminating pod was asked to stop on its
// observer's own clock. The DeletionTimestamp the API server writes is on
// the API server's clock: an observer whose clock runs ahead of it would
// count a pod asked a moment ago as stuck (and take other pods' GPUs for
// it), and one whose clock runs behind would wait for a stuck pod past the
// reclaim budget. So the API server's word is kept within what the observer
// saw itself: a pod seen terminating at now, and not at since (its previous
// look), was asked in between. For a pod already terminating at the
// observer's first look (a restart, a new leader) there is no since: the API
// server's word counts, unless later than now. A pod whose grace period
// changes (deleted again, with a shorter one) was asked again. The zero
// Terminations, and a nil one, take the API server's word for every pod.
type Terminations struct {
	mu   sync.Mutex
	seen map[types.UID]asked
}

// asked is when a pod was asked to stop, and with what grace period.
type asked struct {
	at      time.Time
	granted time.Duration
}

// Saw notes pod as the observer saw it at now, having last looked at since
// (zero: this is its first look).
func (t *Terminations) Saw(pod *v1.Pod, since, now time.Time) {
	if pod.DeletionTimestamp == nil {
		return
	}
	g := granted(pod)
	t.mu.Lock()
	defer t.mu.Unlock()
	if a, ok := t.seen[pod.UID]; ok && a.granted == g {
		return
	}
	at := AskedToStop(pod)
	if at.After(now) {
		at = now
	}
	if !since.IsZero() && at.Before(since) {
		at = since
	}
	if t.seen == nil {
		t.seen = map[types.UID]asked{}
	}
	t.seen[pod.UID] = asked{at: at, granted: g}
}

// Forget drops the pods for which keep is false.
func (t *Terminations) Forget(keep func(types.UID) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for uid := range t.seen {
		if !keep(uid) {
			delete(t.seen, uid)
		}
	}
}

// Drop forgets the pod with uid.
func (t *Terminations) Drop(uid types.UID) {
	t.mu.Lock()
	delete(t.seen, uid)
	t.mu.Unlock()
}

// AskedToStop is when pod was asked to stop: as the observer saw it, or,
// unseen, when the API server says.
func (t *Terminations) AskedToStop(pod *v1.Pod) time.Time {
	if t != nil {
		t.mu.Lock()
		a, ok := t.seen[pod.UID]
		t.mu.Unlock()
		if ok {
			return a.at
		}
	}
	return AskedToStop(pod)
}

// Returning reports whether a terminating pod's GPUs are on their way back at
// now: it was asked to stop (when t says; a nil t takes the API server's
// word) less than its grace period, capped at maxGrace, ago, plus a few
// seconds to be killed. A pod terminating longer (a grace period of an hour
// granted by someone else, a finalizer that never clears, a node that
// stopped answering) is not: its GPUs are owed, and other pods must give them
// back. A pod that is not terminating is not returning either.
func (t *Terminations) Returning(pod *v1.Pod, now time.Time, maxGrace time.Duration) bool {
	if pod.DeletionTimestamp == nil {
		return false
	}
	return !now.After(t.AskedToStop(pod).Add(min(granted(pod), maxGrace)).Add(killSlack))
}

// OverGrace tells whether a terminating pod was granted a grace period
// longer than maxGrace: by its owner (kubectl delete --grace-period=86400,
// perhaps on receiving a notice), a drain, anyone. Its GPUs would come back
// only after it, while Gleaner counts them as returning for maxGrace and then
// as stuck, taking other tenants' GPUs in their place.
func OverGrace(pod *v1.Pod, maxGrace time.Duration) bool {
	return pod.DeletionTimestamp != nil && granted(pod) > maxGrace
}
