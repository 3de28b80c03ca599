package availability

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// recalibration maps the chances a load level's record gives through a
// logistic curve in their log-odds (Platt scaling), fitted to what became of
// the chances given over one span: p' = σ(slope·logit(p) + offset).
//
// A record faded over two days follows the forecast's spells of error a day
// or two late, so its chances come out too far apart: the lowest survive
// more often than they say, the highest less. The curve learns how much
// closer to bring them, and any offset; it fades with the record
// (SurvivalHalfLife) and is drawn toward no change by recalPrior GPUs'
// worth of judgements, so a young or small pool keeps its record's word.
type recalibration struct {
	// gpus and survived, by the log-odds given (recalBins from -recalLogit
	// to recalLogit): the GPUs judged and how many of them survived.
	gpus, survived [recalBins]float64
	fitted         bool
	slope, offset  float64
}

const (
	recalBins  = 200
	recalLogit = 9.3 // past logit(1 - 1e-4)
	// recalPrior is how many GPUs' worth of judgements draw the curve toward
	// no change: spread evenly over log-odds -3 to 3 (chances 0.05 to 0.95),
	// each with the outcome it claims.
	recalPrior = 300_000
	// recalEdge bounds the chances the curve reads, so that 0 and 1 have
	// log-odds.
	recalEdge = 1e-4
)

func logit(p float64) float64 {
	p = min(max(p, recalEdge), 1-recalEdge)
	return math.Log(p / (1 - p))
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

func recalBin(x float64) int {
	return min(max(int((x+recalLogit)/(2*recalLogit)*recalBins), 0), recalBins-1)
}

// recalBinLogit is the log-odds at the middle of bin i.
func recalBinLogit(i int) float64 {
	return (float64(i)+0.5)/recalBins*2*recalLogit - recalLogit
}

// add counts gpus given chance p, of which the fraction survived.
func (r *recalibration) add(p, gpus, survived float64) {
	i := recalBin(logit(p))
	r.gpus[i] += gpus
	r.survived[i] += gpus * survived
}

func (r *recalibration) fade(f float64) {
	for i := range r.gpus {
		r.gpus[i] *= f
		r.survived[i] *= f
	}
}

// fit finds the slope and offset that make what was counted most likely,
// with the prior's judgements beside it (Newton's method, from the last fit).
func (r *recalibration) fit() {
	slope, offset := 1.0, 0.0
	if r.fitted {
		slope, offset = r.slope, r.offset
	}
	for range 25 {
		// The gradient and the (negated) Hessian of the log-likelihood, in
		// the slope (s) and the offset (o).
		var gs, gO, hss, hso, hoo float64
		count := func(x, gpus, survived float64) {
			q := sigmoid(slope*x + offset)
			e := survived - gpus*q
			gs += e * x
			gO += e
			v := gpus * q * (1 - q)
			hss += v * x * x
			hso += v * x
			hoo += v
		}
		for i, g := range r.gpus {
			if g > 0 {
				count(recalBinLogit(i), g, r.survived[i])
			}
		}
		const priorPoints = 13
		for k := range priorPoints {
			x := -3 + 6*float64(k)/(priorPoints-1)
			count(x, recalPrior/priorPoints, recalPrior/priorPoints*sigmoid(x))
		}
		det := hss*hoo - hso*hso
		if !(det > 0) {
			break
		}
		ds, do := (hoo*gs-hso*gO)/det, (hss*gO-hso*gs)/det
		slope, offset = slope+ds, offset+do
		if math.Abs(ds)+math.Abs(do) < 1e-9 {
			break
		}
	}
	if math.IsNaN(slope) || math.IsNaN(offset) {
		return // keep the last fit
	}
	r.fitted, r.slope, r.offset = true, slope, offset
}

// apply is chance p recalibrated; p itself until the first fit.
func (r *recalibration) apply(p float64) float64 {
	if !r.fitted {
		return p
	}
	return sigmoid(r.slope*logit(p) + r.offset)
}

// RecalibrationCount is what the recalibration learned in one band of the
// chances the load levels' record gave: the band's middle in log-odds
// (thousandths), and for each of SurvivalHorizons the GPUs given a chance
// in it and how many of them kept being lent, faded by SurvivalHalfLife.
type RecalibrationCount struct {
	LogOddsMilli int
	Judged
}

// Recalibration is what the learner's recalibration learned, one count per
// band that holds any: with Survival, what a restart must not forget.
func (a *Learner) Recalibration() []RecalibrationCount {
	var out []RecalibrationCount
	for i := range recalBins {
		c := RecalibrationCount{LogOddsMilli: int(math.Round(recalBinLogit(i) * 1000))}
		for h, r := range a.recal {
			c.Given[h], c.Survived[h] = int64(math.Round(r.gpus[i])), int64(math.Round(r.survived[i]))
		}
		if c.any() {
			out = append(out, c)
		}
	}
	return out
}

// RestoreRecalibration adds counts read back after a restart, published at
// (zero: unknown), to what the learner learned since, faded for the time
// between, and fits the curves again. A record with a band the learner does
// not know, a count out of bounds or more survived than given is refused
// whole, and nothing of it is added.
func (a *Learner) RestoreRecalibration(counts []RecalibrationCount, at time.Time) error {
	bins := make([]int, len(counts))
	for i, c := range counts {
		x := float64(c.LogOddsMilli) / 1000
		bins[i] = recalBin(x)
		if math.Abs(x-recalBinLogit(bins[i])) > 0.001 {
			return fmt.Errorf("recalibration record: no band at log-odds %.3f", x)
		}
		if slices.Contains(bins[:i], bins[i]) {
			return fmt.Errorf("recalibration record: the band at log-odds %.3f is there twice", x)
		}
		if err := c.check(); err != nil {
			return fmt.Errorf("recalibration record: at log-odds %.3f %w", x, err)
		}
	}
	if len(counts) == 0 {
		return nil
	}
	f := a.restoredFading(at)
	for i, c := range counts {
		for h := range a.recal {
			a.recal[h].gpus[bins[i]] += f * float64(c.Given[h])
			a.recal[h].survived[bins[i]] += f * float64(c.Survived[h])
		}
	}
	for h := range a.recal {
		a.recal[h].fit()
	}
	return nil
}
