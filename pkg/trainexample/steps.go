package trainexample

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/gleaner-dev/gleaner/pkg/checkpoint"
)

// The objects a pipeline stage reads and writes, each in its own location
// (a directory or s3://bucket/prefix).
const (
	DatasetObject = "dataset.json"
	ModelObject   = "model.json"
	ResultObject  = "result.json"
)

// Model is what a training stage writes for the next stage and for evaluation.
type Model struct {
	Features int       `json:"features"`
	Weights  []float64 `json:"weights"`
	Steps    int64     `json:"steps"`
	Loss     float64   `json:"trainLoss"`
}

// PutJSON writes v as name in location, atomically.
func PutJSON(ctx context.Context, location, name string, v any) error {
	store, err := checkpoint.Open(location)
	if err != nil {
		return err
	}
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return store.Put(ctx, name, data)
}

// GetJSON reads name from location into v.
func GetJSON(ctx context.Context, location, name string, v any) error {
	store, err := checkpoint.Open(location)
	if err != nil {
		return err
	}
	data, err := store.Get(ctx, name)
	if err != nil {
		return fmt.Errorf("reading %s from %s (did the stage that writes it finish?): %w", name, location, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s in %s is not valid JSON: %w", name, location, err)
	}
	return nil
}

// DataSpec says where training data comes from: a dataset written by a
// preprocess stage at Location, or, with no Location, one generated from the rest.
type DataSpec struct {
	Location string
	Seed     uint64
	Samples  int
	Features int
	Noise    float64
}

// Load returns the dataset the spec names.
func (s DataSpec) Load(ctx context.Context) (*Dataset, error) {
	if s.Location == "" {
		return Generate(s.Seed, s.Samples, s.Features, s.Noise)
	}
	var d Dataset
	if err := GetJSON(ctx, s.Location, DatasetObject, &d); err != nil {
		return nil, err
	}
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("%s in %s: %w", DatasetObject, s.Location, err)
	}
	return &d, nil
}

// Preprocess is the preprocess stage: it generates a dataset and writes it to output.
func Preprocess(ctx context.Context, spec DataSpec, output string) error {
	spec.Location = ""
	d, err := spec.Load(ctx)
	if err != nil {
		return err
	}
	return PutJSON(ctx, output, DatasetObject, d)
}

// TrainOptions is one training stage.
type TrainOptions struct {
	Config Config
	Data   DataSpec
	// CheckpointLocation holds this stage's checkpoints; a retried pod must get
	// the same one (in Argo: derive it from {{workflow.uid}}).
	CheckpointLocation string
	// Keep is how many checkpoints to keep.
	Keep int
	// InitLocation, if set, holds the previous stage's model to start from.
	InitLocation string
	// OutputLocation, if set, receives the trained model.
	OutputLocation string
	Recorder       Recorder
	// Notices delivers this pod's reclaim notices (see Trainer.Notices); nil: none.
	Notices <-chan time.Time
	Log     *slog.Logger
}

// Train runs a training stage. When stop is closed it checkpoints and returns
// a Result with Interrupted set and no error; the model is written to
// OutputLocation only when training completes.
func Train(ctx context.Context, o TrainOptions, stop <-chan struct{}) (Result, error) {
	data, err := o.Data.Load(ctx)
	if err != nil {
		return Result{}, err
	}
	store, err := checkpoint.Open(o.CheckpointLocation)
	if err != nil {
		return Result{}, fmt.Errorf("checkpoint location: %w", err)
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	t := &Trainer{
		Config:      o.Config,
		Data:        data,
		Checkpoints: checkpoint.NewManager(store, o.Keep),
		Recorder:    o.Recorder,
		Notices:     o.Notices,
		Log:         o.Log,
	}
	if o.InitLocation != "" {
		var m Model
		if err := GetJSON(ctx, o.InitLocation, ModelObject, &m); err != nil {
			return Result{}, fmt.Errorf("initial model: %w", err)
		}
		t.Init = m.Weights
	}
	res, err := t.Run(ctx, stop)
	if err != nil || res.Interrupted {
		return res, err
	}
	o.Log.Info("training finished", "steps", res.Step, "trainLoss", res.Loss, "resumedFrom", res.ResumedFrom)
	if o.OutputLocation != "" {
		m := Model{Features: data.Features, Weights: res.Weights, Steps: res.Step, Loss: res.Loss}
		if err := PutJSON(ctx, o.OutputLocation, ModelObject, m); err != nil {
			return res, fmt.Errorf("writing the trained model: %w", err)
		}
	}
	return res, nil
}

// Eval is the evaluation stage: it scores the model in modelLocation on one
// benchmark of the dataset and writes the result to output (if set).
func Eval(ctx context.Context, data DataSpec, modelLocation, benchmark, output string) (EvalResult, error) {
	d, err := data.Load(ctx)
	if err != nil {
		return EvalResult{}, err
	}
	var m Model
	if err := GetJSON(ctx, modelLocation, ModelObject, &m); err != nil {
		return EvalResult{}, err
	}
	r, err := Evaluate(d, m.Weights, benchmark)
	if err != nil {
		return EvalResult{}, err
	}
	if output != "" {
		if err := PutJSON(ctx, output, ResultObject, r); err != nil {
			return r, err
		}
	}
	return r, nil
}
