package demo

import (
	"encoding/json"
	"errors"
	"math"
	randv2 "math/rand/v2"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/demand"
)

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		ds = append(ds, time.Duration(i)*time.Second)
	}
	for _, tt := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Second}, {99, 99 * time.Second}, {100, 100 * time.Second}, {0.1, time.Second}} {
		if got := percentile(ds, tt.p); got != tt.want {
			t.Errorf("p%v = %v, want %v", tt.p, got, tt.want)
		}
	}
	if ds[0] != 100*time.Second {
		t.Fatal("percentile sorted its input in place")
	}
	if got := percentile(nil, 50); got != 0 {
		t.Fatalf("p50 of nothing = %v", got)
	}
	if got := percentile([]time.Duration{3 * time.Second}, 99); got != 3*time.Second {
		t.Fatalf("p99 of one = %v", got)
	}
}

func TestIntegralIsAStepFunction(t *testing.T) {
	var i integral
	t0 := time.Unix(1000, 0)
	i.sample(t0, 8)                    // 8 GPUs ...
	i.sample(t0.Add(2*time.Second), 4) // ... for 2 s = 16
	i.sample(t0.Add(5*time.Second), 0) // 4 for 3 s = 12
	i.sample(t0.Add(9*time.Second), 0) // 0
	if i.total != 28 {
		t.Fatalf("total %v GPU-seconds, want 28", i.total)
	}
	// At 360x, 28 real GPU-seconds are 28*360/3600 = 2.8 demo GPU-hours.
	if got := i.hours(360); math.Abs(got-2.8) > 1e-9 {
		t.Fatalf("%v demo GPU-hours, want 2.8", got)
	}
}

func TestTimingScalesConsistently(t *testing.T) {
	tm, err := newTiming(4)
	if err != nil {
		t.Fatal(err)
	}
	if tm.scale != 360 {
		t.Fatalf("a 4-minute day is %vx, want 360x", tm.scale)
	}
	if got := tm.demo(tm.day); got != 24*time.Hour {
		t.Fatalf("the demo day lasts %v of demo time", got)
	}
	// 45 demo minutes at 360x are 7.5 s; 2 h are 20 s.
	if tm.horizon != 7500*time.Millisecond || tm.trendWindow != 20*time.Second {
		t.Fatalf("horizon %v, trend window %v", tm.horizon, tm.trendWindow)
	}
	// The reclaim lead: the grace period and two rounds, within the horizon.
	if tm.reclaimLead != 4*time.Second {
		t.Fatalf("reclaim lead %v, want 2 s of grace and two 1 s rounds", tm.reclaimLead)
	}
	// Floors: a scrape a second at most, whole seconds of grace.
	if tm.scrape != time.Second || tm.graceBestEffort != 2 {
		t.Fatalf("scrape %v, grace %ds", tm.scrape, tm.graceBestEffort)
	}
	short, _ := newTiming(2)
	if short.horizon >= tm.horizon || short.scrape != time.Second {
		t.Fatalf("a shorter day must shorten the horizon (%v vs %v) but not the scrape floor (%v)", short.horizon, tm.horizon, short.scrape)
	}
	for _, bad := range []float64{0, 0.5, math.NaN(), 61} {
		if _, err := newTiming(bad); err == nil {
			t.Errorf("a %v-minute day was accepted", bad)
		}
	}
}

func TestTrafficFollowsTheDay(t *testing.T) {
	for _, s := range demoServices() {
		peakLoad, quiet := 0.0, math.Inf(1)
		peakAt := 0.0
		for m := 0; m < 24*60; m++ {
			h := float64(m) / 60
			l := s.Load(h)
			if l < 0 || math.IsNaN(l) {
				t.Fatalf("%s at %v: load %v", s.Name, h, l)
			}
			if l > peakLoad {
				peakLoad, peakAt = l, h
			}
			quiet = math.Min(quiet, l)
		}
		near := false
		for _, p := range s.PeakHours {
			near = near || math.Abs(peakAt-p) < 1
		}
		if !near {
			t.Errorf("%s peaks at %.1fh, want near one of %v", s.Name, peakAt, s.PeakHours)
		}
		if peakLoad < 0.9*s.Peak || peakLoad > 1.1*s.Peak || quiet > 1.1*s.Base {
			t.Errorf("%s ranges %.0f..%.0f, want about %.0f..%.0f", s.Name, quiet, peakLoad, s.Base, s.Peak)
		}
		// The day wraps: 23:59 and 00:00 are neighbours.
		if d := math.Abs(s.Load(0) - s.Load(23.999)); d > 0.05*s.Peak {
			t.Errorf("%s jumps by %.1f at midnight", s.Name, d)
		}
		// Even at its peak with headroom, a service fits its maximum replicas.
		if need := math.Ceil(peakLoad * 1.1 * 1.05 / s.Target); need > float64(s.Max) {
			t.Errorf("%s needs %v replicas at its peak, max is %d", s.Name, need, s.Max)
		}
	}
}

