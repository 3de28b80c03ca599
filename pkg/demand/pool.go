package demand

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// PoolProfile learns how far the pool's peak falls short of the sum of its
// services' peaks, by slot of the week: each service's Profile keeps room
// for its own highest quarter-hour, but services that share a pool seldom
// peak in the same minutes of the quarter-hour, so room kept for all of
// their peaks at once is more than the pool ever needed.
//
// For each slot it learns the ratio of the peak of the services' summed
// load (in GPUs: load over target, times GPUs per replica) to the sum of
// their own peaks in the same slot, smoothed across weeks as a Profile is
// (DefaultProfileWeight).
// A ratio, not the pool's peak itself: a service that joins the pool brings
// its own peaks into the sum at once, where a learned pool peak would lack
// them until a week had passed.
//
// A slot is learned only if it was seen whole: from its start (not the slot
// a planner started in), with no gap longer than PoolMaxGap between rounds,
// the same services throughout, and every service's whole load in every
// round (Observe's complete). A round missed, or a load unknown to the sum,
// could miss the minutes the services peaked together and make the pool look
// calmer than it was.
type PoolProfile struct {
	// Ratio[s] is the smoothed ratio of slot-of-week s, in (0, 1];
	// meaningful only when Weeks[s] > 0.
	Ratio [SlotsPerWeek]float64
	Weeks [SlotsPerWeek]int
	// Slot is the slot in progress; SlotPeak the peak of the summed load in
	// it so far, Peaks each service's peak, Spoiled whether it was not seen
	// whole; Last is the last round's time.
	Slot     time.Time
	SlotPeak float64
	Peaks    map[string]float64
	Spoiled  bool
	Last     time.Time
	// Clock maps the times given to the methods to the week's slots (zero:
	// the wall clock); PoolMaxGap is in its time. It is not stored.
	Clock Clock
	// restored marks the slots taken from a stored profile (Restore) and
	// not yet seen whole by this planner.
	restored [SlotsPerWeek]bool
}

// RestoredRatioFloor is the least ratio a restored slot is given until the
// planner has seen the slot whole itself: a stored ratio is the planner's own
// word only as far as the store can be trusted, and one near 0 would keep
// little more room than the largest service's peak, lending GPUs inference
// needs for the weeks smoothing would take to relearn it. Below the floor,
// less is lent until the slot is seen again, within a week.
const RestoredRatioFloor = 0.5

// Restore takes the learned slots of a stored profile where this one has
// learned nothing itself, each ratio at least RestoredRatioFloor. The first
// week this planner sees a restored slot whole replaces the stored ratio
// instead of being smoothed into it, so a stored record moves the pool's
// room for at most the week until its slot comes round.
func (p *PoolProfile) Restore(stored PoolProfile) {
	for s := range stored.Weeks {
		if p.Weeks[s] == 0 && stored.Weeks[s] > 0 {
			p.Ratio[s], p.Weeks[s], p.restored[s] = max(stored.Ratio[s], RestoredRatioFloor), stored.Weeks[s], true
		}
	}
}

// PoolMaxGap is the longest time between two rounds within a slot that
// still lets the slot be learned.
const PoolMaxGap = SlotLength / 5

// Observe records one round's loads, in GPUs, by service. complete says the
// round saw every service's whole load; a slot with a round that did not is
// not learned.
func (p *PoolProfile) Observe(now time.Time, loads map[string]float64, complete bool) {
	now = p.Clock.At(now)
	slot := now.UTC().Truncate(SlotLength)
	first := !p.Slot.Equal(slot)
	switch {
	case !p.Slot.IsZero() && slot.Before(p.Slot):
		return
	case first:
		// The slot a planner starts in is seen from its start only by
		// chance; after a gap, neither the end of the slot before nor the
		// start of this one was seen.
		fresh, gap := p.Slot.IsZero(), now.Sub(p.Last) > PoolMaxGap
		if !fresh {
			p.Spoiled = p.Spoiled || gap
			p.fold()
		}
		p.Slot, p.SlotPeak, p.Peaks, p.Spoiled = slot, 0, make(map[string]float64, len(loads)), fresh || gap
	case now.Sub(p.Last) > PoolMaxGap:
		p.Spoiled = true
	}
	p.Last = now
	var sum float64
	for key, load := range loads {
		if _, known := p.Peaks[key]; !known && !first {
			p.Spoiled = true // a service came within the slot
		}
		if !(load >= 0) || math.IsInf(load, 1) {
			p.Spoiled = true
			load = 0
		}
		sum += load
		p.Peaks[key] = max(p.Peaks[key], load)
	}
	if len(loads) != len(p.Peaks) || !complete || math.IsInf(sum, 1) {
		p.Spoiled = true // a service went within the slot, or a load is unknown
	}
	p.SlotPeak = max(p.SlotPeak, sum)
}

