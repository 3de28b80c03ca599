package main

import (
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
		item("Reclaim_gleaner/500Nodes", "scheduler_framework_extension_point_duration_seconds", `,"extension_point":"PostFilter"`, `{"Perc99":40}`),
		item("Gang_gleaner/500Nodes_NoGang", "SchedulingThroughput", "", `{"Average":100}`),
		item("Gang_gleaner/500Nodes_4PerGroup", "SchedulingThroughput", "", `{"Average":79}`),
		item("Gang_gleaner/500Nodes_8PerGroup", "SchedulingThroughput", "", `{"Average":85}`),
		item("Lonely_gleaner/500Nodes", "SchedulingThroughput", "", `{"Average":1}`),
	}, ",") + `]}`
	runs := map[string]*run{}
	if err := read(strings.NewReader(doc), runs); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(report(runs), "\n")
	for _, want := range []string{
		"BestEffort1GPU/500Nodes gleaner/default = 0.95 (gleaner 190.0 pods/s, default 200.0 pods/s; p99 attempt latency gleaner 12.5 ms, default 0.0 ms) goal >= 0.95: met",
		"Reclaim/500Nodes time gleaner/default = 1.10 (gleaner 11.00 s, default 10.00 s; p99 PostFilter gleaner 40.0 ms, default 0.0 ms) goal <= 1.00 and PostFilter p99 < 100 ms: NOT met",
		"Gang_gleaner/500Nodes_4PerGroup gang/no-gang = 0.79",
		"goal >= 0.80: NOT met",
		"Gang_gleaner/500Nodes_8PerGroup gang/no-gang = 0.85",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "Lonely") || strings.Count(got, "\n") != 3 {
		t.Errorf("report has lines without a pair:\n%s", got)
	}
}

// Several runs of a workload count by their median, per figure.
func TestMedianOfRuns(t *testing.T) {
	runs := func(xs ...float64) []map[string]*run {
		var out []map[string]*run
		for _, x := range xs {
			out = append(out, map[string]*run{"W/1": {throughput: x, duration: 100 - x}})
		}
		return out
	}
	if got := median(runs(120, 90, 150))["W/1"]; got.throughput != 120 || got.duration != -20 {
		t.Fatalf("median of three = %+v, want throughput 120, duration -20", got)
	}
	if got := median(runs(120, 90))["W/1"]; got.throughput != 105 {
		t.Fatalf("median of two = %+v, want 105", got)
	}
}
