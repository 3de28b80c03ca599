package availability

import (
	"math"
	"testing"
	"time"
)

// Chances whose outcomes follow σ(slope·logit(p) + offset): a curve fitted
// to many GPUs' worth of them finds the slope and the offset; one fitted to
// a few stays near no change (the prior); one never fitted changes nothing.
func TestRecalibrationFindsTheCurve(t *testing.T) {
	const slope, offset = 0.55, 0.4
	judged := func(gpus float64) *recalibration {
		r := &recalibration{}
		for i := range 99 {
			p := float64(i+1) / 100
			r.add(p, gpus, sigmoid(slope*logit(p)+offset))
		}
		r.fit()
		return r
	}
	many := judged(1e7)
	if !many.fitted || math.Abs(many.slope-slope) > 0.02 || math.Abs(many.offset-offset) > 0.02 {
		t.Errorf("fitted to 1e7 GPUs a chance: slope %.3f, offset %.3f; want %.2f, %.2f", many.slope, many.offset, slope, offset)
	}
	if got, want := many.apply(0.2), sigmoid(slope*logit(0.2)+offset); math.Abs(got-want) > 0.01 {
		t.Errorf("0.2 recalibrated to %.3f, want %.3f", got, want)
	}
	few := judged(10)
	if math.Abs(few.slope-1) > 0.01 || math.Abs(few.offset) > 0.01 {
		t.Errorf("fitted to 990 GPUs: slope %.3f, offset %.3f; want about 1 and 0", few.slope, few.offset)
	}
	var never recalibration
	for _, p := range []float64{0, 0.3, 1} {
		if got := never.apply(p); got != p {
			t.Errorf("never fitted: %v recalibrated to %v", p, got)
		}
	}
	// Fading what was judged by half halves every count.
	before := many.gpus
	many.fade(0.5)
	for i := range before {
		if many.gpus[i] != before[i]/2 {
			t.Fatalf("bin %d: %v faded by half to %v", i, before[i], many.gpus[i])
		}
	}
}

// A pool whose chances were right keeps them.
func TestRecalibrationLeavesRightChancesAlone(t *testing.T) {
	r := &recalibration{}
	for i := range 99 {
		p := float64(i+1) / 100
		r.add(p, 1e6, p)
	}
	r.fit()
	for _, p := range []float64{0.05, 0.5, 0.95} {
		if got := r.apply(p); math.Abs(got-p) > 0.005 {
			t.Errorf("%.2f recalibrated to %.3f", p, got)
		}
	}
}

// The recalibration outlives a restart as the survival record does: a
// learner that takes back what another learned recalibrates as it did, and
// a record that does not add up is refused whole.
func TestRecalibrationOutlivesARestart(t *testing.T) {
	var p Learner
	for i := range 99 {
		prob := float64(i+1) / 100
		p.recal[0].add(prob, 1e4, sigmoid(0.6*logit(prob)+0.2))
		p.recal[1].add(prob, 5e3, sigmoid(0.8*logit(prob)-0.3))
	}
	for h := range p.recal {
		p.recal[h].fit()
	}
	record := p.Recalibration()
	if len(record) == 0 || len(record) > recalBins {
		t.Fatalf("%d bands recorded", len(record))
	}
	var q Learner
	if err := q.RestoreRecalibration(record, time.Time{}); err != nil {
		t.Fatal(err)
	}
	for h := range SurvivalHorizons {
		for _, prob := range []float64{0.1, 0.5, 0.9} {
			if got, want := q.recal[h].apply(prob), p.recal[h].apply(prob); math.Abs(got-want) > 1e-4 {
				t.Errorf("span %v: %.2f recalibrated to %.4f after the restart, %.4f before", SurvivalHorizons[h], prob, got, want)
			}
		}
	}
	band := record[0].LogOddsMilli
	given := func(g1, g4, s1, s4 int64) Judged { return Judged{Given: [2]int64{g1, g4}, Survived: [2]int64{s1, s4}} }
	for _, bad := range [][]RecalibrationCount{
		{{LogOddsMilli: band + 20, Judged: given(1, 1, 0, 0)}},
		{{LogOddsMilli: 99999, Judged: given(1, 1, 0, 0)}},
		{{LogOddsMilli: band, Judged: given(10, 10, 11, 0)}},
		{{LogOddsMilli: band, Judged: given(-1, 0, 0, 0)}},
		{{LogOddsMilli: band, Judged: given(maxSurvivalGPUs+1, 0, 0, 0)}},
		{{LogOddsMilli: band, Judged: given(1, 1, 0, 0)}, {LogOddsMilli: band, Judged: given(1, 1, 0, 0)}},
	} {
		var fresh Learner
		if err := fresh.RestoreRecalibration(bad, time.Time{}); err == nil {
			t.Errorf("%+v was taken back", bad)
		}
		if got := fresh.Recalibration(); len(got) != 0 || fresh.recal[0].fitted {
			t.Errorf("%+v was refused, yet %+v was kept", bad, got)
		}
	}
}
