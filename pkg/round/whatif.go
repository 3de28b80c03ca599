package round

import (
	"slices"
	"time"

	"github.com/gleaner-dev/gleaner/pkg/demand"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
)

// A whatIf is the one question a round asks of its services, whoever asks
// it (the verdicts, notices, availability, the outlook): what would they
// need, and what could the pool lend, if each service's load over the
// window [from, from+length] were its forecast there of the given kind?
//
//	forecasts = each service's forecast of kind over the window,
//	            pooled over it when length > 0 (pooled)
//	needs     = replicas for the forecasts, with the safety margin kept for
//	            one service (replicasFor)
//	headroom  = the headroom replicas of the needs, placed by harvest.MakePlan
type whatIf struct {
	from   time.Time
	length time.Duration
	kind   forecastKind
}

// forecastKind is how a what-if forecasts a service's load.
type forecastKind int

const (
	// cautious is the peak of the load now, its trend and the learned
	// profile (demand.PeakForecastFrom): what lending is decided on. The
	// simulator's oracle replaces it with the load to come.
	cautious forecastKind = iota
	// expected is the learned profile's peak over the window alone, or the
	// load now where none is learned: what people are shown (Outlook).
	expected
	// loadNow is the load now and nothing more: what inference already waits for.
	loadNow
)

// view is one round's services, as assessed once, and its nodes: what its
// what-ifs are asked of.
type view struct {
	p        *Planner
	now      time.Time
	nodes    []harvest.Node
	services []ServiceDecision
}

// forecasts is each service's forecast for w, not yet pooled.
func (v *view) forecasts(w whatIf) []demand.Forecast {
	out := make([]demand.Forecast, len(v.services))
	for i := range v.services {
		out[i] = v.forecast(&v.services[i], w)
	}
	return out
}

func (v *view) forecast(s *ServiceDecision, w whatIf) demand.Forecast {
	switch w.kind {
	case loadNow:
		return demand.Now(s.load())
	case expected:
		if s.profile != nil {
			if peak, ok := s.profile.PeakOver(w.from, w.length); ok {
				return demand.Forecast{Peak: peak, Profile: peak}
			}
		}
		return demand.Now(s.load())
	}
	if oracle := v.p.cfg.Oracle; oracle != nil {
		return demand.Now(oracle(s.Key, w.from, w.length))
	}
	return demand.PeakForecastFrom(v.now, w.from, s.load(), w.length, s.trend, s.profile)
}

// pooledForecasts is forecasts for w, pooled over its window.
func (v *view) pooledForecasts(w whatIf) []demand.Forecast {
	f := v.forecasts(w)
	v.pool(f, w)
	return f
}

// headroom is the room the services need for w.
func (v *view) headroom(w whatIf) []harvest.Headroom {
	return v.headroomFor(v.pooledForecasts(w))
}

// plan is w's plan of every node.
func (v *view) plan(w whatIf) harvest.Plan {
	return harvest.MakePlan(v.nodes, v.headroom(w))
}

// headroomFor is the room the services need for their forecasts: their
// headroom replicas, in service order.
func (v *view) headroomFor(forecasts []demand.Forecast) []harvest.Headroom {
	needed, _ := v.replicasFor(forecasts)
	var out []harvest.Headroom
	for i, n := range needed {
		o := &v.services[i].observed
		out = appendHeadroom(out, &v.services[i], o.GPUsPerReplica, max(0, n-o.Current), false)
	}
	return out
}

// replicasFor is the replicas each service needs for its forecast, with the
// safety margin kept for one service only (unless Config.MarginPerService):
// the one whose margin asks the most GPUs (the first of equals; margined is
// its index, -1 for none). The margin is room for a rise the forecast did
// not see, and the pool's spare GPUs serve whichever service it comes to;
// kept for every service, margins add up across the services as if every
// one rose at once. Rises in several services at once are what the reclaim
// budget is for: a replica that finds no room gets lent GPUs back within it.
func (v *view) replicasFor(forecasts []demand.Forecast) (needed []int, margined int) {
	margin := v.p.cfg.margin()
	needed = make([]int, len(forecasts))
	margined = -1
	var most int64
	for i, f := range forecasts {
		o := &v.services[i].observed
		with := o.Needed(f.Planned(margin), margin)
		if v.p.cfg.MarginPerService {
			needed[i] = with
			continue
		}
		needed[i] = o.Needed(f.Planned(0), -1)
		if extra := int64(max(0, with-o.Current)-max(0, needed[i]-o.Current)) * o.GPUsPerReplica; extra > most {
			margined, most = i, extra
		}
	}
	if margined >= 0 {
		f, o := forecasts[margined], &v.services[margined].observed
		needed[margined] = o.Needed(f.Planned(margin), margin)
	}
	return needed, margined
}

