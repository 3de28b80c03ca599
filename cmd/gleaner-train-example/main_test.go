package main

// These tests run the real binary as a separate process and signal it, the
// way a kubelet does when Gleaner reclaims a GPU.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/gleaner-dev/gleaner/pkg/checkpoint"
)

// binary is the command built once for all tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gleaner-train-example-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "gleaner-train-example")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building gleaner-train-example: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// gracePeriod stands in for the pod's terminationGracePeriodSeconds: after
// SIGTERM the step must have checkpointed and exited within it.
const gracePeriod = 10 * time.Second

// lockedBuffer collects a process's stderr while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tail keeps failure messages readable: RESULT lines can be long.
func tail(s string) string {
	if len(s) > 3000 {
		return "..." + s[len(s)-3000:]
	}
	return s
}

type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stderr *lockedBuffer
	done   chan struct{}
	err    error
}

func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, cmd: exec.Command(binary, args...), stderr: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd.Stderr = p.stderr
	p.cmd.Env = append(os.Environ(), env...)
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %v: %v", args, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// wait returns the exit code, failing the test if the process outlives timeout.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		p.t.Fatalf("process did not exit within %v; stderr:\n%s", timeout, tail(p.stderr.String()))
	}
	var exit *exec.ExitError
	if errors.As(p.err, &exit) {
		return exit.ExitCode()
	}
	if p.err != nil {
		p.t.Fatalf("waiting for process: %v", p.err)
	}
	return 0
}

