package trainexample

import (
	"context"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gleaner-dev/gleaner/pkg/checkpoint"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func testConfig(steps int64) Config {
	return Config{Seed: 7, Steps: steps, Batch: 16, LR: 0.02, CheckpointEvery: 50, SaveTimeout: 10 * time.Second}
}

func newTrainer(t *testing.T, dir string, cfg Config) *Trainer {
	t.Helper()
	d, err := Generate(3, 500, 6, 0.1)
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	return &Trainer{Config: cfg, Data: d, Checkpoints: checkpoint.NewManager(store, 2), Log: quiet}
}

func TestGenerateIsDeterministic(t *testing.T) {
	a, _ := Generate(11, 100, 4, 0.5)
	b, _ := Generate(11, 100, 4, 0.5)
	c, _ := Generate(12, 100, 4, 0.5)
	if !slices.Equal(a.TrainY, b.TrainY) || !slices.Equal(a.TrueWeights, b.TrueWeights) {
		t.Fatal("the same seed gave different data")
	}
	if slices.Equal(a.TrainY, c.TrainY) {
		t.Fatal("different seeds gave the same data")
	}
	if err := a.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := Generate(1, 0, 4, 0); err == nil {
		t.Fatal("a dataset with no samples was generated")
	}
}

// Real arithmetic: SGD must recover the generating weights.
func TestTrainingConverges(t *testing.T) {
	tr := newTrainer(t, t.TempDir(), testConfig(3000))
	res, err := tr.Run(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	start := MSE(make([]float64, len(res.Weights)), tr.Data.TrainX, tr.Data.TrainY)
	if !(res.Loss < 0.02) || !(res.Loss < start/50) {
		t.Fatalf("train loss %v (from %v at zero weights); want below 0.02 with label noise 0.1", res.Loss, start)
	}
	for i, w := range res.Weights {
		if math.Abs(w-tr.Data.TrueWeights[i]) > 0.05 {
			t.Fatalf("weight %d = %v, true %v", i, w, tr.Data.TrueWeights[i])
		}
	}
}

// A run stopped at a checkpoint and started again ends bit-for-bit where an
// uninterrupted run ends.
func TestResumeReachesSameWeights(t *testing.T) {
	ctx := context.Background()
	full, err := newTrainer(t, t.TempDir(), testConfig(400)).Run(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	first, err := newTrainer(t, dir, testConfig(150)).Run(ctx, nil)
	if err != nil || first.Step != 150 || !first.Saved {
		t.Fatalf("first leg: %+v, %v", first, err)
	}
	second, err := newTrainer(t, dir, testConfig(400)).Run(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if second.ResumedFrom != 150 {
		t.Fatalf("second leg resumed from %d, want 150", second.ResumedFrom)
	}
	if !slices.Equal(second.Weights, full.Weights) {
		t.Fatalf("resumed run ended with %v, uninterrupted with %v", second.Weights, full.Weights)
	}
}

// stopAtFirstRecord closes stop when the first checkpoint is recorded, so the
// interruption lands at a known step.
type stopAtFirstRecord struct {
	stop  chan struct{}
	once  sync.Once
	times []time.Time
	took  []time.Duration
}

func (s *stopAtFirstRecord) Record(_ context.Context, t time.Time, took time.Duration) error {
	s.times = append(s.times, t)
	s.took = append(s.took, took)
	s.once.Do(func() { close(s.stop) })
	return nil
}

func TestStopCheckpointsAndReportsInterrupted(t *testing.T) {
	dir := t.TempDir()
	tr := newTrainer(t, dir, testConfig(400))
	rec := &stopAtFirstRecord{stop: make(chan struct{})}
	tr.Recorder = rec
	res, err := tr.Run(context.Background(), rec.stop)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Interrupted || !res.Saved || res.Step != 50 {
		t.Fatalf("result %+v; want interrupted and saved at step 50", res)
	}
	if len(rec.times) != 1 {
		t.Fatalf("recorded %d checkpoint times, want 1 (the state at the stop was already saved)", len(rec.times))
	}
	c, _, err := tr.Checkpoints.Latest(context.Background())
	if err != nil || c == nil || c.Step != 50 {
		t.Fatalf("latest checkpoint %+v, %v; want step 50", c, err)
	}
}

// Each checkpoint records the longest step and save so far, not the last:
// the pod declares how long a save on SIGTERM may take.
func TestRecordsTheLongestSave(t *testing.T) {
	store, err := checkpoint.NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Writing a checkpoint moves the clock on: the saves take 2 s, 5 s, 1 s and 3 s.
	slow := &slowStore{Store: store, took: []time.Duration{2 * time.Second, 5 * time.Second, time.Second, 3 * time.Second},
		clock: time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)}
	tr := newTrainer(t, t.TempDir(), testConfig(200))
	tr.Checkpoints, tr.Now = checkpoint.NewManager(slow, 2), func() time.Time { return slow.clock }
	rec := &stopAtFirstRecord{stop: make(chan struct{})}
	tr.Recorder = rec
	if _, err := tr.Run(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	// The steps' own time (the machine's, well under a second here) is added.
	want := []time.Duration{2 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second}
	for i := range rec.took {
		if i >= len(want) || rec.took[i] < want[i] || rec.took[i] > want[i]+time.Second {
			t.Fatalf("recorded save durations %v, want %v and a step's time", rec.took, want)
		}
	}
	if len(rec.took) != len(want) {
		t.Fatalf("recorded %d save durations, want %d", len(rec.took), len(want))
	}
}

// slowStore is a Store whose writes each take the next of took on clock.
type slowStore struct {
	checkpoint.Store
	took  []time.Duration
	puts  int
	clock time.Time
}

func (s *slowStore) Put(ctx context.Context, name string, data []byte) error {
	s.clock = s.clock.Add(s.took[s.puts%len(s.took)])
	s.puts++
	return s.Store.Put(ctx, name, data)
}

func TestResumeRefusesAnotherRunsCheckpoint(t *testing.T) {
	dir := t.TempDir()
	if _, err := newTrainer(t, dir, testConfig(100)).Run(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	other := testConfig(200)
	other.LR = 0.05
	_, err := newTrainer(t, dir, other).Run(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), "different run") {
		t.Fatalf("resuming with another learning rate: %v; want a 'different run' error", err)
	}
}

func TestInitialModel(t *testing.T) {
	tr := newTrainer(t, t.TempDir(), testConfig(0))
	tr.Init = []float64{1, 2, 3, 4, 5, 6, 7}
	res, err := tr.Run(context.Background(), nil)
	if err != nil || !slices.Equal(res.Weights, tr.Init) {
		t.Fatalf("zero steps from an initial model gave %v, %v", res.Weights, err)
	}
	tr = newTrainer(t, t.TempDir(), testConfig(10))
	tr.Init = []float64{1, 2}
	if _, err := tr.Run(context.Background(), nil); err == nil {
		t.Fatal("an initial model of the wrong size was accepted")
	}
}

// The stages hand data and models to each other through storage.
func TestStagesThroughStorage(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	loc := func(s string) string { return filepath.Join(root, s) }
	if err := Preprocess(ctx, DataSpec{Seed: 5, Samples: 300, Features: 3, Noise: 0.1}, loc("data")); err != nil {
		t.Fatal(err)
	}
	opts := TrainOptions{
		Config: testConfig(800), Data: DataSpec{Location: loc("data")},
		CheckpointLocation: loc("ckpt-pretrain"), OutputLocation: loc("pretrain"), Log: quiet,
	}
	if _, err := Train(ctx, opts, nil); err != nil {
		t.Fatal(err)
	}
	opts.CheckpointLocation, opts.InitLocation, opts.OutputLocation = loc("ckpt-sft"), loc("pretrain"), loc("sft")
	opts.Config.Steps = 100
	res, err := Train(ctx, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.ResumedFrom != -1 {
		t.Fatalf("the second stage resumed from %d; its checkpoint location was fresh", res.ResumedFrom)
	}
	r, err := Eval(ctx, DataSpec{Location: loc("data")}, loc("sft"), "gsm8k", loc("eval"))
	if err != nil {
		t.Fatal(err)
	}
	if !(r.MSE < 0.05) || r.Benchmark != "gsm8k" || r.Samples != 75 {
		t.Fatalf("eval result %+v; want a small MSE on 75 held-out rows", r)
	}
	var written EvalResult
	if err := GetJSON(ctx, loc("eval"), ResultObject, &written); err != nil || written != r {
		t.Fatalf("written result %+v, %v; want %+v", written, err, r)
	}
	if other, _ := Eval(ctx, DataSpec{Location: loc("data")}, loc("sft"), "mmlu", ""); other.MSE == r.MSE {
		t.Fatal("two benchmarks scored identically; each should resample the test split differently")
	}
}

// A reclaim notice makes the run save a checkpoint timed to complete by the
// noticed time, and train on: a pod evicted then loses only the steps after
// it. A notice withdrawn before then costs no checkpoint.
func TestNoticeCheckpointsJustInTimeAndTrainsOn(t *testing.T) {
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		notices []time.Time // sent before the run, read one a step
		// want the notice's checkpoint at a step in [from, to] (0: none), and
		// one at the end.
		from, to int64
	}{
		{name: "a notice already due checkpoints at once", notices: []time.Time{start}, from: 1, to: 1},
		// The clock below moves a second each time it is read, once a step
		// here; until a save is measured it is taken to last 10 s, so the
		// checkpoint is due 2 x 10 + 1 s before the noticed 200 s: at step 179.
		{name: "a notice ahead checkpoints before its time", notices: []time.Time{start.Add(200 * time.Second)}, from: 179, to: 179},
		{name: "a notice withdrawn in time costs nothing", notices: []time.Time{start.Add(200 * time.Second), {}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(400)
			cfg.CheckpointEvery = 0 // only the notice and the end save
			tr := newTrainer(t, t.TempDir(), cfg)
			clock := start
			tr.Now = func() time.Time { clock = clock.Add(time.Second); return clock }
			notices := make(chan time.Time, len(tt.notices))
			for _, n := range tt.notices {
				notices <- n
			}
			tr.Notices = notices
			var saved []int64
			tr.Recorder = recorderFunc(func(context.Context, time.Time) error {
				latest, _, err := tr.Checkpoints.Latest(context.Background())
				if err != nil || latest == nil {
					t.Errorf("recorded a checkpoint time with no checkpoint: %v", err)
					return nil
				}
				saved = append(saved, latest.Step)
				return nil
			})
			res, err := tr.Run(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Step != 400 || res.Interrupted || !res.Saved {
				t.Fatalf("result %+v: want the run trained to the end", res)
			}
			if tt.from == 0 {
				if !slices.Equal(saved, []int64{400}) {
					t.Fatalf("checkpoints at steps %v, want only the end's", saved)
				}
				return
			}
			if len(saved) != 2 || saved[0] < tt.from || saved[0] > tt.to || saved[1] != 400 {
				t.Fatalf("checkpoints at steps %v, want one in [%d, %d] for the notice and one at the end", saved, tt.from, tt.to)
			}
		})
	}
}

type recorderFunc func(context.Context, time.Time) error

func (f recorderFunc) Record(ctx context.Context, t time.Time, _ time.Duration) error {
	return f(ctx, t)
}
