package demand

import (
	"encoding/json"
	"fmt"
	"iter"
	"math"
	"time"
)

// SlotLength is the step of a Profile: a quarter of an hour, the forecast
// horizon's length, so that the horizon's window touches the slot it starts
// in and the next one and keeps room for a learned peak only around when it
// came, not through the whole hour it came in.
const SlotLength = 15 * time.Minute

// SlotsPerWeek is the number of slots in a Profile.
const SlotsPerWeek = int(7 * 24 * time.Hour / SlotLength)

// DefaultProfileWeight is how much one new week moves a learned slot.
const DefaultProfileWeight = 0.3

// Profile is a service's load by quarter-hour of the week (UTC), learned
// online: each slot's peak load, smoothed across weeks. The slot in progress
// is kept apart and only folded in once it is over, so the forecast never
// learns from a partial slot and a dip during this slot does not talk the
// forecast down.
//
// Slots are UTC so that a learned week stays aligned however the controller's
// host is configured.
type Profile struct {
	// Peak[s] is the smoothed peak load of slot-of-week s (0 = Monday 00:00
	// UTC); meaningful only when Weeks[s] > 0.
	Peak [SlotsPerWeek]float64
	// Weeks[s] counts the weeks slot s was observed in.
	Weeks [SlotsPerWeek]int
	// Slot is the slot in progress (start time, UTC) and SlotPeak its peak so far.
	Slot     time.Time
	SlotPeak float64
	// Weight is the smoothing weight of a new week; <= 0 means DefaultProfileWeight.
	Weight float64
	// Clock maps the times given to the profile's methods to the week's
	// slots (zero: the wall clock). Like Weight, it is not stored.
	Clock Clock
}

// SlotOfWeek is the slot of t: quarter-hours since Monday 00:00 UTC.
func SlotOfWeek(t time.Time) int {
	t = t.UTC()
	day := (int(t.Weekday()) + 6) % 7 // Monday = 0
	return int((time.Duration(day)*24*time.Hour + time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute) / SlotLength)
}

// Observe records load at time now. Observations older than the slot in
// progress are ignored (clocks do not run backwards for the profile).
func (p *Profile) Observe(now time.Time, load float64) {
	if !(load >= 0) || math.IsInf(load, 1) {
		return
	}
	slot := p.Clock.At(now).UTC().Truncate(SlotLength)
	switch {
	case p.Slot.IsZero():
		p.Slot, p.SlotPeak = slot, load
		return
	case slot.Before(p.Slot):
		return
	case slot.After(p.Slot):
		p.fold()
		p.Slot, p.SlotPeak = slot, load
		return
	}
	p.SlotPeak = max(p.SlotPeak, load)
}

// fold adds the finished slot in progress to its place in the week.
func (p *Profile) fold() {
	s := SlotOfWeek(p.Slot)
	smooth(&p.Peak[s], &p.Weeks[s], p.SlotPeak, p.Weight)
}

// smooth folds one more week's value x into a slot's smoothed value v: the
// first week's value as it is, later ones by weight (outside (0, 1]:
// DefaultProfileWeight).
func smooth(v *float64, weeks *int, x, weight float64) {
	if !(weight > 0 && weight <= 1) {
		weight = DefaultProfileWeight
	}
	if *weeks == 0 {
		*v = x
	} else {
		*v += weight * (x - *v)
	}
	*weeks++
}

// slotsOver yields the slots of the week that [from, from+window] touches.
func slotsOver(from time.Time, window time.Duration) iter.Seq[int] {
	return func(yield func(int) bool) {
		end := from.Add(window)
		for t := from.UTC().Truncate(SlotLength); !t.After(end); t = t.Add(SlotLength) {
			if !yield(SlotOfWeek(t)) {
				return
			}
		}
	}
}

// PeakOver is the highest learned load of the slots that [from, from+window]
// touches, and whether any of them has been learned.
func (p *Profile) PeakOver(from time.Time, window time.Duration) (float64, bool) {
	var peak float64
	learned := false
	for s := range slotsOver(p.Clock.At(from), p.Clock.Span(window)) {
		if p.Weeks[s] > 0 {
			peak = max(peak, p.Peak[s])
			learned = true
		}
	}
	return peak, learned
}

// LearnedOver says whether every slot [from, from+window] touches is learned.
func (p *Profile) LearnedOver(from time.Time, window time.Duration) bool {
	for s := range slotsOver(p.Clock.At(from), p.Clock.Span(window)) {
		if p.Weeks[s] == 0 {
			return false
		}
	}
	return true
}

// PeakAt is the learned peak of slot s, and whether it is learned.
func (p *Profile) PeakAt(s int) (float64, bool) {
	if s < 0 || s >= SlotsPerWeek || p.Weeks[s] == 0 {
		return 0, false
	}
	return p.Peak[s], true
}

// Learned counts the slots of the week with at least one week of history.
func (p *Profile) Learned() int { return learned(&p.Weeks) }

// learned counts the slots with at least one week.
func learned(weeks *[SlotsPerWeek]int) int {
	n := 0
	for _, w := range weeks {
		if w > 0 {
			n++
		}
	}
	return n
}

// profileJSON is the stored form. Version 2: a peak and a count of weeks
// for every slot of the week, in order (0 where nothing is learned), and the
// slot in progress. Version 1 stored only learned hours, keyed by hour of
// week (Hours, Hour, HourPeak); it is still read, each hour into its four
// slots.
type profileJSON struct {
	Version  int                 `json:"v"`
	Peak     []float64           `json:"peak,omitempty"`
	Weeks    []int               `json:"weeks,omitempty"`
	Slot     *time.Time          `json:"slot,omitempty"`
	SlotPeak float64             `json:"slotPeak,omitempty"`
	Hours    map[int]learnedHour `json:"hours,omitempty"`
	Hour     *time.Time          `json:"hour,omitempty"`
	HourPeak float64             `json:"hourPeak,omitempty"`
}

type learnedHour struct {
	Peak  float64 `json:"peak"`
	Weeks int     `json:"weeks"`
}

// profileVersion is the stored form's version; UnmarshalJSON also reads 1.
const profileVersion = 2

// MarshalJSON stores the profile. Values are stored exactly, so a profile
// read back plans exactly as before; a full week of fractional loads takes
// about 14 KB, of whole request counts about 4 KB.
func (p Profile) MarshalJSON() ([]byte, error) {
	out := profileJSON{Version: profileVersion, SlotPeak: p.SlotPeak}
	if p.Learned() > 0 {
		out.Peak, out.Weeks = p.Peak[:], p.Weeks[:]
	}
	if !p.Slot.IsZero() {
		slot := p.Slot.UTC()
		out.Slot = &slot
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads a stored profile, rejecting what it cannot trust. A
// version 1 profile (by hour) is read into slots: each learned hour's peak
// becomes its four slots', and the hour in progress its first slot.
func (p *Profile) UnmarshalJSON(data []byte) error {
	var in profileJSON
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	var q Profile
	q.Weight, q.Clock = p.Weight, p.Clock
	current, peak := in.Slot, in.SlotPeak
	switch in.Version {
	case profileVersion:
		if len(in.Peak) != len(in.Weeks) || (len(in.Peak) != 0 && len(in.Peak) != SlotsPerWeek) {
			return fmt.Errorf("profile has %d peaks and %d week counts; want %d of each", len(in.Peak), len(in.Weeks), SlotsPerWeek)
		}
		for s := range in.Peak {
			if err := q.learn(s, in.Peak[s], in.Weeks[s], in.Weeks[s] == 0); err != nil {
				return err
			}
		}
	case 1:
		perHour := int(time.Hour / SlotLength)
		for h, l := range in.Hours {
			if h < 0 || h >= SlotsPerWeek/perHour {
				return fmt.Errorf("profile hour %d is out of range", h)
			}
			for s := h * perHour; s < (h+1)*perHour; s++ {
				if err := q.learn(s, l.Peak, l.Weeks, false); err != nil {
					return fmt.Errorf("profile hour %d: %w", h, err)
				}
			}
		}
		current, peak = in.Hour, in.HourPeak
	default:
		return fmt.Errorf("profile version %d is neither 1 nor %d", in.Version, profileVersion)
	}
	if current != nil {
		if !(peak >= 0) || math.IsInf(peak, 1) {
			return fmt.Errorf("profile slot in progress has peak %g", peak)
		}
		q.Slot, q.SlotPeak = current.UTC().Truncate(SlotLength), peak
	}
	*p = q
	return nil
}

// learn sets slot s from stored values after checking them; unlearned, the
// slot must hold nothing.
func (p *Profile) learn(s int, peak float64, weeks int, unlearned bool) error {
	switch {
	case unlearned && peak != 0:
		return fmt.Errorf("profile slot %d has peak %g but no week", s, peak)
	case unlearned:
		return nil
	case weeks <= 0 || !(peak >= 0) || math.IsInf(peak, 1):
		return fmt.Errorf("profile slot %d (peak %g, weeks %d) is out of range", s, peak, weeks)
	}
	p.Peak[s], p.Weeks[s] = peak, weeks
	return nil
}