// waitFor polls stderr until it contains s.
func (p *proc) waitFor(s string, timeout time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(p.stderr.String(), s) {
		if time.Now().After(deadline) {
			p.t.Fatalf("process did not log %q within %v; stderr:\n%s", s, timeout, tail(p.stderr.String()))
		}
		select {
		case <-p.done:
			p.t.Fatalf("process exited before logging %q; stderr:\n%s", s, tail(p.stderr.String()))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

type result struct {
	Steps       int64     `json:"steps"`
	ResumedFrom int64     `json:"resumedFrom"`
	Weights     []float64 `json:"weights"`
}

// runToEnd runs the binary to completion and returns its RESULT line.
func runToEnd(t *testing.T, env []string, args ...string) result {
	t.Helper()
	p := start(t, env, args...)
	if code := p.wait(time.Minute); code != 0 {
		t.Fatalf("%v exited %d; stderr:\n%s", args, code, tail(p.stderr.String()))
	}
	return parseResult(t, p.stderr.String())
}

func parseResult(t *testing.T, stderr string) result {
	t.Helper()
	i := strings.LastIndex(stderr, "RESULT ")
	if i < 0 {
		t.Fatalf("no RESULT line in:\n%s", stderr)
	}
	line, _, _ := strings.Cut(stderr[i+len("RESULT "):], "\n")
	var r result
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		t.Fatalf("parsing RESULT %q: %v", line, err)
	}
	return r
}

// interrupt resumes a run, waits until it has saved a periodic checkpoint past
// the one it resumed from (so it has made progress, however loaded the
// machine), then preempts it with term. It returns the checkpointed step.
func interrupt(t *testing.T, env []string, ckptDir string, args ...string) int64 {
	t.Helper()
	p := start(t, env, args...)
	p.waitFor("msg=\"resuming from checkpoint\"", 10*time.Second)
	p.waitFor("msg=\"checkpoint saved\"", 30*time.Second)
	return p.term(t, ckptDir)
}

// term sends SIGTERM after letting the run train a little longer, and checks
// the contract: exit 143 within the grace period with a checkpoint saved. It
// returns the newest checkpoint's step.
func (p *proc) term(t *testing.T, ckptDir string) int64 {
	t.Helper()
	time.Sleep(300 * time.Millisecond)
	sent := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := p.wait(gracePeriod)
	took := time.Since(sent)
	if code != 143 {
		t.Fatalf("exit code %d after SIGTERM, want 143; stderr:\n%s", code, tail(p.stderr.String()))
	}
	out := p.stderr.String()
	if !strings.Contains(out, "checkpointed=true") {
		t.Fatalf("no checkpoint reported after SIGTERM; stderr:\n%s", out)
	}
	t.Logf("SIGTERM to exit 143: %v", took.Round(time.Millisecond))
	return latestStep(t, ckptDir)
}

// latestStep reads the newest checkpoint in a directory the way a restart would.
func latestStep(t *testing.T, dir string) int64 {
	t.Helper()
	store, err := checkpoint.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, rejected, err := checkpoint.NewManager(store, 2).Latest(context.Background())
	if err != nil || c == nil || len(rejected) > 0 {
		t.Fatalf("latest checkpoint in %s: %+v, rejected %v, %v", dir, c, rejected, err)
	}
	return c.Step
}

const steps = "4000"

// Common flags: every run of a test must use the same data and
// hyperparameters to resume; --step-delay only stretches wall time.
func trainArgs(ckptDir string, extra ...string) []string {
	return append([]string{"train", "--checkpoint-dir", ckptDir, "--steps", steps, "--seed", "42",
		"--features", "6", "--samples", "400", "--lr", "0.02", "--batch", "16"}, extra...)
}

func TestTrainSIGTERMCheckpointsWithinGraceAndExits143(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	// No periodic checkpoints: whatever is on disk afterwards was written on SIGTERM.
	p := start(t, nil, trainArgs(dir, "--checkpoint-every", "0", "--step-delay", "1ms")...)
	p.waitFor("starting fresh", 10*time.Second)
	step := p.term(t, dir)
	if step <= 0 || step >= 4000 {
		t.Fatalf("SIGTERM checkpoint at step %d; want one taken mid-run (0 < step < 4000)", step)
	}
}

// A step preempted twice and then left to finish ends with exactly the
// weights of a run that was never interrupted.
func TestTrainResumesToSameFinalWeights(t *testing.T) {
	want := runToEnd(t, nil, trainArgs(filepath.Join(t.TempDir(), "ckpt"))...)

	dir := filepath.Join(t.TempDir(), "ckpt")
	p := start(t, nil, trainArgs(dir, "--checkpoint-every", "250", "--step-delay", "500us")...)
	p.waitFor("starting fresh", 10*time.Second)
	first := p.term(t, dir)
	second := interrupt(t, nil, dir, trainArgs(dir, "--checkpoint-every", "250", "--step-delay", "500us")...)
	if !(0 < first && first < second && second < 4000) {
		t.Fatalf("checkpoint steps %d then %d; want progress across the interruption, mid-run", first, second)
	}

	got := runToEnd(t, nil, trainArgs(dir, "--checkpoint-every", "250")...)
	if got.ResumedFrom != second {
		t.Fatalf("final run resumed from step %d, want the SIGTERM checkpoint at %d", got.ResumedFrom, second)
	}
	if got.Steps != 4000 || !slices.Equal(got.Weights, want.Weights) {
		t.Fatalf("resumed run ended at step %d with %v; uninterrupted run: %v", got.Steps, got.Weights, want.Weights)
	}
}

// A torn checkpoint (what a kill mid-write leaves in a non-atomic store) and a
// leftover temporary file are never loaded: the step resumes from the newest
// whole checkpoint and still reaches the uninterrupted result.
func TestTrainNeverLoadsTornCheckpoint(t *testing.T) {
	want := runToEnd(t, nil, trainArgs(filepath.Join(t.TempDir(), "ckpt"))...)

	dir := filepath.Join(t.TempDir(), "ckpt")
	first := runToEnd(t, nil, append(trainArgs(dir), "--steps", "1000")...)
	if first.Steps != 1000 {
		t.Fatalf("first leg ended at %d", first.Steps)
	}
	// A real checkpoint at a later step, from another directory, torn in half.
	other := filepath.Join(t.TempDir(), "other")
	runToEnd(t, nil, append(trainArgs(other), "--steps", "3000")...)
	whole, err := os.ReadFile(filepath.Join(other, checkpoint.Name(3000)))
	if err != nil {
		t.Fatal(err)
	}
	torn := filepath.Join(dir, checkpoint.Name(3000))
	if err := os.WriteFile(torn, whole[:len(whole)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".tmp-"+checkpoint.Name(3500)+"-1"), whole, 0o644); err != nil {
		t.Fatal(err)
	}

	p := start(t, nil, trainArgs(dir)...)
	if code := p.wait(time.Minute); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, tail(p.stderr.String()))
	}
	out := p.stderr.String()
	if !strings.Contains(out, "skipping checkpoint that is not whole") || !strings.Contains(out, checkpoint.Name(3000)) {
		t.Fatalf("the torn checkpoint was not reported as skipped; stderr:\n%s", out)
	}
	got := parseResult(t, out)
	if got.ResumedFrom != 1000 {
		t.Fatalf("resumed from step %d, want 1000 (the newest whole checkpoint)", got.ResumedFrom)
	}
	if !slices.Equal(got.Weights, want.Weights) {
		t.Fatalf("weights after skipping the torn checkpoint %v, want %v", got.Weights, want.Weights)
	}
}

