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
// as far from being needed did lately (loadLevels) and recalibrated by what
// became of the chances given (recalibration).
type Availability struct {
	Node string
	// GPUs is what the node lends now (its harvestable GPUs).
	GPUs int64
	// For is the forecast time until the node next owes any of them, in steps
	// of AvailabilityStep; AvailabilityHorizon when not within it.
	For time.Duration
	// Survive are the probabilities that the node keeps lending all of GPUs
	// for each of SurvivalHorizons; harvest.NotLearned until the planner has
	// judged a forecast over the span (it claims nothing it has not learned).
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

// loadLevels are the loads, as multiples of what the services are forecast
// to carry, by which a node's survival over a span is learned apart. A
// node's level is the first at which the forecast, so scaled, needs any of
// the node's lendable GPUs within the span: above 1, how far the loads must
// rise past the forecast for the node to lose them; up to 1, how far they
// may fall short of it while the node still does (never below the load now,
// which demand.Assess keeps room for whatever the forecast). The nodes
// needed at none of them are learned apart too.
//
// The time until the node is needed says less: the forecasts that a node
// will not be needed within the span hold most of the GPUs, and whether
// they hold depends on how far the loads stand from needing it.
var loadLevels = [...]float64{0.5, 0.75, 0.9, 1, 1.1, 1.25, 1.5, 2}

// asForecast is the index of 1 in loadLevels: the forecast as it is.
var asForecast = slices.Index(loadLevels[:], 1)

func init() {
	if asForecast < 0 || !slices.IsSorted(loadLevels[:]) {
		panic("round: loadLevels must be sorted and hold 1")
	}
}

// SurvivalHalfLife is how fast what the planner learned of its availability
// forecasts fades: the forecast's errors come in spells of days (a week
// whose traffic outgrows the learned profiles), and the record follows them.
const SurvivalHalfLife = 48 * time.Hour

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
	// learned: a forecast over the span has been judged (or a record of
	// them restored), so the planner gives chances for it.
	learned [len(SurvivalHorizons)]bool
	// seen[level][horizon]: GPUs first needed within the horizon's span at
	// loadLevels[level] (len(loadLevels): at none), and how many of them
	// survived it, faded by SurvivalHalfLife up to fadedAt.
	seen    [len(loadLevels) + 1][len(SurvivalHorizons)]struct{ gpus, survived float64 }
	recal   [len(SurvivalHorizons)]recalibration // faded with seen
	fadedAt time.Time
	// pending forecasts not yet judged at every horizon.
	pending []availRecord
	// drops: per node, the times its lendable GPUs fell and to what, within
	// AvailabilityHorizon of now.
	drops map[string][]drop
	lent  map[string]int64 // each node's lendable GPUs in the last round
	// calibration[horizon][day][decile]: the forecasts made on each day
	// since calibratedFrom, by the tenth of probability they gave (480 bytes
	// a day; only the simulator reads it).
	calibration    [len(SurvivalHorizons)][][10]calibrationSums
	calibratedFrom time.Time
}

type calibrationSums struct{ gpuHours, predicted, survived float64 }

// add counts gpuHours given probability p, of which the fraction survived.
func (c *calibrationSums) add(gpuHours, p, survived float64) {
	c.gpuHours += gpuHours
	c.predicted += gpuHours * p
	c.survived += gpuHours * survived
}

