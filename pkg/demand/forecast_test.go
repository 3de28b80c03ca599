package demand

import (
	"encoding/json"
	"math"
	"testing"
	"time"
)

// diurnal is a synthetic weekday pattern: quiet nights (load 8), a ramp from
// 08:00 to 09:00 UTC up to 160, a plateau until 18:00, quiet again from 20:00.
// Weekends stay at night level.
func diurnal(t time.Time) float64 {
	t = t.UTC()
	if t.Weekday() == time.Saturday || t.Weekday() == time.Sunday {
		return 8
	}
	h := float64(t.Hour()) + float64(t.Minute())/60
	switch {
	case h < 8 || h >= 20:
		return 8
	case h < 9:
		return 8 + 152*(h-8)
	case h < 18:
		return 160
	default:
		return 160 - 76*(h-18)
	}
}

// learn feeds weeks of history sampled every minute into a profile.
func learn(t *testing.T, from time.Time, weeks int) *Profile {
	t.Helper()
	p := &Profile{}
	for at := from; at.Before(from.Add(time.Duration(weeks) * 7 * 24 * time.Hour)); at = at.Add(time.Minute) {
		p.Observe(at, diurnal(at))
	}
	return p
}

func TestForecastFromDiurnalHistory(t *testing.T) {
	monday := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC) // a Monday
	profile := learn(t, monday, 2)
	week3 := monday.Add(14 * 24 * time.Hour)
	if got := profile.Learned(); got != HoursPerWeek {
		t.Fatalf("after two weeks %d hours are learned, want all %d", got, HoursPerWeek)
	}

	tests := []struct {
		name    string
		at      time.Time
		load    float64
		want    float64 // lowest acceptable forecast peak
		wantMax float64 // highest acceptable forecast peak
	}{
		{"night: quiet, forecast stays at night level", week3.Add(3 * time.Hour), 8, 8, 8},
		// 07:50 on a weekday: the load is still quiet, but the ramp starts
		// within 15 minutes; the learned 08:00 hour brings headroom back now.
		{"before the morning ramp: the profile brings the peak forward", week3.Add(7*time.Hour + 50*time.Minute), 8, 150, 160},
		{"07:30: the ramp is beyond the horizon", week3.Add(7*time.Hour + 30*time.Minute), 8, 8, 8},
		{"plateau: forecast is the plateau", week3.Add(12 * time.Hour), 160, 160, 160},
		{"saturday morning: no ramp learned", week3.Add(5*24*time.Hour + 7*time.Hour + 50*time.Minute), 8, 8, 8},
		{"load above anything learned: the load wins", week3.Add(3 * time.Hour), 40, 40, 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := PeakForecast(tt.at, tt.load, DefaultHorizon, nil, profile)
			if f.Peak < tt.want || f.Peak > tt.wantMax {
				t.Fatalf("forecast at %s with load %g = %+v; want a peak in [%g, %g]", tt.at.Format("Mon 15:04"), tt.load, f, tt.want, tt.wantMax)
			}
		})
	}

	t.Run("headroom before the ramp is in whole replicas", func(t *testing.T) {
		at := week3.Add(7*time.Hour + 50*time.Minute)
		f := PeakForecast(at, 8, DefaultHorizon, nil, profile)
		one := Replica{Known: true, Running: 8, GPUs: 4}
		need := Assess(Service{Name: "chat", TargetLoad: 16, Replicas: []Replica{one}, ForecastLoad: f.Peak, Margin: 0.1})
		// ceil(peak x 1.1 / 16) replicas: one runs, the rest is headroom.
		want := int(math.Ceil(f.Peak*1.1/16)) - 1
		if need.Spare != want || need.Spare < 9 {
			t.Fatalf("spare replicas = %d (%s), want %d", need.Spare, need.Reason, want)
		}
	})
}

func TestTrend(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	ramp := func(perMinute float64, minutes int) *Trend {
		tr := &Trend{}
		for i := 0; i <= minutes*6; i++ {
			tr.Add(Sample{At: t0.Add(time.Duration(i) * 10 * time.Second), Load: 20 + perMinute*float64(i)/6})
		}
		return tr
	}
	tests := []struct {
		name      string
		trend     *Trend
		load      float64
		wantTrend float64
	}{
		{"rising 1/min over 5 min projects 15 more in 15 min", ramp(1, 5), 25, 40},
		{"steep rise is capped at twice the load", ramp(10, 5), 70, 140},
		{"falling load does not lower the forecast", ramp(-2, 5), 10, 10},
		{"too little history: no trend", ramp(5, 0), 20, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at := tt.trend.Samples[len(tt.trend.Samples)-1].At
			f := PeakForecast(at, tt.load, DefaultHorizon, tt.trend, nil)
			if math.Abs(f.Trend-tt.wantTrend) > 0.01 || f.Peak != max(tt.load, f.Trend) {
				t.Fatalf("forecast = %+v, want trend %g", f, tt.wantTrend)
			}
		})
	}
	t.Run("window forgets old samples", func(t *testing.T) {
		tr := ramp(1, 10)
		if span := tr.Samples[len(tr.Samples)-1].At.Sub(tr.Samples[0].At); span > DefaultTrendWindow {
			t.Fatalf("trend keeps %v of samples, want at most %v", span, DefaultTrendWindow)
		}
	})
}

