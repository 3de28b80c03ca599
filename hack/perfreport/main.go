// Command perfreport reads the data items scheduler_perf writes
// (BenchmarkPerfScheduling_benchmark_*.json, see test/perf) and prints one
// line per workload: the Gleaner profile against the default plugins for the
// same pods, and gangs against the same pods without groups. Each line names
// the goal it is judged by and whether it was met. Given several files (runs),
// each figure is its median over them.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: perfreport BenchmarkPerfScheduling_benchmark_*.json ...")
		os.Exit(2)
	}
	var all []map[string]*run
	for _, path := range os.Args[1:] {
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		runs := map[string]*run{}
		err = read(f, runs)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			os.Exit(1)
		}
		all = append(all, runs)
	}
	lines := report(median(all))
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
}

type dataItem struct {
	Data   map[string]float64 `json:"data"`
	Unit   string             `json:"unit"`
	Labels map[string]string  `json:"labels"`
}

// nameRE takes "BenchmarkPerfScheduling/<case>/<workload>/<namespace>" apart.
var nameRE = regexp.MustCompile(`^BenchmarkPerfScheduling/([^/]+)/([^/]+)(/.*)?$`)

func read(r io.Reader, runs map[string]*run) error {
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
		rn := runs[key]
		if rn == nil {
			rn = &run{}
			runs[key] = rn
		}
		switch metric := it.Labels["Metric"]; {
		case metric == "SchedulingThroughput":
			rn.throughput = it.Data["Average"]
		case metric == "SchedulingDuration":
			rn.duration = it.Data["Duration"]
		case metric == "scheduler_scheduling_attempt_duration_seconds" && it.Labels["result"] == "scheduled":
			rn.attemptP99 = it.Data["Perc99"]
		case metric == "scheduler_framework_extension_point_duration_seconds" && it.Labels["extension_point"] == "PostFilter":
			rn.postFilterP99 = it.Data["Perc99"]
		}
	}
	return nil
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
				lines = append(lines, fmt.Sprintf("%s time gleaner/default = %.2f (gleaner %.2f s, default %.2f s; p99 PostFilter gleaner %.1f ms, default %.1f ms) goal <= 1.00 and PostFilter p99 < 100 ms: %s",
					name, r, g.duration, d.duration, g.postFilterP99, d.postFilterP99, met(r <= 1.0 && g.postFilterP99 < 100)))
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

// median merges several invocations (one data-items file each, e.g. from
// -test.count=3) into one run per workload: each figure is the median of its
// values across the files that measured the workload.
func median(all []map[string]*run) map[string]*run {
	values := map[string][]run{}
	for _, runs := range all {
		for k, r := range runs {
			values[k] = append(values[k], *r)
		}
	}
	out := map[string]*run{}
	for k, rs := range values {
		mid := func(get func(run) float64) float64 {
			xs := make([]float64, len(rs))
			for i, r := range rs {
				xs[i] = get(r)
			}
			sort.Float64s(xs)
			if n := len(xs); n%2 == 0 {
				return (xs[n/2-1] + xs[n/2]) / 2
			}
			return xs[len(xs)/2]
		}
		out[k] = &run{
			throughput:    mid(func(r run) float64 { return r.throughput }),
			duration:      mid(func(r run) float64 { return r.duration }),
			attemptP99:    mid(func(r run) float64 { return r.attemptP99 }),
			postFilterP99: mid(func(r run) float64 { return r.postFilterP99 }),
		}
	}
	return out
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}
