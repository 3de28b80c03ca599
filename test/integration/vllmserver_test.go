package integration

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
)

// vllmMode is how a test vLLM endpoint behaves.
type vllmMode int

const (
	vllmServing     vllmMode = iota // answers with the current values
	vllmUnreachable                 // drops every connection without an answer
	vllmHanging                     // accepts and never answers (the scrape times out)
)

// vllmServer is a real HTTP server on 127.0.0.1 exposing vLLM V1 metrics whose
// values the test changes.
type vllmServer struct {
	srv  *httptest.Server
	mu   sync.Mutex
	mode vllmMode
	// running and waiting requests, KV-cache usage (0..1), summed token counters.
	running, waiting int
	kv               float64
	promptTokens     int
	hang             chan struct{}
}

func startVLLMServer(t *testing.T, model string) *vllmServer {
	s := &vllmServer{hang: make(chan struct{})}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		mode, running, waiting, kv := s.mode, s.running, s.waiting, s.kv
		s.promptTokens += 10 * running
		prompt := s.promptTokens
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
		fmt.Fprintf(w, `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name=%[1]q} %[2]d.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name=%[1]q} %[3]d.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name=%[1]q} %[4]g
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name=%[1]q} %[5]d.0
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name=%[1]q} 1.7769301736864316e+09
`, model, running, waiting, kv, prompt)
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
	s.mode, s.running, s.waiting, s.kv = mode, running, waiting, kv
}

// port is the TCP port, for the pod's gleaner.dev/metrics-port annotation.
func (s *vllmServer) port() string {
	_, port, _ := net.SplitHostPort(s.srv.Listener.Addr().String())
	if _, err := strconv.Atoi(port); err != nil {
		panic("bad port " + port)
	}
	return port
}