type availRecord struct {
	at   time.Time
	node string
	gpus int64
	// level: the index of the first of loadLevels at which the node was
	// needed within each span.
	level [len(SurvivalHorizons)]int
	// raw is the chance the record of the level gave, p the one published
	// (recalibrated; harvest.NotLearned: none).
	raw, p [len(SurvivalHorizons)]float64
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

// judge settles the pending forecasts whose spans ended by now, after
// fading what was learned before.
func (a *availability) judge(now time.Time) {
	if !a.fadedAt.IsZero() && now.After(a.fadedAt) {
		f := fading(now.Sub(a.fadedAt))
		for l := range a.seen {
			for h := range a.seen[l] {
				a.seen[l][h].gpus *= f
				a.seen[l][h].survived *= f
			}
		}
		for h := range a.recal {
			a.recal[h].fade(f)
		}
	}
	a.fadedAt = now
	var refit [len(SurvivalHorizons)]bool
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
			a.learned[h] = true
			r.judged[h] = true
			fraction := 0.0
			if survived {
				fraction = 1
			}
			if r.p[h] != harvest.NotLearned {
				a.calibrated(r.at, h, r.p[h]).add(float64(r.gpus)*AvailabilityEvery.Hours(), r.p[h], fraction)
			}
			if r.certain[h] {
				continue // not learned from
			}
			s := &a.seen[r.level[h]][h]
			s.gpus += float64(r.gpus)
			s.survived += float64(r.gpus) * fraction
			if r.p[h] != harvest.NotLearned {
				a.recal[h].add(r.raw[h], float64(r.gpus), fraction)
				refit[h] = true
			}
		}
		if !done {
			kept = append(kept, r)
		}
	}
	clear(a.pending[len(kept):])
	a.pending = kept
	for h := range refit {
		if refit[h] {
			a.recal[h].fit()
		}
	}
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

// calibrated is where a forecast made at `at` giving p over horizon h is
// checked: its day's tenth of probability.
func (a *availability) calibrated(at time.Time, h int, p float64) *calibrationSums {
	if a.calibratedFrom.IsZero() {
		a.calibratedFrom = at
	}
	day := max(int(at.Sub(a.calibratedFrom)/(24*time.Hour)), 0)
	for len(a.calibration[h]) <= day {
		a.calibration[h] = append(a.calibration[h], [10]calibrationSums{})
	}
	return &a.calibration[h][day][min(int(p*10), 9)]
}

// fading is what is left of a record after d: half in SurvivalHalfLife.
func fading(d time.Duration) float64 {
	return math.Exp2(-float64(d) / float64(SurvivalHalfLife))
}

// survival is the learned chance that GPUs first needed within horizon h's
// span at loadLevels[level] survive it. What the record lacks is made up by
// one GPU's worth of the forecast's own word (kept: the forecast as it is
// does not need them within the span), so a new planner follows its
// forecast and an experienced one its record.
func (a *availability) survival(level, h int, kept bool) float64 {
	prior := 0.0
	if kept {
		prior = 1
	}
	s := a.seen[level][h]
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
	needed := p.firstNeeds(obs, d, at, open)
	for i := range open {
		av := &open[i]
		// Learned by the forecast's levels; the windows' close is certain.
		av.For = needed[asForecast][i]
		if closes >= 0 && closes < av.For {
			av.For = closes
		}
		r := availRecord{at: now, node: av.Node, gpus: av.GPUs}
		for h, span := range SurvivalHorizons {
			r.level[h] = len(loadLevels)
			for l := range loadLevels {
				if needed[l][i] < span {
					r.level[h] = l
					break
				}
			}
			switch {
			case closes >= 0 && closes <= span:
				// Certain: the windows close within the span. Nothing to
				// learn from it either.
				r.certain[h] = true
			case !a.learned[h]:
				av.Survive[h] = harvest.NotLearned
			default:
				r.raw[h] = a.survival(r.level[h], h, needed[asForecast][i] >= span)
				av.Survive[h] = a.recal[h].apply(r.raw[h])
			}
			r.p[h] = av.Survive[h]
		}
		a.pending = append(a.pending, r)
	}
	a.last = open
	return open
}

