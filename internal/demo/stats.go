package demo

import (
	"math"
	"slices"
	"time"
)

// percentile is the nearest-rank p-th percentile (0 < p <= 100) of ds; 0 when empty.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = min(max(rank, 1), len(s))
	return s[rank-1]
}

// integral accumulates a step function of time (a GPU count held until the
// next sample) into value x seconds.
type integral struct {
	last  time.Time
	value float64
	total float64 // value-seconds
}

// sample records that the value is v from now on, crediting the previous value up to now.
func (i *integral) sample(now time.Time, v float64) {
	if !i.last.IsZero() && now.After(i.last) {
		i.total += i.value * now.Sub(i.last).Seconds()
	}
	i.last, i.value = now, v
}

// hours is the accumulated value-seconds in value-hours of demo time, at scale
// demo seconds per real second.
func (i *integral) hours(scale float64) float64 {
	return i.total * scale / 3600
}
