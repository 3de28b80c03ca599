// Command perfreport reads the data items scheduler_perf writes
// (BenchmarkPerfScheduling_benchmark_*.json, see test/perf) and prints one
// line per workload: the Gleaner profile against the default plugins for the
// same pods, and gangs against the same pods without groups. Each line names
// the goal it is judged by and whether it was met. Given several files (runs),
// each figure is its median over them.
//
// With -workloads CONFIG -labels L it prints instead the workloads of a
// scheduler_perf config that carry every label in L (comma-separated), one
// group to a line: the workloads a report line compares (X_gleaner/W beside
// X_default/W; a gang workload beside the others of its size), so that
// `make bench-perf` can run each in a fresh process next to the others of
// its group.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

func main() {
	if len(os.Args) == 5 && os.Args[1] == "-workloads" && os.Args[3] == "-labels" {
		groups, err := listWorkloads(os.Args[2], os.Args[4])
		if err != nil {
			fmt.Fprintln(os.Stderr, "perfreport:", err)
			os.Exit(1)
		}
		for _, g := range groups {
			fmt.Println(strings.Join(g, " "))
		}
		return
	}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: perfreport BenchmarkPerfScheduling_benchmark_*.json ...\n       perfreport -workloads performance-config.yaml -labels performance")
		os.Exit(2)
	}
	samples := map[string]*figures{}
	for _, path := range os.Args[1:] {
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		err = read(f, samples)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			os.Exit(1)
		}
	}
	lines := report(medians(samples))
	if len(lines) == 0 {
		fmt.Fprintln(os.Stderr, "perfreport: no pair of workloads to compare in", strings.Join(os.Args[1:], " "))
		os.Exit(1)
	}
	for _, l := range lines {
		fmt.Println(l)
	}
}

// run is what one workload measured.
type run struct {
	throughput    float64 // pods/s, average over the measured op
	duration      float64 // seconds the measured pods took
	attemptP99    float64 // ms, scheduling attempts that placed a pod
	postFilterP99 float64 // ms, the PostFilter extension point (preemption)
	postFilterAvg float64 // ms, its mean: the time of one preemption decision
}

type dataItem struct {
	Data   map[string]float64 `json:"data"`
	Unit   string             `json:"unit"`
	Labels map[string]string  `json:"labels"`
}

// nameRE takes "BenchmarkPerfScheduling/<case>/<workload>/<namespace>" apart.
var nameRE = regexp.MustCompile(`^BenchmarkPerfScheduling/([^/]+)/([^/]+)(/.*)?$`)

// figures are every value a workload's data items gave, one per run: a
// workload run several times (-test.count, or several files) appears once per
// run.
type figures struct {
	throughput, duration, attemptP99, postFilterP99, postFilterAvg []float64
}

func read(r io.Reader, samples map[string]*figures) error {
	var doc struct {
		DataItems []dataItem `json:"dataItems"`
	}
	if err := json.NewDecoder(r).Decode(&doc); err != nil {
		return err
	}
	for _, it := range doc.DataItems {
		m := nameRE.FindStringSubmatch(it.Labels["Name"])
		if m == nil || it.Data == nil {
			continue
		}
		key := m[1] + "/" + m[2]
		f := samples[key]
		if f == nil {
			f = &figures{}
			samples[key] = f
		}
		switch metric := it.Labels["Metric"]; {
		case metric == "SchedulingThroughput":
			f.throughput = append(f.throughput, it.Data["Average"])
		case metric == "SchedulingDuration":
			f.duration = append(f.duration, it.Data["Duration"])
		case metric == "scheduler_scheduling_attempt_duration_seconds" && it.Labels["result"] == "scheduled":
			f.attemptP99 = append(f.attemptP99, it.Data["Perc99"])
		case metric == "scheduler_framework_extension_point_duration_seconds" && it.Labels["extension_point"] == "PostFilter":
			f.postFilterP99 = append(f.postFilterP99, it.Data["Perc99"])
			f.postFilterAvg = append(f.postFilterAvg, it.Data["Average"])
		}
	}
	return nil
}

// medians is one run per workload, each figure the median of its runs (0
// when no run measured it).
func medians(samples map[string]*figures) map[string]*run {
	mid := func(xs []float64) float64 {
		if len(xs) == 0 {
			return 0
		}
		xs = append([]float64(nil), xs...)
		sort.Float64s(xs)
		if n := len(xs); n%2 == 0 {
			return (xs[n/2-1] + xs[n/2]) / 2
		}
		return xs[len(xs)/2]
	}
	out := map[string]*run{}
	for k, f := range samples {
		out[k] = &run{throughput: mid(f.throughput), duration: mid(f.duration), attemptP99: mid(f.attemptP99),
			postFilterP99: mid(f.postFilterP99), postFilterAvg: mid(f.postFilterAvg)}
	}
	return out
}

