package round

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/demand"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
)

// Availability says how long an open node's lendable GPUs are expected to
// stay lendable: when the forecast next needs any of them, and the chance
// that they stay lent for an hour and for four, learned from how often nodes
// given the same forecast did.
type Availability struct {
	Node string
	// GPUs is what the node lends now (its harvestable GPUs).
	GPUs int64
	// For is the forecast time until the node next owes any of them, in steps
	// of AvailabilityStep; AvailabilityHorizon when not within it.
	For time.Duration
	// Survive are the probabilities that the node keeps lending all of GPUs
	// for each of SurvivalHorizons.
	Survive [len(SurvivalHorizons)]float64
}

// Published is a as nodes carry it (api.AnnotationAvailability).
func (a Availability) Published() harvest.Availability {
	return harvest.Availability{For: a.For, AtLeast: a.For >= AvailabilityHorizon, Survive1h: a.Survive[0], Survive4h: a.Survive[1]}
}

// SurvivalHorizons are the spans whose survival Availability gives.
var SurvivalHorizons = [...]time.Duration{time.Hour, 4 * time.Hour}

const (
	// AvailabilityHorizon is how far ahead availability is forecast.
	AvailabilityHorizon = 4 * time.Hour
	// AvailabilityStep is how finely the time until a node is needed is found.
	AvailabilityStep = 15 * time.Minute
	// AvailabilityEvery is how often availability is forecast again (and a
	// forecast recorded, to learn from what followed).
	AvailabilityEvery = 5 * time.Minute
)

// forBuckets are the upper bounds of the ranges of For whose survival is
// learned apart; a For beyond the last falls in one more bucket.
var forBuckets = [...]time.Duration{15 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 3 * time.Hour, AvailabilityHorizon}

func forBucket(d time.Duration) int {
	for i, b := range forBuckets {
		if d <= b && d < AvailabilityHorizon {
			return i
		}
	}
	return len(forBuckets)
}

// CalibrationBucket is what became of the GPUs given a survival probability
// in [From, To): GPU-hours given it (GPUs x AvailabilityEvery each time it was
// given) and the fraction of them that did survive.
type CalibrationBucket struct {
	From      float64 `json:"from"`
	To        float64 `json:"to"`
	GPUHours  float64 `json:"gpuHours"`
	Predicted float64 `json:"predicted"` // GPU-hour-weighted mean of the probabilities given
	Survived  float64 `json:"survived"`  // fraction of GPUHours that survived
}

// availability is what the planner remembers to forecast and learn availability.
type availability struct {
	at   time.Time
	last []Availability
	// seen[bucket][horizon]: GPUs given that For bucket, and how many survived.
	seen [len(forBuckets) + 1][len(SurvivalHorizons)]struct{ gpus, survived float64 }
	// pending forecasts not yet judged at every horizon.
	pending []availRecord
	// drops: per node, the times its lendable GPUs fell and to what, within
	// AvailabilityHorizon of now.
	drops map[string][]drop
	lent  map[string]int64 // each node's lendable GPUs in the last round
	// calibration[horizon][decile]
	calibration [len(SurvivalHorizons)][10]struct{ gpuHours, predicted, survived float64 }
}

type availRecord struct {
	at     time.Time
	node   string
	gpus   int64
	bucket int
	p      [len(SurvivalHorizons)]float64
	judged [len(SurvivalHorizons)]bool
	// certain: p is 0 because the harvest windows close within the span.
	certain [len(SurvivalHorizons)]bool
}

type drop struct {
	at   time.Time
	gpus int64
}

// observeLendable notes each node's lendable GPUs this round, to judge
// earlier forecasts by.
func (a *availability) observeLendable(now time.Time, plan harvest.Plan) {
	if a.lent == nil {
		a.lent, a.drops = map[string]int64{}, map[string][]drop{}
	}
	for name, np := range plan.Nodes {
		g := np.HarvestableGPUs
		if np.Verdict.State != api.HarvestOpen {
			g = 0
		}
		if prev, ok := a.lent[name]; ok && g < prev {
			a.drops[name] = append(a.drops[name], drop{at: now, gpus: g})
		}
		a.lent[name] = g
	}
	for name := range a.lent {
		if _, ok := plan.Nodes[name]; !ok {
			delete(a.lent, name)
			a.drops[name] = append(a.drops[name], drop{at: now, gpus: 0})
		}
	}
}

