package demand

import (
	"math"
	"testing"
	"time"
)

// A profile on a fast clock learns and reads the slots of its own week: at
// 96 times the wall clock, a quarter-hour slot passes in 9.375 s.
func TestProfileOnAFastClock(t *testing.T) {
	origin := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC) // a Monday, on a slot's start
	clock := Clock{Origin: origin, Scale: 96}
	if got := clock.At(origin.Add(9375 * time.Millisecond)); !got.Equal(origin.Add(SlotLength)) {
		t.Fatalf("9.375 s after the origin the clock reads %v, want %v", got, origin.Add(SlotLength))
	}
	fast, wall := Profile{Clock: clock}, Profile{}
	for _, o := range []struct {
		after time.Duration
		load  float64
	}{{0, 5}, {5 * time.Second, 7}, {10 * time.Second, 3}} {
		fast.Observe(origin.Add(o.after), o.load)
		wall.Observe(origin.Add(o.after), o.load)
	}
	// The first slot ended 9.375 s in and was learned at its peak.
	if peak, ok := fast.PeakOver(origin, time.Second); !ok || peak != 7 {
		t.Fatalf("the fast profile's first slot = %g (learned %v), want 7", peak, ok)
	}
	if got := fast.Learned(); got != 1 {
		t.Fatalf("the fast profile learned %d slots, want 1", got)
	}
	// The window is in wall time too: 10 s reaches the second slot, unlearned.
	if fast.LearnedOver(origin, 10*time.Second) {
		t.Fatal("a 10 s window (16 minutes of the fast clock) is learned, though it reaches the slot in progress")
	}
	// On the wall clock, the 10 s stayed within one slot: nothing learned.
	if got := wall.Learned(); got != 0 {
		t.Fatalf("the wall clock's profile learned %d slots, want 0", got)
	}
}

func TestClockIsTheWallClockUnlessSet(t *testing.T) {
	now := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	for _, c := range []Clock{{}, {Scale: 480}, {Origin: now, Scale: 1}, {Origin: now, Scale: 0}, {Origin: now, Scale: math.Inf(1)}} {
		if got := c.At(now.Add(time.Hour)); !got.Equal(now.Add(time.Hour)) {
			t.Errorf("%+v: At = %v, want the time given", c, got)
		}
		if got := c.Span(time.Minute); got != time.Minute {
			t.Errorf("%+v: Span = %v, want the span given", c, got)
		}
	}
	fast := Clock{Origin: now, Scale: 480}
	if got := fast.Span(time.Duration(math.MaxInt64 / 2)); got != time.Duration(math.MaxInt64) {
		t.Errorf("a span beyond time.Duration's range = %v, want it saturated", got)
	}
	if got := (Clock{Origin: now, Scale: 1e-12}).Wall(time.Hour); got != time.Duration(math.MaxInt64) {
		t.Errorf("an hour on a clock 1e12 times slower lasts %v on the wall, want it saturated", got)
	}
	if got := fast.At(now.Add(-time.Second)); !got.Equal(now.Add(-8 * time.Minute)) {
		t.Errorf("a second before the origin the clock reads %v, want 8 minutes before it", got)
	}
}
