package availability

import (
	"math"
	"testing"
	"time"
)

// What a learner learned of its availability forecasts is what a restart
// reads back (the controller publishes it on the GPUPool): a learner that
// takes it back gives the same probabilities, and gives them over both
// spans from the start (the recalibration curve it learns again as its own
// forecasts are judged); a record that does not add up is refused whole.
// A record fades by half in SurvivalHalfLife.
func TestSurvivalRecordOutlivesARestart(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	p := &Learner{}
	p.seen[levelOf(110)][0] = struct{ gpus, survived float64 }{800, 760}
	p.seen[levelOf(110)][1] = struct{ gpus, survived float64 }{800, 200}
	p.seen[levelOf(0)][1] = struct{ gpus, survived float64 }{96, 90}
	record := p.Survival()
	if len(record) != 2 || record[0].NeededAtPercent != 110 || record[1].NeededAtPercent != 0 || record[0].Given != [2]int64{800, 800} || record[0].Survived != [2]int64{760, 200} {
		t.Fatalf("record %+v", record)
	}
	q := &Learner{}
	if q.learned != [2]bool{} {
		t.Fatalf("a new learner has learned %v", q.learned)
	}
	if err := q.RestoreSurvival(record, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if q.learned != [2]bool{true, true} {
		t.Errorf("restored, the learner gives chances over %v, want both spans", q.learned)
	}
	for l := range q.seen {
		for h := range SurvivalHorizons {
			if got, want := q.survival(l, h, true), p.survival(l, h, true); got != want {
				t.Errorf("level %d%%, horizon %d: %.4f after the restart, %.4f before", levelPercent(l), h, got, want)
			}
		}
	}
	// The time the controller was down fades the record as if it had run:
	// published a half-life before the restarted planner's first judgement,
	// or before what it learned since was last faded.
	halved := func(q *Learner, when string) {
		t.Helper()
		if got := q.seen[levelOf(110)][0]; got.gpus != 400 || got.survived != 380 {
			t.Errorf("%s: %+v at 110%% over an hour, want 400 given and 380 survived", when, got)
		}
	}
	down := &Learner{}
	if err := down.RestoreSurvival(record, t0); err != nil {
		t.Fatal(err)
	}
	down.judge(t0.Add(SurvivalHalfLife))
	halved(down, "restored, then judged a half-life later")
	since := &Learner{}
	since.judge(t0.Add(SurvivalHalfLife))
	if err := since.RestoreSurvival(record, t0); err != nil {
		t.Fatal(err)
	}
	halved(since, "restored into a learner that judged a half-life after it was published")
	given := func(g1, g4, s1, s4 int64) Judged { return Judged{Given: [2]int64{g1, g4}, Survived: [2]int64{s1, s4}} }
	for _, bad := range [][]SurvivalCount{
		{{NeededAtPercent: 120, Judged: given(1, 1, 0, 0)}},
		{{NeededAtPercent: 100, Judged: given(10, 10, 11, 0)}},
		{{NeededAtPercent: 100, Judged: given(-1, 0, 0, 0)}},
		{{NeededAtPercent: 100, Judged: given(maxSurvivalGPUs+1, 0, 0, 0)}},
		{{NeededAtPercent: 100, Judged: given(1, 1, 0, 0)}, {NeededAtPercent: 100, Judged: given(1, 1, 0, 0)}},
		{{NeededAtPercent: 100, Judged: given(5, 5, 0, 0)}, {NeededAtPercent: -1}},
	} {
		fresh := &Learner{}
		if err := fresh.RestoreSurvival(bad, time.Time{}); err == nil {
			t.Errorf("%+v was taken back", bad)
		}
		if got := fresh.Survival(); len(got) != 0 {
			t.Errorf("%+v was refused, yet %+v was kept", bad, got)
		}
	}
}

// A record restored with counts far above what the pool could give (up to
// maxSurvivalGPUs: a bad write, another pool's record) is scaled down to what
// this pool's own forecasts could hold in it, its chances kept: what the
// planner learns then outweighs it within one SurvivalHalfLife instead of
// the weeks 2^40 takes to fade.
func TestBoundScalesARestoredRecordToThePool(t *testing.T) {
	record := []SurvivalCount{{NeededAtPercent: 110, Judged: Judged{Given: [2]int64{1 << 40, 1 << 40}, Survived: [2]int64{1 << 39, 1 << 40}}}}
	recal := []RecalibrationCount{{LogOddsMilli: 2464, Judged: Judged{Given: [2]int64{1 << 40, 1 << 40}, Survived: [2]int64{1 << 40, 1 << 40}}}}
	a := &Learner{}
	if err := a.RestoreSurvival(record, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := a.RestoreRecalibration(recal, time.Time{}); err != nil {
		t.Fatal(err)
	}
	before := [2]float64{a.survival(levelOf(110), 0, true), a.survival(levelOf(110), 1, true)}
	const poolGPUs = 16
	a.Bound(poolGPUs)
	most := poolGPUs / (1 - fading(Every))
	for h := range SurvivalHorizons {
		got := a.seen[levelOf(110)][h].gpus
		var recalGPUs float64
		for _, g := range a.recal[h].gpus {
			recalGPUs += g
		}
		if got > most*(1+1e-9) || recalGPUs > most*(1+1e-9) {
			t.Fatalf("horizon %d: %v GPUs in the survival record, %v in the recalibration, want at most %v", h, got, recalGPUs, most)
		}
		if after := a.survival(levelOf(110), h, true); math.Abs(after-before[h]) > 1e-3 {
			t.Errorf("horizon %d: chance %v after bounding, %v before", h, after, before[h])
		}
	}
	halfLives := math.Log2(float64(1<<40) / most)
	t.Logf("a record of 2^40 GPUs for a %d-GPU pool: bounded to %.0f (it would have taken %.0f days to fade to that)", poolGPUs, most, halfLives*SurvivalHalfLife.Hours()/24)
	// A record within the bound is left as it is.
	b := &Learner{}
	if err := b.RestoreSurvival([]SurvivalCount{{NeededAtPercent: 110, Judged: Judged{Given: [2]int64{800, 800}, Survived: [2]int64{760, 200}}}}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	b.Bound(poolGPUs)
	if got := b.seen[levelOf(110)][0]; got.gpus != 800 || got.survived != 760 {
		t.Fatalf("a record within the bound became %+v", got)
	}
}
