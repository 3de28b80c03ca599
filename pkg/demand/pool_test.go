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
	var p PoolProfile
	// Slot 0: a and b take turns at 6 GPUs (the pool peaks at 8 of the 12
	// their own peaks add up to). Slot 1: a round misses a load. Slot 2:
	// idle. Slot 3 ends slot 2.
	p.Observe(monday, map[string]float64{"a": 6, "b": 2}, true)
	p.Observe(monday.Add(5*time.Minute), map[string]float64{"a": 1, "b": 6}, true)
	p.Observe(monday.Add(15*time.Minute), map[string]float64{"a": 6, "b": 2}, true)
	p.Observe(monday.Add(20*time.Minute), map[string]float64{"a": 1}, false)
	p.Observe(monday.Add(30*time.Minute), map[string]float64{"a": 0, "b": 0}, true)
	p.Observe(monday.Add(45*time.Minute), map[string]float64{"a": 1, "b": 1}, true)
	p.Observe(monday.Add(44*time.Minute), map[string]float64{"a": 100, "b": 100}, true) // before the slot in progress: ignored
	if got, want := p.Ratio[0], 8.0/12; p.Weeks[0] != 1 || math.Abs(got-want) > 1e-12 {
		t.Fatalf("slot 0: ratio %v (weeks %d), want %v", got, p.Weeks[0], want)
	}
	if p.Weeks[1] != 0 || p.Weeks[2] != 0 || p.Learned() != 1 {
		t.Fatalf("weeks %v: a slot with a load missing or an idle pool was learned", p.Weeks[:4])
	}
	if p.SlotPeak != 2 {
		t.Fatalf("slot in progress peaks at %v, want 2 (the round from before it ignored)", p.SlotPeak)
	}

	sum := func(int) float64 { return 22 }
	if peak, ok := p.PeakOver(monday, 10*time.Minute, sum); !ok || math.Abs(peak-22*8.0/12) > 1e-12 {
		t.Fatalf("PeakOver slot 0: %v %v, want 22 x 8/12", peak, ok)
	}
	if _, ok := p.PeakOver(monday, 15*time.Minute, sum); ok {
		t.Fatal("PeakOver slots 0 and 1 is known, though slot 1 is not learned")
	}

	// A week later the same slot moves by the weight.
	p.Observe(monday.Add(7*24*time.Hour), map[string]float64{"a": 3, "b": 3}, true)
	p.Observe(monday.Add(7*24*time.Hour+15*time.Minute), nil, true)
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