// judge settles the pending forecasts whose spans ended by now.
func (a *availability) judge(now time.Time) {
	kept := a.pending[:0]
	for _, r := range a.pending {
		done := true
		for h, span := range SurvivalHorizons {
			if r.judged[h] {
				continue
			}
			end := r.at.Add(span)
			if now.Before(end) {
				done = false
				continue
			}
			survived := !slices.ContainsFunc(a.drops[r.node], func(d drop) bool { return d.at.After(r.at) && !d.at.After(end) && d.gpus < r.gpus })
			s := &a.seen[r.bucket][h]
			if r.certain[h] {
				s = &struct{ gpus, survived float64 }{} // not learned from
			}
			s.gpus += float64(r.gpus)
			gpuHours := float64(r.gpus) * AvailabilityEvery.Hours()
			c := &a.calibration[h][min(int(r.p[h]*10), 9)]
			c.gpuHours += gpuHours
			c.predicted += gpuHours * r.p[h]
			if survived {
				s.survived += float64(r.gpus)
				c.survived += gpuHours
			}
			r.judged[h] = true
		}
		if !done {
			kept = append(kept, r)
		}
	}
	clear(a.pending[len(kept):])
	a.pending = kept
	for name, ds := range a.drops {
		i := 0
		for i < len(ds) && now.Sub(ds[i].at) > AvailabilityHorizon {
			i++
		}
		if i == len(ds) {
			delete(a.drops, name)
		} else {
			a.drops[name] = ds[i:]
		}
	}
}

// survival is the learned chance that GPUs given a For in bucket survive
// horizon h. What the record lacks is made up by one GPU's worth of the
// forecast's own word (For reaching past the span), so a new planner follows
// its forecast and an experienced one its record.
func (a *availability) survival(bucket, h int, forecastFor time.Duration) float64 {
	prior := 0.0
	if forecastFor >= SurvivalHorizons[h] {
		prior = 1
	}
	s := a.seen[bucket][h]
	return (s.survived + prior) / (s.gpus + 1)
}

// availabilityOf forecasts the availability of every open node, every
// AvailabilityEvery, recording each forecast to learn from; between, it gives
// the last one for the nodes still open (a node opened since has none yet).
func (p *Planner) availabilityOf(obs Observation, d Decision) []Availability {
	a := &p.avail
	now := obs.Now
	a.observeLendable(now, d.Plan)
	if !a.at.IsZero() && now.Sub(a.at) < AvailabilityEvery {
		return slices.DeleteFunc(slices.Clone(a.last), func(av Availability) bool {
			return d.Plan.Nodes[av.Node].Verdict.State != api.HarvestOpen
		})
	}
	a.at = now
	a.judge(now)
	var open []Availability
	var at []int // each open node's place in obs.Nodes
	for i, n := range obs.Nodes {
		if np := d.Plan.Nodes[n.Name]; np.Verdict.State == api.HarvestOpen && np.HarvestableGPUs > 0 {
			open = append(open, Availability{Node: n.Name, GPUs: np.HarvestableGPUs, For: AvailabilityHorizon})
			at = append(at, i)
		}
	}
	if len(open) == 0 {
		a.last = nil
		return nil
	}
	var headroom []harvest.Headroom
	var plans []harvest.NodePlan
	left := len(open)
	// closes is when the harvest windows close, outside which nothing is lent
	// (found at the start of the first step outside them, so no earlier than
	// they do); -1: not within the horizon.
	closes := time.Duration(-1)
	for at := time.Duration(0); at <= AvailabilityHorizon; at += AvailabilityStep {
		if !p.cfg.Windows.Open(now.Add(at)) {
			closes = at
			break
		}
	}
	for step := AvailabilityStep; left > 0 && step <= AvailabilityHorizon; step += AvailabilityStep {
		h := p.headroomFor(d.Services, func(s ServiceDecision) demand.Forecast {
			if p.cfg.Oracle != nil {
				return demand.Now(p.cfg.Oracle(s.Key, now.Add(step-AvailabilityStep), AvailabilityStep))
			}
			return demand.PeakForecastFrom(now, now.Add(step-AvailabilityStep), s.load, AvailabilityStep, s.trend, s.profile)
		}, window{now.Add(step - AvailabilityStep), AvailabilityStep})
		if plans == nil || !slices.Equal(h, headroom) {
			headroom, plans = h, harvest.NodePlans(plans, obs.Nodes, h)
		}
		for i := range open {
			av := &open[i]
			if av.For == AvailabilityHorizon && plans[at[i]].HarvestableGPUs < av.GPUs {
				av.For = step - AvailabilityStep
				left--
			}
		}
	}
	for i := range open {
		av := &open[i]
		// Learned by what the forecast says; the windows' close is certain.
		b := forBucket(av.For)
		if closes >= 0 && closes < av.For {
			av.For = closes
		}
		r := availRecord{at: now, node: av.Node, gpus: av.GPUs, bucket: b}
		for h, span := range SurvivalHorizons {
			if closes >= 0 && closes <= span {
				// Certain: the windows close within the span. Nothing to
				// learn from it either.
				r.certain[h] = true
			} else {
				av.Survive[h] = a.survival(b, h, av.For)
			}
			r.p[h] = av.Survive[h]
		}
		a.pending = append(a.pending, r)
	}
	a.last = open
	return open
}

