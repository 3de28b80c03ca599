package demand

import (
	"math"
	"time"
)

// Clock is the time the learned profiles (Profile, PoolProfile) keep their
// slots of the week by. The zero Clock is the wall clock. A demo that plays
// a day in a few minutes gives its profiles a faster one, so that a week of
// history means its compressed week: from Origin, Scale seconds of profile
// time pass in every real second.
type Clock struct {
	Origin time.Time
	Scale  float64
}

// fast says whether the clock runs other than the wall clock.
func (c Clock) fast() bool {
	return !c.Origin.IsZero() && c.Scale > 0 && c.Scale != 1 && !math.IsInf(c.Scale, 0)
}

// At is the profile's time at wall time t.
func (c Clock) At(t time.Time) time.Time {
	if !c.fast() {
		return t
	}
	return c.Origin.Add(c.Span(t.Sub(c.Origin)))
}

// Wall is the wall time in which profile time d passes: how long a span of
// the profiles' days (an outlook's step) lasts on the wall clock.
func (c Clock) Wall(d time.Duration) time.Duration {
	if !c.fast() {
		return d
	}
	return scaled(d, 1/c.Scale)
}

// Span is the profile time that passes in wall time d.
func (c Clock) Span(d time.Duration) time.Duration {
	if !c.fast() {
		return d
	}
	return scaled(d, c.Scale)
}

// scaled is d times k, saturated at time.Duration's range.
func scaled(d time.Duration, k float64) time.Duration {
	x := float64(d) * k
	switch {
	case x >= math.MaxInt64:
		return math.MaxInt64
	case x <= math.MinInt64:
		return math.MinInt64
	}
	return time.Duration(x)
}
