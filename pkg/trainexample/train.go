package trainexample

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/gleaner-dev/gleaner/pkg/checkpoint"
)

// Config is a training run's hyperparameters.
type Config struct {
	// Seed drives batch sampling (the data has its own seed).
	Seed  uint64
	Steps int64
	Batch int
	LR    float64
	// CheckpointEvery saves a checkpoint every N steps; 0 saves only on
	// interruption and at the end.
	CheckpointEvery int64
	// StepDelay stretches each step so the toy runs long enough to be preempted.
	StepDelay time.Duration
	// SaveTimeout bounds one checkpoint write; keep it well inside the pod's
	// termination grace period so a SIGTERM save finishes before SIGKILL.
	SaveTimeout time.Duration
}

func (c Config) validate() error {
	switch {
	case c.Steps < 0:
		return fmt.Errorf("steps must be >= 0, got %d", c.Steps)
	case c.Batch < 1:
		return fmt.Errorf("batch must be >= 1, got %d", c.Batch)
	case !(c.LR > 0):
		return fmt.Errorf("lr must be > 0, got %v", c.LR)
	case c.CheckpointEvery < 0:
		return fmt.Errorf("checkpoint-every must be >= 0, got %d", c.CheckpointEvery)
	case c.SaveTimeout <= 0:
		return fmt.Errorf("save-timeout must be > 0, got %v", c.SaveTimeout)
	}
	return nil
}

// Recorder is told the time of each saved checkpoint and how long, at most,
// the run takes to save once asked to stop: its longest step and longest
// save so far (a PodAnnotator in a cluster).
type Recorder interface {
	Record(ctx context.Context, t time.Time, took time.Duration) error
}

// Trainer runs one training step of a pipeline under the checkpoint contract.
type Trainer struct {
	Config Config
	Data   *Dataset
	// Init are the starting weights (e.g. the previous stage's model); nil starts from zero.
	Init        []float64
	Checkpoints *checkpoint.Manager
	// Recorder may be nil.
	Recorder Recorder
	// Notices, when not nil, delivers the changes of this pod's reclaim
	// notice (checkpoint.WatchNotices: the expected eviction time, zero when
	// withdrawn). The run trains on and saves a checkpoint timed to complete
	// by the noticed time (twice its last save's duration and a second
	// before it; at once when that is past), so its eviction loses only the
	// steps after it. A notice withdrawn before then costs nothing.
	Notices <-chan time.Time
	Log     *slog.Logger
	Now     func() time.Time

	// longestStep and longestSave are the longest a step (without
	// StepDelay, which a stop cuts short) and a checkpoint of this run took:
	// what a stop waits for, so what the pod declares, and a reclaim gives
	// it that long to save on SIGTERM.
	longestStep, longestSave time.Duration
}

// Result is how a run ended.
type Result struct {
	Weights []float64
	// Step is the number of steps completed.
	Step int64
	// ResumedFrom is the checkpoint step the run started from, -1 if none.
	ResumedFrom int64
	// Interrupted is true when the run stopped early on request (SIGTERM).
	Interrupted bool
	// Saved is true when the state at Step is in a checkpoint.
	Saved bool
	Loss  float64
}

// state is the checkpoint payload.
type state struct {
	Version int `json:"version"`
	// Run identifies what the weights were trained on and how; resuming a
	// different run from them would silently mix two experiments.
	Run     runIdentity `json:"run"`
	Weights []float64   `json:"weights"`
}

type runIdentity struct {
	Seed    uint64  `json:"seed"`
	Batch   int     `json:"batch"`
	LR      float64 `json:"lr"`
	Dataset string  `json:"dataset"` // SHA-256 of the dataset's JSON
}