// firstNeeds is, for each of loadLevels and each open node (at
// obs.Nodes[at[i]]), the forecast time until the node next owes any of the
// GPUs it lends, in steps of AvailabilityStep, with every service's forecast
// load scaled by the level; AvailabilityHorizon when not within it. Each
// step's forecasts are made once, and scaled for each level.
func (p *Planner) firstNeeds(obs Observation, d Decision, at []int, open []Availability) [len(loadLevels)][]time.Duration {
	now := obs.Now
	var out [len(loadLevels)][]time.Duration
	var headroom [len(loadLevels)][]harvest.Headroom
	var plans [len(loadLevels)][]harvest.NodePlan
	var left [len(loadLevels)]int // nodes not yet needed at each level
	for l := range out {
		left[l] = len(open)
		out[l] = make([]time.Duration, len(open))
		for i := range open {
			out[l][i] = AvailabilityHorizon
		}
	}
	scaled := make([]demand.Forecast, len(d.Services))
	for step := AvailabilityStep; slices.Max(left[:]) > 0 && step <= AvailabilityHorizon; step += AvailabilityStep {
		from := now.Add(step - AvailabilityStep)
		forecasts := p.forecasts(d.Services, func(s ServiceDecision) demand.Forecast {
			if p.cfg.Oracle != nil {
				return demand.Now(p.cfg.Oracle(s.Key, from, AvailabilityStep))
			}
			return demand.PeakForecastFrom(now, from, s.load, AvailabilityStep, s.trend, s.profile)
		}, window{from, AvailabilityStep})
		for l, load := range loadLevels {
			if left[l] == 0 {
				continue
			}
			for i, f := range forecasts {
				scaled[i] = f.Scaled(load)
			}
			h := headroomOf(d.Services, p.needsOf(d.Services, scaled))
			if plans[l] == nil || !slices.Equal(h, headroom[l]) {
				headroom[l], plans[l] = h, harvest.NodePlans(plans[l], obs.Nodes, h)
			}
			for i, av := range open {
				if out[l][i] == AvailabilityHorizon && plans[l][at[i]].HarvestableGPUs < av.GPUs {
					out[l][i] = step - AvailabilityStep
					left[l]--
				}
			}
		}
	}
	return out
}

// Calibration is, per survival horizon and per day since the first
// forecast judged, what became of the GPUs given each tenth of probability:
// the check that the probabilities mean what they say. Kept by day so that a
// reader can tell how much of a gap a few days' traffic makes
// (SumCalibration adds the days up).
func (p *Planner) Calibration() [len(SurvivalHorizons)][][]CalibrationBucket {
	var out [len(SurvivalHorizons)][][]CalibrationBucket
	for h := range SurvivalHorizons {
		for _, day := range p.avail.calibration[h] {
			out[h] = append(out[h], bucketsOf(day))
		}
	}
	return out
}

// SumCalibration is the buckets of several days (Calibration) added up, one
// per tenth of probability that any day holds, in order.
func SumCalibration(days [][]CalibrationBucket) []CalibrationBucket {
	var sum [10]calibrationSums
	for _, day := range days {
		for _, b := range day {
			sum[min(int(b.From*10+0.5), 9)].add(b.GPUHours, b.Predicted, b.Survived)
		}
	}
	return bucketsOf(sum)
}

// bucketsOf is the tenths of probability that hold any GPU-hours, in order.
func bucketsOf(tenths [10]calibrationSums) []CalibrationBucket {
	var out []CalibrationBucket
	for i, c := range tenths {
		if c.gpuHours > 0 {
			out = append(out, CalibrationBucket{From: float64(i) / 10, To: float64(i+1) / 10, GPUHours: c.gpuHours,
				Predicted: c.predicted / c.gpuHours, Survived: c.survived / c.gpuHours})
		}
	}
	return out
}

// SurvivalCount is what the planner learned for one of loadLevels: how many
// GPUs were forecast to be first needed within a span at that load and, of
// them, how many kept being lent, for each of SurvivalHorizons (a forecast
// counts once judged at that span), faded by SurvivalHalfLife.
type SurvivalCount struct {
	// NeededAtPercent is the level, as a percentage of the forecast load; 0
	// for the GPUs needed at none of the levels.
	NeededAtPercent int
	Given           [len(SurvivalHorizons)]int64
	Survived        [len(SurvivalHorizons)]int64
}

