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
	// Spare replicas to keep room for: max(0, Needed - Current).
	Spare  int
	Reason string
	// Load is the summed load of the replicas with fresh metrics.
	Load float64
	// Complete: every replica that serves has fresh metrics, so Load is the
	// service's whole load (the only kind worth learning from).
	Complete bool
	// Target is the per-replica target applied.
	Target float64
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
//	counts the bound ones), and, if any replica is unknown, or has waiting
//	requests while no replica is starting or pending, at least current + 1
//
// A replica whose metrics are missing, stale or malformed (negative, NaN or
// infinite) counts as saturated (fail closed): its service keeps room for one
// more replica. An unreadable forecast (NaN) counts as unbounded. Needed is at
// most max(MaxReplicas, current) when MaxReplicas is set.
func Assess(s Service) Need {
	target := s.Target()
	n := Need{Service: s.Name, GPUsPerReplica: s.GPUsPerReplica, Target: target}
	var load float64
	var unknown, waiting, starting, pending int
	for _, r := range s.Replicas {
		if s.GPUsPerReplica <= 0 {
			n.GPUsPerReplica = max(n.GPUsPerReplica, r.GPUs)
		}
		if r.Pending {
			pending++
			continue
		}
		if r.Starting && !r.Known {
			starting++
			continue
		}
		if !r.Known || !usable(r.Running) || !usable(r.Waiting) || !usable(r.KVCache) {
			unknown++
			continue
		}
		if s.Metric == KVCache {
			load += r.KVCache
		} else {
			load += r.Running + r.Waiting
		}
		if r.Waiting > 0 {
			waiting++
		}
	}
	n.Current = len(s.Replicas) - pending
	n.Load, n.Complete = load, unknown == 0
	forecast := s.ForecastLoad
	switch {
	case math.IsNaN(forecast):
		forecast = math.Inf(1)
	case forecast < 0:
		forecast = 0
	}
	planned := max(load, forecast) * (1 + max(s.Margin, 0))
	limit := maxNeeded
	if s.MaxReplicas > 0 {
		limit = min(s.MaxReplicas, maxNeeded)
	}
	needed := math.Ceil(planned/target-1e-9) + float64(unknown)
	if math.IsNaN(needed) {
		needed = float64(limit) // unreadable: fail closed
	}
	n.Needed = int(min(needed, float64(limit)))
	switch {
	case pending > 0 && n.Needed < n.Current+pending:
		// Whoever created the pending replicas wants them: keep their room.
		n.Needed = n.Current + pending
		n.Reason = fmt.Sprintf("%d replicas are pending", pending)
	case unknown > 0:
		n.Needed = max(n.Needed, n.Current+1)
		n.Reason = fmt.Sprintf("%d of %d replicas have no fresh metrics", unknown, n.Current)
	case waiting > 0 && starting == 0 && pending == 0:
		// A replica already starting or pending is the one more the waiting
		// requests ask for: they move to it once it serves, so no further room
		// is kept.
		n.Needed = max(n.Needed, n.Current+1)
		n.Reason = fmt.Sprintf("%d replicas have waiting requests", waiting)
	case n.Needed > n.Current && s.ForecastLoad > load:
		n.Reason = fmt.Sprintf("forecast load %.4g over the horizon (now %.4g) needs %d replicas x target %.4g", s.ForecastLoad, load, n.Needed, target)
	case n.Needed > n.Current:
		n.Reason = fmt.Sprintf("load %.4g exceeds %d replicas x target %.4g", load, n.Current, target)
	}
	if s.MaxReplicas > 0 {
		n.Needed = min(n.Needed, max(s.MaxReplicas, n.Current))
	}
	n.Spare = max(0, n.Needed-n.Current)
	return n
}

// usable: a metric value a replica can report (finite, not negative).
func usable(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }
