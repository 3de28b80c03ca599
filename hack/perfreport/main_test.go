package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// Pairs are matched by test case and workload: _gleaner with _default, gangs
// with NoGang of the same size; goals are judged on the ratio.
func TestReportPairsWorkloads(t *testing.T) {
	item := func(name, metric, labels, data string) string {
		return `{"data":` + data + `,"unit":"x","labels":{"Name":"BenchmarkPerfScheduling/` + name + `/namespace-2","Metric":"` + metric + `"` + labels + `}}`
	}
	doc := `{"version":"v1","dataItems":[` + strings.Join([]string{
		item("BestEffort1GPU_gleaner/500Nodes", "SchedulingThroughput", "", `{"Average":190}`),
		item("BestEffort1GPU_default/500Nodes", "SchedulingThroughput", "", `{"Average":200}`),
		item("BestEffort1GPU_gleaner/500Nodes", "scheduler_scheduling_attempt_duration_seconds", `,"result":"scheduled"`, `{"Perc99":12.5}`),
		item("BestEffort1GPU_default/500Nodes", "scheduler_scheduling_attempt_duration_seconds", `,"result":"unschedulable"`, `{"Perc99":99}`),
		item("Reclaim_gleaner/500Nodes", "SchedulingDuration", "", `{"Duration":11}`),
		item("Reclaim_default/500Nodes", "SchedulingDuration", "", `{"Duration":10}`),
		item("Reclaim_gleaner/500Nodes", "scheduler_framework_extension_point_duration_seconds", `,"extension_point":"PostFilter"`, `{"Perc99":40,"Average":6.5}`),
		item("Reclaim_gleaner/2000Nodes", "SchedulingDuration", "", `{"Duration":8.40}`),
		item("Reclaim_default/2000Nodes", "SchedulingDuration", "", `{"Duration":8.36}`),
		item("Gang_gleaner/500Nodes_NoGang", "SchedulingThroughput", "", `{"Average":100}`),
		item("Gang_gleaner/500Nodes_4PerGroup", "SchedulingThroughput", "", `{"Average":79}`),
		item("Gang_gleaner/500Nodes_8PerGroup", "SchedulingThroughput", "", `{"Average":85}`),
		item("Lonely_gleaner/500Nodes", "SchedulingThroughput", "", `{"Average":1}`),
	}, ",") + `]}`
	samples := map[string]*figures{}
	if err := read(strings.NewReader(doc), samples); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(report(medians(samples)), "\n")
	for _, want := range []string{
		"BestEffort1GPU/500Nodes gleaner/default = 0.95 (gleaner 190.0 pods/s, default 200.0 pods/s; p99 attempt latency gleaner 12.5 ms, default 0.0 ms) goal >= 0.95: met",
		"Reclaim/500Nodes time gleaner/default = 1.10 (gleaner 11.00 s, default 10.00 s; PostFilter mean gleaner 6.50 ms, default 0.00 ms, p99 gleaner 40.0 ms, default 0.0 ms) goal <= 1.00 and PostFilter p99 < 100 ms: NOT met",
		// 1.005 is judged as printed, 1.00.
		"Reclaim/2000Nodes time gleaner/default = 1.00 (gleaner 8.40 s, default 8.36 s; PostFilter mean gleaner 0.00 ms, default 0.00 ms, p99 gleaner 0.0 ms, default 0.0 ms) goal <= 1.00 and PostFilter p99 < 100 ms: met",
		"Gang_gleaner/500Nodes_4PerGroup gang/no-gang = 0.79",
		"goal >= 0.80: NOT met",
		"Gang_gleaner/500Nodes_8PerGroup gang/no-gang = 0.85",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "Lonely") || strings.Count(got, "\n") != 4 {
		t.Errorf("report has lines without a pair:\n%s", got)
	}
}

// A workload run several times (items repeated in one file, or several files)
// counts by the median of each figure; one that ended within a second has no
// throughput and says so instead of a ratio of 0.
func TestMedianOfRuns(t *testing.T) {
	item := func(name, throughput string) string {
		return `{"data":{"Average":` + throughput + `},"unit":"pods/s","labels":{"Name":"BenchmarkPerfScheduling/` + name + `/namespace-2","Metric":"SchedulingThroughput"}}`
	}
	samples := map[string]*figures{}
	for _, doc := range []string{
		`{"dataItems":[` + item("X_gleaner/W", "120") + `,` + item("X_gleaner/W", "90") + `,` + item("X_default/W", "100") + `]}`,
		`{"dataItems":[` + item("X_gleaner/W", "150") + `,` + item("X_default/W", "140") + `]}`,
	} {
		if err := read(strings.NewReader(doc), samples); err != nil {
			t.Fatal(err)
		}
	}
	runs := medians(samples)
	if g, d := runs["X_gleaner/W"].throughput, runs["X_default/W"].throughput; g != 120 || d != 120 {
		t.Fatalf("medians gleaner %g, default %g; want 120 (of 90, 120, 150) and 120 (of 100, 140)", g, d)
	}
	short := map[string]*run{"Y_gleaner/W": {attemptP99: 3}, "Y_default/W": {attemptP99: 4}}
	if got := report(short); len(got) != 1 || !strings.Contains(got[0], "no throughput samples") {
		t.Fatalf("a workload without throughput samples reads %q", got)
	}
}

// The workloads of a label come out grouped as the report compares them, in
// the config's order, whatever the order of their test cases.
func TestListWorkloadsGroupsWhatIsCompared(t *testing.T) {
	config := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(config, []byte(`
- name: Fill_gleaner
  workloads: &w
  - {name: 10Nodes, labels: [short]}
  - {name: 500Nodes, labels: [performance]}
- name: Gang_gleaner
  workloads:
  - {name: 500Nodes_NoGang, labels: [performance]}
  - {name: 500Nodes_4PerGroup, labels: [performance]}
  - {name: 10Nodes_4PerGroup, labels: [short]}
- name: Fill_default
  workloads: *w
- name: Slow_gleaner
  labels: [performance]
  workloads:
  - {name: 9Nodes, labels: [slow]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := listWorkloads(config, "performance")
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"Fill_gleaner/500Nodes", "Fill_default/500Nodes"},
		{"Gang_gleaner/500Nodes_NoGang", "Gang_gleaner/500Nodes_4PerGroup"},
		{"Slow_gleaner/9Nodes"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("performance workloads = %q, want %q", got, want)
	}
	if got, err := listWorkloads(config, "performance,slow"); err != nil || !reflect.DeepEqual(got, [][]string{{"Slow_gleaner/9Nodes"}}) {
		t.Fatalf("performance and slow = %q, %v", got, err)
	}
	if _, err := listWorkloads(config, "nightly"); err == nil || !strings.Contains(err.Error(), "no workload is labelled nightly") {
		t.Fatalf("a label nothing carries: %v", err)
	}
}
