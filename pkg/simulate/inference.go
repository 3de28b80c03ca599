package simulate

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gleaner-dev/gleaner/pkg/autoscale"
	"github.com/gleaner-dev/gleaner/pkg/demand"
	"github.com/gleaner-dev/gleaner/pkg/round"
)

// InferenceAutoscaler is what scales the simulated inference services.
type InferenceAutoscaler string

const (
	// GleanerAutoscaler: gleaner-controller's own autoscaler, as the live
	// loop applies it (round.Decision.Scale, gleaner.dev/autoscale on every
	// service): replicas are created when the round decides, wait for GPUs
	// as pending pods, and serve once started (Config.ReplicaStartup).
	GleanerAutoscaler InferenceAutoscaler = "gleaner"
	// ExternalAutoscaler: each service wants max(1, ceil(load / capacity))
	// replicas at once, as an autoscaler of its own would if it scaled on
	// the load with no delay, and a replica serves as soon as it binds.
	ExternalAutoscaler InferenceAutoscaler = "external"
)

// ParseInferenceAutoscaler reads "gleaner" or "external".
func ParseInferenceAutoscaler(s string) (InferenceAutoscaler, error) {
	switch a := InferenceAutoscaler(s); a {
	case GleanerAutoscaler, ExternalAutoscaler:
		return a, nil
	}
	return "", fmt.Errorf("inference autoscaler %q: want gleaner or external", s)
}

type simNode struct {
	name      string
	alloc     int64
	serving   int64 // GPUs of bound inference replicas
	lent      int64 // GPUs of best-effort pods, terminating included
	returning int64 // GPUs of terminating best-effort pods
	reclaimed int64 // reclaimed GPUs no replica has bound to yet
	// freedAt is when the last evicted pod that left it gave its GPUs back;
	// freedNow are the GPUs given back at the step itself (jobs done,
	// replicas removed), which no replica could bind to earlier.
	freedAt  time.Duration
	freedNow int64
}

type simService struct {
	bound   []boundReplica
	pending []pendingReplica // in the order wanted
	// desired is the replicas the service's autoscaler wants; wanted is what
	// its load needs now, max(1, ceil(load / capacity)), against which idle
	// GPUs are counted whatever scales it.
	desired, wanted int
	// max is the most replicas the service's autoscaler may run: what its
	// peak window needs, as its owner would set gleaner.dev/max-replicas.
	max int
	buf []demand.Replica
}

// boundReplica is a replica bound to node, serving from ready on.
type boundReplica struct {
	node  int
	ready time.Duration
}

// pendingReplica is a replica waiting for GPUs since wanted; seen is since
// when the load it is for has been there (-1: not yet). Only that part of
// its wait is one inference sees: a replica the forecast asked for ahead of
// its load may wait without anyone noticing.
type pendingReplica struct {
	wanted, seen time.Duration
}

// autoscale is the external autoscaler: service i wants what its load needs
// at t, at once.
func (s *sim) autoscale(i int, t time.Duration) {
	sv := &s.svcs[i]
	sv.desired = sv.wanted
	s.scaleTo(i, sv.desired, t, t)
}

// scaleTo adds pending replicas or removes replicas until service i has
// want, as a Deployment's ReplicaSet does: pending replicas first (the
// newest), then those still starting, then those on the node serving the
// least inference, so nodes empty. New replicas are wanted at t and seen at
// seen (-1: when the load needs them).
func (s *sim) scaleTo(i, want int, t, seen time.Duration) {
	sv := &s.svcs[i]
	have := len(sv.bound) + len(sv.pending)
	for ; have < want; have++ {
		sv.pending = append(sv.pending, pendingReplica{wanted: t, seen: seen})
	}
	for ; have > want && len(sv.pending) > 0; have-- {
		p := sv.pending[len(sv.pending)-1]
		sv.pending = sv.pending[:len(sv.pending)-1]
		if p.seen >= 0 {
			s.wait(t - p.seen) // wanted, then no longer: it waited this long
		}
	}
	for ; have > want; have-- {
		k := 0
		for x, r := range sv.bound {
			n, least := s.nodes[r.node], s.nodes[sv.bound[k].node]
			starting, leastStarting := r.ready > t, sv.bound[k].ready > t
			if starting != leastStarting {
				if starting {
					k = x
				}
				continue
			}
			if n.serving < least.serving || n.serving == least.serving && r.node > sv.bound[k].node {
				k = x
			}
		}
		s.nodes[sv.bound[k].node].serving -= s.cfg.GPUsPerReplica
		s.nodes[sv.bound[k].node].freedNow += s.cfg.GPUsPerReplica
		sv.bound = append(sv.bound[:k], sv.bound[k+1:]...)
	}
}

// seeLoad marks, for the gleaner autoscaler, the pending replicas of service
// i whose load is there at t: those its load needs beyond the bound ones,
// the longest waiting first, each since its load arrived (loadArrived).
func (s *sim) seeLoad(i int, t time.Duration) {
	sv := &s.svcs[i]
	for k := 0; k < len(sv.pending) && len(sv.bound)+k < sv.wanted; k++ {
		if p := &sv.pending[k]; p.seen < 0 {
			p.seen = max(p.wanted, s.loadArrived(i, len(sv.bound)+k, t))
		}
	}
}

// loadArrived is when, in the step to t, service i's load came to need
// replica n (counting from 0): when it crossed n replicas' capacity, found
// on the line between the step's ends (the load is linear between trace
// windows' middles); t if it needed it at the step's start already (the
// replica was not pending then, or another was ahead of it) or with
// StepLoad, whose load changes at steps.
func (s *sim) loadArrived(i, n int, t time.Duration) time.Duration {
	from := t - s.cfg.ScrapeInterval
	if s.cfg.StepLoad || from < 0 {
		return t
	}
	need := (float64(n) + 1e-9) * s.cfg.ReplicaCapacity
	l0, l1 := s.load(i, from), s.load(i, t)
	if l0 > need || l1 <= need {
		return t
	}
	return from + time.Duration(float64(s.cfg.ScrapeInterval)*(need-l0)/(l1-l0))
}

// applyScale applies the round's scale decisions: a replica the gleaner
// autoscaler asks for is created now and waits for GPUs like any pending pod.
func (s *sim) applyScale(scale []round.Scale, t time.Duration) {
	for _, sc := range scale {
		i := s.index[sc.Key]
		s.svcs[i].desired = sc.Decision.Replicas
		s.scaleTo(i, sc.Decision.Replicas, t, -1)
		s.seeLoad(i, t)
	}
}

// autoscaled is service i as the gleaner autoscaler sees it.
func (s *sim) autoscaled(i int) *round.Autoscaled {
	if s.cfg.InferenceAutoscaler != GleanerAutoscaler || s.policy == None {
		return nil
	}
	sv := &s.svcs[i]
	return &round.Autoscaled{Replicas: sv.desired, Limits: autoscale.Limits{Min: 1, Max: sv.max}}
}

// replicaStartup is how long a bound replica takes to serve.
func (s *sim) replicaStartup() time.Duration {
	if s.autoscaled(0) == nil {
		return 0
	}
	return s.cfg.ReplicaStartup
}

// observe is service i's replicas at t as the metrics informer sees them:
// those serving carry equal shares of the load (beyond a replica's capacity
// it waits), those starting carry none, those pending hold no GPU.
func (s *sim) observe(i int, t time.Duration) []demand.Replica {
	sv := &s.svcs[i]
	load := s.load(i, t)
	sv.buf = sv.buf[:0]
	serving := 0
	for _, r := range sv.bound {
		if r.ready <= t {
			serving++
		}
	}
	for _, r := range sv.bound {
		if r.ready > t {
			sv.buf = append(sv.buf, demand.Replica{Starting: true, GPUs: s.cfg.GPUsPerReplica})
			continue
		}
		per := load / float64(serving)
		sv.buf = append(sv.buf, demand.Replica{Known: true, Running: min(per, s.cfg.ReplicaCapacity),
			Waiting: max(0, per-s.cfg.ReplicaCapacity), GPUs: s.cfg.GPUsPerReplica})
	}
	if s.autoscaled(i) != nil {
		for range sv.pending {
			sv.buf = append(sv.buf, demand.Replica{Pending: true, GPUs: s.cfg.GPUsPerReplica})
		}
	}
	return sv.buf
}

func (s *sim) wait(d time.Duration) {
	if d <= 0 {
		return
	}
	s.res.InferenceWaitSeconds += d.Seconds()
	s.res.MaxInferenceWaitSeconds = max(s.res.MaxInferenceWaitSeconds, d.Seconds())
	s.waits = append(s.waits, d)
	if d > s.cfg.budget() {
		s.res.InferenceWaitsOverBudget++
	}
}

// bindNode is the node a new replica binds to: GPUsPerReplica GPUs held by no
// pod, on the fullest such node (first by name on ties); -1 if none.
func (s *sim) bindNode() int {
	best, bestFree := -1, int64(0)
	for i := range s.nodes {
		n := &s.nodes[i]
		free := n.alloc - n.serving - n.lent
		if free >= s.cfg.GPUsPerReplica && (best < 0 || free < bestFree) {
			best, bestFree = i, free
		}
	}
	return best
}

// bind binds a replica of service svc to node at t.
func (s *sim) bind(svc, node int, t time.Duration) {
	n := &s.nodes[node]
	n.serving += s.cfg.GPUsPerReplica
	n.reclaimed -= min(n.reclaimed, s.cfg.GPUsPerReplica)
	s.svcs[svc].bound = append(s.svcs[svc].bound, boundReplica{node: node, ready: t + s.replicaStartup()})
}

// boundAt is when, in the step to t, a replica pending since wanted could
// bind to node: bindDelay after the evicted pods that left it in the step
// gave their GPUs back, if those made its room without the GPUs given back
// at t; t if that is later.
func (s *sim) boundAt(node int, wanted, t time.Duration) time.Duration {
	n := &s.nodes[node]
	if n.freedAt <= t-s.cfg.ScrapeInterval || n.alloc-n.serving-n.lent-n.freedNow < s.cfg.GPUsPerReplica {
		return t
	}
	return min(t, max(n.freedAt+bindDelay, wanted))
}

// bindDelay is how long after a pod's grace period ends its GPUs take to
// reach a replica: the kubelet killing and the API server removing it, and
// the scheduler binding the replica. It is the 5 s the reclaim budget
// allows for them.
const bindDelay = 5 * time.Second

// bindPending binds waiting replicas in the order they were wanted, across
// services, as kube-scheduler's queue pops pods of equal priority: the GPUs an
// eviction frees go to the replica that has waited longest, not to whichever
// service comes first.
func (s *sim) bindPending(t time.Duration) {
	s.waiting = s.waiting[:0]
	for i := range s.svcs {
		for _, p := range s.svcs[i].pending {
			s.waiting = append(s.waiting, waitingReplica{svc: i, pendingReplica: p})
		}
	}
	if len(s.waiting) == 0 {
		return
	}
	slices.SortStableFunc(s.waiting, func(a, b waitingReplica) int { return cmp.Compare(a.wanted, b.wanted) })
	bound := 0
	for _, w := range s.waiting {
		n := s.bindNode()
		if n < 0 {
			break
		}
		at := s.boundAt(n, w.wanted, t)
		s.bind(w.svc, n, at)
		s.res.InferenceReplicaStarts++
		if w.seen >= 0 {
			s.wait(at - w.seen)
		}
		bound++
	}
	// Each service's pending replicas are in the order wanted: the bound ones
	// are its first.
	for _, w := range s.waiting[:bound] {
		sv := &s.svcs[w.svc]
		sv.pending = sv.pending[1:]
	}
}

// waitingReplica is a pending replica of service svc.
type waitingReplica struct {
	svc int
	pendingReplica
}

// loadWants is what service i's load needs at t: max(1, ceil(load / capacity)).
func (s *sim) loadWants(i int, t time.Duration) int {
	return max(1, int(math.Ceil(s.load(i, t)/s.cfg.ReplicaCapacity-1e-9)))
}