// needsFor is replicasFor as each service's demand.Need, with its reason.
func (v *view) needsFor(forecasts []demand.Forecast) []demand.Need {
	_, margined := v.replicasFor(forecasts)
	margin := v.p.cfg.margin()
	out := make([]demand.Need, len(forecasts))
	for i, f := range forecasts {
		if v.p.cfg.MarginPerService || i == margined {
			out[i] = v.services[i].observed.Need(f.Planned(margin), margin)
		} else {
			out[i] = v.services[i].observed.Need(f.Planned(0), -1)
		}
	}
	return out
}

// pool scales the room the services' learned profiles keep above their
// loads now, all by one factor, so that together they keep what the pool's
// profile expects them to rise by at once over w (unless
// Config.ProfilePerService):
//
//	pooled     = the services whose profile is learned for every slot of w
//	room(i)    = gpus(profile(i) - load(i)), or 0 when the load is higher
//	pool       = demand.PoolProfile.PeakOver(w, the pooled services' learned peaks)
//	factor     = (pool - sum of gpus(load(i))) / sum of room(i), within [0, 1]
//	profile(i) = load(i) + factor x (profile(i) - load(i))
//
// Where the pool's ratio is not learned for every slot of w, or a service's
// load now is not whole, nothing is scaled: every service keeps room for its
// own peak. A service whose own profile is not learned through w (one new
// to the pool) keeps its own room and stays out of the sums. The trend and
// the load now are never scaled, and the margin is kept as replicasFor keeps it.
//
// The room is kept in GPUs for the pool's expected rise, not for each
// service's: when one service rises while another's load falls, the
// falling one's replicas stand idle until its autoscaler scales it in, and
// the rising one's new replica waits for lent GPUs to be evicted, within the
// reclaim budget. That, like a rise in several services at once, is what
// the budget is for; --headroom-profile-per-service keeps every service's
// room whole instead.
func (v *view) pool(forecasts []demand.Forecast, w whatIf) {
	p := v.p
	if p.cfg.ProfilePerService || w.length <= 0 || p.pool.Learned() == 0 {
		return
	}
	pooled := make([]bool, len(v.services))
	var load, rooms float64
	for i := range v.services {
		s := &v.services[i]
		if !s.observed.Complete {
			return
		}
		if s.profile == nil || !s.profile.LearnedOver(w.from, w.length) {
			continue
		}
		pooled[i] = true
		load += s.load() * s.gpusPerLoad
		rooms += max(forecasts[i].Profile-s.load(), 0) * s.gpusPerLoad
	}
	if !(rooms > 0) {
		return
	}
	peak, ok := p.pool.PeakOver(w.from, w.length, func(slot int) (sum, largest float64) {
		for i := range v.services {
			if s := &v.services[i]; pooled[i] {
				peak, _ := s.profile.PeakAt(slot)
				sum += peak * s.gpusPerLoad
				largest = max(largest, peak*s.gpusPerLoad)
			}
		}
		return sum, largest
	})
	if !ok {
		return
	}
	factor := min(max((peak-load)/rooms, 0), 1)
	for i := range v.services {
		if s := &v.services[i]; pooled[i] && forecasts[i].Profile > s.load() {
			forecasts[i].Profile = s.load() + factor*(forecasts[i].Profile-s.load())
		}
	}
}

// nodePlans plans every node for headroom into dst, unless headroom is the
// same as the last's (then dst is the plan already): for the callers that
// plan step after step, where most steps keep the same room.
func (v *view) nodePlans(dst []harvest.NodePlan, last, headroom []harvest.Headroom) []harvest.NodePlan {
	if dst != nil && slices.Equal(headroom, last) {
		return dst
	}
	return harvest.NodePlans(dst, v.nodes, headroom)
}

// appendHeadroom adds the room a service keeps for its headroom replicas, if
// any: one form for every plan of a round, so that equal needs give equal
// headroom (nodePlans reuses a plan when they do). now: the plan is this
// round's (what it takes back, and the nodes whose pods it warns), so while
// a replica of any service waits (pending), room that must be reclaimed is
// taken where lent pods leave soonest (harvest.Headroom.Waiting). The
// look-ahead what-ifs, which time the notices, keep the name order.
func appendHeadroom(out []harvest.Headroom, s *ServiceDecision, gpusPerReplica int64, spare int, now bool) []harvest.Headroom {
	if spare > 0 {
		out = append(out, harvest.Headroom{Service: s.Key, GPUsPerReplica: gpusPerReplica, Replicas: spare, DRA: s.dra,
			Waiting: now && s.observed.Pending > 0})
	}
	return out
}
