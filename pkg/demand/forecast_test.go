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
	if got := profile.Learned(); got != SlotsPerWeek {
		t.Fatalf("after two weeks %d slots are learned, want all %d", got, SlotsPerWeek)
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
		// within 15 minutes; the learned 08:00 slot brings headroom back now,
		// for that slot's peak (08:14: 8 + 152 x 14/60).
		{"before the morning ramp: the profile brings the ramp's first slot forward", week3.Add(7*time.Hour + 50*time.Minute), 8, 43.4, 43.5},
		// 08:20: the window reaches the 08:30 slot (peak at 08:44), not the plateau.
		{"on the ramp: room for the next slot's peak, not the hour's", week3.Add(8*time.Hour + 20*time.Minute), 58, 119.4, 119.5},
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

	t.Run("room for the profile's peak in whole replicas, without the margin on it", func(t *testing.T) {
		at := week3.Add(8*time.Hour + 20*time.Minute)
		f := PeakForecast(at, 58, DefaultHorizon, nil, profile)
		one := Replica{Known: true, Running: 58, GPUs: 4}
		need := Assess(Service{Name: "chat", TargetLoad: 16, Replicas: []Replica{one}, ForecastLoad: f.Planned(0.1), Margin: 0.1})
		// ceil(max(58 x 1.1, 119.47) / 16) = 8 replicas: one runs, the rest is
		// headroom; with the margin on the profile's peak too it would be 9.
		if need.HeadroomReplicas != 7 {
			t.Fatalf("spare replicas = %d (%s), want 7", need.HeadroomReplicas, need.Reason)
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
	p.Observe(monday.Add(7*24*time.Hour+90*time.Minute), 33) // a slot in progress
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
	if len(raw) > 20<<10 {
		t.Fatalf("a full week's profile takes %d bytes; it must stay small enough for an annotation", len(raw))
	}
	for _, bad := range []string{`{"v":3}`, `{"v":2,"peak":[1],"weeks":[1]}`, `{"v":2,"peak":[1,2],"weeks":[1]}`,
		`{"v":1,"hours":{"168":{"peak":1,"weeks":1}}}`, `{"v":1,"hours":{"3":{"peak":-1,"weeks":1}}}`, `not json`} {
		if err := json.Unmarshal([]byte(bad), &back); err == nil {
			t.Errorf("profile %s was accepted", bad)
		}
	}
}

func TestProfileLearnsPeakAcrossWeeks(t *testing.T) {
	monday := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	p := &Profile{}
	// Week 1, Monday 10:30-10:45: load 100 for a moment; week 2: 50 throughout.
	p.Observe(monday.Add(10*time.Hour+30*time.Minute), 20)
	p.Observe(monday.Add(10*time.Hour+40*time.Minute), 100)
	p.Observe(monday.Add(10*time.Hour+45*time.Minute), 20)
	at := func(week int, d time.Duration) time.Time { return monday.Add(time.Duration(week)*7*24*time.Hour + d) }
	if peak, ok := p.PeakOver(at(1, 10*time.Hour+30*time.Minute), time.Minute); !ok || peak != 100 {
		t.Fatalf("after one week slot 10:30 = %g (learned %v), want its peak 100", peak, ok)
	}
	if _, ok := p.PeakOver(at(1, 10*time.Hour), time.Minute); ok {
		t.Fatal("slot 10:00 was never observed, yet it is learned")
	}
	p.Observe(at(1, 10*time.Hour+30*time.Minute), 50)
	p.Observe(at(1, 10*time.Hour+45*time.Minute), 50)
	peak, _ := p.PeakOver(at(2, 10*time.Hour+30*time.Minute), time.Minute)
	if want := 100 + DefaultProfileWeight*(50-100); math.Abs(peak-want) > 1e-9 {
		t.Fatalf("after two weeks slot 10:30 = %g, want %g (smoothed)", peak, want)
	}
	// The slot in progress does not count until it is over.
	if _, ok := p.PeakOver(at(1, 10*time.Hour+45*time.Minute), time.Minute); !ok {
		t.Fatal("slot 10:45 of week 1 should be learned")
	}
	if got := p.Peak[SlotOfWeek(monday.Add(10*time.Hour+45*time.Minute))]; got != 20 {
		t.Fatalf("slot 10:45 = %g; the in-progress observation of 50 must not be folded in yet", got)
	}
}

// A profile stored by hour (version 1) is read into the four slots of each
// hour, and its hour in progress into the hour's first slot.
func TestProfileReadsHourlyVersion(t *testing.T) {
	var p Profile
	stored := `{"v":1,"hours":{"10":{"peak":40,"weeks":2}},"hour":"2026-03-02T11:00:00Z","hourPeak":7}`
	if err := json.Unmarshal([]byte(stored), &p); err != nil {
		t.Fatal(err)
	}
	monday := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	for m := time.Duration(0); m < time.Hour; m += SlotLength {
		if s := SlotOfWeek(monday.Add(10*time.Hour + m)); p.Peak[s] != 40 || p.Weeks[s] != 2 {
			t.Fatalf("slot %d (Monday 10:%02d) = peak %g over %d weeks, want 40 over 2", s, int(m.Minutes()), p.Peak[s], p.Weeks[s])
		}
	}
	if p.Learned() != 4 || !p.Slot.Equal(monday.Add(11*time.Hour)) || p.SlotPeak != 7 {
		t.Fatalf("read %d learned slots, slot in progress %s at %g; want 4, Monday 11:00 at 7", p.Learned(), p.Slot, p.SlotPeak)
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
