package round

import (
	"time"

	"github.com/gleaner-dev/gleaner/pkg/harvest"
)

// OutlookPoint is the forecast of one step of the outlook.
type OutlookPoint struct {
	// Time starts the step.
	Time time.Time
	// ServingGPUs is what the services are expected to need in the step:
	// replicas for the load their learned profile expects, or the load now
	// if higher (scaling in is the autoscaler's to decide, not the
	// forecast's), times their GPUs per replica.
	ServingGPUs int64
	// LendableLow is what the pool could lend in the step by this round's
	// cautious forecast (the peak of the load now, the trend and the
	// profile); LendableHigh, by the profile's expectation alone. Both leave
	// aside what the gate holds back.
	LendableLow, LendableHigh int64
}

// Outlook forecasts the pool over [now, now+span) in steps of step, from
// what the round that decided d learned of each service: for people
// deciding when to run, not for lending (rounds decide that). Ask it before
// the planner's next round. span and step are in the profiles' time
// (Config.ProfileClock): a demo's outlook of a day covers its compressed day.
func (p *Planner) Outlook(d Decision, span, step time.Duration) []OutlookPoint {
	v := d.view
	span, step = p.cfg.ProfileClock.Wall(span), p.cfg.ProfileClock.Wall(step)
	if step <= 0 || span <= 0 || v == nil {
		return nil
	}
	out := make([]OutlookPoint, 0, int(span/step))
	for from := v.now; from.Before(v.now.Add(span)); from = from.Add(step) {
		pt := OutlookPoint{Time: from}
		expected := v.pooledForecasts(whatIf{from: from, length: step, kind: expected})
		needed, _ := v.replicasFor(expected)
		for i, n := range needed {
			pt.ServingGPUs += int64(n) * v.services[i].observed.GPUsPerReplica
		}
		pt.LendableLow = lendable(v.nodes, v.plan(whatIf{from: from, length: step}))
		pt.LendableHigh = max(pt.LendableLow, lendable(v.nodes, harvest.MakePlan(v.nodes, v.headroomFor(expected))))
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