func TestProfileRoundTrip(t *testing.T) {
	monday := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	p := learn(t, monday, 1)
	p.Observe(monday.Add(7*24*time.Hour+90*time.Minute), 33) // an hour in progress
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var back Profile
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatalf("reading back %s: %v", raw, err)
	}
	if back != *p {
		t.Fatalf("profile changed on a round trip through %d bytes of JSON", len(raw))
	}
	if len(raw) > 16<<10 {
		t.Fatalf("a full week's profile takes %d bytes; it must stay small enough for an annotation", len(raw))
	}
	for _, bad := range []string{`{"v":2}`, `{"v":1,"hours":{"168":{"peak":1,"weeks":1}}}`, `{"v":1,"hours":{"3":{"peak":-1,"weeks":1}}}`, `not json`} {
		if err := json.Unmarshal([]byte(bad), &back); err == nil {
			t.Errorf("profile %s was accepted", bad)
		}
	}
}

func TestProfileLearnsPeakAcrossWeeks(t *testing.T) {
	monday := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	p := &Profile{}
	// Week 1, Monday 10:00: load 100 for a moment; week 2: 50 throughout.
	p.Observe(monday.Add(10*time.Hour), 20)
	p.Observe(monday.Add(10*time.Hour+30*time.Minute), 100)
	p.Observe(monday.Add(11*time.Hour), 20)
	if peak, ok := p.PeakOver(monday.Add(7*24*time.Hour+10*time.Hour), time.Minute); !ok || peak != 100 {
		t.Fatalf("after one week hour 10 = %g (learned %v), want its peak 100", peak, ok)
	}
	p.Observe(monday.Add(7*24*time.Hour+10*time.Hour), 50)
	p.Observe(monday.Add(7*24*time.Hour+11*time.Hour), 50)
	peak, _ := p.PeakOver(monday.Add(14*24*time.Hour+10*time.Hour), time.Minute)
	if want := 100 + DefaultProfileWeight*(50-100); math.Abs(peak-want) > 1e-9 {
		t.Fatalf("after two weeks hour 10 = %g, want %g (smoothed)", peak, want)
	}
	// The hour in progress does not count until it is over.
	if _, ok := p.PeakOver(monday.Add(7*24*time.Hour+11*time.Hour), time.Minute); !ok {
		t.Fatal("hour 11 of week 1 should be learned")
	}
	if got := p.Peak[HourOfWeek(monday.Add(11*time.Hour))]; got != 20 {
		t.Fatalf("hour 11 = %g; the in-progress observation of 50 must not be folded in yet", got)
	}
}

func TestAssessMetricsAndMargin(t *testing.T) {
	kv := func(u float64) Replica { return Replica{Known: true, KVCache: u, GPUs: 2} }
	tests := []struct {
		name       string
		svc        Service
		wantNeeded int
	}{
		{"kv-cache: 3 replicas at 0.9 with target 0.8 need 4", Service{Metric: KVCache, TargetLoad: 0.8, Replicas: []Replica{kv(0.9), kv(0.9), kv(0.9)}}, 4},
		{"kv-cache default target", Service{Metric: KVCache, Replicas: []Replica{kv(0.4), kv(0.4)}}, 1},
		{"kv-cache ignores request counts", Service{Metric: KVCache, Replicas: []Replica{{Known: true, Running: 500, KVCache: 0.1}}}, 1},
		{"margin rounds up to a whole replica", Service{TargetLoad: 10, Margin: 0.1, Replicas: []Replica{{Known: true, Running: 20}}}, 3},
		{"no margin: exactly on target", Service{TargetLoad: 10, Replicas: []Replica{{Known: true, Running: 20}}}, 2},
		{"forecast below load changes nothing", Service{TargetLoad: 10, ForecastLoad: 5, Replicas: []Replica{{Known: true, Running: 20}}}, 2},
		{"forecast above load keeps room", Service{TargetLoad: 10, ForecastLoad: 41, Replicas: []Replica{{Known: true, Running: 20}}}, 5},
		{"annotated GPUs per replica with no replica running", Service{TargetLoad: 10, ForecastLoad: 10, GPUsPerReplica: 4}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Assess(tt.svc)
			if got.Needed != tt.wantNeeded {
				t.Fatalf("Needed = %d (%+v), want %d", got.Needed, got, tt.wantNeeded)
			}
			if tt.svc.GPUsPerReplica > 0 && got.GPUsPerReplica != tt.svc.GPUsPerReplica {
				t.Fatalf("GPUsPerReplica = %d, want the annotated %d", got.GPUsPerReplica, tt.svc.GPUsPerReplica)
			}
		})
	}
}