// SIGKILL at arbitrary moments while the step checkpoints every step: however
// a write is cut short, every restart loads a whole checkpoint and the final
// weights are those of an uninterrupted run.
func TestTrainSurvivesSIGKILLDuringCheckpointWrites(t *testing.T) {
	// Wide rows make each checkpoint tens of kilobytes, so kills often land mid-write.
	args := func(dir string, extra ...string) []string {
		return append([]string{"train", "--checkpoint-dir", dir, "--steps", "3000", "--seed", "9",
			"--features", "2000", "--samples", "40", "--lr", "0.0002", "--batch", "4"}, extra...)
	}
	want := runToEnd(t, nil, args(filepath.Join(t.TempDir(), "ckpt"), "--checkpoint-every", "0")...)

	dir := filepath.Join(t.TempDir(), "ckpt")
	leftovers := 0
	for i := range 8 {
		p := start(t, nil, args(dir, "--checkpoint-every", "1", "--step-delay", "1ms")...)
		p.waitFor("level=INFO", 10*time.Second)
		time.Sleep(time.Duration(50+37*i) * time.Millisecond)
		_ = p.cmd.Process.Kill()
		<-p.done
		if strings.Contains(p.stderr.String(), "level=ERROR") {
			t.Fatalf("run %d logged an error before being killed:\n%s", i, tail(p.stderr.String()))
		}
		tmp, _ := filepath.Glob(filepath.Join(dir, ".tmp-*"))
		leftovers += len(tmp)
	}
	t.Logf("kills that left a temporary file behind (killed mid-write): %d of 8", leftovers)
	got := runToEnd(t, nil, args(dir, "--checkpoint-every", "1")...)
	if got.ResumedFrom <= 0 {
		t.Fatalf("final run resumed from %d; the killed runs should have left checkpoints", got.ResumedFrom)
	}
	if !slices.Equal(got.Weights, want.Weights) {
		t.Fatalf("weights after 8 kills differ from an uninterrupted run")
	}
}

// The same contract against an S3-compatible bucket over the real protocol.
func TestTrainS3CheckpointsResume(t *testing.T) {
	backend := s3mem.New()
	if err := backend.CreateBucket("research"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	defer srv.Close()
	env := []string{"AWS_ENDPOINT_URL=" + srv.URL, "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test-secret", "AWS_REGION=us-east-1"}
	loc := "s3://research/pipelines/uid-1234/pretrain/checkpoints"

	want := runToEnd(t, nil, trainArgs(filepath.Join(t.TempDir(), "ckpt"))...)

	p := start(t, env, trainArgs(loc, "--checkpoint-every", "250", "--step-delay", "500us", "--output", "s3://research/pipelines/uid-1234/pretrain/model")...)
	p.waitFor("starting fresh", 10*time.Second)
	time.Sleep(300 * time.Millisecond)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(gracePeriod); code != 143 || !strings.Contains(p.stderr.String(), "checkpointed=true") {
		t.Fatalf("exit %d after SIGTERM, want 143 with a checkpoint; stderr:\n%s", code, tail(p.stderr.String()))
	}
	got := runToEnd(t, env, trainArgs(loc, "--checkpoint-every", "250", "--output", "s3://research/pipelines/uid-1234/pretrain/model")...)
	if got.ResumedFrom <= 0 || got.ResumedFrom >= 4000 {
		t.Fatalf("restart resumed from step %d; want the mid-run SIGTERM checkpoint", got.ResumedFrom)
	}
	if !slices.Equal(got.Weights, want.Weights) {
		t.Fatalf("S3-resumed weights %v, want %v", got.Weights, want.Weights)
	}
	out := start(t, env, "eval", "--seed", "42", "--features", "6", "--samples", "400",
		"--model", "s3://research/pipelines/uid-1234/pretrain/model", "--benchmark", "mmlu")
	if code := out.wait(time.Minute); code != 0 || !strings.Contains(out.stderr.String(), "benchmark=mmlu") {
		t.Fatalf("eval of the model written to S3 exited %d:\n%s", code, out.stderr)
	}
}

func TestHparams(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	got := runToEnd(t, nil, "train", "--checkpoint-dir", dir, "--hparams", `{"steps": 30, "lr": 0.5, "features": 3}`, "--lr", "0.01")
	if got.Steps != 30 || len(got.Weights) != 4 {
		t.Fatalf("--hparams steps/features not applied: %+v", got)
	}
	// The explicit --lr wins over the one in --hparams.
	explicit := runToEnd(t, nil, "train", "--checkpoint-dir", filepath.Join(t.TempDir(), "ckpt"), "--steps", "30", "--features", "3", "--lr", "0.01")
	if !slices.Equal(got.Weights, explicit.Weights) {
		t.Fatalf("--hparams run %v differs from the same flags given explicitly %v", got.Weights, explicit.Weights)
	}
	p := start(t, nil, "train", "--checkpoint-dir", dir, "--hparams", `{"learning_rate": 0.1}`)
	if code := p.wait(time.Minute); code != 2 || !strings.Contains(p.stderr.String(), `"learning_rate", which is not a flag`) {
		t.Fatalf("unknown hyperparameter: exit %d, stderr:\n%s", code, tail(p.stderr.String()))
	}
}
