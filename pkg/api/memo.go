package api

import v1 "k8s.io/api/core/v1"

// PodMemo keeps what was read from each pod object from one round to the
// next. An informer's cache replaces an object that changes, never edits it,
// so the same object reads the same: what a round reads from its pods (their
// GPUs, their job) is read once per object, not once per round (at 5,000
// nodes that reading was a fifth of a round). Pods passed in must be such
// objects.
// Each round's Next forgets the objects that round did not see.
type PodMemo[V any] struct {
	last, seen map[*v1.Pod]V
}

// Get is read(p), read only if the last round did not see p.
func (m *PodMemo[V]) Get(p *v1.Pod, read func(*v1.Pod) V) V {
	v, ok := m.last[p]
	if !ok {
		v = read(p)
	}
	if m.seen == nil {
		m.seen = make(map[*v1.Pod]V, len(m.last))
	}
	m.seen[p] = v
	return v
}

// Next ends a round: only the objects it saw are kept.
func (m *PodMemo[V]) Next() {
	m.last, m.seen = m.seen, nil
}
