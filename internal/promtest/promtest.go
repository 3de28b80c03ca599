// Package promtest serves the Prometheus HTTP API's range queries for tests:
// Prometheus' own query engine over a TSDB the test writes, behind a thin
// handler for /api/v1/query_range that answers as Prometheus does.
package promtest

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/tsdb"
)

// Stale is the value Prometheus writes when a series stops being scraped
// (its target gone, or a scrape failed): from then on the series is absent.
var Stale = math.Float64frombits(value.StaleNaN)

// Sample is one scraped value of the series named by Labels (with __name__).
type Sample struct {
	Labels map[string]string
	T      time.Time
	V      float64
}

// Server is a Prometheus HTTP API over the samples given.
type Server struct {
	URL string
	// Token, when set, is the bearer token every request must carry (as an
	// authenticating proxy in front of Prometheus would ask).
	Token  string
	db     *tsdb.DB
	engine *promql.Engine
}

// Start writes samples into a fresh TSDB and serves it until the test ends.
func Start(t *testing.T, samples []Sample) *Server {
	t.Helper()
	opts := tsdb.DefaultOptions()
	opts.OutOfOrderTimeWindow = math.MaxInt64 // samples may come in any order
	db, err := tsdb.Open(t.TempDir(), nil, nil, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	app := db.Appender(context.Background())
	for _, s := range samples {
		if _, err := app.Append(0, labels.FromMap(s.Labels), s.T.UnixMilli(), s.V); err != nil {
			t.Fatalf("appending %v at %v: %v", s.Labels, s.T, err)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	s := &Server{db: db, engine: promql.NewEngine(promql.EngineOpts{MaxSamples: 50_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if s.Token != "" && r.Header.Get("Authorization") != "Bearer "+s.Token {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	if r.URL.Path != "/api/v1/query_range" {
		http.NotFound(w, r)
		return
	}
	if err := r.ParseForm(); err != nil {
		apiError(w, err)
		return
	}
	start, err1 := parseTime(r.Form.Get("start"))
	end, err2 := parseTime(r.Form.Get("end"))
	step, err3 := parseStep(r.Form.Get("step"))
	for _, err := range []error{err1, err2, err3} {
		if err != nil {
			apiError(w, err)
			return
		}
	}
	q, err := s.engine.NewRangeQuery(r.Context(), s.db, nil, r.Form.Get("query"), start, end, step)
	if err != nil {
		apiError(w, err)
		return
	}
	defer q.Close()
	res := q.Exec(r.Context())
	if res.Err != nil {
		apiError(w, res.Err)
		return
	}
	matrix, err := res.Matrix()
	if err != nil {
		apiError(w, err)
		return
	}
	type series struct {
		Metric map[string]string `json:"metric"`
		Values [][2]any          `json:"values"`
	}
	out := []series{}
	for _, m := range matrix {
		s := series{Metric: m.Metric.Map(), Values: [][2]any{}}
		for _, p := range m.Floats {
			s.Values = append(s.Values, [2]any{float64(p.T) / 1000, strconv.FormatFloat(p.F, 'f', -1, 64)})
		}
		out = append(out, s)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": "matrix", "result": out}})
}

func apiError(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	json.NewEncoder(w).Encode(map[string]any{"status": "error", "errorType": "bad_data", "error": err.Error()})
}

func parseTime(s string) (time.Time, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		sec, frac := math.Modf(f)
		return time.Unix(int64(sec), int64(math.Round(frac*1e9))).UTC(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("invalid time %q", s)
	}
	return t, nil
}

func parseStep(s string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil && f > 0 {
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("invalid step %q", s)
	}
	return d, nil
}
