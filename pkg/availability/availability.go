// Package availability forecasts how long an open node's lent GPUs stay
// lent, and learns how far to trust that forecast: each forecast is recorded
// and judged once its span has passed, by how far the loads stood from
// needing the node (Levels), and the chances it gives are recalibrated by
// what became of the chances given. The planning round (pkg/round) finds
// when each node is needed; this package keeps the record. It is pure:
// plain values and a clock in, no API client.
package availability

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
)

// Availability says how long an open node's lendable GPUs are expected to
// stay lendable: when the forecast next needs any of them, and the chance
// that they stay lent for an hour and for four, learned from how often nodes
// as far from being needed did lately (Levels) and recalibrated by what
// became of the chances given (recalibration).
type Availability struct {
	Node string
	// GPUs is what the node lends now (its harvestable GPUs).
	GPUs int64
	// For is the forecast time until the node next owes any of them, in steps
	// of Step; Horizon when not within it.
	For time.Duration
	// Survive are the probabilities that the node keeps lending all of GPUs
	// for each of SurvivalHorizons; harvest.NotLearned until the planner has
	// judged a forecast over the span (it claims nothing it has not learned).
	Survive [len(SurvivalHorizons)]float64
}

// Published is a as nodes carry it (api.AnnotationAvailability).
func (a Availability) Published() harvest.Availability {
	return harvest.Availability{For: a.For, AtLeast: a.For >= Horizon, Survive1h: a.Survive[0], Survive4h: a.Survive[1]}
}

// SurvivalHorizons are the spans whose survival Availability gives.
var SurvivalHorizons = [...]time.Duration{time.Hour, 4 * time.Hour}

const (
	// Horizon is how far ahead availability is forecast.
	Horizon = 4 * time.Hour
	// Step is how finely the time until a node is needed is found.
	Step = 15 * time.Minute
	// Every is how often availability is forecast again (and a forecast
	// recorded, to learn from what followed).
	Every = 5 * time.Minute
)

// Levels are the loads, as multiples of what the services are forecast
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
var Levels = [...]float64{0.5, 0.75, 0.9, 1, 1.1, 1.25, 1.5, 2}

// AsForecast is the index of 1 in Levels: the forecast as it is.
var AsForecast = slices.Index(Levels[:], 1)

func init() {
	if AsForecast < 0 || !slices.IsSorted(Levels[:]) {
		panic("availability: Levels must be sorted and hold 1")
	}
}

// SurvivalHalfLife is how fast what the planner learned of its availability
// forecasts fades: the forecast's errors come in spells of days (a week
// whose traffic outgrows the learned profiles), and the record follows them.
const SurvivalHalfLife = 48 * time.Hour

// CalibrationBucket is what became of the GPUs given a survival probability
// in [From, To): GPU-hours given it (GPUs x Every each time it was
// given) and the fraction of them that did survive.
type CalibrationBucket struct {
	From      float64 `json:"from"`
	To        float64 `json:"to"`
	GPUHours  float64 `json:"gpuHours"`
	Predicted float64 `json:"predicted"` // GPU-hour-weighted mean of the probabilities given
	Survived  float64 `json:"survived"`  // fraction of GPUHours that survived
}