func TestPodLoadSpreadsAndQueues(t *testing.T) {
	s := Service{Target: 16}
	if r, w, kv := podLoad(s, 40, 2); r != 20 || w != 0 || kv <= 0 || kv > 1 {
		t.Fatalf("40 over 2: %v running, %v waiting, kv %v", r, w, kv)
	}
	// Beyond twice the target a replica's batch is full and the rest waits.
	if r, w, kv := podLoad(s, 100, 2); r != 32 || w != 18 || kv != 0.95 {
		t.Fatalf("100 over 2: %v running, %v waiting, kv %v", r, w, kv)
	}
	if r, w, _ := podLoad(s, 10, 0); r != 0 || w != 0 {
		t.Fatal("no replicas, no load")
	}
}

func TestChecksFailClosed(t *testing.T) {
	tm, _ := newTiming(4)
	empty := &report{t: tm}
	failures := empty.check()
	empty.published = published{err: errors.New(`harvestreports.gleaner.dev "gleaner" not found`)}
	failures = empty.check()
	for _, want := range []string{"no GPU was ever lent", "no best-effort job finished", "never reclaimed", "autoscaler never changed", "published no readable HarvestReport"} {
		found := false
		for _, f := range failures {
			found = found || strings.Contains(f, want)
		}
		if !found {
			t.Errorf("an empty day passes the check %q; failures: %q", want, failures)
		}
	}

	good := &report{t: tm, peakLent: 40, finishedJobs: 3, byReclaimer: 2,
		infWaits:      []time.Duration{time.Second, 2 * time.Second},
		replicaRanges: []replicaRange{{"chat", 1, 6}},
		published:     published{pool: true, gpuSeconds: 3600, jobs: 2, timelines: 2}}
	good.lentGPU.sample(time.Unix(0, 0), 40)
	good.lentGPU.sample(time.Unix(10, 0), 0)
	if f := good.check(); len(f) != 0 {
		t.Fatalf("a good day fails: %q", f)
	}
	good.infWaits = append(good.infWaits, tm.reclaimBudget()+time.Second)
	if f := good.check(); len(f) != 1 || !strings.Contains(f[0], "over the reclaim budget") {
		t.Fatalf("an inference pod over budget: %q", f)
	}
}

// The week of history a service brings is its day a week before, read as the
// controller stores it, on the profiles' clock: a day's slots and the notice
// horizon's after it, each the peak of a day near but not the same as today's.
func TestStoredProfileIsLastWeeksDay(t *testing.T) {
	zero := time.Date(2026, 12, 7, 22, 40, 13, 0, time.UTC) // hour 0, off a slot's start
	rng := randv2.New(randv2.NewPCG(lastWeekSeed, 0))
	for _, s := range demoServices() {
		raw, err := s.storedProfile(rng, zero, 26)
		if err != nil {
			t.Fatal(err)
		}
		var p demand.Profile
		if err := json.Unmarshal([]byte(raw), &p); err != nil {
			t.Fatalf("%s: the stored profile does not read back: %v", s.Name, err)
		}
		if got := p.Learned(); got != 26*4+1 {
			t.Errorf("%s: %d slots learned, want 105 (26 hours from a slot's middle)", s.Name, got)
		}
		for _, p0 := range s.PeakHours {
			at := zero.Add(time.Duration(p0 * float64(time.Hour)))
			near, ok := p.PeakOver(at.Add(-30*time.Minute), time.Hour)
			if !ok || near < s.Base+0.8*(s.Peak-s.Base) {
				t.Errorf("%s: last week's peak within 30m of %.1fh is %g, want at least 80%% of today's rise", s.Name, p0, near)
			}
		}
		// Last week peaked at another height or time than today.
		var lastPeak, todayPeak, lastAt, todayAt float64
		for h := 0.0; h < 24; h += 0.25 {
			if got, _ := p.PeakOver(zero.Add(time.Duration(h*float64(time.Hour))), 0); got > lastPeak {
				lastPeak, lastAt = got, h
			}
			if l := math.Round(s.Load(h)); l > todayPeak {
				todayPeak, todayAt = l, h
			}
		}
		if math.Abs(lastPeak-todayPeak) < 1 && math.Abs(lastAt-todayAt) < 0.25 {
			t.Errorf("%s: last week peaked at %g at %.2fh, today at %g at %.2fh: last week is today", s.Name, lastPeak, lastAt, todayPeak, todayAt)
		}
	}
}

