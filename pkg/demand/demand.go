// Package demand turns a service's vLLM load into the inference replicas it
// needs now and over the reclaim horizon, and so the headroom Gleaner must keep
// for it. It is pure: plain values and times in, no API client.
package demand

import (
	"fmt"
	"math"
)

// DefaultTargetLoad is the running+waiting requests one replica is expected to carry.
const DefaultTargetLoad = 16

// DefaultTargetKVCache is the KV-cache usage (0..1) one replica is expected to
// carry when a service measures load by KV cache.
const DefaultTargetKVCache = 0.8

// Metric is what a service's load is measured in.
type Metric string

const (
	// Requests: running + waiting requests (the default).
	Requests Metric = "requests"
	// KVCache: KV-cache usage, 0..1 per replica.
	KVCache Metric = "kv-cache"
)

// Replica is one inference pod of a service as the metrics informer sees it.
type Replica struct {
	// Pending: the pod is not bound to a node yet. It holds no GPU and serves
	// nothing: the GPUs it asks for are headroom, kept at once.
	Pending bool
	// Known: the pod's metrics are fresh.
	Known bool
	// Starting: the pod has not been scraped yet (not Ready, or Ready since the
	// last scrape round). It adds capacity but no load. A replica neither Known nor
	// Starting is unknown: its scrapes fail or are stale, and it counts as saturated.
	Starting bool
	Running  float64
	Waiting  float64
	// KVCache is the replica's KV-cache usage, 0..1.
	KVCache float64
	// GPUs the replica requests.
	GPUs int64
	// Asleep: the replica's fresh metrics say vLLM sleeps (every engine of
	// it). It serves nothing until woken, yet holds its GPUs: capacity that
	// needs a wake-up, not load. Read only when Known.
	Asleep bool
}

// Service is one inference service's replicas.
type Service struct {
	Name     string
	Replicas []Replica
	// Metric is what load means; empty means Requests.
	Metric Metric
	// TargetLoad per replica; <= 0 means DefaultTargetLoad (DefaultTargetKVCache for KVCache).
	TargetLoad float64
	// GPUsPerReplica, when > 0, overrides the largest request among Replicas
	// (it is also what a service with no replica running needs).
	GPUsPerReplica int64
	// ForecastLoad is the peak load expected over the reclaim horizon (see
	// Forecast); the service keeps room for it as well as for its load now.
	ForecastLoad float64
	// Margin is a safety margin on load, as a fraction (0.1 keeps room for 10%
	// more load than expected). Negative means 0.
	Margin float64
	// MaxReplicas bounds Needed (0: unbounded): the most replicas the service
	// could ever run (its autoscaler's maximum, or what the pool can hold). No
	// load, however large or forged, keeps room for more than that.
	MaxReplicas int
}

// maxNeeded bounds Needed when MaxReplicas does not, so that no load, however
// large, overflows the conversion to int.
const maxNeeded = 1 << 20

// Need is the demand model's answer for one service.
type Need struct {
	Service        string
	Current        int
	Needed         int
	GPUsPerReplica int64
	// HeadroomReplicas are the replicas to keep room for: max(0, Needed - Current).
	HeadroomReplicas int
	Reason           string
	// Load is the summed load of the replicas with fresh metrics.
	Load float64
	// Complete: every replica that serves has fresh metrics, so Load is the
	// service's whole load (the only kind worth learning from).
	Complete bool
	// Target is the per-replica target applied.
	Target float64
	// Asleep counts the bound replicas asleep; Wake is how many of them
	// Needed includes: replicas the service gets back by waking them, on
	// the GPUs they hold, for which no room is kept.
	Asleep, Wake int
}

// Target is the per-replica target for the service's metric, with defaults.
func (s Service) Target() float64 {
	switch {
	case s.TargetLoad > 0:
		return s.TargetLoad
	case s.Metric == KVCache:
		return DefaultTargetKVCache
	default:
		return DefaultTargetLoad
	}
}

