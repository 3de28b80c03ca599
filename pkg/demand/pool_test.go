package demand

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

func TestPoolProfileLearnsHowPeaksAddUp(t *testing.T) {
	monday := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	both := func(a, b float64) map[string]float64 { return map[string]float64{"a": a, "b": b} }
	var p PoolProfile
	// observe feeds a round a minute over [from, to) minutes after monday.
	observe := func(from, to int, loads map[string]float64, complete bool) {
		for m := from; m < to; m++ {
			p.Observe(monday.Add(time.Duration(m)*time.Minute), loads, complete)
		}
	}
	// The slot the planner starts in (Sunday's last) is not learned: its
	// start was not seen.
	observe(-3, 0, both(1, 1), true)
	// Slot 0: a and b take turns at 6 GPUs; the pool peaks at 8 of the 12
	// their own peaks add up to.
	observe(0, 7, both(6, 2), true)
	observe(7, 15, both(1, 6), true)
	// Slot 1: one round misses a load. Slot 2: idle. Slot 3: no round for 4
	// minutes. Slot 4: b goes within it. Slot 5: a service comes within it.
	// Slot 6: a load overflows the sum.
	observe(15, 20, both(1, 1), true)
	observe(20, 21, both(1, 1), false)
	observe(21, 30, both(1, 1), true)
	observe(30, 45, both(0, 0), true)
	observe(45, 50, both(2, 1), true)
	observe(54, 60, both(2, 1), true)
	observe(60, 70, both(2, 1), true)
	observe(70, 75, map[string]float64{"a": 2}, true)
	observe(75, 80, map[string]float64{"a": 2}, true)
	observe(80, 90, both(2, 1), true)
	observe(90, 100, both(math.MaxFloat64, math.MaxFloat64), true)
	// Slot 7: no round after its fifth minute. Slot 8 starts after the gap.
	observe(105, 110, both(2, 1), true)
	observe(120, 121, both(1, 1), true)
	// Slot 9 (from minute 135) ends slot 8.
	observe(121, 136, both(1, 1), true)
	p.Observe(monday.Add(134*time.Minute), both(100, 100), true) // before the slot in progress: ignored
	if got, want := p.Ratio[0], 8.0/12; p.Weeks[0] != 1 || math.Abs(got-want) > 1e-12 {
		t.Fatalf("slot 0: ratio %v (weeks %d), want %v", got, p.Weeks[0], want)
	}
	if p.Learned() != 1 {
		t.Fatalf("weeks %v, last slot %v: a slot not seen whole was learned", p.Weeks[:9], p.Weeks[SlotsPerWeek-1])
	}
	if p.SlotPeak != 2 {
		t.Fatalf("slot in progress peaks at %v, want 2 (the round from before it ignored)", p.SlotPeak)
	}

	peaks := func(int) (float64, float64) { return 22, 12 }
	if peak, ok := p.PeakOver(monday, 10*time.Minute, peaks); !ok || math.Abs(peak-22*8.0/12) > 1e-12 {
		t.Fatalf("PeakOver slot 0: %v %v, want 22 x 8/12", peak, ok)
	}
	if peak, _ := p.PeakOver(monday, 10*time.Minute, func(int) (float64, float64) { return 22, 20 }); peak != 20 {
		t.Fatalf("PeakOver slot 0: %v, want 20, the largest service's peak", peak)
	}
	if _, ok := p.PeakOver(monday, 15*time.Minute, peaks); ok {
		t.Fatal("PeakOver slots 0 and 1 is known, though slot 1 is not learned")
	}

	// A week later the same slot moves by the weight.
	week := 7 * 24 * 60
	observe(week-1, week+16, both(3, 3), true)
	if got, want := p.Ratio[0], 8.0/12+DefaultProfileWeight*(1-8.0/12); p.Weeks[0] != 2 || math.Abs(got-want) > 1e-12 {
		t.Fatalf("slot 0 a week later: ratio %v (weeks %d), want %v", got, p.Weeks[0], want)
	}
}