// Learner keeps the record of the availability forecasts given and what
// became of them, and gives each new forecast its chances. The zero value
// is ready to use; it is not safe for concurrent use.
type Learner struct {
	at   time.Time
	last []Availability
	// learned: a forecast over the span has been judged (or a record of
	// them restored), so the planner gives chances for it.
	learned [len(SurvivalHorizons)]bool
	// seen[level][horizon]: GPUs first needed within the horizon's span at
	// Levels[level] (len(Levels): at none), and how many of them
	// survived it, faded by SurvivalHalfLife up to fadedAt.
	seen    [len(Levels) + 1][len(SurvivalHorizons)]struct{ gpus, survived float64 }
	recal   [len(SurvivalHorizons)]recalibration // faded with seen
	fadedAt time.Time
	// pending forecasts not yet judged at every horizon.
	pending []availRecord
	// drops: per node, the times its lendable GPUs fell and to what, within
	// Horizon of now.
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
	// level: the index of the first of Levels at which the node was
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

// Observe notes each node's lendable GPUs under this round's plan, to judge
// earlier forecasts by.
func (a *Learner) Observe(now time.Time, plan harvest.Plan) {
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
func (a *Learner) judge(now time.Time) {
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
				a.calibrated(r.at, h, r.p[h]).add(float64(r.gpus)*Every.Hours(), r.p[h], fraction)
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
		for i < len(ds) && now.Sub(ds[i].at) > Horizon {
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
func (a *Learner) calibrated(at time.Time, h int, p float64) *calibrationSums {
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
// span at Levels[level] survive it. What the record lacks is made up by
// one GPU's worth of the forecast's own word (kept: the forecast as it is
// does not need them within the span), so a new planner follows its
// forecast and an experienced one its record.
func (a *Learner) survival(level, h int, kept bool) float64 {
	prior := 0.0
	if kept {
		prior = 1
	}
	s := a.seen[level][h]
	return (s.survived + prior) / (s.gpus + 1)
}

// Due reports whether a forecast is due at now: every Every.
func (a *Learner) Due(now time.Time) bool {
	return a.at.IsZero() || now.Sub(a.at) >= Every
}

// Last is the last forecast given, for the nodes plan keeps open (a node
// opened since has none yet).
func (a *Learner) Last(plan harvest.Plan) []Availability {
	return slices.DeleteFunc(slices.Clone(a.last), func(av Availability) bool {
		return plan.Nodes[av.Node].Verdict.State != api.HarvestOpen
	})
}

// Judge settles, at a forecast that is due, the forecasts given earlier
// whose spans ended by now.
func (a *Learner) Judge(now time.Time) {
	a.at = now
	a.judge(now)
}

// Give gives each open node (Node and GPUs set) its forecast and records it
// to learn from: needed[level][i] is the forecast time until open[i] next
// owes any of its GPUs with every load scaled by Levels[level] (Horizon when
// not within it); closes is when the harvest windows close (-1: not within
// Horizon), which is certain.
func (a *Learner) Give(now time.Time, open []Availability, needed [len(Levels)][]time.Duration, closes time.Duration) []Availability {
	for i := range open {
		av := &open[i]
		// Learned by the forecast's levels; the windows' close is certain.
		av.For = needed[AsForecast][i]
		if closes >= 0 && closes < av.For {
			av.For = closes
		}
		r := availRecord{at: now, node: av.Node, gpus: av.GPUs}
		for h, span := range SurvivalHorizons {
			r.level[h] = len(Levels)
			for l := range Levels {
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
				r.raw[h] = a.survival(r.level[h], h, needed[AsForecast][i] >= span)
				av.Survive[h] = a.recal[h].apply(r.raw[h])
			}
			r.p[h] = av.Survive[h]
		}
		a.pending = append(a.pending, r)
	}
	a.last = open
	return open
}

// Calibration is, per survival horizon and per day since the first
// forecast judged, what became of the GPUs given each tenth of probability:
// the check that the probabilities mean what they say. Kept by day so that a
// reader can tell how much of a gap a few days' traffic makes
// (SumCalibration adds the days up).
func (a *Learner) Calibration() [len(SurvivalHorizons)][][]CalibrationBucket {
	var out [len(SurvivalHorizons)][][]CalibrationBucket
	for h := range SurvivalHorizons {
		for _, day := range a.calibration[h] {
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

// SurvivalCount is what the learner learned for one of Levels: how many
// GPUs were forecast to be first needed within a span at that load and, of
// them, how many kept being lent (a forecast counts once judged at that span).
type SurvivalCount struct {
	// NeededAtPercent is the level, as a percentage of the forecast load; 0
	// for the GPUs needed at none of the levels.
	NeededAtPercent int
	Judged
}

// Judged counts, for each of SurvivalHorizons, the GPUs given a chance over
// the span and how many of them stayed lent, faded by SurvivalHalfLife.
type Judged struct {
	Given, Survived [len(SurvivalHorizons)]int64
}

// maxSurvivalGPUs bounds a restored count, far above what a faded record
// holds: 100,000 GPUs judged every Every come to about 8e7 in it.
const maxSurvivalGPUs = 1 << 40

// check checks restored counts: within bounds, and no more survived than given.
func (j Judged) check() error {
	for h, span := range SurvivalHorizons {
		if j.Given[h] < 0 || j.Given[h] > maxSurvivalGPUs || j.Survived[h] < 0 || j.Survived[h] > j.Given[h] {
			return fmt.Errorf("over %v, %d survived of %d given", span, j.Survived[h], j.Given[h])
		}
	}
	return nil
}

// any reports whether any GPU was given a chance.
func (j Judged) any() bool { return j.Given != [len(SurvivalHorizons)]int64{} }

// levelPercent is Levels[l] as SurvivalCount.NeededAtPercent says it.
func levelPercent(l int) int {
	if l == len(Levels) {
		return 0
	}
	return int(math.Round(Levels[l] * 100))
}

// levelOf is the index in availability.seen of the level a
// SurvivalCount.NeededAtPercent names; -1 for none.
func levelOf(percent int) int {
	for l := 0; l <= len(Levels); l++ {
		if levelPercent(l) == percent {
			return l
		}
	}
	return -1
}

// Survival is what the planner learned of its availability forecasts, one
// count per load level that holds any: what a restart must not forget.
func (a *Learner) Survival() []SurvivalCount {
	var out []SurvivalCount
	for l := range a.seen {
		c := SurvivalCount{NeededAtPercent: levelPercent(l)}
		for h := range SurvivalHorizons {
			s := a.seen[l][h]
			c.Given[h], c.Survived[h] = int64(math.Round(s.gpus)), int64(math.Round(s.survived))
		}
		if c.any() {
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
func (a *Learner) RestoreSurvival(counts []SurvivalCount, at time.Time) error {
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
		if err := c.check(); err != nil {
			return fmt.Errorf("survival record: at %d%% %w", c.NeededAtPercent, err)
		}
	}
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

// Bound scales the record down, span by span, to what a pool of poolGPUs
// could hold in it: each forecast is judged once per span and gives at most
// the pool's GPUs, every Every, and the record fades by SurvivalHalfLife, so
//
//	most = poolGPUs / (1 - fading(Every))  (about 831 x poolGPUs)
//
// The planner learns no more than that itself; a record restored with more
// (counts up to maxSurvivalGPUs, from a larger pool or a bad write) would
// outweigh what the planner learns for weeks while it fades. Scaled to the
// bound, its chances stay as they were and what the planner learns
// outweighs it within one SurvivalHalfLife. The planner bounds the record
// every round, so a pool that shrinks weighs its older record less too.
func (a *Learner) Bound(poolGPUs int64) {
	most := float64(max(poolGPUs, 0)) / (1 - fading(Every))
	for h := range SurvivalHorizons {
		var total float64
		for l := range a.seen {
			total += a.seen[l][h].gpus
		}
		if total > most {
			f := most / total
			for l := range a.seen {
				a.seen[l][h].gpus *= f
				a.seen[l][h].survived *= f
			}
		}
		total = 0
		for _, g := range a.recal[h].gpus {
			total += g
		}
		if total > most {
			a.recal[h].fade(most / total)
			a.recal[h].fit()
		}
	}
}

// restoredFading is how much a record published at (zero: unknown) has
// faded by what the planner learned since; when it learned nothing yet, its
// first judgement fades the record from at.
func (a *Learner) restoredFading(at time.Time) float64 {
	switch {
	case at.IsZero():
	case a.fadedAt.IsZero():
		a.fadedAt = at
	case at.Before(a.fadedAt):
		return fading(a.fadedAt.Sub(at))
	}
	return 1
}
