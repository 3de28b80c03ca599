package integration

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gleaner-dev/gleaner/internal/vllmsim"
)

// vllmMode is how a test vLLM endpoint behaves.
type vllmMode int

const (
	vllmServing     vllmMode = iota // answers with the current values
	vllmUnreachable                 // drops every connection without an answer
	vllmHanging                     // accepts and never answers (the scrape times out)
)

// vllmServer is a real HTTP server on 127.0.0.1 exposing vLLM V1 metrics
// (vllm-sim's exposition) whose values the test changes.
type vllmServer struct {
	srv      *httptest.Server
	endpoint *vllmsim.Endpoint
	mu       sync.Mutex
	mode     vllmMode
	load     vllmsim.Load
	hang     chan struct{}
}

func startVLLMServer(t *testing.T, model string) *vllmServer {
	s := &vllmServer{hang: make(chan struct{}), endpoint: vllmsim.NewEndpoint(time.Now()), load: vllmsim.Load{Model: model}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		mode, load := s.mode, s.load
		s.mu.Unlock()
		switch mode {
		case vllmUnreachable:
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					conn.Close()
					return
				}
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		case vllmHanging:
			select {
			case <-r.Context().Done():
			case <-s.hang:
			}
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write(s.endpoint.Render(load, time.Now()))
	}))
	t.Cleanup(func() {
		close(s.hang)
		s.srv.Close()
	})
	return s
}

func (s *vllmServer) set(mode vllmMode, running, waiting int, kv float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mode = mode
	s.load.Running, s.load.Waiting, s.load.KVCache = float64(running), float64(waiting), kv
}

// port is the TCP port, for the pod's gleaner.dev/metrics-port annotation.
func (s *vllmServer) port() string {
	_, port, _ := net.SplitHostPort(s.srv.Listener.Addr().String())
	if _, err := strconv.Atoi(port); err != nil {
		panic("bad port " + port)
	}
	return port
}