func TestPoolProfileJSON(t *testing.T) {
	var p PoolProfile
	p.Ratio[5], p.Weeks[5] = 0.75, 3
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var q PoolProfile
	if err := json.Unmarshal(raw, &q); err != nil || q.Ratio != p.Ratio || q.Weeks != p.Weeks {
		t.Fatalf("read back %v: %v %v", err, q.Ratio[5], q.Weeks[5])
	}
	good := string(raw)
	for _, bad := range []string{
		`{"v":2}`,
		`{"v":1,"ratio":[0.5],"weeks":[1]}`,
		strings.Replace(good, "0.75", "1.25", 1),
		strings.Replace(good, "0.75", "-0.5", 1),
		strings.Replace(good, ",3,", ",0,", 1),
		strings.Replace(good, `"ratio":[0,`, `"ratio":[0.1,`, 1),
	} {
		if bad == good {
			t.Fatalf("test case did not change the stored form")
		}
		if err := json.Unmarshal([]byte(bad), &q); err == nil {
			t.Errorf("%.80s... was read", bad)
		}
	}
	if err := json.Unmarshal([]byte(`{"v":1}`), &q); err != nil || q.Learned() != 0 {
		t.Fatalf("an empty pool profile: %v, %d learned", err, q.Learned())
	}
}

// A restored profile is bounded: a slot's stored ratio counts as at least
// RestoredRatioFloor until the planner sees the slot whole itself, and that
// week replaces it instead of being smoothed into it. A stored ratio near 0
// (a bad write, another pool's record) would otherwise keep room for little
// more than the largest service's peak, relearned only over weeks.
func TestPoolProfileRestoreIsBounded(t *testing.T) {
	monday := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	var stored PoolProfile
	stored.Ratio[0], stored.Weeks[0] = 0.01, 100
	stored.Ratio[1], stored.Weeks[1] = 0.8, 3
	var p PoolProfile
	p.Ratio[1], p.Weeks[1] = 0.7, 1 // learned here since the start: kept
	p.Restore(stored)
	// Four services peaking at 8 GPUs each: 32 in all, 8 the largest.
	peaks := func(int) (float64, float64) { return 32, 8 }
	peak, ok := p.PeakOver(monday, time.Minute, peaks)
	t.Logf("restored ratio 0.01: room for a pool peak of %v GPUs (%v as stored)", peak, max(0.01*32, 8))
	if !ok || peak != RestoredRatioFloor*32 {
		t.Fatalf("PeakOver a restored slot at 0.01: %v %v, want the floor's %v", peak, ok, RestoredRatioFloor*32)
	}
	if p.Ratio[1] != 0.7 {
		t.Fatalf("slot 1 learned here: ratio %v, want 0.7 kept", p.Ratio[1])
	}
	// The planner sees slot 0 whole: a and b take turns, the pool peaking at
	// 9 of the 12 their peaks add up to. That week is the slot's ratio.
	both := func(a, b float64) map[string]float64 { return map[string]float64{"a": a, "b": b} }
	for m := -1; m < 16; m++ {
		loads := both(6, 3)
		if m >= 7 {
			loads = both(3, 6)
		}
		p.Observe(monday.Add(time.Duration(m)*time.Minute), loads, true)
	}
	if got := p.Ratio[0]; got != 9.0/12 || p.Weeks[0] != 1 {
		t.Fatalf("slot 0 seen whole after a restore: ratio %v (weeks %d), want 0.75 from its own week", got, p.Weeks[0])
	}
	// From then on it is smoothed as any learned slot.
	for m := 7*24*60 - 1; m < 7*24*60+16; m++ {
		p.Observe(monday.Add(time.Duration(m)*time.Minute), both(3, 3), true)
	}
	if got, want := p.Ratio[0], 0.75+DefaultProfileWeight*(1-0.75); math.Abs(got-want) > 1e-12 {
		t.Fatalf("slot 0 a week later: %v, want %v", got, want)
	}
}
