// Package vllmsim is Gleaner's stand-in for a fleet of vLLM servers: one HTTP
// listener serves vLLM V1 /metrics for many simulated pods, telling them apart
// by the local address each connection arrived on. Pods of a local cluster
// whose IPs are loopback addresses (127.x.y.z, e.g. KWOK with --cidr
// 127.42.0.0/16) all reach one listener bound to 0.0.0.0, and a scrape of
// http://127.42.0.7:PORT/metrics is answered with the load set for 127.42.0.7.
//
// Loads are set through PUT /sim/loads (JSON, see Load), accepted only on
// 127.0.0.1. An address with no load set gets 503, so a scraper reads it as
// busy (fail closed), unless a default load is configured.
package vllmsim

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"
)

// Load is what one simulated vLLM server reports.
type Load struct {
	Model   string  `json:"model"`
	Running float64 `json:"running"` // requests in the running batch
	Waiting float64 `json:"waiting"` // requests queued
	KVCache float64 `json:"kvCache"` // KV-cache usage, 0..1
}

// counters are one simulated server's cumulative figures since it first served.
type counters struct {
	created              time.Time
	last                 time.Time
	prompt, generation   float64
	success, preemptions float64
	queue, ttft, itl     histogram
}

// Server serves simulated vLLM metrics.
type Server struct {
	mu       sync.Mutex
	loads    map[string]Load
	counters map[string]*counters
	def      *Load
	now      func() time.Time
}

// New returns a Server; def, when not nil, is served to addresses without a load of their own.
func New(def *Load) *Server {
	return &Server{loads: map[string]Load{}, counters: map[string]*counters{}, def: def, now: time.Now}
}

// SetLoads replaces every address's load. Counters of addresses that are
// dropped are forgotten, as when a vLLM pod goes away.
func (s *Server) SetLoads(loads map[string]Load) error {
	for addr, l := range loads {
		if net.ParseIP(addr) == nil {
			return fmt.Errorf("%q is not an IP address", addr)
		}
		if err := l.Validate(); err != nil {
			return fmt.Errorf("%s: %w", addr, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loads = loads
	for addr := range s.counters {
		if _, ok := loads[addr]; !ok {
			delete(s.counters, addr)
		}
	}
	return nil
}

// Validate rejects negative or non-finite values, a KV-cache usage above 1 and an empty model.
func (l Load) Validate() error {
	for _, v := range []float64{l.Running, l.Waiting, l.KVCache} {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return fmt.Errorf("load %+v: values must be finite and non-negative", l)
		}
	}
	if l.KVCache > 1 {
		return fmt.Errorf("load %+v: kvCache is a fraction, at most 1", l)
	}
	if l.Model == "" {
		return fmt.Errorf("load %+v: model is empty", l)
	}
	return nil
}

// Handler serves /metrics on every address and /sim/loads on 127.0.0.1.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", s.serveMetrics)
	mux.HandleFunc("/sim/loads", s.serveLoads)
	return mux
}

// localIP is the address the request's connection arrived on.
func localIP(r *http.Request) string {
	addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return ""
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return ""
	}
	return host
}

// fromLoopback reports whether the request came from this machine: the
// listener is bound to 0.0.0.0 to reach every loopback address, but serves
// this machine's scrapers only.
func fromLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if !fromLoopback(r) {
		http.Error(w, "vllm-sim serves this machine only", http.StatusForbidden)
		return
	}
	ip := localIP(r)
	s.mu.Lock()
	load, ok := s.loads[ip]
	if !ok && s.def != nil {
		load, ok = *s.def, true
	}
	if !ok {
		s.mu.Unlock()
		http.Error(w, "vllm-sim: no simulated vLLM server at "+ip, http.StatusServiceUnavailable)
		return
	}
	c := s.counters[ip]
	now := s.now()
	if c == nil {
		c = newCounters(now)
		s.counters[ip] = c
	}
	text := c.render(load, now)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write(text)
}

