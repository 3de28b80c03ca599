package vllm

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// fixtureDir returns the shared vLLM fixtures (real expositions kept outside
// the repository), resolved relative to this file so it works from any working
// directory. ok is false when ../shared is absent.
func fixtureDir(tb testing.TB) (dir string, ok bool) {
	tb.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir = filepath.Join(filepath.Dir(file), "..", "..", "..", "shared", "fixtures", "vllm")
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
		transform func(string) string
		want      Metrics
		wantErr   string // substring; empty means success
	}{
		{
			// vLLM V1 with engine labels, _created gauges and a trailing HELP without samples.
			file: "vllm-v1-2026-kserve-head40.txt",
			want: Metrics{Engines: 1, Models: []string{"llama-vllm-single"}},
		},
		{
			// Pre-V1: gpu_cache_usage_perc, no engine label.
			file: "aibrix-docs-runtime-vllm-v0-engine.txt",
			want: Metrics{
				Engines:               1,
				Models:                []string{"Qwen/Qwen2.5-Coder-1.5B-Instruct"},
				PromptTokensTotal:     148,
				GenerationTokensTotal: 955,
			},
		},
		{
			// The "..." elisions are not exposition format.
			file:    "vllm-docs-design-metrics-example.txt",
			wantErr: "line 4: invalid metric name",
		},
		{
			file:      "vllm-docs-design-metrics-example.txt",
			transform: dropElisions,
			want: Metrics{
				Running:               8,
				Engines:               1,
				Models:                []string{"meta-llama/Llama-3.1-8B-Instruct"},
				GenerationTokensTotal: 27453,
			},
		},
	}
	for _, tc := range tests {
		name := tc.file
		if tc.transform != nil {
			name += "/elisions-removed"
		}
		t.Run(name, func(t *testing.T) {
			text := readFixture(t, tc.file)
			if tc.transform != nil {
				text = tc.transform(text)
			}
			got, err := Parse(strings.NewReader(text))
			checkParse(t, got, err, tc.want, tc.wantErr)
		})
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
	f.Add("")
	f.Fuzz(func(t *testing.T, text string) {
		m, err := Parse(strings.NewReader(text))
		if err != nil {
			if !reflect.DeepEqual(m, Metrics{}) {
				t.Fatalf("partial data with error %v: %+v", err, m)
			}
			return
		}
		if m.Engines < 1 {
			t.Errorf("Engines = %d on success, want >= 1", m.Engines)
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
