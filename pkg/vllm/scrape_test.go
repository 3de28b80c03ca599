package vllm

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
)

// exposition is a small vLLM V1 exposition with the given load.
func exposition(running, waiting, kv float64) string {
	return fmt.Sprintf(`# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="llama"} %g
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="llama"} %g
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="llama"} %g
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="llama"} 1200
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="llama"} 3400
`, running, waiting, kv)
}

func TestScrape(t *testing.T) {
	good := exposition(2, 1, 0.25)
	tests := []struct {
		name    string
		scraper Scraper
		handler http.HandlerFunc
		want    Metrics
		wantErr string
	}{
		{
			name:    "good body",
			handler: func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, good) },
			want: Metrics{Running: 2, Waiting: 1, KVCacheUsage: 0.25, Engines: 1, Models: []string{"llama"},
				PromptTokensTotal: 1200, GenerationTokensTotal: 3400},
		},
		{
			name:    "body exactly at the cap",
			scraper: Scraper{MaxBodyBytes: int64(len(good))},
			handler: func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, good) },
			want: Metrics{Running: 2, Waiting: 1, KVCacheUsage: 0.25, Engines: 1, Models: []string{"llama"},
				PromptTokensTotal: 1200, GenerationTokensTotal: 3400},
		},
		{
			name: "server error",
			handler: func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "engine dead", http.StatusInternalServerError)
			},
			wantErr: "HTTP status 500 Internal Server Error: engine dead",
		},
		{
			name:    "not found",
			handler: http.NotFound,
			wantErr: "HTTP status 404 Not Found",
		},
		{
			name:    "timeout",
			scraper: Scraper{Timeout: 50 * time.Millisecond},
			handler: func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-time.After(5 * time.Second):
				case <-r.Context().Done():
				}
			},
			wantErr: "timeout after 50ms",
		},
		{
			name:    "timeout while reading the body",
			scraper: Scraper{Timeout: 50 * time.Millisecond},
			handler: func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprint(w, "vllm:num_requests_running 1\n")
				w.(http.Flusher).Flush()
				select {
				case <-time.After(5 * time.Second):
				case <-r.Context().Done():
				}
			},
			wantErr: "timeout after 50ms",
		},
		{
			name:    "body over the cap",
			scraper: Scraper{MaxBodyBytes: 1024},
			handler: func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprint(w, good)
				fmt.Fprint(w, strings.Repeat("# padding\n", 200))
			},
			wantErr: "body exceeds 1024 bytes",
		},
		{
			name:    "not vLLM",
			handler: func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "up 1\n") },
			wantErr: "not a vLLM metrics endpoint",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			url := srv.URL + "/metrics"
			got, err := tc.scraper.Scrape(context.Background(), url)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Scrape error = %v, want one containing %q", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), url) {
					t.Errorf("Scrape error %q does not name the URL %s", err, url)
				}
				if !reflect.DeepEqual(got, Metrics{}) {
					t.Errorf("Scrape returned data with its error: %+v", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Scrape: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Scrape = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestScrapeCancelledIsNotTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := (&Scraper{}).Scrape(ctx, srv.URL)
	if err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("Scrape with a cancelled context: error = %v, want a cancellation that is not called a timeout", err)
	}
}
