// Package trainexample is Gleaner's reference best-effort step: a linear model
// trained by mini-batch SGD on generated data, with no GPU, that follows the
// checkpoint contract (package checkpoint). It is small on purpose, so that a
// researcher can read how a step survives preemption, and deterministic, so
// tests can prove that an interrupted and resumed run ends with exactly the
// weights of an uninterrupted one.
package trainexample

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
)

// Dataset is a regression problem y = w.x + b + noise with a train and a test split.
type Dataset struct {
	Seed     uint64  `json:"seed"`
	Features int     `json:"features"`
	Noise    float64 `json:"noise"`
	// TrueWeights are w followed by b, what training should approach.
	TrueWeights []float64   `json:"trueWeights"`
	TrainX      [][]float64 `json:"trainX"`
	TrainY      []float64   `json:"trainY"`
	TestX       [][]float64 `json:"testX"`
	TestY       []float64   `json:"testY"`
}

// Generate makes a dataset of samples training rows (and a quarter as many
// test rows) from seed alone, so the same seed always gives the same data.
func Generate(seed uint64, samples, features int, noise float64) (*Dataset, error) {
	if samples < 1 || features < 1 {
		return nil, fmt.Errorf("dataset needs at least one sample and one feature, got %d samples, %d features", samples, features)
	}
	rng := rand.New(rand.NewPCG(seed, 0x6461746173657473)) // stream constant: data, not batches
	d := &Dataset{Seed: seed, Features: features, Noise: noise, TrueWeights: make([]float64, features+1)}
	for i := range d.TrueWeights {
		d.TrueWeights[i] = rng.NormFloat64()
	}
	row := func() ([]float64, float64) {
		x := make([]float64, features)
		for j := range x {
			x[j] = rng.NormFloat64()
		}
		return x, predict(d.TrueWeights, x) + noise*rng.NormFloat64()
	}
	for range samples {
		x, y := row()
		d.TrainX, d.TrainY = append(d.TrainX, x), append(d.TrainY, y)
	}
	for range max(samples/4, 1) {
		x, y := row()
		d.TestX, d.TestY = append(d.TestX, x), append(d.TestY, y)
	}
	return d, nil
}

// Validate checks a dataset read from storage before training on it.
func (d *Dataset) Validate() error {
	if d.Features < 1 || len(d.TrueWeights) != d.Features+1 || len(d.TrainX) == 0 ||
		len(d.TrainX) != len(d.TrainY) || len(d.TestX) != len(d.TestY) {
		return fmt.Errorf("dataset is malformed: %d features, %d true weights, %d/%d train rows/targets, %d/%d test rows/targets",
			d.Features, len(d.TrueWeights), len(d.TrainX), len(d.TrainY), len(d.TestX), len(d.TestY))
	}
	for _, rows := range [][][]float64{d.TrainX, d.TestX} {
		for i, x := range rows {
			if len(x) != d.Features {
				return fmt.Errorf("dataset row %d has %d values, want %d features", i, len(x), d.Features)
			}
		}
	}
	return nil
}

// predict is w.x + b, with the bias b stored last in w.
func predict(w, x []float64) float64 {
	y := w[len(x)]
	for j, v := range x {
		y += w[j] * v
	}
	return y
}

// MSE is the mean squared error of weights w on rows x, y.
func MSE(w []float64, x [][]float64, y []float64) float64 {
	var sum float64
	for i := range x {
		e := predict(w, x[i]) - y[i]
		sum += e * e
	}
	return sum / float64(len(x))
}

// sgdStep applies SGD step number step (0-based) to w in place. The batch is
// drawn from a generator seeded with (seed, step), not from a stream carried
// across steps, so a run resumed at any step draws exactly the batches an
// uninterrupted run would have: the checkpoint needs only the weights.
func sgdStep(w []float64, d *Dataset, seed uint64, step int64, batch int, lr float64) {
	rng := rand.New(rand.NewPCG(seed, uint64(step)))
	grad := make([]float64, len(w))
	for range batch {
		i := rng.IntN(len(d.TrainX))
		x := d.TrainX[i]
		e := predict(w, x) - d.TrainY[i]
		for j, v := range x {
			grad[j] += e * v
		}
		grad[len(x)] += e
	}
	scale := 2 * lr / float64(batch)
	for j := range w {
		w[j] -= scale * grad[j]
	}
}

// EvalResult is what an evaluation step writes.
type EvalResult struct {
	Benchmark string  `json:"benchmark"`
	Samples   int     `json:"samples"`
	MSE       float64 `json:"mse"`
}

// Evaluate scores w on a benchmark: a resample of the test split seeded by the
// benchmark's name, so each benchmark is a different, repeatable view of
// held-out data.
func Evaluate(d *Dataset, w []float64, benchmark string) (EvalResult, error) {
	if len(w) != d.Features+1 {
		return EvalResult{}, fmt.Errorf("model has %d weights but the dataset has %d features (want %d weights): was it trained on this dataset?", len(w), d.Features, d.Features+1)
	}
	h := fnv.New64a()
	h.Write([]byte(benchmark))
	rng := rand.New(rand.NewPCG(d.Seed, h.Sum64()))
	n := len(d.TestX)
	x, y := make([][]float64, n), make([]float64, n)
	for i := range n {
		k := rng.IntN(n)
		x[i], y[i] = d.TestX[k], d.TestY[k]
	}
	return EvalResult{Benchmark: benchmark, Samples: n, MSE: MSE(w, x, y)}, nil
}
