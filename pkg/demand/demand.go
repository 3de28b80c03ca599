// Package demand turns a service's vLLM load into the inference replicas it
// needs, and so the headroom Gleaner must keep for it. It is pure: plain values in.
package demand

import (
	"fmt"
	"math"
)

// DefaultTargetLoad is the running+waiting requests one replica is expected to carry.
const DefaultTargetLoad = 16

// Replica is one inference pod of a service as the metrics informer sees it.
type Replica struct {
	// Known: the pod's metrics are fresh.
	Known bool
	// Starting: the pod has not been scraped yet (not Ready, or Ready since the
	// last scrape round). It adds capacity but no load. A replica neither Known nor
	// Starting is unknown: its scrapes fail or are stale, and it counts as saturated.
	Starting bool
	Running  float64
	Waiting  float64
	// GPUs the replica requests.
	GPUs int64
}

// Service is one inference service's replicas.
type Service struct {
	Name     string
	Replicas []Replica
	// TargetLoad per replica; <= 0 means DefaultTargetLoad.
	TargetLoad float64
}

// Need is the demand model's answer for one service.
type Need struct {
	Service        string
	Current        int
	Needed         int
	GPUsPerReplica int64
	// Spare replicas to keep room for: max(0, Needed - Current).
	Spare  int
	Reason string
}

// Assess computes the replicas a service needs now:
//
//	needed = ceil(load of known replicas / target) + unknown replicas
//	and, if any replica has waiting requests or is unknown, at least current + 1
//
// A replica whose metrics are missing, stale or malformed counts as saturated
// (fail closed): its service keeps room for one more replica.
func Assess(s Service) Need {
	target := s.TargetLoad
	if target <= 0 {
		target = DefaultTargetLoad
	}
	n := Need{Service: s.Name, Current: len(s.Replicas)}
	var load float64
	var unknown, waiting int
	for _, r := range s.Replicas {
		n.GPUsPerReplica = max(n.GPUsPerReplica, r.GPUs)
		if r.Starting && !r.Known {
			continue
		}
		if !r.Known {
			unknown++
			continue
		}
		load += r.Running + r.Waiting
		if r.Waiting > 0 {
			waiting++
		}
	}
	n.Needed = int(math.Ceil(load/target)) + unknown
	switch {
	case unknown > 0:
		n.Needed = max(n.Needed, n.Current+1)
		n.Reason = fmt.Sprintf("%d of %d replicas have no fresh metrics", unknown, n.Current)
	case waiting > 0:
		n.Needed = max(n.Needed, n.Current+1)
		n.Reason = fmt.Sprintf("%d replicas have waiting requests", waiting)
	case n.Needed > n.Current:
		n.Reason = fmt.Sprintf("load %.0f exceeds %d replicas x target %.0f", load, n.Current, target)
	}
	n.Spare = max(0, n.Needed-n.Current)
	return n
}