// Assess computes the replicas a service needs now and over the horizon:
//
//	planned = max(load of known replicas, ForecastLoad) x (1 + Margin)
//	needed  = ceil(planned / target) + unknown replicas
//	and at least current + pending replicas (pending: not yet bound; current
//	counts the bound ones), and, if any replica is unknown, at least
//	current + 1, and, if any replica has waiting requests while no replica is
//	starting or pending, at least current + 1 - idle asleep replicas
//	headroom = max(0, needed - current)
//	wake     = min(asleep, max(0, needed - (current - asleep)))
//
// A replica whose metrics are missing, stale or malformed (negative, NaN or
// infinite) counts as saturated (fail closed): its service keeps room for one
// more replica. An unreadable forecast (NaN) counts as unbounded. Needed is at
// most max(MaxReplicas, current + pending) when MaxReplicas is set: the bound
// caps what load can ask for, never the pods that exist (a rollout's surge
// replicas above the maximum are pending pods all the same, and wait on no
// lent GPU).
//
// A replica asleep (vLLM's sleep mode, read from fresh metrics only) serves
// nothing until woken: it adds only the load of requests held in it (usually
// none), and is not ready capacity for the load now: the needed replicas
// beyond the awake ones are asleep ones to wake (wake) before new ones. It
// holds its GPUs and waking it takes no more, so it stays in current: no room
// is kept for a replica it could be, and an idle one (no request in it) is
// the one more that waiting requests ask for, as a starting one is. Its GPUs
// are never lendable: the planner counts every GPU an inference pod requests
// as serving, asleep or not.
//
// It is Observe(s).Need(s.ForecastLoad, s.Margin): a caller asking about
// many forecasts of one service observes its replicas once.
func Assess(s Service) Need {
	return Observe(s).Need(s.ForecastLoad, s.Margin)
}

// Observed is a service's replicas counted once: what every forecast of it
// is assessed against (Need, Needed).
type Observed struct {
	Service        string
	Target         float64
	GPUsPerReplica int64
	// Load of the replicas with fresh metrics; Complete when no replica is unknown.
	Load     float64
	Complete bool
	// Current counts the bound replicas; the others are the replicas by state.
	// Asleep replicas are among the current ones: idleAsleep of them have no
	// request in them (see Assess).
	Current                             int
	Unknown, Waiting, Starting, Pending int
	Asleep, idleAsleep                  int
	// limit bounds needed before the floors (MaxReplicas, else maxNeeded);
	// maxReplicas is MaxReplicas (0: none), which bounds it after them.
	limit, maxReplicas int
}

// Observe counts a service's replicas by state and sums their load; the
// forecast and margin of s are not read.
func Observe(s Service) Observed {
	o := Observed{Service: s.Name, Target: s.Target(), GPUsPerReplica: s.GPUsPerReplica, limit: maxNeeded, maxReplicas: s.MaxReplicas}
	if s.MaxReplicas > 0 {
		o.limit = min(s.MaxReplicas, maxNeeded)
	}
	for _, r := range s.Replicas {
		if s.GPUsPerReplica <= 0 {
			o.GPUsPerReplica = max(o.GPUsPerReplica, r.GPUs)
		}
		if r.Pending {
			o.Pending++
			continue
		}
		if r.Starting && !r.Known {
			o.Starting++
			continue
		}
		if !r.Known || !usable(r.Running) || !usable(r.Waiting) || !usable(r.KVCache) {
			o.Unknown++
			continue
		}
		if s.Metric == KVCache {
			o.Load += r.KVCache
		} else {
			o.Load += r.Running + r.Waiting
		}
		if r.Waiting > 0 {
			o.Waiting++
		}
		if r.Asleep {
			o.Asleep++
			if r.Running == 0 && r.Waiting == 0 {
				o.idleAsleep++
			}
		}
	}
	o.Current = len(s.Replicas) - o.Pending
	o.Complete = o.Unknown == 0
	return o
}

// Needed is the replicas the service needs if its load over the window is
// forecastLoad, with the safety margin: Assess's formula.
func (o Observed) Needed(forecastLoad, margin float64) int {
	n, _ := o.needed(forecastLoad, margin)
	return o.bound(n)
}

// needed is Needed before MaxReplicas bounds it, and which rule set it
// above the bound replicas.
func (o Observed) needed(forecastLoad, margin float64) (int, why) {
	forecast := forecastLoad
	switch {
	case math.IsNaN(forecast):
		forecast = math.Inf(1)
	case forecast < 0:
		forecast = 0
	}
	planned := max(o.Load, forecast) * (1 + max(margin, 0))
	needed := math.Ceil(planned/o.Target-1e-9) + float64(o.Unknown)
	if math.IsNaN(needed) {
		needed = float64(o.limit) // unreadable: fail closed
	}
	n := int(min(needed, float64(o.limit)))
	if o.Waiting > 0 && o.Starting == 0 && o.Pending == 0 && o.idleAsleep > 0 {
		// An idle asleep replica, woken, is the one more the waiting requests
		// ask for, on GPUs it holds: it is among the current ones.
		n = max(n, o.Current+1-o.idleAsleep)
	}
	switch {
	case o.Pending > 0 && n < o.Current+o.Pending:
		// Whoever created the pending replicas wants them: keep their room.
		return o.Current + o.Pending, pendingReplicas
	case o.Unknown > 0:
		return max(n, o.Current+1), unknownReplicas
	case o.Waiting > 0 && o.Starting == 0 && o.Pending == 0 && o.idleAsleep == 0:
		// A replica already starting, pending or idle asleep is the one more
		// the waiting requests ask for: they move to it once it serves, so no
		// further room is kept.
		return max(n, o.Current+1), waitingRequests
	case n > o.Current && forecastLoad > o.Load:
		return n, forecastNeeds
	case n > o.Current:
		return n, loadNeeds
	}
	return n, notMore
}

// bound applies MaxReplicas: no load, however large or forged, keeps room
// for more replicas than the service could run, but every replica that
// exists, bound or pending, keeps its room.
func (o Observed) bound(n int) int {
	if o.maxReplicas > 0 {
		return min(n, max(o.maxReplicas, o.Current+o.Pending))
	}
	return n
}

// why is which of Assess's rules set Needed above the bound replicas.
type why int

const (
	notMore why = iota
	pendingReplicas
	unknownReplicas
	waitingRequests
	forecastNeeds
	loadNeeds
)

// Need is the service's Need for forecastLoad with the margin.
func (o Observed) Need(forecastLoad, margin float64) Need {
	needed, reason := o.needed(forecastLoad, margin)
	n := Need{Service: o.Service, Current: o.Current, Needed: o.bound(needed), GPUsPerReplica: o.GPUsPerReplica,
		Load: o.Load, Complete: o.Complete, Target: o.Target, Asleep: o.Asleep}
	n.HeadroomReplicas = max(0, n.Needed-n.Current)
	n.Wake = min(o.Asleep, max(0, n.Needed-(n.Current-o.Asleep)))
	switch reason {
	case pendingReplicas:
		n.Reason = fmt.Sprintf("%d replicas are pending", o.Pending)
	case unknownReplicas:
		n.Reason = fmt.Sprintf("%d of %d replicas have no fresh metrics", o.Unknown, o.Current)
	case waitingRequests:
		n.Reason = fmt.Sprintf("%d replicas have waiting requests", o.Waiting)
	case forecastNeeds:
		n.Reason = fmt.Sprintf("forecast load %.4g over the horizon (now %.4g) needs %d replicas x target %.4g", forecastLoad, o.Load, needed, o.Target)
	case loadNeeds:
		n.Reason = fmt.Sprintf("load %.4g exceeds %d replicas x target %.4g", o.Load, o.Current, o.Target)
	}
	return n
}

// usable: a metric value a replica can report (finite, not negative).
func usable(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }
