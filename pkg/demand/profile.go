package demand

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// HoursPerWeek is the number of hour-of-week buckets in a Profile.
const HoursPerWeek = 7 * 24

// DefaultProfileWeight is how much one new week moves a learned hour.
const DefaultProfileWeight = 0.3

// Profile is a service's load by hour of the week (UTC), learned online: each
// hour's peak load, smoothed across weeks. The hour in progress is kept apart
// and only folded in once it is over, so the forecast never learns from a
// partial hour and a dip during this hour does not talk the forecast down.
//
// Hours are UTC so that a learned week stays aligned however the controller's
// host is configured.
type Profile struct {
	// Peak[h] is the smoothed peak load of hour-of-week h (0 = Monday 00:00 UTC);
	// meaningful only when Weeks[h] > 0.
	Peak [HoursPerWeek]float64
	// Weeks[h] counts the weeks hour h was observed in.
	Weeks [HoursPerWeek]int
	// Hour is the hour in progress (start time, UTC) and its peak so far.
	Hour     time.Time
	HourPeak float64
	// Weight is the smoothing weight of a new week; <= 0 means DefaultProfileWeight.
	Weight float64
}

// HourOfWeek is the bucket of t: hours since Monday 00:00 UTC.
func HourOfWeek(t time.Time) int {
	t = t.UTC()
	day := (int(t.Weekday()) + 6) % 7 // Monday = 0
	return day*24 + t.Hour()
}

// Observe records load at time now. Observations older than the hour in
// progress are ignored (clocks do not run backwards for the profile).
func (p *Profile) Observe(now time.Time, load float64) {
	if !(load >= 0) || math.IsInf(load, 1) {
		return
	}
	hour := now.UTC().Truncate(time.Hour)
	switch {
	case p.Hour.IsZero():
		p.Hour, p.HourPeak = hour, load
		return
	case hour.Before(p.Hour):
		return
	case hour.After(p.Hour):
		p.fold()
		p.Hour, p.HourPeak = hour, load
		return
	}
	p.HourPeak = max(p.HourPeak, load)
}

// fold adds the finished hour in progress to its bucket.
func (p *Profile) fold() {
	w := p.Weight
	if w <= 0 || w > 1 {
		w = DefaultProfileWeight
	}
	h := HourOfWeek(p.Hour)
	if p.Weeks[h] == 0 {
		p.Peak[h] = p.HourPeak
	} else {
		p.Peak[h] += w * (p.HourPeak - p.Peak[h])
	}
	p.Weeks[h]++
}

// PeakOver is the highest learned load of the hours that [from, from+horizon]
// touches, and whether any of them has been learned.
func (p *Profile) PeakOver(from time.Time, horizon time.Duration) (float64, bool) {
	var peak float64
	learned := false
	end := from.Add(horizon)
	for t := from.UTC().Truncate(time.Hour); !t.After(end); t = t.Add(time.Hour) {
		h := HourOfWeek(t)
		if p.Weeks[h] > 0 {
			peak = max(peak, p.Peak[h])
			learned = true
		}
	}
	return peak, learned
}

// Learned counts the hours of the week with at least one week of history.
func (p *Profile) Learned() int {
	n := 0
	for _, w := range p.Weeks {
		if w > 0 {
			n++
		}
	}
	return n
}

// profileJSON is the stored form: only learned hours, keyed by hour of week,
// so an annotation stays small.
type profileJSON struct {
	Version  int                 `json:"v"`
	Hours    map[int]learnedHour `json:"hours,omitempty"`
	Hour     *time.Time          `json:"hour,omitempty"`
	HourPeak float64             `json:"hourPeak,omitempty"`
}

type learnedHour struct {
	Peak  float64 `json:"peak"`
	Weeks int     `json:"weeks"`
}

// MarshalJSON stores the profile compactly: learned hours only. Values are
// stored exactly, so a profile read back plans exactly as before.
func (p Profile) MarshalJSON() ([]byte, error) {
	out := profileJSON{Version: 1, Hours: map[int]learnedHour{}, HourPeak: p.HourPeak}
	for h := range HoursPerWeek {
		if p.Weeks[h] > 0 {
			out.Hours[h] = learnedHour{Peak: p.Peak[h], Weeks: p.Weeks[h]}
		}
	}
	if !p.Hour.IsZero() {
		hour := p.Hour.UTC()
		out.Hour = &hour
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads a stored profile, rejecting what it cannot trust.
func (p *Profile) UnmarshalJSON(data []byte) error {
	var in profileJSON
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	if in.Version != 1 {
		return fmt.Errorf("profile version %d is not 1", in.Version)
	}
	var q Profile
	q.Weight = p.Weight
	for h, l := range in.Hours {
		if h < 0 || h >= HoursPerWeek || l.Weeks <= 0 || !(l.Peak >= 0) || math.IsInf(l.Peak, 1) {
			return fmt.Errorf("profile hour %d (peak %g, weeks %d) is out of range", h, l.Peak, l.Weeks)
		}
		q.Peak[h], q.Weeks[h] = l.Peak, l.Weeks
	}
	if in.Hour != nil {
		if !(in.HourPeak >= 0) || math.IsInf(in.HourPeak, 1) {
			return fmt.Errorf("profile hour in progress has peak %g", in.HourPeak)
		}
		q.Hour, q.HourPeak = in.Hour.UTC().Truncate(time.Hour), in.HourPeak
	}
	*p = q
	return nil
}
