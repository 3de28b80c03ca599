package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestMain lets tests run the real command, exit code included, by starting
// this test binary again with GLEANER_TEST_RUN_MAIN set.
func TestMain(m *testing.M) {
	if os.Getenv("GLEANER_TEST_RUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// gleaner runs the gleaner command with args and returns its stdout, stderr and exit code.
func gleaner(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "GLEANER_TEST_RUN_MAIN=1")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		code = exitErr.ExitCode()
	default:
		t.Fatalf("running gleaner %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// twoEngines is a vLLM V1 exposition of a data-parallel server with two
// engines serving two models.
const twoEngines = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="llama"} 3.0
vllm:num_requests_running{engine="1",model_name="qwen"} 4.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="llama"} 1.0
vllm:num_requests_waiting{engine="1",model_name="qwen"} 0.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="llama"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="qwen"} 0.75
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="llama"} 100.0
vllm:prompt_tokens_total{engine="1",model_name="qwen"} 23.0
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name="llama"} 1.7769301736864982e+09
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="llama"} 1000.0
vllm:generation_tokens_total{engine="1",model_name="qwen"} 7.0
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="llama"} 2.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="llama"} 4.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="llama"} 4.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="llama"} 4.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="llama"} 0.2
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.05",model_name="llama"} 80.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="llama"} 100.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="llama"} 100.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="llama"} 3.0
`

func serve(t *testing.T, h http.HandlerFunc) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestProbe(t *testing.T) {
	base := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, twoEngines)
	})
	for _, target := range []string{base + "/metrics", strings.TrimPrefix(base, "http://")} {
		t.Run(target, func(t *testing.T) {
			stdout, stderr, code := gleaner(t, "probe", target)
			if code != 0 || stderr != "" {
				t.Fatalf("exit %d, stderr %q; want 0 and nothing", code, stderr)
			}
			var got map[string]any
			dec := json.NewDecoder(strings.NewReader(stdout))
			if err := dec.Decode(&got); err != nil {
				t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout)
			}
			if dec.More() {
				t.Errorf("stdout has more than one JSON value:\n%s", stdout)
			}
			want := map[string]any{
				"url":                   base + "/metrics",
				"running":               7.0,
				"waiting":               1.0,
				"kvCacheUsage":          0.5,
				"engines":               2.0,
				"models":                []any{"llama", "qwen"},
				"promptTokensTotal":     123.0,
				"generationTokensTotal": 1007.0,
				"preemptionsTotal":      2.0,
				"timeToFirstTokenSeconds": map[string]any{
					"observations": 4.0, "p50": 0.05, "p90": 0.09, "p99": 0.099, "mean": 0.05,
				},
				// Buckets not read: no quantiles.
				"interTokenLatencySeconds": map[string]any{"observations": 100.0, "mean": 0.03},
				// No vllm:engine_sleep_state: read as awake, and said so.
				"sleepState":      "unreported",
				"sleepingEngines": 0.0,
			}
			if s, ok := got["scrapeSeconds"].(float64); !ok || s <= 0 || s > 5 {
				t.Errorf("scrapeSeconds = %v, want a duration in seconds", got["scrapeSeconds"])
			}
			delete(got, "scrapeSeconds")
			if !reflect.DeepEqual(roundFloats(got), roundFloats(want)) {
				t.Errorf("probe printed\n%v\nwant\n%v", got, want)
			}
		})
	}
}

// roundFloats rounds every number to 9 digits so float noise does not fail a comparison.
func roundFloats(v any) any {
	switch x := v.(type) {
	case float64:
		return math.Round(x*1e9) / 1e9
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			out[k] = roundFloats(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = roundFloats(e)
		}
		return out
	}
	return v
}

// sleepingServer is a data-parallel vLLM server whose engines are in the
// given sleep states (awake, weights_offloaded or discard_all), written as
// vLLM writes vllm:engine_sleep_state: one series per state, that one 1.
func sleepingServer(states ...string) string {
	var b strings.Builder
	b.WriteString("# HELP vllm:num_requests_running Number of requests in model execution batches.\n# TYPE vllm:num_requests_running gauge\n")
	for engine := range states {
		fmt.Fprintf(&b, "vllm:num_requests_running{engine=\"%d\",model_name=\"llama\"} 0.0\n", engine)
	}
	b.WriteString("# HELP vllm:engine_sleep_state Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; " +
		"weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.\n# TYPE vllm:engine_sleep_state gauge\n")
	for engine, state := range states {
		for _, s := range []string{"awake", "weights_offloaded", "discard_all"} {
			v := "0.0"
			if s == state {
				v = "1.0"
			}
			fmt.Fprintf(&b, "vllm:engine_sleep_state{engine=\"%d\",model_name=\"llama\",sleep_state=\"%s\"} %s\n", engine, s, v)
		}
	}
	return b.String()
}

func TestProbeShowsSleepState(t *testing.T) {
	tests := []struct {
		name   string
		states []string
		want   map[string]any // the sleep fields of the output; sleepLevel absent when nil
	}{
		{"every engine asleep: the deepest level", []string{"weights_offloaded", "discard_all"},
			map[string]any{"sleepState": "asleep", "sleepingEngines": 2.0, "sleepLevel": 2.0}},
		{"asleep at level 1", []string{"weights_offloaded"},
			map[string]any{"sleepState": "asleep", "sleepingEngines": 1.0, "sleepLevel": 1.0}},
		{"one engine of two asleep", []string{"weights_offloaded", "awake"},
			map[string]any{"sleepState": "partly-asleep", "sleepingEngines": 1.0, "sleepLevel": 1.0}},
		{"awake", []string{"awake", "awake"},
			map[string]any{"sleepState": "awake", "sleepingEngines": 0.0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := sleepingServer(tc.states...)
			target := serve(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, body) })
			stdout, stderr, code := gleaner(t, "probe", target)
			if code != 0 {
				t.Fatalf("exit %d, stderr %q", code, stderr)
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(stdout), &got); err != nil {
				t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
			}
			sleep := map[string]any{}
			for _, key := range []string{"sleepState", "sleepingEngines", "sleepLevel"} {
				if v, ok := got[key]; ok {
					sleep[key] = v
				}
			}
			if !reflect.DeepEqual(sleep, tc.want) {
				t.Errorf("probe printed %v, want %v\n%s", sleep, tc.want, stdout)
			}
		})
	}
}

func TestProbeNoModelsIsEmptyList(t *testing.T) {
	target := serve(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "vllm:num_requests_running 0\n") })
	stdout, _, code := gleaner(t, "probe", target)
	if code != 0 || !strings.Contains(stdout, `"models": []`) {
		t.Errorf("exit %d, stdout:\n%s\nwant exit 0 and \"models\": []", code, stdout)
	}
}

func TestProbeFailures(t *testing.T) {
	hang := make(chan struct{})
	defer close(hang)
	tests := []struct {
		name    string
		handler http.HandlerFunc
		args    []string
		url     string // instead of a test server
		wantErr []string
	}{
		{
			name: "HTTP status",
			handler: func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "engine dead", http.StatusServiceUnavailable)
			},
			wantErr: []string{"HTTP status 503 Service Unavailable: engine dead"},
		},
		{
			name: "timeout",
			handler: func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-hang:
				case <-r.Context().Done():
				}
			},
			args:    []string{"--timeout", "200ms"},
			wantErr: []string{"timeout after 200ms"},
		},
		{
			name:    "body too large",
			handler: func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, twoEngines) },
			args:    []string{"--max-body-bytes", "100"},
			wantErr: []string{"body exceeds 100 bytes"},
		},
		{
			name: "parse error names the line",
			handler: func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprint(w, "vllm:num_requests_running 1\nvllm:num_requests_waiting one\n")
			},
			wantErr: []string{"line 2", `"vllm:num_requests_waiting one"`},
		},
		{
			name: "contradictory sleep state",
			handler: func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprint(w, strings.Replace(sleepingServer("awake"), `sleep_state="discard_all"} 0.0`, `sleep_state="discard_all"} 1.0`, 1))
			},
			wantErr: []string{`vllm:engine_sleep_state{engine="0"}: awake is 1, and so is a sleep level`},
		},
		{
			name:    "not vLLM",
			handler: func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "up 1\n") },
			wantErr: []string{"not a vLLM metrics endpoint"},
		},
		{
			name:    "connection refused",
			url:     "http://127.0.0.1:1/metrics",
			wantErr: []string{"connection refused"},
		},
		{
			name:    "not a URL",
			url:     "ftp://example.com/metrics",
			wantErr: []string{`scheme "ftp" is neither http nor https`},
		},
		{
			name:    "CA file missing",
			url:     "https://127.0.0.1:1/metrics",
			args:    []string{"--ca-file", "/nonexistent/ca.crt"},
			wantErr: []string{"reading the CA file", "/nonexistent/ca.crt"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			target := tc.url
			if target == "" {
				target = serve(t, tc.handler) + "/metrics"
			}
			start := time.Now()
			stdout, stderr, code := gleaner(t, append([]string{"probe", target}, tc.args...)...)
			if code == 0 {
				t.Fatalf("exit 0, want non-zero; stdout %q", stdout)
			}
			if stdout != "" {
				t.Errorf("stdout %q on failure, want nothing (no partial JSON)", stdout)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr %q does not contain %q", stderr, want)
				}
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("probe took %v", d)
			}
		})
	}
}
