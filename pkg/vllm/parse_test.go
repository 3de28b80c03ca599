package vllm

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/gleaner-dev/gleaner/internal/vllmsim"
)

// fixtureDir returns the shared vLLM fixtures (real expositions kept outside
// the repository), relative to this package's directory, where go test runs
// (not to this file's path, which -trimpath makes a module path). ok is false
// when ../shared is absent.
func fixtureDir(tb testing.TB) (dir string, ok bool) {
	tb.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "..", "shared", "fixtures", "vllm"))
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := os.Stat(dir); err != nil {
		return dir, false
	}
	return dir, true
}

func readFixture(t *testing.T, name string) string {
	t.Helper()
	dir, ok := fixtureDir(t)
	if !ok {
		t.Skipf("../shared is absent: %s not found; the fixtures are real vLLM expositions kept outside the repository", dir)
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("reading fixture: %v", err)
	}
	return string(b)
}

// dropElisions removes the "..." lines vLLM's docs use to shorten their example.
func dropElisions(s string) string {
	var kept []string
	for _, line := range strings.Split(s, "\n") {
		if strings.TrimSpace(line) != "..." {
			kept = append(kept, line)
		}
	}
	return strings.Join(kept, "\n")
}

func TestParseFixtures(t *testing.T) {
	tests := []struct {
		file      string
		variant   string // names a transform in the subtest name
		transform func(string) string
		want      Metrics
		wantErr   string // substring; empty means success
	}{
		{
			// vLLM V1 with engine labels and _created gauges (1.78e9, which must
			// not be added to any counter). Captured truncated: it ends with a
			// HELP line without samples, and the histograms are cut off.
			file: "vllm-v1-2026-kserve-head40.txt",
			want: Metrics{Engines: 1, Models: []string{"llama-vllm-single"}},
		},
		{
			// Pre-V1: gpu_cache_usage_perc, no engine label, and a histogram
			// (iteration_tokens_total, not read) cut off before its +Inf bucket.
			file: "aibrix-docs-runtime-vllm-v0-engine.txt",
			want: Metrics{
				Engines:               1,
				Models:                []string{"Qwen/Qwen2.5-Coder-1.5B-Instruct"},
				PromptTokensTotal:     148,
				GenerationTokensTotal: 955,
			},
		},
		{
			// The same with load, to see the fallback name is read.
			file:    "aibrix-docs-runtime-vllm-v0-engine.txt",
			variant: "with-load",
			transform: func(s string) string {
				return strings.NewReplacer(
					`vllm:gpu_cache_usage_perc{model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 0.0`,
					`vllm:gpu_cache_usage_perc{model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 0.37`,
					`vllm:num_requests_waiting{model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 0.0`,
					`vllm:num_requests_waiting{model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 5.0`,
					`vllm:num_preemptions_total{model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 0.0`,
					`vllm:num_preemptions_total{model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 2.0`,
				).Replace(s)
			},
			want: Metrics{
				Waiting:               5,
				KVCacheUsage:          0.37,
				Engines:               1,
				Models:                []string{"Qwen/Qwen2.5-Coder-1.5B-Instruct"},
				PromptTokensTotal:     148,
				GenerationTokensTotal: 955,
				PreemptionsTotal:      2,
			},
		},
		{
			// The same server put to sleep at level 1, its state set as vLLM
			// writes it appended after the capture's last line.
			file:      "vllm-v1-2026-kserve-head40.txt",
			variant:   "asleep",
			transform: func(s string) string { return s + sleepStateSet("llama-vllm-single", "0", sleepWeightsOffloaded) },
			want: Metrics{Engines: 1, Models: []string{"llama-vllm-single"},
				SleepReported: 1, Sleeping: 1, SleepLevel: 1},
		},
		{
			// The "..." elisions are not exposition format: a clear error, no partial data.
			file:    "vllm-docs-design-metrics-example.txt",
			wantErr: "text format parsing error in line 4: invalid metric name",
		},
		{
			// Without them: a TTFT histogram with neither +Inf bucket nor _sum.
			file:      "vllm-docs-design-metrics-example.txt",
			variant:   "elisions-removed",
			transform: dropElisions,
			want: Metrics{
				Running:               8,
				Engines:               1,
				Models:                []string{"meta-llama/Llama-3.1-8B-Instruct"},
				GenerationTokensTotal: 27453,
				TimeToFirstToken: Histogram{
					Bounds: []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, math.Inf(1)},
					Counts: []float64{0, 0, 0, 13, 97, 123, 138, 140, 140},
					Count:  140,
				},
			},
		},
	}
	for _, tc := range tests {
		name := tc.file
		if tc.variant != "" {
			name += "/" + tc.variant
		}
		t.Run(name, func(t *testing.T) {
			text := readFixture(t, tc.file)
			if tc.transform != nil {
				transformed := tc.transform(text)
				if transformed == text {
					t.Fatalf("transform %s changed nothing; has the fixture changed?", tc.variant)
				}
				text = transformed
			}
			got, err := Parse(strings.NewReader(text))
			checkParse(t, got, err, tc.want, tc.wantErr)
		})
	}
}

// TestParseFixtureLatency reads a quantile off the docs example's lifetime
// TTFT histogram: rank 70 of 140 falls in (0.02, 0.04], 57 of its 84
// observations in: 0.02 + 0.02*57/84.
func TestParseFixtureLatency(t *testing.T) {
	m, err := Parse(strings.NewReader(dropElisions(readFixture(t, "vllm-docs-design-metrics-example.txt"))))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.TimeToFirstToken.Quantile(0.5), 0.02+0.02*57.0/84; math.Abs(got-want) > 1e-12 {
		t.Errorf("TTFT median = %v, want %v", got, want)
	}
	// Rank 139 of 140 lies in the last finite bucket (0.08, 0.1]: 138 below, 2 in it.
	if got, want := m.TimeToFirstToken.Quantile(0.99), 0.08+0.02*(138.6-138)/2; math.Abs(got-want) > 1e-12 {
		t.Errorf("TTFT p99 = %v, want %v", got, want)
	}
}

