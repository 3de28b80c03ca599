// Command gleaner-train-example is Gleaner's reference pipeline step. It
// trains a toy linear model by SGD (no GPU needed) and follows the checkpoint
// contract every best-effort step must follow:
//
//   - checkpoint every --checkpoint-every steps, atomically, to a directory or
//     an S3-compatible bucket (--checkpoint-dir);
//   - on SIGTERM, finish the current step, checkpoint within the grace period
//     and exit 143, so Argo retries the step;
//   - on start, resume from the newest whole checkpoint;
//   - after each checkpoint, record its time in the pod's
//     gleaner.dev/last-checkpoint annotation (when running in a cluster).
//
// It is called as COMMAND STAGE --flag=value..., the interface of the example
// Argo pipeline: preprocess writes a dataset, pretrain/sft/rl (aliases of
// train) train from the previous stage's model, eval scores a model. See
// docs/argo.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/checkpoint"
	"github.com/gleaner-dev/gleaner/pkg/trainexample"
	"github.com/gleaner-dev/gleaner/pkg/version"
)

// Exit codes. 143 (128+SIGTERM) is what a preempted step must return: Argo's
// retry strategy in examples/argo retries on it.
const (
	exitOK        = 0
	exitError     = 1
	exitUsage     = 2
	exitInterrupt = 130
	exitSIGTERM   = 143
)

