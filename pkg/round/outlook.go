package round

import (
	"time"

	"github.com/gleaner-dev/gleaner/pkg/demand"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
)

// OutlookPoint is the forecast of one step of the outlook.
type OutlookPoint struct {
	// Time starts the step.
	Time time.Time
	// InferenceGPUs is what the services are expected to need in the step:
	// replicas for the load their learned profile expects, or the load now
	// if higher (scaling in is the autoscaler's to decide, not the
	// forecast's), times their GPUs per replica.
	InferenceGPUs int64
	// LendableLow is what the pool could lend in the step by this round's
	// cautious forecast (the peak of the load now, the trend and the
	// profile); LendableHigh, by the profile's expectation alone. Both leave
	// aside what the gate holds back.
	LendableLow, LendableHigh int64
}

// Outlook forecasts the pool over [now, now+span) in steps of step, from
// what the round learned of each service: for people deciding when to run,
// not for lending (rounds decide that). d is the round's decision for obs.
func (p *Planner) Outlook(obs Observation, d Decision, span, step time.Duration) []OutlookPoint {
	if step <= 0 || span <= 0 {
		return nil
	}
	now := obs.Now
	out := make([]OutlookPoint, 0, int(span/step))
	for from := now; from.Before(now.Add(span)); from = from.Add(step) {
		expected := func(s ServiceDecision) demand.Forecast {
			if p.cfg.WithoutProfile || s.profile == nil {
				return demand.Now(s.load)
			}
			if v, ok := s.profile.PeakOver(from, step); ok {
				return demand.Forecast{Peak: v, Profile: v}
			}
			return demand.Now(s.load)
		}
		cautious := func(s ServiceDecision) demand.Forecast {
			return demand.PeakForecastFrom(now, from, s.load, step, s.trend, s.profile)
		}
		pt := OutlookPoint{Time: from}
		w := window{from, step}
		for _, need := range p.needs(d.Services, expected, w) {
			pt.InferenceGPUs += int64(need.Needed) * need.GPUsPerReplica
		}
		pt.LendableLow = lendable(obs.Nodes, harvest.MakePlan(obs.Nodes, p.headroomFor(d.Services, cautious, w)))
		pt.LendableHigh = max(pt.LendableLow, lendable(obs.Nodes, harvest.MakePlan(obs.Nodes, p.headroomFor(d.Services, expected, w))))
		out = append(out, pt)
	}
	return out
}

// lendable sums the GPUs a plan lets the pool's nodes lend.
func lendable(nodes []harvest.Node, plan harvest.Plan) int64 {
	var sum int64
	for _, n := range nodes {
		if n.InPool {
			sum += plan.Nodes[n.Name].HarvestableGPUs
		}
	}
	return sum
}