// TestParseTruncatedFixtureIsTruncated guards the premise of the head40 case:
// the capture ends after a HELP line whose samples are missing.
func TestParseTruncatedFixtureIsTruncated(t *testing.T) {
	text := strings.TrimRight(readFixture(t, "vllm-v1-2026-kserve-head40.txt"), "\n")
	last := text[strings.LastIndex(text, "\n")+1:]
	if !strings.HasPrefix(last, "# HELP vllm:request_success_total") {
		t.Errorf("last line %q: the fixture is no longer cut off after a HELP line", last)
	}
}

// TestParseFixturesCovered keeps the table above in step with the fixture directory.
func TestParseFixturesCovered(t *testing.T) {
	dir, ok := fixtureDir(t)
	if !ok {
		t.Skipf("../shared is absent: %s not found", dir)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	covered := map[string]bool{
		"vllm-v1-2026-kserve-head40.txt":         true,
		"aibrix-docs-runtime-vllm-v0-engine.txt": true,
		"vllm-docs-design-metrics-example.txt":   true,
	}
	for _, f := range files {
		if !covered[filepath.Base(f)] {
			t.Errorf("fixture %s has no expectations in TestParseFixtures; read it and add them", filepath.Base(f))
		}
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    Metrics
		wantErr string
	}{
		{
			name: "data parallel: running and waiting summed, KV usage averaged over engines",
			text: `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3
vllm:num_requests_running{engine="1",model_name="m"} 5
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1
vllm:num_requests_waiting{engine="1",model_name="m"} 2
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.6
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 100
vllm:prompt_tokens_total{engine="1",model_name="m"} 50
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name="m"} 1.7e+09
vllm:prompt_tokens_created{engine="7",model_name="m"} 1.7e+09
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 1000
vllm:generation_tokens_total{engine="1",model_name="m"} 500
`,
			want: Metrics{Running: 8, Waiting: 3, KVCacheUsage: 0.4, Engines: 2, Models: []string{"m"},
				PromptTokensTotal: 150, GenerationTokensTotal: 1500},
		},
		{
			name: "older vLLM: gpu_cache_usage_perc fallback, several models sorted",
			text: `vllm:num_requests_running{model_name="b"} 1
vllm:num_requests_running{model_name="a"} 2
vllm:gpu_cache_usage_perc{model_name="b"} 0.5
`,
			want: Metrics{Running: 3, KVCacheUsage: 0.5, Engines: 1, Models: []string{"a", "b"}},
		},
		{
			name: "kv_cache_usage_perc wins over gpu_cache_usage_perc",
			text: `vllm:num_requests_waiting 4
vllm:kv_cache_usage_perc 0.9
vllm:gpu_cache_usage_perc 0.1
`,
			want: Metrics{Waiting: 4, KVCacheUsage: 0.9, Engines: 1},
		},
		{
			name: "histograms summed over engines bucket by bucket, _created ignored, preemptions summed",
			text: `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 1
vllm:num_requests_running{engine="1",model_name="m"} 1
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 4
vllm:num_preemptions_total{engine="1",model_name="m"} 3
# TYPE vllm:num_preemptions_created gauge
vllm:num_preemptions_created{engine="0",model_name="m"} 1.7e+09
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_sum{engine="0",model_name="m"} 3.5
vllm:request_queue_time_seconds_bucket{engine="0",le="0.3",model_name="m"} 5
vllm:request_queue_time_seconds_bucket{engine="0",le="0.5",model_name="m"} 7
vllm:request_queue_time_seconds_bucket{engine="0",le="+Inf",model_name="m"} 10
vllm:request_queue_time_seconds_count{engine="0",model_name="m"} 10
vllm:request_queue_time_seconds_sum{engine="1",model_name="m"} 1.5
vllm:request_queue_time_seconds_bucket{engine="1",le="0.3",model_name="m"} 1
vllm:request_queue_time_seconds_bucket{engine="1",le="0.5",model_name="m"} 2
vllm:request_queue_time_seconds_bucket{engine="1",le="+Inf",model_name="m"} 2
vllm:request_queue_time_seconds_count{engine="1",model_name="m"} 2
# TYPE vllm:request_queue_time_seconds_created gauge
vllm:request_queue_time_seconds_created{engine="0",model_name="m"} 1.7e+09
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 2
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 2
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 2
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.1
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1",model_name="m"} 1
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="m"} 4
vllm:time_to_first_token_seconds_count{engine="1",model_name="m"} 4
vllm:time_to_first_token_seconds_sum{engine="1",model_name="m"} 2
`,
			want: Metrics{Running: 2, Engines: 2, Models: []string{"m"}, PreemptionsTotal: 7,
				QueueTime:        Histogram{Bounds: []float64{0.3, 0.5, math.Inf(1)}, Counts: []float64{6, 9, 12}, Count: 12, Sum: 5},
				TimeToFirstToken: Histogram{Bounds: []float64{0.1, math.Inf(1)}, Counts: []float64{3, 6}, Count: 6, Sum: 2.1}},
		},
		{
			name: "inter-token latency: _count and _sum are read, its buckets are not (not even checked)",
			text: `vllm:num_requests_running{engine="0"} 0
vllm:num_requests_running{engine="1"} 0
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.05"} 9
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.1"} 2
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf"} 10
vllm:inter_token_latency_seconds_count{engine="0"} 10
vllm:inter_token_latency_seconds_sum{engine="0"} 0.4
vllm:inter_token_latency_seconds_count{engine="1"} 5
vllm:inter_token_latency_seconds_sum{engine="1"} 0.1
`,
			want: Metrics{Engines: 2,
				InterTokenLatency: Histogram{Bounds: []float64{math.Inf(1)}, Counts: []float64{15}, Count: 15, Sum: 0.5}},
		},
		{
			name: "inter_token_latency_seconds wins over time_per_output_token_seconds",
			text: `vllm:num_requests_running 0
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_count 10
vllm:inter_token_latency_seconds_sum 0.4
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_count 1
vllm:time_per_output_token_seconds_sum 0.01
`,
			want: Metrics{Engines: 1,
				InterTokenLatency: Histogram{Bounds: []float64{math.Inf(1)}, Counts: []float64{10}, Count: 10, Sum: 0.4}},
		},
		{
			name: "older vLLM: time_per_output_token_seconds fallback",
			text: `vllm:num_requests_running 0
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{le="0.05"} 1
vllm:time_per_output_token_seconds_bucket{le="+Inf"} 3
vllm:time_per_output_token_seconds_count 3
vllm:time_per_output_token_seconds_sum 0.3
`,
			want: Metrics{Engines: 1,
				InterTokenLatency: Histogram{Bounds: []float64{math.Inf(1)}, Counts: []float64{3}, Count: 3, Sum: 0.3}},
		},
		{
			name: "histogram series without a TYPE line are not a histogram, and not read",
			text: "vllm:num_requests_running 0\nvllm:request_queue_time_seconds_bucket{le=\"+Inf\"} 3\nvllm:request_queue_time_seconds_count 3\n",
			want: Metrics{Engines: 1},
		},
		{
			name: "engines with different buckets cannot be summed",
			text: `vllm:num_requests_running 0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1"} 1
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf"} 1
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.2"} 1
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf"} 1
`,
			wantErr: `vLLM histogram vllm:time_to_first_token_seconds{engine="1"} has buckets [0.2 +Inf], but an earlier series has [0.1 +Inf]`,
		},
		{
			name: "bucket counts that are not cumulative",
			text: `vllm:num_requests_running 0
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_bucket{le="0.1"} 5
vllm:request_queue_time_seconds_bucket{le="0.2"} 4
vllm:request_queue_time_seconds_bucket{le="+Inf"} 5
`,
			wantErr: "bucket le=0.2 has count 4, below the 5 of the bucket before",
		},
		{
			name: "_count below the largest bucket, no +Inf bucket",
			text: `vllm:num_requests_running 0
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_bucket{le="0.1"} 5
vllm:request_queue_time_seconds_count 2
`,
			wantErr: "_count is 2, below its largest bucket (5)",
		},
		{
			name: "NaN bucket count",
			text: `vllm:num_requests_running 0
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_bucket{le="+Inf"} NaN
`,
			wantErr: "bucket le=+Inf has count NaN",
		},
		{
			name: "negative _sum",
			text: `vllm:num_requests_running 0
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_bucket{le="+Inf"} 1
vllm:request_queue_time_seconds_sum -1
`,
			wantErr: "_sum is -1",
		},
		{
			name:    "a latency histogram typed as gauge",
			text:    "vllm:num_requests_running 0\n# TYPE vllm:time_to_first_token_seconds gauge\nvllm:time_to_first_token_seconds 0.2\n",
			wantErr: "vllm:time_to_first_token_seconds has type GAUGE, want histogram",
		},
		{
			name:    "NaN preemptions",
			text:    "vllm:num_requests_running 0\nvllm:num_preemptions_total NaN\n",
			wantErr: "vllm:num_preemptions_total has value NaN",
		},
		{
			name:    "missing load metrics: not vLLM",
			text:    "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 12\n",
			wantErr: "not a vLLM metrics endpoint",
		},
		{
			name:    "empty body",
			text:    "",
			wantErr: "not a vLLM metrics endpoint",
		},
		{
			name:    "garbage",
			text:    "<html><body>502 Bad Gateway</body></html>\n",
			wantErr: "parsing vLLM metrics: text format parsing error in line 1",
		},
		{
			name:    "truncated mid-line",
			text:    "vllm:num_requests_running{engine=\"0\",model_na",
			wantErr: "parsing vLLM metrics",
		},
		{
			// expfmt v0.70.0 dereferences nil here; found by FuzzParse.
			name:    "label braces without a metric name after a TYPE line",
			text:    "# TYPE vllm:num_requests_running gauge\n{}",
			wantErr: "parsing vLLM metrics",
		},
		{
			name:    "NaN load is malformed, not idle",
			text:    "vllm:num_requests_running NaN\n",
			wantErr: "vllm:num_requests_running has value NaN",
		},
		{
			name:    "negative KV usage",
			text:    "vllm:num_requests_running 0\nvllm:kv_cache_usage_perc{engine=\"0\"} -0.5\n",
			wantErr: `vllm:kv_cache_usage_perc{engine="0"} has value -0.5`,
		},
		{
			name:    "wrong type",
			text:    "# TYPE vllm:num_requests_running histogram\nvllm:num_requests_running_bucket{le=\"+Inf\"} 1\nvllm:num_requests_running_count 1\nvllm:num_requests_running_sum 1\n",
			wantErr: "has type HISTOGRAM, want gauge or counter",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tc.text))
			checkParse(t, got, err, tc.want, tc.wantErr)
		})
	}
}

