package vllm

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// smallExposition is a small vLLM V1 exposition with the given load.
func smallExposition(running, waiting, kv float64) string {
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
	good := smallExposition(2, 1, 0.25)
	tests := []struct {
		name    string
		scraper Scraper
		handler http.HandlerFunc
		want    Metrics
		wantErr string
		reason  string
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
			wantErr: "HTTP status 500 Internal Server Error: engine dead", reason: ReasonHTTPStatus,
		},
		{
			name:    "not found",
			handler: http.NotFound,
			wantErr: "HTTP status 404 Not Found", reason: ReasonHTTPStatus,
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
			wantErr: "timeout after 50ms", reason: ReasonTimeout,
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
			wantErr: "timeout after 50ms", reason: ReasonTimeout,
		},
		{
			name:    "body over the cap",
			scraper: Scraper{MaxBodyBytes: 1024},
			handler: func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprint(w, good)
				fmt.Fprint(w, strings.Repeat("# padding\n", 200))
			},
			wantErr: "body exceeds 1024 bytes", reason: ReasonBodyTooLarge,
		},
		{
			name:    "body over the cap, announced by Content-Length",
			scraper: Scraper{MaxBodyBytes: 1024},
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "2048")
				fmt.Fprint(w, strings.Repeat("# padding\n", 204)+"\n\n\n\n\n\n\n\n")
			},
			wantErr: "body exceeds 1024 bytes", reason: ReasonBodyTooLarge,
		},
		{
			name: "garbage: the error quotes the line",
			handler: func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprint(w, "vllm:num_requests_running 1\n<html>oops</html>\n")
			},
			wantErr: `text format parsing error in line 2: invalid metric name (line 2 reads "<html>oops</html>")`, reason: ReasonParse,
		},
		{
			name: "redirect is not followed",
			handler: func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, "http://192.0.2.1/metrics", http.StatusFound)
			},
			wantErr: "HTTP status 302 Found", reason: ReasonHTTPStatus,
		},
		{
			name: "connection dropped without an answer",
			handler: func(w http.ResponseWriter, r *http.Request) {
				conn, _, _ := w.(http.Hijacker).Hijack()
				conn.Close()
			},
			wantErr: "EOF", reason: ReasonConnection,
		},
		{
			name: "truncated body (Content-Length not met)",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "4096")
				fmt.Fprint(w, "vllm:num_requests_running 1\n")
				w.(http.Flusher).Flush()
				conn, _, _ := w.(http.Hijacker).Hijack()
				conn.Close()
			},
			wantErr: "unexpected EOF", reason: ReasonConnection,
		},
		{
			name:    "not vLLM",
			handler: func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "up 1\n") },
			wantErr: "not a vLLM metrics endpoint", reason: ReasonNotVLLM,
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
				var se *ScrapeError
				if !errors.As(err, &se) || se.Reason != tc.reason || se.URL != url {
					t.Errorf("Scrape error %#v, want a *ScrapeError with Reason %q and URL %s", err, tc.reason, url)
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

// writeFile writes content to a new file in a test directory and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// tlsServer serves smallExposition(1, 0, 0.5) over HTTPS to requests bearing token,
// and returns it with a file holding its CA certificate.
func tlsServer(t *testing.T, token string) (*httptest.Server, string) {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, smallExposition(1, 0, 0.5))
	}))
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return srv, writeFile(t, "ca.crt", string(ca))
}

func TestScrapeHTTPS(t *testing.T) {
	srv, caFile := tlsServer(t, "s3cret")
	tokenFile := writeFile(t, "token", "s3cret\n")
	tests := []struct {
		name    string
		opts    ClientOptions
		wantErr string
		reason  string
	}{
		{name: "CA and token", opts: ClientOptions{CAFile: caFile, BearerTokenFile: tokenFile}},
		{name: "wrong token", opts: ClientOptions{CAFile: caFile, BearerTokenFile: writeFile(t, "other", "guess")},
			wantErr: "HTTP status 401 Unauthorized: unauthorized", reason: ReasonHTTPStatus},
		{name: "CA unknown", opts: ClientOptions{BearerTokenFile: tokenFile},
			wantErr: "certificate signed by unknown authority", reason: ReasonConnection},
		{name: "server name not in the certificate", opts: ClientOptions{CAFile: caFile, TLSServerName: "vllm.serving.svc", BearerTokenFile: tokenFile},
			wantErr: "vllm.serving.svc", reason: ReasonConnection},
		{name: "verification skipped", opts: ClientOptions{InsecureSkipTLSVerify: true, BearerTokenFile: tokenFile}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client, err := NewHTTPClient(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			m, err := (&Scraper{Client: client}).Scrape(context.Background(), srv.URL+"/metrics")
			if tc.wantErr == "" {
				if err != nil || m.Running != 1 {
					t.Fatalf("Scrape = %+v, %v; want Running 1", m, err)
				}
				return
			}
			var se *ScrapeError
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.As(err, &se) || se.Reason != tc.reason {
				t.Fatalf("Scrape error = %v, want a %s error containing %q", err, tc.reason, tc.wantErr)
			}
		})
	}
}

func TestNewHTTPClientErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		opts    ClientOptions
		wantErr string
	}{
		{name: "missing CA file", opts: ClientOptions{CAFile: filepath.Join(dir, "nope.crt")}, wantErr: "reading the CA file for scraping vLLM over HTTPS"},
		{name: "CA file without PEM", opts: ClientOptions{CAFile: writeFile(t, "ca.crt", "hello")}, wantErr: "holds no PEM certificate"},
		{name: "missing token file", opts: ClientOptions{BearerTokenFile: filepath.Join(dir, "token")}, wantErr: "reading the bearer-token file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewHTTPClient(tc.opts); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("NewHTTPClient error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestScrapeKeepsConnectionsAlive: consecutive scrapes of one endpoint reuse
// one TCP connection.
func TestScrapeKeepsConnectionsAlive(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, smallExposition(1, 0, 0))
	}))
	srv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	client, err := NewHTTPClient(ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := &Scraper{Client: client}
	for range 5 {
		if _, err := s.Scrape(context.Background(), srv.URL); err != nil {
			t.Fatal(err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("5 scrapes opened %d connections, want 1", n)
	}
}

// manyModels is an exposition of n distinct model_name values of
// vllm:num_requests_running, one series each: 87,000 of them fill 4 MiB.
func manyModels(n int) []byte {
	var b strings.Builder
	b.WriteString("# TYPE vllm:num_requests_running gauge\n")
	for i := range n {
		fmt.Fprintf(&b, "vllm:num_requests_running{model_name=\"%05d\"} 0\n", i)
	}
	return []byte(b.String())
}

// TestScrapeBoundsCardinality serves what a hostile pod would: 4 MiB of
// distinct model names, and a few hundred engines. Each is refused whole
// (its pod reads as busy, with nothing of it kept), and reading the big one
// allocates about what its body takes, not what parsing 87,000 series would.
func TestScrapeBoundsCardinality(t *testing.T) {
	huge := manyModels(87_000)
	if len(huge) > DefaultMaxBodyBytes {
		t.Fatalf("the exposition is %d bytes, over the body cap", len(huge))
	}
	var engines strings.Builder
	engines.WriteString("# TYPE vllm:num_requests_running gauge\n")
	for e := range DefaultMaxLabelValues + 1 {
		fmt.Fprintf(&engines, "vllm:num_requests_running{engine=\"%d\"} 1\n", e)
	}
	for _, tc := range []struct {
		name    string
		body    []byte
		wantErr error
	}{
		{"87,000 series", huge, ErrTooManySeries},
		{fmt.Sprintf("%d engines", DefaultMaxLabelValues+1), []byte(engines.String()), ErrTooManyLabelValues},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(tc.body) }))
			defer srv.Close()
			var s Scraper
			scrape := func() (Metrics, error) { return s.Scrape(context.Background(), srv.URL+"/metrics") }
			_, _ = scrape() // a connection and pooled buffers, as a running informer has them
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			m, err := scrape()
			runtime.ReadMemStats(&after)
			var se *ScrapeError
			if !errors.Is(err, tc.wantErr) || !errors.As(err, &se) || se.Reason != ReasonTooManySeries {
				t.Fatalf("Scrape error %v, want %v with reason %s", err, tc.wantErr, ReasonTooManySeries)
			}
			if !reflect.DeepEqual(m, Metrics{}) {
				t.Errorf("Scrape kept %d models of a refused body", len(m.Models))
			}
			allocated := after.TotalAlloc - before.TotalAlloc
			t.Logf("%s (%d bytes): refused; %.1f MiB allocated by the scrape", tc.name, len(tc.body), float64(allocated)/(1<<20))
			if limit := uint64(3*len(tc.body) + 1<<20); allocated > limit {
				t.Errorf("the scrape allocated %d bytes, more than three times its %d-byte body and 1 MiB", allocated, len(tc.body))
			}
		})
	}
	// Within the limits, a body as large passes: the caps bound what a vLLM
	// server never exposes, not size.
	if _, err := parseBytes(manyModels(DefaultMaxLabelValues), Limits{}); err != nil {
		t.Errorf("%d models: %v", DefaultMaxLabelValues, err)
	}
	if _, err := parseBytes(huge, Limits{MaxSeries: 100_000, MaxLabelValues: 100_000}); err != nil {
		t.Errorf("87,000 series under limits of 100,000: %v", err)
	}
}