const usage = `usage: gleaner-train-example STAGE [flags]

Stages:
  preprocess           generate a dataset and write it to --output
  train                train from --data (or generated data) and --init, checkpointing
                       to --checkpoint-dir; the model goes to --output
  pretrain, sft, rl    the same as train, named for the pipeline stage
  eval                 score the model in --model on --benchmark; the result goes to --output

Locations (--output, --data, --init, --model, --checkpoint-dir) are directories or
s3://bucket/prefix. S3 settings come from AWS_ENDPOINT_URL, AWS_REGION,
AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the pod's IAM role).

Run "gleaner-train-example STAGE -h" for a stage's flags, "gleaner-train-example
--version" for the version.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	// Catch signals before anything else, so a SIGTERM during start-up is
	// handled by the contract rather than by the Go runtime's default exit.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	stop := make(chan struct{})
	var got os.Signal
	log := slog.New(slog.NewTextHandler(stderr, nil))
	go func() {
		got = <-sigs
		log.Info("signal received; checkpointing and exiting", "signal", got.String())
		close(stop)
	}()
	exitCode := func() int {
		if got == syscall.SIGINT {
			return exitInterrupt
		}
		return exitSIGTERM
	}

	switch {
	case len(args) == 0:
		fmt.Fprint(stderr, usage)
		return exitUsage
	case args[0] == "-h" || args[0] == "--help" || args[0] == "help":
		fmt.Fprint(stderr, usage)
		return exitOK
	case args[0] == "--version" || args[0] == "version":
		fmt.Println(version.String())
		return exitOK
	}
	ctx := context.Background()
	switch args[0] {
	case "preprocess":
		fs, data := newFlags(args[0], stderr)
		output := fs.String("output", "", "location to write "+trainexample.DatasetObject+" to (required)")
		if code := parse(fs, args[1:]); code >= 0 {
			return code
		}
		if *output == "" {
			return usageError(stderr, fs, "--output is required")
		}
		// Nothing to checkpoint: on a signal, stop at once and let the retry redo it.
		go func() { <-stop; os.Exit(exitCode()) }()
		if err := trainexample.Preprocess(ctx, data(), *output); err != nil {
			log.Error("preprocess failed", "err", err)
			return exitError
		}
		log.Info("dataset written", "location", *output)
		return exitOK

	case "train", "pretrain", "sft", "rl":
		fs, data := newFlags(args[0], stderr)
		dataLoc := fs.String("data", "", "location of "+trainexample.DatasetObject+" from a preprocess stage; empty: generate from --seed/--samples/--features/--noise")
		ckpt := fs.String("checkpoint-dir", "", "location for this stage's checkpoints; a retried pod must get the same one (required)")
		initLoc := fs.String("init", "", "location of the previous stage's "+trainexample.ModelObject+" to start from")
		output := fs.String("output", "", "location to write "+trainexample.ModelObject+" to when training completes")
		steps := fs.Int64("steps", 1000, "SGD steps to train in total")
		batch := fs.Int("batch", 32, "mini-batch size")
		lr := fs.Float64("lr", 0.01, "learning rate")
		every := fs.Int64("checkpoint-every", 100, "save a checkpoint every N steps (0: only on SIGTERM and at the end)")
		keep := fs.Int("keep", 2, "checkpoints to keep")
		delay := fs.Duration("step-delay", 0, "sleep after each step, so the toy runs long enough to be preempted")
		saveTimeout := fs.Duration("save-timeout", 20*time.Second, "time limit for one checkpoint write; keep it below the pod's terminationGracePeriodSeconds")
		kubeconfig := fs.String("kubeconfig", "", "kubeconfig for annotating this pod outside a cluster; in a cluster the in-cluster config is used")
		noticeFile := fs.String("notice-file", "", "this pod's annotations as the downward API writes them (e.g. /etc/podinfo/annotations): while a reclaim notice ("+api.AnnotationReclaimNotice+") stands, train on and save a checkpoint timed to complete by its time; empty: no watch")
		if code := parse(fs, args[1:]); code >= 0 {
			return code
		}
		if *ckpt == "" {
			return usageError(stderr, fs, "--checkpoint-dir is required")
		}
		spec := data()
		spec.Location = *dataLoc
		recorder, err := checkpoint.PodAnnotatorFromEnv(*kubeconfig)
		if err != nil {
			log.Warn("checkpoint times will not be recorded on the pod", "err", err)
		}
		opts := trainexample.TrainOptions{
			Config: trainexample.Config{
				Seed: spec.Seed, Steps: *steps, Batch: *batch, LR: *lr,
				CheckpointEvery: *every, StepDelay: *delay, SaveTimeout: *saveTimeout,
			},
			Data:               spec,
			CheckpointLocation: *ckpt,
			Keep:               *keep,
			InitLocation:       *initLoc,
			OutputLocation:     *output,
			Log:                log,
		}
		if recorder != nil { // a nil *PodAnnotator in the interface would not be nil
			opts.Recorder = recorder
		}
		if *noticeFile != "" {
			opts.Notices = checkpoint.WatchNotices(ctx, *noticeFile, time.Second, func(err error) {
				log.Warn("cannot read the reclaim notice", "err", err)
			})
		}
		res, err := trainexample.Train(ctx, opts, stop)
		if res.Interrupted {
			// Exit 143 even if the save failed: this run was preempted, and a
			// retry resumes from the newest checkpoint there is.
			if err != nil {
				log.Error("checkpoint on SIGTERM failed; the retry will resume from an older one", "err", err)
			}
			log.Info("interrupted", "step", res.Step, "checkpointed", res.Saved && err == nil)
			return exitCode()
		}
		if err != nil {
			log.Error("training failed", "stage", args[0], "err", err)
			return exitError
		}
		// Machine-readable last line, e.g. for comparing runs.
		out, _ := json.Marshal(map[string]any{"steps": res.Step, "resumedFrom": res.ResumedFrom, "trainLoss": res.Loss, "weights": res.Weights})
		fmt.Fprintf(stderr, "RESULT %s\n", out)
		return exitOK

	case "eval":
		fs, data := newFlags(args[0], stderr)
		dataLoc := fs.String("data", "", "location of "+trainexample.DatasetObject+"; empty: generate from --seed/--samples/--features/--noise")
		model := fs.String("model", "", "location of "+trainexample.ModelObject+" (required)")
		benchmark := fs.String("benchmark", "default", "benchmark name; each is a different resample of the test split")
		output := fs.String("output", "", "location to write "+trainexample.ResultObject+" to")
		if code := parse(fs, args[1:]); code >= 0 {
			return code
		}
		if *model == "" {
			return usageError(stderr, fs, "--model is required")
		}
		go func() { <-stop; os.Exit(exitCode()) }()
		spec := data()
		spec.Location = *dataLoc
		r, err := trainexample.Eval(ctx, spec, *model, *benchmark, *output)
		if err != nil {
			log.Error("eval failed", "err", err)
			return exitError
		}
		log.Info("evaluated", "benchmark", r.Benchmark, "mse", r.MSE, "samples", r.Samples)
		return exitOK
	}
	fmt.Fprintf(stderr, "unknown stage %q\n\n%s", args[0], usage)
	return exitUsage
}

// newFlags makes a stage's flag set with the data-generation flags every
// stage shares and --hparams.
func newFlags(name string, stderr io.Writer) (*flag.FlagSet, func() trainexample.DataSpec) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	seed := fs.Uint64("seed", 1, "random seed for data generation and batch sampling")
	samples := fs.Int("samples", 1000, "training rows to generate")
	features := fs.Int("features", 8, "features per row")
	noise := fs.Float64("noise", 0.1, "standard deviation of the label noise")
	fs.String("hparams", "", `hyperparameters as one JSON object of flag names to values, e.g. {"lr":0.05,"steps":2000}; flags given explicitly win`)
	return fs, func() trainexample.DataSpec {
		return trainexample.DataSpec{Seed: *seed, Samples: *samples, Features: *features, Noise: *noise}
	}
}

// parse parses args and applies --hparams. It returns -1 to go on, or the
// exit code to return.
func parse(fs *flag.FlagSet, args []string) int {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage // flag has printed the error and the usage
	}
	if fs.NArg() > 0 {
		return usageError(fs.Output(), fs, fmt.Sprintf("unexpected arguments %q", fs.Args()))
	}
	if err := applyHparams(fs); err != nil {
		return usageError(fs.Output(), fs, err.Error())
	}
	return -1
}

// applyHparams sets each flag named in the --hparams JSON object that was not
// given explicitly. One JSON parameter lets a pipeline pass any set of
// hyperparameters to a step without a template change per flag.
func applyHparams(fs *flag.FlagSet) error {
	raw := fs.Lookup("hparams").Value.String()
	if strings.TrimSpace(raw) == "" {
		return nil
	}
	var hp map[string]any
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber() // keep integers exact: 1e3 steps is not 1000.0
	if err := dec.Decode(&hp); err != nil {
		return fmt.Errorf("--hparams is not a JSON object: %v", err)
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	keys := make([]string, 0, len(hp))
	for k := range hp {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == "hparams" || fs.Lookup(k) == nil {
			var known []string
			fs.VisitAll(func(f *flag.Flag) {
				if f.Name != "hparams" {
					known = append(known, f.Name)
				}
			})
			return fmt.Errorf("--hparams names %q, which is not a flag of %s; known: %s", k, fs.Name(), strings.Join(known, ", "))
		}
		if explicit[k] {
			continue
		}
		v := hp[k]
		s, ok := v.(string)
		if !ok {
			s = fmt.Sprint(v)
		}
		if err := fs.Set(k, s); err != nil {
			return fmt.Errorf("--hparams %s=%v: %v", k, v, err)
		}
	}
	return nil
}

func usageError(w io.Writer, fs *flag.FlagSet, msg string) int {
	fmt.Fprintf(w, "%s: %s\n", fs.Name(), msg)
	fs.Usage()
	return exitUsage
}