// report pairs X_gleaner/W with X_default/W, and Gang_gleaner/N_kPerGroup with
// Gang_gleaner/N_NoGang.
func report(runs map[string]*run) []string {
	keys := make([]string, 0, len(runs))
	for k := range runs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var lines []string
	for _, k := range keys {
		tc, workload, _ := strings.Cut(k, "/")
		g := runs[k]
		switch {
		case strings.HasSuffix(tc, "_gleaner") && runs[strings.TrimSuffix(tc, "_gleaner")+"_default/"+workload] != nil:
			name := strings.TrimSuffix(tc, "_gleaner") + "/" + workload
			d := runs[strings.TrimSuffix(tc, "_gleaner")+"_default/"+workload]
			if strings.HasPrefix(tc, "Reclaim") {
				r := ratio(g.duration, d.duration)
				lines = append(lines, fmt.Sprintf("%s time gleaner/default = %.2f (gleaner %.2f s, default %.2f s; PostFilter mean gleaner %.2f ms, default %.2f ms, p99 gleaner %.1f ms, default %.1f ms) goal <= 1.00 and PostFilter p99 < 100 ms: %s",
					name, r, g.duration, d.duration, g.postFilterAvg, d.postFilterAvg, g.postFilterP99, d.postFilterP99, met(r <= 1.0 && g.postFilterP99 < 100)))
				continue
			}
			if g.throughput == 0 || d.throughput == 0 {
				lines = append(lines, fmt.Sprintf("%s gleaner/default: no throughput samples (the workload ends within a second); p99 attempt latency gleaner %.1f ms, default %.1f ms",
					name, g.attemptP99, d.attemptP99))
				continue
			}
			r := ratio(g.throughput, d.throughput)
			lines = append(lines, fmt.Sprintf("%s gleaner/default = %.2f (gleaner %.1f pods/s, default %.1f pods/s; p99 attempt latency gleaner %.1f ms, default %.1f ms) goal >= 0.95: %s",
				name, r, g.throughput, d.throughput, g.attemptP99, d.attemptP99, met(r >= 0.95)))
		case strings.HasPrefix(tc, "Gang") && strings.Contains(workload, "PerGroup"):
			size, _, _ := strings.Cut(workload, "_")
			base := runs[tc+"/"+size+"_NoGang"]
			if base == nil {
				continue
			}
			r := ratio(g.throughput, base.throughput)
			lines = append(lines, fmt.Sprintf("%s gang/no-gang = %.2f (gang %.1f pods/s, no gang %.1f pods/s; p99 attempt latency gang %.1f ms, no gang %.1f ms) goal >= 0.80: %s",
				k, r, g.throughput, base.throughput, g.attemptP99, base.attemptP99, met(r >= 0.8)))
		}
	}
	return lines
}

// ratio is a/b to the two decimals the report prints, which is also what a
// goal is judged on: "= 1.00 ... NOT met" would say two things at once, and
// no run here is steadier than that.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return math.Round(a/b*100) / 100
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// listWorkloads reads a scheduler_perf workload config and returns the
// "Case/Workload" names whose test case and workload labels together hold
// every one of labels, grouped by what the report compares, in the config's
// order.
func listWorkloads(path, labels string) ([][]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cases []struct {
		Name      string   `json:"name"`
		Labels    []string `json:"labels"`
		Workloads []struct {
			Name   string   `json:"name"`
			Labels []string `json:"labels"`
		} `json:"workloads"`
	}
	if err := yaml.Unmarshal(raw, &cases); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	want := strings.Split(labels, ",")
	var order []string
	groups := map[string][]string{}
	for _, tc := range cases {
		for _, w := range tc.Workloads {
			if !hasAll(append(append([]string(nil), tc.Labels...), w.Labels...), want) {
				continue
			}
			g := groupOf(tc.Name, w.Name)
			if groups[g] == nil {
				order = append(order, g)
			}
			groups[g] = append(groups[g], tc.Name+"/"+w.Name)
		}
	}
	if len(order) == 0 {
		return nil, fmt.Errorf("%s: no workload is labelled %s", path, labels)
	}
	out := make([][]string, len(order))
	for i, g := range order {
		out[i] = groups[g]
	}
	return out, nil
}

// groupOf names what a workload is compared with in the report: the same
// workload of the other profile, or the gang workloads of the same size.
func groupOf(testCase, workload string) string {
	if base, ok := strings.CutSuffix(testCase, "_gleaner"); ok && !strings.HasPrefix(testCase, "Gang") {
		return base + "/" + workload
	}
	if base, ok := strings.CutSuffix(testCase, "_default"); ok {
		return base + "/" + workload
	}
	size, _, _ := strings.Cut(workload, "_")
	return testCase + "/" + size
}

func hasAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}
