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
	if len(results) != 4 {
		t.Fatalf("%d results, want one per policy", len(results))
	}
	for i, p := range []string{"none", "nightly", "continuous", "forecast"} {
		r := results[i]
		if r["policy"] != p {
			t.Errorf("result %d is policy %v, want %s", i, r["policy"], p)
		}
		for _, k := range []string{"idleGpuHours", "harvestedGpuHours", "harvestedFraction", "lostGpuHours", "preemptions",
			"inferenceWaitSeconds", "inferenceWaitsOverBudget", "jobsCompleted", "savings"} {
			if _, ok := r[k].(float64); !ok {
				t.Errorf("%s: %s is %v, want a number", p, k, r[k])
			}
		}
	}
	if fi, err := os.Stat(plot); err != nil || fi.Size() == 0 {
		t.Fatalf("no plot written: %v", err)
	}
}

func TestSimulateErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "services.csv")
	if err := os.WriteFile(bad, []byte("window_start_s,service,rate_req_per_s\n0,a,1\n600,a,-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--services", bad}, bad + ":3: rate_req_per_s -1 is negative"},
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
