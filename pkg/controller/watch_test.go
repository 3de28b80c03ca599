package controller

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A watch that keeps up passes, and so does one on a quiet resource that
// holds what the server does; one that stops short of a version the server
// was at while objects changed fails the check once the bound has passed,
// and passes again once it catches up. Versions that are not numbers turn
// the check off.
func TestWatchProgress(t *testing.T) {
	server, seen := uint64(100), uint64(100)
	changed := 0 // objects the informer has not seen
	w := &watchProgress{bound: time.Minute, every: 10 * time.Second, watched: []watched{{
		resource: "nodes",
		current:  func(context.Context) (string, error) { return strconv.FormatUint(server, 10), nil },
		seen:     func() string { return strconv.FormatUint(seen, 10) },
		differ: func(context.Context) (string, int, error) {
			return strconv.FormatUint(server, 10), changed, nil
		},
	}}}
	ctx := context.Background()
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	// Healthy: the server moves on, the watch follows within a bookmark period.
	for s := 0; s <= 120; s += 5 {
		server += 7
		if s%60 == 55 {
			seen = server
		}
		if err := w.check(ctx, at(s)); err != nil {
			t.Fatalf("at %ds, a watch that follows within a minute: %v", s, err)
		}
	}
	// Quiet: other resources move the server's version, this one has no
	// event and no bookmark for three minutes, and holds what the server does.
	for s := 125; s <= 300; s += 5 {
		server += 7
		if err := w.check(ctx, at(s)); err != nil {
			t.Fatalf("at %ds, a quiet watch: %v", s, err)
		}
	}
	seen = server
	// Stalled: the watch stays where it is while objects change.
	changed = 3
	stalledAt := 305
	var failed int
	for s := stalledAt; s <= stalledAt+90; s += 5 {
		server += 7
		if err := w.check(ctx, at(s)); err != nil {
			if !strings.Contains(err.Error(), "the nodes watch has not reached") {
				t.Fatalf("error %q", err)
			}
			if failed == 0 {
				failed = s
			}
		} else if failed != 0 {
			t.Fatalf("at %ds the stalled watch passes again", s)
		}
	}
	// The first probe it missed was at most a probe period after it stalled.
	if failed == 0 || failed-stalledAt > 60+10+5 {
		t.Fatalf("stall noticed at %ds, %ds after the watch stopped; want within the bound, a probe period and a round", failed, failed-stalledAt)
	}
	seen = server
	if err := w.check(ctx, at(stalledAt+95)); err != nil {
		t.Fatalf("caught up: %v", err)
	}

	off := &watchProgress{bound: time.Minute, every: time.Second, watched: []watched{{
		resource: "pods",
		current:  func(context.Context) (string, error) { return "opaque-7", nil },
		seen:     func() string { return "opaque-3" },
		differ:   func(context.Context) (string, int, error) { return "opaque-7", 1, nil },
	}}}
	for s := 0; s < 300; s += 5 {
		if err := off.check(ctx, at(s)); err != nil {
			t.Fatalf("resource versions that are not numbers: %v", err)
		}
	}
}