// Calibration is, per survival horizon, what became of the GPUs given each
// tenth of probability: the check that the probabilities mean what they say.
func (p *Planner) Calibration() [len(SurvivalHorizons)][]CalibrationBucket {
	var out [len(SurvivalHorizons)][]CalibrationBucket
	for h := range SurvivalHorizons {
		for i, c := range p.avail.calibration[h] {
			if c.gpuHours == 0 {
				continue
			}
			out[h] = append(out[h], CalibrationBucket{From: float64(i) / 10, To: float64(i+1) / 10, GPUHours: c.gpuHours,
				Predicted: c.predicted / c.gpuHours, Survived: c.survived / c.gpuHours})
		}
	}
	return out
}

// SurvivalCount is what the planner learned for one range of For: how many
// GPUs were given a forecast in it and, of them, how many kept being lent,
// for each of SurvivalHorizons (a forecast counts once judged at that span).
type SurvivalCount struct {
	// ForUpTo is the range's upper end; 0 for forecasts not within
	// AvailabilityHorizon.
	ForUpTo  time.Duration
	Given    [len(SurvivalHorizons)]int64
	Survived [len(SurvivalHorizons)]int64
}

// maxSurvivalGPUs bounds a restored count: a year of 100,000 GPUs judged
// every AvailabilityEvery is under 2^40.
const maxSurvivalGPUs = 1 << 40

// Survival is what the planner learned of its availability forecasts, one
// count per range of For that holds any: what a restart must not forget.
func (p *Planner) Survival() []SurvivalCount {
	var out []SurvivalCount
	for b := range p.avail.seen {
		c := SurvivalCount{}
		if b < len(forBuckets) {
			c.ForUpTo = forBuckets[b]
		}
		for h := range SurvivalHorizons {
			s := p.avail.seen[b][h]
			c.Given[h], c.Survived[h] = int64(math.Round(s.gpus)), int64(math.Round(s.survived))
		}
		if c.Given != [len(SurvivalHorizons)]int64{} {
			out = append(out, c)
		}
	}
	return out
}

// RestoreSurvival adds counts read back after a restart to what the planner
// learned since. A record with a range the planner does not know, a count
// out of bounds or more survived than given is refused whole, and nothing of
// it is added.
func (p *Planner) RestoreSurvival(counts []SurvivalCount) error {
	buckets := map[int]bool{}
	for _, c := range counts {
		b := len(forBuckets)
		if c.ForUpTo != 0 {
			b = slices.Index(forBuckets[:], c.ForUpTo)
			if b < 0 {
				return fmt.Errorf("survival record: no range ends at %v", c.ForUpTo)
			}
		}
		if buckets[b] {
			return fmt.Errorf("survival record: the range up to %v is there twice", c.ForUpTo)
		}
		buckets[b] = true
		for h, span := range SurvivalHorizons {
			if c.Given[h] < 0 || c.Given[h] > maxSurvivalGPUs || c.Survived[h] < 0 || c.Survived[h] > c.Given[h] {
				return fmt.Errorf("survival record: up to %v over %v, %d survived of %d given", c.ForUpTo, span, c.Survived[h], c.Given[h])
			}
		}
	}
	for _, c := range counts {
		b := len(forBuckets)
		if c.ForUpTo != 0 {
			b = slices.Index(forBuckets[:], c.ForUpTo)
		}
		for h := range SurvivalHorizons {
			p.avail.seen[b][h].gpus += float64(c.Given[h])
			p.avail.seen[b][h].survived += float64(c.Survived[h])
		}
	}
	return nil
}