// An evicted job's lost work is told apart by its notice: none (or one
// withdrawn), saved for its time, or taken before it saved; a notice that
// moved, or came again, after the save needs another.
func TestEvictionsSplitByNotice(t *testing.T) {
	tm, _ := newTiming(3)
	s := &scenario{t: tm, rep: report{t: tm}}
	t0 := time.Date(2026, 12, 8, 2, 0, 0, 0, time.UTC)
	noticed := func(at time.Time) []*v1.Pod {
		p := &v1.Pod{}
		if !at.IsZero() {
			p.Annotations = map[string]string{api.AnnotationReclaimNotice: at.Format(time.RFC3339)}
		}
		return []*v1.Pod{p}
	}
	// follow runs a job's ticks from from until until, its pods noticed for notice.
	follow := func(j *job, notice, from, until time.Time) {
		for now := from; now.Before(until); now = now.Add(jobTick) {
			s.followNotice(j, noticed(notice), now)
			s.dueForNotice(j, now)
		}
	}
	evict := func(j *job, notice, at time.Time, lost float64) {
		follow(j, notice, t0, at)
		s.rep.evicted(lost, j, at)
	}
	evict(&job{}, time.Time{}, t0.Add(2*time.Second), 1)           // no notice
	evict(&job{}, t0.Add(3*time.Second), t0.Add(3*time.Second), 2) // saved for it
	evict(&job{}, t0.Add(9*time.Second), t0.Add(3*time.Second), 4) // taken before it saved
	withdrawn := &job{}
	follow(withdrawn, t0.Add(9*time.Second), t0, t0.Add(time.Second))
	follow(withdrawn, time.Time{}, t0.Add(time.Second), t0.Add(2*time.Second))
	s.rep.evicted(16, withdrawn, t0.Add(2*time.Second)) // its notice withdrawn: none

	moved := &job{}
	follow(moved, t0.Add(2*time.Second), t0, t0.Add(2*time.Second))
	if !moved.noticeSaved {
		t.Fatal("a job did not save for its notice's time")
	}
	follow(moved, t0.Add(8*time.Second), t0.Add(2*time.Second), t0.Add(3*time.Second))
	s.rep.evicted(8, moved, t0.Add(3*time.Second)) // moved later, taken before the new save

	again := &job{}
	follow(again, t0.Add(2*time.Second), t0, t0.Add(2*time.Second))
	follow(again, time.Time{}, t0.Add(2*time.Second), t0.Add(3*time.Second))
	follow(again, t0.Add(9*time.Second), t0.Add(3*time.Second), t0.Add(4*time.Second))
	s.rep.evicted(32, again, t0.Add(4*time.Second)) // saved, withdrawn, noticed again: not saved for it

	r := &s.rep
	if r.lostWork != 63 || r.lostUnnoticed != 17 || r.noticedEvictions != 4 || r.lostNoticed != 46 || r.overtaken != 3 || r.lostOvertaken != 44 {
		t.Fatalf("lost %v (unnoticed %v), noticed %d losing %v, overtaken %d losing %v; want 63 (17), 4 losing 46, 3 losing 44",
			r.lostWork, r.lostUnnoticed, r.noticedEvictions, r.lostNoticed, r.overtaken, r.lostOvertaken)
	}
	var out strings.Builder
	r.print(&out)
	if want := "46.0  GPU-hours over 4 evictions: 2.0 over 1 saved for its time, 44.0 over 3 taken before they saved"; !strings.Contains(out.String(), want) {
		t.Fatalf("the report does not split the noticed evictions (%q):\n%s", want, out.String())
	}
}
