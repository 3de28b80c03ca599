package vllm

import (
	"math"
	"testing"
	"time"
)

var inf = math.Inf(1)

func TestQuantile(t *testing.T) {
	tests := []struct {
		name           string
		bounds, counts []float64
		q, want        float64
	}{
		{name: "interpolated inside a bucket", bounds: []float64{1, 2, inf}, counts: []float64{10, 30, 30}, q: 0.5, want: 1.25},
		{name: "first bucket starts at 0", bounds: []float64{4, inf}, counts: []float64{8, 8}, q: 0.25, want: 1},
		{name: "rank in the +Inf bucket reads the largest finite bound", bounds: []float64{1, 2, inf}, counts: []float64{1, 2, 100}, q: 0.9, want: 2},
		{name: "rank exactly at a bucket's top", bounds: []float64{1, 2, inf}, counts: []float64{5, 10, 10}, q: 0.5, want: 1},
		{name: "empty buckets are skipped", bounds: []float64{1, 2, 3, inf}, counts: []float64{0, 0, 4, 4}, q: 0.5, want: 2.5},
		{name: "no observations", bounds: []float64{1, inf}, counts: []float64{0, 0}, q: 0.5, want: 0},
		{name: "only the +Inf bucket", bounds: []float64{inf}, counts: []float64{7}, q: 0.5, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := quantile(tc.q, tc.bounds, tc.counts); math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
}

func hist(bounds []float64, counts []float64, sum float64) Histogram {
	return Histogram{Bounds: bounds, Counts: counts, Count: counts[len(counts)-1], Sum: sum}
}

func TestDeriveRates(t *testing.T) {
	bounds := []float64{0.1, 1, inf}
	prev := Metrics{
		Engines: 2, PromptTokensTotal: 1000, GenerationTokensTotal: 5000, PreemptionsTotal: 3,
		QueueTime:        hist(bounds, []float64{10, 10, 10}, 0.5),
		TimeToFirstToken: hist(bounds, []float64{4, 8, 10}, 6),
	}
	tests := []struct {
		name   string
		prev   Metrics
		cur    Metrics
		window time.Duration
		want   Rates
	}{
		{
			name: "deltas over the window",
			prev: prev,
			cur: Metrics{
				Engines: 2, PromptTokensTotal: 1500, GenerationTokensTotal: 6000, PreemptionsTotal: 4,
				// 10 new queue times, all in (0.1, 1]; 4 new TTFTs in (0.1, 1], 6 above 1.
				QueueTime:        hist(bounds, []float64{10, 20, 20}, 5.5),
				TimeToFirstToken: hist(bounds, []float64{4, 12, 20}, 26),
			},
			window: 5 * time.Second,
			want: Rates{
				Window: 5 * time.Second, PromptTokensPerSecond: 100, GenerationTokensPerSecond: 200, PreemptionsPerSecond: 0.2,
				// Ranks 5, 9, 9.9 of 10 in (0.1, 1]: 0.1 + 0.9*rank/10.
				QueueTime: Latency{Observations: 10, P50: 0.55, P90: 0.91, P99: 0.991, Mean: 0.5},
				// Only 4 of 10 fell in (0.1, 1]; ranks 5 and up lie in +Inf, which reads as 1.
				TimeToFirstToken: Latency{Observations: 10, P50: 1, P90: 1, P99: 1, Mean: 2},
			},
		},
		{
			name: "no traffic: rates zero, latencies unknown",
			prev: prev, cur: prev, window: 5 * time.Second,
			want: Rates{Window: 5 * time.Second},
		},
		{
			name: "a counter went down: restart, increases counted from zero",
			prev: prev,
			cur: Metrics{
				Engines: 2, PromptTokensTotal: 100, GenerationTokensTotal: 9000, PreemptionsTotal: 0,
				QueueTime: hist(bounds, []float64{2, 2, 2}, 0.1),
			},
			window: 2 * time.Second,
			want: Rates{
				Window: 2 * time.Second, Restarted: true,
				PromptTokensPerSecond: 50, GenerationTokensPerSecond: 4500,
				QueueTime: Latency{Observations: 2, P50: 0.05, P90: 0.09, P99: 0.099, Mean: 0.05},
			},
		},
		{
			name: "a histogram bucket lost observations: restart",
			prev: prev,
			cur: Metrics{
				Engines: 2, PromptTokensTotal: 1000, GenerationTokensTotal: 5000, PreemptionsTotal: 3,
				// Cumulative counts all grew, but (0.1, 1] went from 4 to 1 observations.
				TimeToFirstToken: hist(bounds, []float64{9, 10, 11}, 7),
			},
			window: time.Second,
			want: Rates{
				Window: time.Second, Restarted: true,
				PromptTokensPerSecond: 1000, GenerationTokensPerSecond: 5000, PreemptionsPerSecond: 3,
				TimeToFirstToken: Latency{Observations: 11, P50: 0.1 * 5.5 / 9, P90: 0.1 + 0.9*(9.9-9), P99: 1, Mean: 7.0 / 11},
			},
		},
		{
			name:   "engines changed: restart",
			prev:   prev,
			cur:    Metrics{Engines: 4, PromptTokensTotal: 2000, GenerationTokensTotal: 6000, PreemptionsTotal: 3},
			window: 10 * time.Second,
			want:   Rates{Window: 10 * time.Second, Restarted: true, PromptTokensPerSecond: 200, GenerationTokensPerSecond: 600, PreemptionsPerSecond: 0.3},
		},
		{
			name:   "histogram appears without a baseline: unknown, not lifetime",
			prev:   Metrics{Engines: 1},
			cur:    Metrics{Engines: 1, QueueTime: hist(bounds, []float64{100, 100, 100}, 1)},
			window: time.Second,
			want:   Rates{Window: time.Second},
		},
		{
			name: "no window",
			prev: prev, cur: prev, window: 0,
			want: Rates{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := deriveRates(tc.prev, tc.cur, tc.window)
			if !ratesClose(got, tc.want) {
				t.Errorf("deriveRates:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func ratesClose(a, b Rates) bool {
	near := func(x, y float64) bool { return math.Abs(x-y) <= 1e-9*math.Max(1, math.Abs(y)) }
	lat := func(x, y Latency) bool {
		return near(x.Observations, y.Observations) && near(x.P50, y.P50) && near(x.P90, y.P90) && near(x.P99, y.P99) && near(x.Mean, y.Mean)
	}
	return a.Window == b.Window && a.Restarted == b.Restarted &&
		near(a.PromptTokensPerSecond, b.PromptTokensPerSecond) &&
		near(a.GenerationTokensPerSecond, b.GenerationTokensPerSecond) &&
		near(a.PreemptionsPerSecond, b.PreemptionsPerSecond) &&
		lat(a.QueueTime, b.QueueTime) && lat(a.TimeToFirstToken, b.TimeToFirstToken) && lat(a.InterTokenLatency, b.InterTokenLatency)
}
