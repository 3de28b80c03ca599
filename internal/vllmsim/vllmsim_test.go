package vllmsim

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gleaner-dev/gleaner/pkg/vllm"
)

// TestExpositionParsesBack: what the simulator serves is read by Gleaner's own
// parser with the values it was given, so metric names cannot drift apart.
func TestExpositionParsesBack(t *testing.T) {
	s := New(nil)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	s.now = func() time.Time { return now }
	load := Load{Model: "llama-chat", Running: 12, Waiting: 3, KVCache: 0.97}
	if err := s.SetLoads(map[string]Load{"127.42.0.9": load}); err != nil {
		t.Fatal(err)
	}
	var prev vllm.Metrics
	for i := range 3 {
		body := scrape(t, s, "127.42.0.9")
		m, err := vllm.Parse(strings.NewReader(body))
		if err != nil {
			t.Fatalf("scrape %d does not parse: %v\n%s", i, err, body)
		}
		if m.Running != 12 || m.Waiting != 3 || m.KVCacheUsage != 0.97 || m.Engines != 1 || len(m.Models) != 1 || m.Models[0] != "llama-chat" {
			t.Fatalf("parsed %+v, want the load %+v", m, load)
		}
		if i > 0 {
			if m.PromptTokensTotal <= prev.PromptTokensTotal || m.GenerationTokensTotal <= prev.GenerationTokensTotal {
				t.Fatalf("token counters did not grow under load: %+v then %+v", prev, m)
			}
			if m.QueueTime.Count <= prev.QueueTime.Count || m.TimeToFirstToken.Count == 0 || m.InterTokenLatency.Count == 0 {
				t.Fatalf("histograms did not fill: %+v", m)
			}
			if m.PreemptionsTotal == 0 {
				t.Fatalf("a full KV cache should preempt: %+v", m)
			}
		}
		prev = m
		now = now.Add(5 * time.Second)
	}
}

func TestUnknownAddressFailsClosed(t *testing.T) {
	s := New(nil)
	rec := do(t, s, "127.42.0.1", http.MethodGet, "/metrics", "")
	if rec.code != http.StatusServiceUnavailable {
		t.Fatalf("unknown address: status %d, want 503", rec.code)
	}
	s = New(&Load{Model: "m", Running: 1})
	if rec := do(t, s, "127.42.0.1", http.MethodGet, "/metrics", ""); rec.code != http.StatusOK {
		t.Fatalf("default load: status %d", rec.code)
	}
}

func TestLoadsOnlyFromLoopbackOne(t *testing.T) {
	s := New(nil)
	if rec := do(t, s, "127.42.0.1", http.MethodPut, "/sim/loads", `{}`); rec.code != http.StatusForbidden {
		t.Fatalf("PUT on a pod address: status %d, want 403", rec.code)
	}
	if rec := do(t, s, "127.0.0.1", http.MethodPut, "/sim/loads", `{"127.42.0.2":{"model":"m","running":-1}}`); rec.code != http.StatusBadRequest {
		t.Fatalf("negative load: status %d, want 400", rec.code)
	}
	if rec := do(t, s, "127.0.0.1", http.MethodPut, "/sim/loads", `{"127.42.0.2":{"model":"m","running":2}}`); rec.code != http.StatusNoContent {
		t.Fatalf("PUT: status %d %s", rec.code, rec.body)
	}
	if rec := do(t, s, "127.42.0.2", http.MethodGet, "/metrics", ""); rec.code != http.StatusOK {
		t.Fatalf("scrape after PUT: status %d", rec.code)
	}
	// Bound to 0.0.0.0, it must still serve this machine only.
	if rec := doFrom(t, s, "192.0.2.7:5000", "127.42.0.2", http.MethodGet, "/metrics", ""); rec.code != http.StatusForbidden {
		t.Fatalf("scrape from another machine: status %d, want 403", rec.code)
	}
	if rec := doFrom(t, s, "192.0.2.7:5000", "127.0.0.1", http.MethodPut, "/sim/loads", `{}`); rec.code != http.StatusForbidden {
		t.Fatalf("PUT from another machine: status %d, want 403", rec.code)
	}
}

// TestOneListenerManyLoopbackAddresses checks the premise: a listener on
// 0.0.0.0 receives connections to any 127.x address and sees which one.
func TestOneListenerManyLoopbackAddresses(t *testing.T) {
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New(nil)
	srv := &http.Server{Handler: s.Handler()}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	loads := map[string]Load{}
	for i := 1; i <= 3; i++ {
		loads[fmt.Sprintf("127.42.0.%d", i)] = Load{Model: "m", Running: float64(i)}
	}
	if err := s.SetLoads(loads); err != nil {
		t.Fatal(err)
	}
	for ip, l := range loads {
		resp, err := http.Get(fmt.Sprintf("http://%s:%d/metrics", ip, port))
		if err != nil {
			t.Fatal(err)
		}
		m, err := vllm.Parse(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if m.Running != l.Running {
			t.Fatalf("%s served running=%v, want %v", ip, m.Running, l.Running)
		}
	}
}

type recorded struct {
	code int
	body string
}

func do(t *testing.T, s *Server, local, method, path, body string) recorded {
	return doFrom(t, s, "", local, method, path, body)
}

func doFrom(t *testing.T, s *Server, remote, local, method, path, body string) recorded {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+local+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req = req.WithContext(contextWithLocal(req, local))
	req.RemoteAddr = "127.0.0.1:40000"
	if remote != "" {
		req.RemoteAddr = remote
	}
	w := &responseRecorder{header: http.Header{}, code: http.StatusOK}
	s.Handler().ServeHTTP(w, req)
	return recorded{code: w.code, body: w.buf.String()}
}

func scrape(t *testing.T, s *Server, local string) string {
	t.Helper()
	r := do(t, s, local, http.MethodGet, "/metrics", "")
	if r.code != http.StatusOK {
		t.Fatalf("scrape %s: status %d: %s", local, r.code, r.body)
	}
	return r.body
}

type responseRecorder struct {
	header http.Header
	code   int
	buf    bytes.Buffer
}

func (r *responseRecorder) Header() http.Header         { return r.header }
func (r *responseRecorder) Write(b []byte) (int, error) { return r.buf.Write(b) }
func (r *responseRecorder) WriteHeader(code int)        { r.code = code }

var _ io.Writer = (*responseRecorder)(nil)

func contextWithLocal(req *http.Request, local string) context.Context {
	return context.WithValue(req.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.ParseIP(local), Port: 8000})
}