func (s *Server) serveLoads(w http.ResponseWriter, r *http.Request) {
	if localIP(r) != "127.0.0.1" || !fromLoopback(r) {
		http.Error(w, "vllm-sim: /sim/loads is served on 127.0.0.1 only", http.StatusForbidden)
		return
	}
	switch r.Method {
	case http.MethodGet:
		s.mu.Lock()
		out, _ := json.Marshal(s.loads)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	case http.MethodPut:
		var loads map[string]Load
		if err := json.NewDecoder(io.LimitReader(r.Body, 8<<20)).Decode(&loads); err != nil {
			http.Error(w, "vllm-sim: decoding loads: "+err.Error(), http.StatusBadRequest)
			return
		}
		if err := s.SetLoads(loads); err != nil {
			http.Error(w, "vllm-sim: "+err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		http.Error(w, "vllm-sim: GET or PUT", http.StatusMethodNotAllowed)
	}
}

// Simulated serving rates: what one running request adds per second.
const (
	promptTokensPerSecond     = 120
	generationTokensPerSecond = 30
	requestSeconds            = 8 // a request's mean time in the batch
)

func newCounters(now time.Time) *counters {
	return &counters{created: now, last: now, queue: newHistogram(queueBuckets), ttft: newHistogram(ttftBuckets), itl: newHistogram(itlBuckets)}
}

// render advances the counters to now under l and writes the exposition.
func (c *counters) render(l Load, now time.Time) []byte {
	c.advance(l, now)
	return appendExposition(nil, l, c)
}

// Endpoint is one simulated vLLM server's /metrics, for a test that serves
// it itself (a real HTTP server of its own, failing on demand): the same
// exposition vllm-sim serves, its counters advancing with the load between
// renders. It is safe for concurrent use.
type Endpoint struct {
	mu sync.Mutex
	c  *counters
}

// NewEndpoint returns an Endpoint whose counters start at now.
func NewEndpoint(now time.Time) *Endpoint { return &Endpoint{c: newCounters(now)} }

// Render returns the exposition for load l at now.
func (e *Endpoint) Render(l Load, now time.Time) []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.c.render(l, now)
}

// advance moves the counters and histograms forward to now under load.
func (c *counters) advance(l Load, now time.Time) {
	dt := now.Sub(c.last).Seconds()
	c.last = now
	if dt <= 0 {
		return
	}
	c.prompt += l.Running * promptTokensPerSecond * dt
	c.generation += l.Running * generationTokensPerSecond * dt
	done := l.Running * dt / requestSeconds
	c.success += done
	// Queued requests wait about as long as the batch ahead of them takes to turn over.
	queue := 0.002
	if l.Waiting > 0 {
		queue = requestSeconds * l.Waiting / math.Max(l.Running, 1)
	}
	if l.KVCache > 0.95 {
		c.preemptions += done * (l.KVCache - 0.95) * 10
	}
	c.queue.observe(queue, done)
	c.ttft.observe(queue+0.04+0.2*l.KVCache, done)
	c.itl.observe(0.015+0.03*l.KVCache, l.Running*generationTokensPerSecond*dt)
}

var (
	queueBuckets = []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}
	ttftBuckets  = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}
	itlBuckets   = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}
)

// histogram is cumulative; observations of equal value come in weighted batches.
type histogram struct {
	bounds []float64
	counts []float64 // per bucket, not cumulative
	count  float64
	sum    float64
}

func newHistogram(bounds []float64) histogram {
	return histogram{bounds: bounds, counts: make([]float64, len(bounds))}
}

func (h *histogram) observe(v, weight float64) {
	if weight <= 0 {
		return
	}
	i := sort.SearchFloat64s(h.bounds, v) // first bound >= v
	if i < len(h.counts) {
		h.counts[i] += weight
	}
	h.count += weight
	h.sum += v * weight
}
