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
// reclaim budget. So a pod counts from when the observer first saw it
// terminating. For a pod already terminating when the observer started (a
// restart, a new leader), there is nothing of its own to go by: the API
// server's word counts, unless later than now. The zero Terminations, and a
// nil one, take the API server's word for every pod.
type Terminations struct {
	mu   sync.Mutex
	seen map[types.UID]time.Time
}

// Saw notes that the observer saw pod at now; initial: in its first look at
// the cluster, where the pod may have been terminating for a while.
func (t *Terminations) Saw(pod *v1.Pod, now time.Time, initial bool) {
	if pod.DeletionTimestamp == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.seen[pod.UID]; ok {
		return
	}
	if t.seen == nil {
		t.seen = map[types.UID]time.Time{}
	}
	at := now
	if asked := AskedToStop(pod); initial && asked.Before(now) {
		at = asked
	}
	t.seen[pod.UID] = at
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

// AskedToStop is when pod was asked to stop: when the observer first saw it
// terminating, or, unseen, when the API server says.
func (t *Terminations) AskedToStop(pod *v1.Pod) time.Time {
	if t != nil {
		t.mu.Lock()
		at, ok := t.seen[pod.UID]
		t.mu.Unlock()
		if ok {
			return at
		}
	}
	return AskedToStop(pod)
}

// Returning is Returning with the pod asked to stop when t says.
func (t *Terminations) Returning(pod *v1.Pod, now time.Time, maxGrace time.Duration) bool {
	if pod.DeletionTimestamp == nil {
		return false
	}
	return !now.After(t.AskedToStop(pod).Add(min(granted(pod), maxGrace)).Add(killSlack))
}
