package demand

import (
	"time"
)

// DefaultHorizon is how far ahead demand is forecast: the time it takes to get
// lent GPUs back and start a replica on them.
const DefaultHorizon = 15 * time.Minute

// DefaultReclaimLead is how far ahead demand must need lent GPUs before they
// are evicted: a best-effort pod's grace period (commonly up to 2 minutes) and a
// planning round or two, with room to spare. Within the longer horizon a node
// only stops lending more.
const DefaultReclaimLead = 5 * time.Minute

// DefaultNoticeHorizon is how far ahead the forecast warns the pods it will
// evict (reclaim notices): an hour, chosen when the profile's step was an
// hour and judged since on both halves of the shared services. A notice
// costs a job nothing until its time nears (it checkpoints just in time), so
// it may come long before the horizon, where nodes stop lending.
const DefaultNoticeHorizon = time.Hour

// DefaultTrendWindow is how much recent history the trend is fitted to.
const DefaultTrendWindow = 5 * time.Minute

// Sample is one observation of a service's load.
type Sample struct {
	At   time.Time
	Load float64
}

// Trend holds a service's recent load samples.
type Trend struct {
	// Window is how far back samples are kept; <= 0 means DefaultTrendWindow.
	Window  time.Duration
	Samples []Sample
}

// window is the Window, or its default.
func (t *Trend) window() time.Duration {
	if t.Window <= 0 {
		return DefaultTrendWindow
	}
	return t.Window
}

// Add records a sample and forgets those older than the window.
func (t *Trend) Add(s Sample) {
	window := t.window()
	if n := len(t.Samples); n > 0 && !s.At.After(t.Samples[n-1].At) {
		return
	}
	t.Samples = append(t.Samples, s)
	cut := 0
	for cut < len(t.Samples) && s.At.Sub(t.Samples[cut].At) > window {
		cut++
	}
	t.Samples = append(t.Samples[:0], t.Samples[cut:]...)
}

// Slope is the least-squares slope of load over time, in load per second, and
// whether there is enough history to fit one: 3 samples over at least a tenth
// of the window (30 s of the default 5 minutes). The span is the window's,
// not a fixed time, so that a compressed day (the demo's) has a trend too.
func (t *Trend) Slope() (float64, bool) {
	n := len(t.Samples)
	if n < 3 || t.Samples[n-1].At.Sub(t.Samples[0].At) < t.window()/10 {
		return 0, false
	}
	t0 := t.Samples[0].At
	var sx, sy, sxx, sxy float64
	for _, s := range t.Samples {
		x := s.At.Sub(t0).Seconds()
		sx += x
		sy += s.Load
		sxx += x * x
		sxy += x * s.Load
	}
	fn := float64(n)
	den := fn*sxx - sx*sx
	if den == 0 {
		return 0, false
	}
	return (fn*sxy - sx*sy) / den, true
}

// Forecast is the demand model's view of a service's load over the horizon.
type Forecast struct {
	// Peak is the highest load expected from now until now+horizon.
	Peak float64
	// Trend is the load the recent trend reaches at the end of the horizon.
	Trend float64
	// Profile is the learned peak of the slots the horizon touches (0 when none is learned).
	Profile float64
}

// PeakForecast is the load to keep room for over [now, now+horizon]:
//
//	trend   = now + max(0, slope) x horizon, at most 2 x now
//	profile = learned peak of the slots of the week the horizon touches
//	peak    = max(now, trend, profile)
//
// The safety margin applies to the load now and the trend but not to the
// profile (Planned).
//
// A falling trend never lowers the forecast below the load now: scaling in is
// the autoscaler's business; the planner only keeps room. The trend is capped
// because a short, noisy window extrapolated over 15 minutes would otherwise
// reclaim every lent GPU on a blip; a steeper ramp is still caught a sync later
// by the load itself, and a recurring one by the profile.
func PeakForecast(now time.Time, load float64, horizon time.Duration, trend *Trend, profile *Profile) Forecast {
	return PeakForecastFrom(now, now, load, horizon, trend, profile)
}

// PeakForecastFrom is PeakForecast for the window [from, from+window] that
// starts later than now: the trend is extrapolated from now to the window's
// end (capped the same way), the profile read over the window. It is what a
// later round would forecast, as far as now can tell.
func PeakForecastFrom(now, from time.Time, load float64, window time.Duration, trend *Trend, profile *Profile) Forecast {
	if window <= 0 {
		window = DefaultHorizon
	}
	f := Forecast{Peak: load, Trend: load}
	if trend != nil {
		if slope, ok := trend.Slope(); ok && slope > 0 {
			f.Trend = min(load+slope*(from.Sub(now)+window).Seconds(), 2*load)
		}
	}
	if profile != nil {
		if peak, ok := profile.PeakOver(from, window); ok {
			f.Profile = peak
		}
	}
	f.Peak = max(load, f.Trend, f.Profile)
	return f
}

// Scaled is f with every load in it scaled by k: the forecast were the
// loads that much above or below it.
func (f Forecast) Scaled(k float64) Forecast {
	return Forecast{Peak: f.Peak * k, Trend: f.Trend * k, Profile: f.Profile * k}
}

// Now is the forecast that expects the load now and nothing more.
func Now(load float64) Forecast { return Forecast{Peak: load, Trend: load} }

// Planned is the load the forecast asks room for before the safety margin
// (demand.Service.ForecastLoad): the load now and its trend get the margin,
// the learned profile does not, since it is a peak already: the highest
// load of the hours the window touches, not an estimate of the load around
// which it scatters. So Assess keeps room for
// max(max(now, trend) x (1 + margin), profile).
func (f Forecast) Planned(margin float64) float64 {
	return max(f.Trend, f.Profile/(1+max(margin, 0)))
}