// Run trains from the newest whole checkpoint (or from Init) up to
// Config.Steps, saving every CheckpointEvery steps. When stop is closed it
// finishes the current step, saves a checkpoint and returns with Interrupted
// set; the caller then exits 143 so the retry resumes from it.
func (t *Trainer) Run(ctx context.Context, stop <-chan struct{}) (Result, error) {
	if err := t.Config.validate(); err != nil {
		return Result{}, err
	}
	if err := t.Data.Validate(); err != nil {
		return Result{}, err
	}
	if t.Now == nil {
		t.Now = time.Now
	}
	if t.Log == nil {
		t.Log = slog.Default()
	}
	id, err := t.identity()
	if err != nil {
		return Result{}, err
	}
	res := Result{ResumedFrom: -1}
	var resumed bool
	res.Weights, res.Step, resumed, err = t.start(ctx, id)
	if err != nil {
		return Result{}, err
	}
	lastSaved := int64(-1)
	var due time.Time            // when to checkpoint for the standing notice; zero: none
	saveTook := 10 * time.Second // until a save is measured
	save := func(why string) {
		if res.Step == lastSaved || res.Step >= t.Config.Steps {
			return // nothing new to save, or the final save follows
		}
		began := t.Now()
		if err := t.save(ctx, id, res.Step, res.Weights); err != nil {
			t.Log.Error(why+" checkpoint failed; training on", "step", res.Step, "err", err)
			return
		}
		lastSaved, saveTook = res.Step, t.Now().Sub(began)
	}
	if resumed {
		res.ResumedFrom = res.Step
		lastSaved = res.Step // the resumed state is already in storage
	}

	for res.Step < t.Config.Steps {
		if stopped(stop) {
			res.Interrupted = true
			break
		}
		stepBegan := time.Now() // a step's length is the machine's, whatever clock Now keeps
		sgdStep(res.Weights, t.Data, t.Config.Seed, res.Step, t.Config.Batch, t.Config.LR)
		t.longestStep = max(t.longestStep, time.Since(stepBegan))
		res.Step++
		select {
		case at, ok := <-t.Notices:
			switch {
			case !ok:
				t.Notices = nil // the watch ended: nothing more to hear
			case at.IsZero():
				if !due.IsZero() {
					t.Log.Info("reclaim notice withdrawn: no checkpoint for it", "step", res.Step)
				}
				due = time.Time{}
			default:
				due = at.Add(-2*saveTook - time.Second)
				t.Log.Info("reclaim notice: checkpointing before the expected eviction", "expectedEviction", at, "checkpointAt", due, "step", res.Step)
			}
		default:
		}
		if !due.IsZero() && !t.Now().Before(due) {
			due = time.Time{}
			t.Log.Info("checkpointing for the reclaim notice", "step", res.Step)
			save("notice")
		}
		if t.Config.CheckpointEvery > 0 && res.Step%t.Config.CheckpointEvery == 0 {
			// A failed periodic save costs only the work since the last good one
			// if this pod is preempted; stopping here would lose the whole step.
			save("periodic")
		}
		if t.Config.StepDelay > 0 {
			select {
			case <-stop:
			case <-ctx.Done():
				return res, ctx.Err()
			case <-time.After(t.Config.StepDelay):
			}
		}
	}
	res.Loss = MSE(res.Weights, t.Data.TrainX, t.Data.TrainY)
	if res.Step == lastSaved {
		res.Saved = true
		return res, nil
	}
	// On interruption ctx may be on its way out with the process; the save gets
	// its own deadline instead.
	if err := t.save(context.WithoutCancel(ctx), id, res.Step, res.Weights); err != nil {
		return res, err
	}
	res.Saved = true
	return res, nil
}

// start returns the weights and step to train from, and whether they come
// from a checkpoint.
func (t *Trainer) start(ctx context.Context, id runIdentity) ([]float64, int64, bool, error) {
	c, rejected, err := t.Checkpoints.Latest(ctx)
	for _, r := range rejected {
		t.Log.Warn("skipping checkpoint that is not whole", "location", t.Checkpoints.Location(), "name", r.Name, "reason", r.Reason)
	}
	if err != nil {
		return nil, 0, false, err
	}
	if c == nil {
		w := make([]float64, t.Data.Features+1)
		if t.Init != nil {
			if len(t.Init) != len(w) {
				return nil, 0, false, fmt.Errorf("initial model has %d weights, the dataset needs %d (%d features + bias): pass a model trained on data with the same features", len(t.Init), len(w), t.Data.Features)
			}
			copy(w, t.Init)
		}
		t.Log.Info("no checkpoint found; starting fresh", "location", t.Checkpoints.Location(), "fromInitialModel", t.Init != nil)
		return w, 0, false, nil
	}
	var s state
	if err := json.Unmarshal(c.Payload, &s); err != nil {
		return nil, 0, false, fmt.Errorf("checkpoint at step %d in %s passed its checksum but its payload does not parse: %w", c.Step, t.Checkpoints.Location(), err)
	}
	if s.Run != id {
		return nil, 0, false, fmt.Errorf("checkpoint at step %d in %s belongs to a different run (%+v, this run is %+v): "+
			"rerun with the same data and hyperparameters to resume it, or use a fresh checkpoint location", c.Step, t.Checkpoints.Location(), s.Run, id)
	}
	if len(s.Weights) != t.Data.Features+1 {
		return nil, 0, false, fmt.Errorf("checkpoint at step %d in %s has %d weights, want %d", c.Step, t.Checkpoints.Location(), len(s.Weights), t.Data.Features+1)
	}
	t.Log.Info("resuming from checkpoint", "location", t.Checkpoints.Location(), "step", c.Step)
	return s.Weights, c.Step, true, nil
}

func (t *Trainer) save(ctx context.Context, id runIdentity, step int64, w []float64) error {
	payload, err := json.Marshal(state{Version: 1, Run: id, Weights: slices.Clone(w)})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, t.Config.SaveTimeout)
	defer cancel()
	begin := t.Now()
	if err := t.Checkpoints.Save(ctx, checkpoint.Checkpoint{Step: step, Payload: payload}); err != nil {
		return err
	}
	done := t.Now()
	t.longestSave = max(t.longestSave, done.Sub(begin))
	t.Log.Info("checkpoint saved", "step", step, "location", t.Checkpoints.Location(), "took", done.Sub(begin).Round(time.Millisecond))
	if t.Recorder != nil {
		// The annotation orders evictions and sizes their grace periods; it
		// must not eat the grace period.
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := t.Recorder.Record(rctx, done, t.longestStep+t.longestSave); err != nil {
			t.Log.Warn("could not record the checkpoint time on the pod", "err", err)
		}
	}
	return nil
}

func (t *Trainer) identity() (runIdentity, error) {
	data, err := json.Marshal(t.Data)
	if err != nil {
		return runIdentity{}, err
	}
	sum := sha256.Sum256(data)
	return runIdentity{Seed: t.Config.Seed, Batch: t.Config.Batch, LR: t.Config.LR, Dataset: hex.EncodeToString(sum[:])}, nil
}

func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}