// sleepStateSet is vllm:engine_sleep_state as vLLM writes it for one engine
// in state (awake, weights_offloaded or discard_all; "" for asleep with no
// level named): one series per state, that one 1.
func sleepStateSet(model, engine, state string) string {
	var b strings.Builder
	b.WriteString("# HELP vllm:engine_sleep_state Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; " +
		"weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.\n# TYPE vllm:engine_sleep_state gauge\n")
	for _, s := range []string{sleepAwake, sleepWeightsOffloaded, sleepDiscardAll} {
		v := "0.0"
		if s == state {
			v = "1.0"
		}
		fmt.Fprintf(&b, "vllm:engine_sleep_state{engine=%q,model_name=%q,sleep_state=%q} %s\n", engine, model, s, v)
	}
	return b.String()
}

func TestParseSleep(t *testing.T) {
	const load = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 0.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 0.0
`
	const twoEngines = load + `vllm:num_requests_running{engine="1",model_name="m"} 0.0
`
	one := Metrics{Engines: 1, Models: []string{"m"}}
	with := func(m Metrics, reported, sleeping, level int) Metrics {
		m.SleepReported, m.Sleeping, m.SleepLevel = reported, sleeping, level
		return m
	}
	two := Metrics{Engines: 2, Models: []string{"m"}}
	tests := []struct {
		name       string
		text       string
		want       Metrics
		wantAsleep bool
		wantErr    string
	}{
		{name: "no sleep metric (vLLM before late 2025): awake, none reported", text: load, want: one},
		{name: "awake", text: load + sleepStateSet("m", "0", sleepAwake), want: with(one, 1, 0, 0)},
		{name: "asleep at level 1: weights offloaded", text: load + sleepStateSet("m", "0", sleepWeightsOffloaded),
			want: with(one, 1, 1, 1), wantAsleep: true},
		{name: "asleep at level 2: weights discarded", text: load + sleepStateSet("m", "0", sleepDiscardAll),
			want: with(one, 1, 1, 2), wantAsleep: true},
		{name: "asleep with no level named (level 0)", text: load + sleepStateSet("m", "0", ""),
			want: with(one, 1, 1, 0), wantAsleep: true},
		{
			name: "data parallel, every engine asleep: the deepest level",
			text: twoEngines + sleepStateSet("m", "0", sleepWeightsOffloaded) +
				strings.Join(strings.Split(sleepStateSet("m", "1", sleepDiscardAll), "\n")[2:], "\n"),
			want: with(two, 2, 2, 2), wantAsleep: true,
		},
		{
			name: "data parallel, one engine awake: the server still serves",
			text: twoEngines + sleepStateSet("m", "0", sleepWeightsOffloaded) +
				strings.Join(strings.Split(sleepStateSet("m", "1", sleepAwake), "\n")[2:], "\n"),
			want: with(two, 2, 1, 1),
		},
		{
			name: "data parallel, one engine reports no state: not asleep",
			text: twoEngines + sleepStateSet("m", "0", sleepWeightsOffloaded),
			want: with(two, 1, 1, 1),
		},
		{
			name: "no awake series: a level at 1 says asleep",
			text: load + `vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="discard_all"} 1` + "\n",
			want: with(one, 1, 1, 2), wantAsleep: true,
		},
		{
			name: "no awake series and no level at 1: no state",
			text: load + `vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="weights_offloaded"} 0` + "\n",
			want: one,
		},
		{
			name: "a state Gleaner does not know is checked, and awake decides",
			text: load + sleepStateSet("m", "0", sleepAwake) + `vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="paused"} 1` + "\n",
			want: with(one, 1, 0, 0),
		},
		{
			name: "the first draft's form: asleep, with its level gauge",
			text: load + "# TYPE vllm:engine_sleep_state gauge\nvllm:engine_sleep_state{engine=\"0\",model_name=\"m\"} 1.0\n" +
				"# TYPE vllm:engine_sleep_level gauge\nvllm:engine_sleep_level{engine=\"0\",model_name=\"m\"} 2.0\n",
			want: with(one, 1, 1, 2), wantAsleep: true,
		},
		{
			name: "the first draft's form: awake",
			text: load + "vllm:engine_sleep_state{engine=\"0\",model_name=\"m\"} 0.0\nvllm:engine_sleep_level{engine=\"0\",model_name=\"m\"} 0.0\n",
			want: with(one, 1, 0, 0),
		},
		{
			name: "a level gauge that agrees with the state set",
			text: load + sleepStateSet("m", "0", sleepWeightsOffloaded) + "vllm:engine_sleep_level{engine=\"0\",model_name=\"m\"} 1\n",
			want: with(one, 1, 1, 1), wantAsleep: true,
		},
		{
			name: "a level gauge alone states nothing: awake",
			text: load + "vllm:engine_sleep_level{engine=\"0\",model_name=\"m\"} 2\n",
			want: one,
		},
		{
			name:    "malformed: a state neither 0 nor 1",
			text:    load + `vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="awake"} 0.5` + "\n",
			wantErr: `vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="awake"} has value 0.5, want 0 or 1`,
		},
		{
			name:    "malformed: NaN",
			text:    load + `vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="awake"} NaN` + "\n",
			wantErr: "has value NaN, want a finite non-negative number",
		},
		{
			name:    "malformed: an unknown state's value is checked too",
			text:    load + sleepStateSet("m", "0", sleepWeightsOffloaded) + `vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="paused"} 2` + "\n",
			wantErr: `sleep_state="paused"} has value 2, want 0 or 1`,
		},
		{
			name:    "malformed: a level that is not 0, 1 or 2",
			text:    load + sleepStateSet("m", "0", sleepDiscardAll) + "vllm:engine_sleep_level{engine=\"0\",model_name=\"m\"} 3\n",
			wantErr: `vllm:engine_sleep_level{engine="0",model_name="m"} has value 3, want 0, 1 or 2`,
		},
		{
			name:    "malformed: a fractional level",
			text:    load + sleepStateSet("m", "0", "") + "vllm:engine_sleep_level{engine=\"0\",model_name=\"m\"} 1.5\n",
			wantErr: "has value 1.5, want 0, 1 or 2",
		},
		{
			name:    "malformed: typed as a histogram",
			text:    load + "# TYPE vllm:engine_sleep_state histogram\nvllm:engine_sleep_state_bucket{le=\"+Inf\"} 1\n",
			wantErr: "vllm:engine_sleep_state has type HISTOGRAM, want gauge or counter",
		},
		{
			name: "contradictory: awake and asleep at once",
			text: load + strings.Replace(sleepStateSet("m", "0", sleepAwake),
				`sleep_state="weights_offloaded"} 0.0`, `sleep_state="weights_offloaded"} 1.0`, 1),
			wantErr: `vllm:engine_sleep_state{engine="0"}: awake is 1, and so is a sleep level`,
		},
		{
			name: "contradictory: two levels at once",
			text: load + strings.Replace(sleepStateSet("m", "0", sleepDiscardAll),
				`sleep_state="weights_offloaded"} 0.0`, `sleep_state="weights_offloaded"} 1.0`, 1),
			wantErr: "both weights_offloaded and discard_all are 1",
		},
		{
			name:    "contradictory: the level gauge disagrees with the state set",
			text:    load + sleepStateSet("m", "0", sleepWeightsOffloaded) + "vllm:engine_sleep_level{engine=\"0\",model_name=\"m\"} 2\n",
			wantErr: "the engine sleeps at level 1, but vllm:engine_sleep_level is 2",
		},
		{
			name:    "contradictory: awake, with a sleep level",
			text:    load + sleepStateSet("m", "0", sleepAwake) + "vllm:engine_sleep_level{engine=\"0\",model_name=\"m\"} 1\n",
			wantErr: "the engine is awake, but vllm:engine_sleep_level is 1",
		},
		{
			name:    "contradictory: both forms for one engine",
			text:    load + sleepStateSet("m", "0", sleepAwake) + "vllm:engine_sleep_state{engine=\"0\",model_name=\"m\"} 1\n",
			wantErr: "series with and without a sleep_state label",
		},
		{
			name: "contradictory: one engine's state twice, differently",
			text: load + sleepStateSet("m", "0", sleepAwake) +
				`vllm:engine_sleep_state{engine="0",model_name="other",sleep_state="awake"} 0` + "\n",
			wantErr: `sleep_state="awake"} has value 0, but another series of the same engine and state has 1`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tc.text))
			checkParse(t, got, err, tc.want, tc.wantErr)
			if got.Asleep() != tc.wantAsleep {
				t.Errorf("Asleep() = %v, want %v", got.Asleep(), tc.wantAsleep)
			}
		})
	}
}

func TestSelectLines(t *testing.T) {
	tests := []struct {
		line string
		keep bool
	}{
		{"vllm:num_requests_running{engine=\"0\"} 1", true},
		{"  vllm:num_requests_running 1", true},
		{"vllm:time_to_first_token_seconds_bucket{le=\"0.1\"} 1", true},
		{"vllm:time_to_first_token_seconds_sum 1", true},
		{"vllm:time_to_first_token_seconds_count\t1", true},
		{"vllm:inter_token_latency_seconds_sum{engine=\"0\"} 3.5", true},
		{"vllm:inter_token_latency_seconds_bucket{engine=\"0\",le=\"0.01\"} 3", false},
		{"vllm:time_per_output_token_seconds_bucket{le=\"0.01\"} 3", false},
		{"# HELP vllm:num_requests_waiting Number of requests waiting.", false},
		{"# TYPE vllm:kv_cache_usage_perc gauge", true},
		{"#TYPE\tvllm:gpu_cache_usage_perc gauge", true},
		{"vllm:engine_sleep_state{engine=\"0\",model_name=\"m\",sleep_state=\"awake\"} 1.0", true},
		{"# TYPE vllm:engine_sleep_level gauge", true},
		{"vllm:time_to_first_token_seconds_created{engine=\"0\"} 1.7e+09", false},
		{"# TYPE vllm:prompt_tokens_created gauge", false},
		{"vllm:iteration_tokens_total_bucket{le=\"1\"} 994", false},
		{"process_cpu_seconds_total 12", false},
		{"# HELP python_info Python platform information", false},
		{"# a comment the parser skips", false},
		// Not certain what these are: the parser decides.
		{"...", true},
		{"<html><body>502</body></html>", true},
		{"{\"vllm:num_requests_running\"} 2", true},
		{"{}", true},
		{"# TYPE \"process.cpu\" counter", true},
		{"# TYPE process_cpu_seconds_total{ counter", true},
		{"# HELPER vllm:num_requests_running", true},
		{"process_cpu_seconds_total", true},
		{"process_cpu_seconds_total=12", true},
		{"", true},
	}
	for _, tc := range tests {
		for _, last := range []bool{false, true} {
			var sel bytes.Buffer
			text := tc.line + "\n"
			want := tc.keep
			if last {
				// An unterminated last line always reaches the parser.
				text, want = tc.line, true
			}
			selectLines(&sel, []byte(text), 0)
			if got := sel.Len() > 0 || tc.line == ""; got != want {
				t.Errorf("line %q (unterminated: %v): kept = %v, want %v", tc.line, last, got, want)
			}
		}
	}
}

func TestParseErrorNamesTheOriginalLine(t *testing.T) {
	tests := []struct{ name, text, want string }{
		{
			name: "after lines of other families",
			text: "# HELP process_cpu_seconds_total CPU.\n# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1\n" +
				"vllm:num_requests_running 1\nvllm:num_requests_waiting one\n",
			want: `text format parsing error in line 5: expected float as value, got "one" (line 5 reads "vllm:num_requests_waiting one")`,
		},
		{
			name: "after inter-token latency buckets, which are not read",
			text: "# TYPE vllm:time_per_output_token_seconds histogram\nvllm:time_per_output_token_seconds_bucket{le=\"+Inf\"} 1\n" +
				"# TYPE vllm:inter_token_latency_seconds histogram\nvllm:inter_token_latency_seconds_bucket{le=\"+Inf\"} 1\n" +
				"vllm:num_requests_running{engine=\"0\" 1\n",
			// The parser saw it as its line 3.
			want: `text format parsing error in line 5: unexpected end of label value "0" (line 5 reads "vllm:num_requests_running{engine=\"0\" 1")`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tc.text))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse error = %v, want one containing %s", err, tc.want)
			}
		})
	}
}

func checkParse(t *testing.T, got Metrics, err error, want Metrics, wantErr string) {
	t.Helper()
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("Parse error = %v, want one containing %q", err, wantErr)
		}
		if !reflect.DeepEqual(got, Metrics{}) {
			t.Errorf("Parse returned partial data with its error: %+v", got)
		}
		return
	}
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if math.Abs(got.KVCacheUsage-want.KVCacheUsage) > 1e-9 {
		t.Errorf("KVCacheUsage = %v, want %v", got.KVCacheUsage, want.KVCacheUsage)
	}
	got.KVCacheUsage = want.KVCacheUsage
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse = %+v, want %+v", got, want)
	}
}

// withoutInterTokenBuckets makes whole-text families look as Parse reads
// them: inter-token latency without its buckets (see wanted).
func withoutInterTokenBuckets(families map[string]*dto.MetricFamily) {
	for _, name := range []string{metricInterTokenLatency, metricTimePerOutputToken} {
		mf := families[name]
		if mf == nil || (mf.GetType() != dto.MetricType_HISTOGRAM && mf.GetType() != dto.MetricType_GAUGE_HISTOGRAM) {
			continue
		}
		var kept []*dto.Metric
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			if h.SampleCount == nil && h.SampleCountFloat == nil && h.SampleSum == nil {
				continue // a series of buckets only: Parse never sees it
			}
			h.Bucket = nil
			kept = append(kept, m)
		}
		mf.Metric = kept
		if len(kept) == 0 {
			delete(families, name) // as the parser drops families without samples
		}
	}
}

// checkHistogramShape asserts what consumers of a parsed Histogram rely on.
func checkHistogramShape(t *testing.T, name string, h Histogram) {
	t.Helper()
	if len(h.Bounds) == 0 {
		if len(h.Counts) != 0 || h.Count != 0 || h.Sum != 0 {
			t.Errorf("%s: no buckets but %+v", name, h)
		}
		return
	}
	n := len(h.Bounds)
	if len(h.Counts) != n || !math.IsInf(h.Bounds[n-1], 1) || h.Counts[n-1] != h.Count {
		t.Fatalf("%s: want equal lengths, a last +Inf bucket holding Count; got %+v", name, h)
	}
	for i := range h.Bounds {
		if math.IsNaN(h.Counts[i]) || math.IsInf(h.Counts[i], 0) || h.Counts[i] < 0 {
			t.Errorf("%s: bucket %d count %v", name, i, h.Counts[i])
		}
		if i > 0 && (h.Bounds[i] <= h.Bounds[i-1] || h.Counts[i] < h.Counts[i-1]) {
			t.Errorf("%s: buckets not ascending or not cumulative at %d: %+v", name, i, h)
		}
	}
	if math.IsNaN(h.Sum) || math.IsInf(h.Sum, 0) || h.Sum < 0 {
		t.Errorf("%s: Sum %v", name, h.Sum)
	}
	for _, q := range []float64{0.5, 0.9, 0.99} {
		v := h.Quantile(q)
		if math.IsNaN(v) || math.IsInf(v, 0) {
			t.Errorf("%s: quantile %v = %v, want finite", name, q, v)
		}
		if n > 1 && (v > h.Bounds[n-2] || (v < 0 && v < h.Bounds[0])) {
			t.Errorf("%s: quantile %v = %v outside the finite buckets %v", name, q, v, h.Bounds)
		}
	}
}

func FuzzParse(f *testing.F) {
	if dir, ok := fixtureDir(f); ok {
		files, _ := filepath.Glob(filepath.Join(dir, "*.txt"))
		for _, file := range files {
			b, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(string(b))
			f.Add(dropElisions(string(b)))
		}
	}
	f.Add("vllm:num_requests_running 1\n")
	f.Add("vllm:num_requests_running{engine=\"0\"} 1\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.5\nvllm:kv_cache_usage_perc{engine=\"1\"} 1e308\n")
	f.Add("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} +Inf\n")
	f.Add("{\"vllm:num_requests_running\"} 2\n")
	f.Add("vllm:num_requests_running 1\n# TYPE vllm:time_to_first_token_seconds histogram\n" +
		"vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.1\"} 2\nvllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"+Inf\"} 3\n" +
		"vllm:time_to_first_token_seconds_bucket{engine=\"1\",le=\"0.1\"} 1\nvllm:time_to_first_token_seconds_count{engine=\"1\"} 4\n" +
		"vllm:time_to_first_token_seconds_sum{engine=\"1\"} 1.5\n")
	f.Add("vllm:num_requests_running{engine=\"0\"} 0\n" + sleepStateSet("m", "0", sleepWeightsOffloaded) +
		"vllm:engine_sleep_level{engine=\"0\"} 1\nvllm:engine_sleep_state{engine=\"1\"} 1\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, text string) {
		m, err := Parse(strings.NewReader(text))
		// Skipping the lines of other families must not change the outcome
		// whenever the whole text is valid: same Metrics, or an error both ways.
		if families, fullErr := parseText(strings.NewReader(text)); fullErr == nil {
			withoutInterTokenBuckets(families)
			e := newExposition()
			e.fromFamilies(families)
			want, wantErr := e.extract()
			if (err == nil) != (wantErr == nil) || !reflect.DeepEqual(m, want) {
				t.Fatalf("with lines selected: %+v, %v\nparsed whole: %+v, %v", m, err, want, wantErr)
			}
		}
		checkScanAgrees(t, []byte(text))
		if err != nil {
			if !reflect.DeepEqual(m, Metrics{}) {
				t.Fatalf("partial data with error %v: %+v", err, m)
			}
			return
		}
		if m.Engines < 1 {
			t.Errorf("Engines = %d on success, want >= 1", m.Engines)
		}
		if m.Sleeping < 0 || m.Sleeping > m.SleepReported || m.SleepReported > m.Engines {
			t.Errorf("Sleeping %d, SleepReported %d, Engines %d: want 0 <= Sleeping <= SleepReported <= Engines", m.Sleeping, m.SleepReported, m.Engines)
		}
		if m.SleepLevel < 0 || m.SleepLevel > 2 || (m.Sleeping == 0 && m.SleepLevel != 0) {
			t.Errorf("SleepLevel = %d with %d engines asleep, want 0..2 and 0 when none sleeps", m.SleepLevel, m.Sleeping)
		}
		for name, h := range map[string]Histogram{"QueueTime": m.QueueTime, "TimeToFirstToken": m.TimeToFirstToken, "InterTokenLatency": m.InterTokenLatency} {
			checkHistogramShape(t, name, h)
		}
		for name, v := range map[string]float64{
			"Running": m.Running, "Waiting": m.Waiting, "KVCacheUsage": m.KVCacheUsage,
			"PromptTokensTotal": m.PromptTokensTotal, "GenerationTokensTotal": m.GenerationTokensTotal,
		} {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				t.Errorf("%s = %v on success, want finite and non-negative", name, v)
			}
		}
	})
}

// TestPooledParserKeepsNothingParsed: a parser parked in the pool between
// scrapes must not hold the families it parsed (one per scrape in flight,
// they were most of the informer's heap at 10,000 endpoints).
func TestPooledParserKeepsNothingParsed(t *testing.T) {
	body := "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 3\n"
	families, err := parseText(strings.NewReader(body))
	if err != nil || len(families) != 1 {
		t.Fatalf("parseText = %d families, %v; want 1", len(families), err)
	}
	// Without a collection between, Get returns the parser just put back on
	// this P (a new one, holding nothing, if the goroutine moved).
	parser := textParsers.Get()
	defer textParsers.Put(parser)
	if held := reflect.ValueOf(parser).Elem().FieldByName("metricFamiliesByName"); !held.IsValid() || held.Len() != 0 {
		t.Errorf("a parser in the pool holds %d families of its last parse", held.Len())
	}
	if len(families) != 1 || families["vllm:num_requests_running"] == nil {
		t.Errorf("releasing the parser changed the families it returned: %v", families)
	}
}

// checkScanAgrees: where scan reads the selected lines of body, what Parse
// makes of them is what it makes of expfmt's reading of the same lines:
// the same Metrics, or the same error.
func checkScanAgrees(t *testing.T, body []byte) (scanned bool) {
	t.Helper()
	var selected bytes.Buffer
	if whole, _ := selectLines(&selected, body, 0); whole {
		return false
	}
	read := func(fast bool) (Metrics, error, bool) {
		e := newExposition()
		if fast {
			if !e.scan(selected.Bytes()) {
				return Metrics{}, nil, false
			}
		} else {
			families, err := parseText(bytes.NewReader(selected.Bytes()))
			if err != nil {
				return Metrics{}, err, true
			}
			e.fromFamilies(families)
		}
		if err := e.checkLabelValues(DefaultMaxLabelValues); err != nil {
			return Metrics{}, err, true
		}
		m, err := e.extract()
		return m, err, true
	}
	got, gotErr, scanned := read(true)
	if !scanned {
		return false
	}
	want, wantErr, _ := read(false)
	if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || !reflect.DeepEqual(got, want) {
		t.Fatalf("scanned: %+v, %v\nexpfmt:  %+v, %v\nof %q", got, gotErr, want, wantErr, selected.Bytes())
	}
	return true
}

// TestScanAgreesWithExpfmt mutates vLLM expositions line by line and byte
// by byte: wherever scan reads a mutant, it must read it as expfmt does.
// The unmutated expositions must be scanned, or Parse's common case would
// be expfmt's after all.
func TestScanAgreesWithExpfmt(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	bodies := [][]byte{
		vllmV1Exposition(2, 100),
		vllmsim.NewEndpoint(now).Render(vllmsim.Load{Model: "m", Running: 3, Waiting: 1, KVCache: 0.5}, now.Add(time.Minute)),
		[]byte("vllm:num_requests_running{engine=\"0\"} 0\n" + sleepStateSet("m", "0", sleepWeightsOffloaded) + "vllm:engine_sleep_level{engine=\"0\"} 1\n"),
	}
	if dir, ok := fixtureDir(t); ok {
		files, _ := filepath.Glob(filepath.Join(dir, "*.txt"))
		for _, file := range files {
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			bodies = append(bodies, []byte(dropElisions(string(b))))
		}
	}
	for i, body := range bodies[:3] {
		if !checkScanAgrees(t, body) {
			t.Errorf("body %d: scan declined an unmutated vLLM exposition", i)
		}
	}
	// Pieces that expfmt reads in its own way, spliced in at random.
	pieces := []string{" ", "\t", "\n", "{", "}", ",", "=", "\"", "\\", "-", "+Inf", "NaN", "_", "p", "le=\"0.5\"", "le=\"x\"",
		"_bucket", "_count", "_sum", "# TYPE vllm:num_requests_running gauge\n", "# TYPE vllm:request_queue_time_seconds histogram\n",
		"# TYPE vllm:num_requests_waiting summary\n", "engine=\"1\"", " 123", "1e400", "-0", "0x1", "__name__=\"a\"", "\xff"}
	rng := rand.New(rand.NewPCG(1, 2))
	scanned, mutants := 0, 20000
	for range mutants {
		body := bodies[rng.IntN(len(bodies))]
		lines := bytes.SplitAfter(body, []byte("\n"))
		for range 1 + rng.IntN(3) {
			j := rng.IntN(len(lines))
			line := slices.Clone(lines[j])
			switch rng.IntN(5) {
			case 0: // drop a line
				lines = slices.Delete(lines, j, j+1)
				continue
			case 1: // repeat a line elsewhere
				lines = slices.Insert(lines, rng.IntN(len(lines)+1), line)
				continue
			case 2: // drop a byte
				if len(line) > 0 {
					k := rng.IntN(len(line))
					line = slices.Delete(line, k, k+1)
				}
			default: // splice in a piece
				k := rng.IntN(len(line) + 1)
				line = slices.Insert(line, k, []byte(pieces[rng.IntN(len(pieces))])...)
			}
			lines[j] = line
		}
		if checkScanAgrees(t, bytes.Join(lines, nil)) {
			scanned++
		}
	}
	t.Logf("%d of %d mutants scanned, the rest read by expfmt", scanned, mutants)
	if scanned < mutants/4 {
		t.Errorf("scan read only %d of %d mutants: the test no longer tests it", scanned, mutants)
	}
}

// TestResetExpositionKeepsNoText: an exposition parked in the pool between
// scrapes must not keep the text it read alive (one per scrape in flight).
func TestResetExpositionKeepsNoText(t *testing.T) {
	var selected bytes.Buffer
	selectLines(&selected, vllmV1Exposition(2, 10), 0)
	e := newExposition()
	if !e.scan(selected.Bytes()) {
		t.Fatal("scan declined the benchmark's exposition")
	}
	if err := e.checkLabelValues(DefaultMaxLabelValues); err != nil {
		t.Fatal(err)
	}
	if _, err := e.extract(); err != nil {
		t.Fatal(err)
	}
	e.reset()
	held := 0
	for _, l := range slices.Concat(e.labels[:cap(e.labels)], e.scratch[:cap(e.scratch)]) {
		if l.name != nil || l.value != nil {
			held++
		}
	}
	for _, f := range e.families {
		for _, s := range f.series[:cap(f.series)] {
			if s.labels != nil {
				held++
			}
		}
	}
	if held > 0 || len(e.engines) > 0 || len(e.models) > 0 {
		t.Errorf("after reset the exposition holds %d references into the text, %d engines, %d models", held, len(e.engines), len(e.models))
	}
}

// TestScanDeclinesWhatExpfmtReadsItsOwnWay: inputs a hostile endpoint could
// write where scan would differ from expfmt, or cost more than it, go to
// expfmt; the result is expfmt's.
func TestScanDeclinesWhatExpfmtReadsItsOwnWay(t *testing.T) {
	var manySeries, manyLabels strings.Builder
	manySeries.WriteString("vllm:num_requests_running 0\n# TYPE vllm:request_queue_time_seconds histogram\n")
	for i := range scanMaxHistogramSeries + 1 {
		fmt.Fprintf(&manySeries, "vllm:request_queue_time_seconds_sum{engine=\"%d\"} 1\n", i)
	}
	manyLabels.WriteString("vllm:num_requests_running{")
	for i := range scanMaxLabels + 1 {
		fmt.Fprintf(&manyLabels, "l%d=\"x\",", i)
	}
	manyLabels.WriteString("} 1\n")
	for name, body := range map[string]string{
		// expfmt keeps a fractional _count apart from an integer one and reads the fraction.
		"two counts": "vllm:num_requests_running 0\n# TYPE vllm:request_queue_time_seconds histogram\n" +
			"vllm:request_queue_time_seconds_bucket{le=\"1\"} 1\nvllm:request_queue_time_seconds_count 0.5\nvllm:request_queue_time_seconds_count 2\n",
		"two sums": "vllm:num_requests_running 0\n# TYPE vllm:request_queue_time_seconds histogram\n" +
			"vllm:request_queue_time_seconds_sum 0.5\nvllm:request_queue_time_seconds_sum 2\n",
		"many histogram series": manySeries.String(),
		"many labels":           manyLabels.String(),
	} {
		if checkScanAgrees(t, []byte(body)) {
			t.Errorf("%s: scanned; want it declined to expfmt", name)
		}
	}
	_, err := Parse(strings.NewReader("vllm:num_requests_running 0\n# TYPE vllm:request_queue_time_seconds histogram\n" +
		"vllm:request_queue_time_seconds_bucket{le=\"1\"} 1\nvllm:request_queue_time_seconds_count 0.5\nvllm:request_queue_time_seconds_count 2\n"))
	if err == nil || !strings.Contains(err.Error(), "_count is 0.5") {
		t.Errorf("Parse(two counts) = %v, want expfmt's reading: _count is 0.5", err)
	}
}

// TestLabelValuesCappedOutsideTheFamiliesRead: a family Parse does not read
// but expfmt parsed (a line selectLines cannot classify) still counts toward
// MaxLabelValues, as it costs the parse its memory.
func TestLabelValuesCappedOutsideTheFamiliesRead(t *testing.T) {
	var b strings.Builder
	b.WriteString("vllm:num_requests_running 0\n")
	for i := range DefaultMaxLabelValues + 1 {
		fmt.Fprintf(&b, "x\"y\"{a=\"%d\"} 0\n", i)
	}
	if _, err := Parse(strings.NewReader(b.String())); !errors.Is(err, ErrTooManyLabelValues) {
		t.Errorf("Parse = %v, want ErrTooManyLabelValues", err)
	}
}
