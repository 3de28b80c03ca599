package round

import (
	"slices"
	"time"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/availability"
	"github.com/gleaner-dev/gleaner/pkg/demand"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
)

// availabilityOf forecasts the availability of every open node, every
// availability.Every, recording each forecast to learn from; between, it
// gives the last one for the nodes still open.
func (p *Planner) availabilityOf(v *view, plan harvest.Plan) []availability.Availability {
	a := &p.avail
	now := v.now
	var poolGPUs int64
	for _, n := range v.nodes {
		if n.InPool {
			poolGPUs += n.AllocatableGPUs
		}
	}
	if poolGPUs > 0 {
		a.Bound(poolGPUs) // a restored record weighs no more than this pool could give it
	}
	a.Observe(now, plan)
	if !a.Due(now) {
		return a.Last(plan)
	}
	a.Judge(now)
	var open []availability.Availability
	var at []int // each open node's place in the nodes
	for i, n := range v.nodes {
		if np := plan.Nodes[n.Name]; np.Verdict.State == api.HarvestOpen && np.HarvestableGPUs > 0 {
			open = append(open, availability.Availability{Node: n.Name, GPUs: np.HarvestableGPUs, For: availability.Horizon})
			at = append(at, i)
		}
	}
	if len(open) == 0 {
		return a.Give(now, nil, [len(availability.Levels)][]time.Duration{}, -1)
	}
	// closes is when the harvest windows close, outside which nothing is lent
	// (found at the start of the first step outside them, so no earlier than
	// they do); -1: not within the horizon.
	closes := time.Duration(-1)
	for at := time.Duration(0); at <= availability.Horizon; at += availability.Step {
		if !p.cfg.Windows.Open(now.Add(at)) {
			closes = at
			break
		}
	}
	return a.Give(now, open, firstNeeds(v, at, open), closes)
}

// firstNeeds is, for each of availability.Levels and each open node (at
// nodes[at[i]]), the forecast time until the node next owes any of the GPUs
// it lends, in steps of availability.Step, with every service's forecast
// load scaled by the level; availability.Horizon when not within it. Each
// step's forecasts are made once, and scaled for each level.
func firstNeeds(v *view, at []int, open []availability.Availability) [len(availability.Levels)][]time.Duration {
	var out [len(availability.Levels)][]time.Duration
	var headroom [len(availability.Levels)][]harvest.Headroom
	var plans [len(availability.Levels)][]harvest.NodePlan
	var left [len(availability.Levels)]int // nodes not yet needed at each level
	for l := range out {
		left[l] = len(open)
		out[l] = make([]time.Duration, len(open))
		for i := range open {
			out[l][i] = availability.Horizon
		}
	}
	scaled := make([]demand.Forecast, len(v.services))
	for step := availability.Step; slices.Max(left[:]) > 0 && step <= availability.Horizon; step += availability.Step {
		forecasts := v.pooledForecasts(whatIf{from: v.now.Add(step - availability.Step), length: availability.Step})
		for l, load := range availability.Levels {
			if left[l] == 0 {
				continue
			}
			for i, f := range forecasts {
				scaled[i] = f.Scaled(load)
			}
			h := v.headroomFor(scaled)
			plans[l], headroom[l] = v.nodePlans(plans[l], headroom[l], h), h
			for i, av := range open {
				if out[l][i] == availability.Horizon && plans[l][at[i]].HarvestableGPUs < av.GPUs {
					out[l][i] = step - availability.Step
					left[l]--
				}
			}
		}
	}
	return out
}
