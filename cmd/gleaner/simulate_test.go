package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSimulateJSON(t *testing.T) {
	plot := filepath.Join(t.TempDir(), "gpus.png")
	stdout, stderr, code := gleaner(t, "simulate", "--days", "1", "--synthetic-services", "3", "--format", "json", "--plot", plot)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var results []map[string]any
	if err := json.Unmarshal([]byte(stdout), &results); err != nil {
		t.Fatalf("output is not a JSON array: %v\n%s", err, stdout)
	}
	if len(results) != 5 {
		t.Fatalf("%d results, want one per policy", len(results))
	}
	for i, p := range []string{"none", "nightly", "continuous", "forecast", "oracle"} {
		r := results[i]
		if r["policy"] != p {
			t.Errorf("result %d is policy %v, want %s", i, r["policy"], p)
		}
		for _, k := range []string{"idleGpuHours", "harvestedGpuHours", "harvestedFraction", "lostGpuHours", "preemptions",
			"inferenceWaitSeconds", "inferenceWaitsOverBudget", "jobsCompleted", "savings", "noticedEvictions", "noticeLeadP50Seconds", "noticeFirmLeadP50Seconds"} {
			if _, ok := r[k].(float64); !ok {
				t.Errorf("%s: %s is %v, want a number", p, k, r[k])
			}
		}
	}
	if fi, err := os.Stat(plot); err != nil || fi.Size() == 0 {
		t.Fatalf("no plot written: %v", err)
	}
}

// Bad input as a new user would give it: each gets a clear error naming what
// is wrong, exit 1, and no run that spins or fails later for another reason.
func TestSimulateErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	bad := write("services.csv", "window_start_s,service,rate_req_per_s\n0,a,1\n600,a,-1\n")
	const jobsHead = "name,num_gpu,creation_time,deletion_time,scheduled_time\n"
	tooBig := write("big.csv", jobsHead+"huge,9,0,3600,0\n")
	backwards := write("backwards.csv", jobsHead+"ok,1,0,3600,0\nbackwards,1,0,100,200\n")
	missing := filepath.Join(dir, "absent.csv")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--services", bad}, "--services: " + bad + ":3: rate_req_per_s -1 is negative"},
		{[]string{"--jobs", tooBig, "--policy", "continuous", "--days", "1"}, "no job fits on a node of 8 GPUs: the smallest asks for 9"},
		{[]string{"--jobs", backwards}, backwards + ":3: deletion_time 100 is before scheduled_time 200"},
		{[]string{"--jobs", missing}, "--jobs: open " + missing},
		{[]string{"--grace-period", "-5m"}, "grace period -5m0s: must not be negative"},
		{[]string{"--checkpoint-interval", "0s"}, "checkpoint interval 0s: must be positive"},
		{[]string{"--policy", "sometimes"}, `policy "sometimes"`},
		{[]string{"--format", "xml"}, `--format "xml"`},
		{[]string{"--load-shape", "cubic"}, `--load-shape "cubic"`},
	} {
		_, stderr, code := gleaner(t, append([]string{"simulate"}, tt.args...)...)
		if code != 1 || !strings.Contains(stderr, tt.want) {
			t.Errorf("simulate %v: exit %d, stderr %q; want exit 1 and %q", tt.args, code, stderr, tt.want)
		}
	}
}

// The table says what its idle column means: GPUs inference did not want,
// before anything was harvested from them.
func TestSimulateTableSaysIdleBeforeHarvest(t *testing.T) {
	stdout, stderr, code := gleaner(t, "simulate", "--days", "1", "--synthetic-services", "2", "--policy", "none")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "idle GPU-h before harvest") {
		t.Fatalf("table header does not say idle means before harvest:\n%s", stdout)
	}
}