// fold learns the finished slot in progress, unless it was spoiled or the
// pool was idle through it (a ratio of nothing to nothing says nothing).
func (p *PoolProfile) fold() {
	var sum float64
	for _, peak := range p.Peaks {
		sum += peak
	}
	ratio := min(p.SlotPeak/sum, 1)
	if p.Spoiled || !(ratio > 0) {
		return // idle (0/0), or overflowed
	}
	s := SlotOfWeek(p.Slot)
	if p.restored[s] {
		p.Weeks[s], p.restored[s] = 0, false // seen whole: its own week replaces the stored ratio
	}
	smooth(&p.Ratio[s], &p.Weeks[s], ratio, DefaultProfileWeight)
}

// PeakOver estimates the pool's peak over [from, from+window], in GPUs: for
// each slot s the window touches, its learned ratio times the sum of the
// services' learned peaks of s, and never below the largest of those peaks
// (the pool peaks no lower than any one of its services). peaks(s) gives
// the sum and the largest. It is false unless every slot the window touches
// has a learned ratio: where the pool was never seen, its services are
// taken to peak together.
func (p *PoolProfile) PeakOver(from time.Time, window time.Duration, peaks func(slot int) (sum, largest float64)) (float64, bool) {
	var peak float64
	for s := range slotsOver(p.Clock.At(from), p.Clock.Span(window)) {
		if p.Weeks[s] == 0 {
			return 0, false
		}
		sum, largest := peaks(s)
		peak = max(peak, p.Ratio[s]*sum, largest)
	}
	return peak, true
}

// Learned counts the slots with a learned ratio.
func (p *PoolProfile) Learned() int { return learned(&p.Weeks) }

// poolProfileJSON is the stored form: every slot's ratio and count of weeks,
// in order. The slot in progress is not stored: a restart loses at most one
// quarter-hour, and a slot partly seen is not learned.
type poolProfileJSON struct {
	Version int       `json:"v"`
	Ratio   []float64 `json:"ratio,omitempty"`
	Weeks   []int     `json:"weeks,omitempty"`
}

const poolProfileVersion = 1

// MarshalJSON stores the learned ratios.
func (p PoolProfile) MarshalJSON() ([]byte, error) {
	out := poolProfileJSON{Version: poolProfileVersion}
	if p.Learned() > 0 {
		out.Ratio, out.Weeks = p.Ratio[:], p.Weeks[:]
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads stored ratios, rejecting what it cannot trust: a
// ratio outside (0, 1], or one without weeks. The slot in progress is left
// as it was.
func (p *PoolProfile) UnmarshalJSON(data []byte) error {
	var in poolProfileJSON
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	if in.Version != poolProfileVersion {
		return fmt.Errorf("pool profile version %d is not %d", in.Version, poolProfileVersion)
	}
	if len(in.Ratio) != len(in.Weeks) || (len(in.Ratio) != 0 && len(in.Ratio) != SlotsPerWeek) {
		return fmt.Errorf("pool profile has %d ratios and %d week counts; want %d of each", len(in.Ratio), len(in.Weeks), SlotsPerWeek)
	}
	var ratio [SlotsPerWeek]float64
	var weeks [SlotsPerWeek]int
	for s := range in.Ratio {
		r, w := in.Ratio[s], in.Weeks[s]
		switch {
		case w == 0 && r == 0:
		case w <= 0 || !(r > 0 && r <= 1):
			return fmt.Errorf("pool profile slot %d (ratio %g, weeks %d) is out of range", s, r, w)
		}
		ratio[s], weeks[s] = r, w
	}
	p.Ratio, p.Weeks = ratio, weeks
	return nil
}