// maxSurvivalGPUs bounds a restored count, far above what a faded record
// holds: 100,000 GPUs judged every AvailabilityEvery come to about 8e7 in
// it.
const maxSurvivalGPUs = 1 << 40

// checkJudged checks restored counts of GPUs given a chance over each of
// SurvivalHorizons and of those that survived: within bounds, and no more
// survived than given.
func checkJudged(given, survived [len(SurvivalHorizons)]int64) error {
	for h, span := range SurvivalHorizons {
		if given[h] < 0 || given[h] > maxSurvivalGPUs || survived[h] < 0 || survived[h] > given[h] {
			return fmt.Errorf("over %v, %d survived of %d given", span, survived[h], given[h])
		}
	}
	return nil
}

// levelPercent is loadLevels[l] as SurvivalCount.NeededAtPercent says it.
func levelPercent(l int) int {
	if l == len(loadLevels) {
		return 0
	}
	return int(math.Round(loadLevels[l] * 100))
}

// levelOf is the index in availability.seen of the level a
// SurvivalCount.NeededAtPercent names; -1 for none.
func levelOf(percent int) int {
	for l := 0; l <= len(loadLevels); l++ {
		if levelPercent(l) == percent {
			return l
		}
	}
	return -1
}

// Survival is what the planner learned of its availability forecasts, one
// count per load level that holds any: what a restart must not forget.
func (p *Planner) Survival() []SurvivalCount {
	var out []SurvivalCount
	for l := range p.avail.seen {
		c := SurvivalCount{NeededAtPercent: levelPercent(l)}
		for h := range SurvivalHorizons {
			s := p.avail.seen[l][h]
			c.Given[h], c.Survived[h] = int64(math.Round(s.gpus)), int64(math.Round(s.survived))
		}
		if c.Given != [len(SurvivalHorizons)]int64{} {
			out = append(out, c)
		}
	}
	return out
}

// RestoreSurvival adds counts read back after a restart, published at
// (zero: unknown), to what the planner learned since, faded for the time
// between. A record with a level the planner does not know, a count out of
// bounds or more survived than given is refused whole, and nothing of it is
// added.
func (p *Planner) RestoreSurvival(counts []SurvivalCount, at time.Time) error {
	levels := make([]int, len(counts))
	for i, c := range counts {
		l := levelOf(c.NeededAtPercent)
		if l < 0 {
			return fmt.Errorf("survival record: no load level of %d%%", c.NeededAtPercent)
		}
		if slices.Contains(levels[:i], l) {
			return fmt.Errorf("survival record: the level of %d%% is there twice", c.NeededAtPercent)
		}
		levels[i] = l
		if err := checkJudged(c.Given, c.Survived); err != nil {
			return fmt.Errorf("survival record: at %d%% %w", c.NeededAtPercent, err)
		}
	}
	a := &p.avail
	f := a.restoredFading(at)
	for i, c := range counts {
		for h := range SurvivalHorizons {
			a.seen[levels[i]][h].gpus += f * float64(c.Given[h])
			a.seen[levels[i]][h].survived += f * float64(c.Survived[h])
			a.learned[h] = a.learned[h] || c.Given[h] > 0
		}
	}
	return nil
}

// restoredFading is how much a record published at (zero: unknown) has
// faded by what the planner learned since; when it learned nothing yet, its
// first judgement fades the record from at.
func (a *availability) restoredFading(at time.Time) float64 {
	switch {
	case at.IsZero():
	case a.fadedAt.IsZero():
		a.fadedAt = at
	case at.Before(a.fadedAt):
		return fading(a.fadedAt.Sub(at))
	}
	return 1
}
