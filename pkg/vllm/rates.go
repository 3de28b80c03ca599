package vllm

import (
	"math"
	"time"
)

// Rates are what happened on one pod between two successful scrapes: token
// and preemption rates from counter deltas, latency quantiles from histogram
// bucket deltas. They describe the recent past, unlike the lifetime totals in
// Metrics.
type Rates struct {
	// Window is the time between the two scrapes compared. Zero: there was no
	// earlier successful scrape within StaleAfter, and every rate is unknown
	// (reported as 0).
	Window time.Duration
	// Restarted: a counter went down, so the server restarted within the
	// window. Increases are then counted from zero (the Prometheus convention):
	// what the old process did after the earlier scrape is lost, so rates
	// undercount a little and never overcount.
	Restarted bool

	PromptTokensPerSecond     float64
	GenerationTokensPerSecond float64
	PreemptionsPerSecond      float64

	QueueTime         Latency // vllm:request_queue_time_seconds
	TimeToFirstToken  Latency // vllm:time_to_first_token_seconds
	InterTokenLatency Latency // vllm:inter_token_latency_seconds (or time_per_output_token_seconds): Observations and Mean only
}

// Latency summarizes one latency histogram's observations within a window.
type Latency struct {
	// Observations is how many requests (or tokens, for inter-token latency)
	// were observed in the window. When 0 the other fields are 0 and mean
	// nothing: no traffic, or the server does not expose the histogram.
	Observations float64
	// Quantiles in seconds, interpolated linearly within the bucket holding
	// the rank as Prometheus' histogram_quantile does; a rank above the
	// largest finite bucket reads as that bucket's bound. 0 when the
	// histogram has no finite bucket.
	P50, P90, P99 float64
	Mean          float64 // seconds; _sum delta / Observations
}

// deriveRates compares two successful scrapes of the same pod taken window apart.
//
//	rate    = (cur - prev) / window, or cur / window after a restart
//	buckets = cur.Counts - prev.Counts, or cur.Counts after a restart
func deriveRates(prev, cur Metrics, window time.Duration) Rates {
	if window <= 0 {
		return Rates{}
	}
	r := Rates{Window: window, Restarted: restarted(prev, cur)}
	base := prev
	if r.Restarted {
		base = Metrics{}
	}
	secs := window.Seconds()
	r.PromptTokensPerSecond = (cur.PromptTokensTotal - base.PromptTokensTotal) / secs
	r.GenerationTokensPerSecond = (cur.GenerationTokensTotal - base.GenerationTokensTotal) / secs
	r.PreemptionsPerSecond = (cur.PreemptionsTotal - base.PreemptionsTotal) / secs
	r.QueueTime = latency(base.QueueTime, cur.QueueTime, r.Restarted)
	r.TimeToFirstToken = latency(base.TimeToFirstToken, cur.TimeToFirstToken, r.Restarted)
	r.InterTokenLatency = latency(base.InterTokenLatency, cur.InterTokenLatency, r.Restarted)
	return r
}

// restarted reports whether any counter Gleaner reads went down between the
// two scrapes, or the engines or histogram buckets changed: only a new
// server process does that. vLLM restarts all data-parallel engines together
// (the server exits when one dies), so the summed counters reset together.
func restarted(prev, cur Metrics) bool {
	if cur.PromptTokensTotal < prev.PromptTokensTotal ||
		cur.GenerationTokensTotal < prev.GenerationTokensTotal ||
		cur.PreemptionsTotal < prev.PreemptionsTotal ||
		cur.Engines != prev.Engines {
		return true
	}
	for _, h := range [][2]Histogram{
		{prev.QueueTime, cur.QueueTime},
		{prev.TimeToFirstToken, cur.TimeToFirstToken},
		{prev.InterTokenLatency, cur.InterTokenLatency},
	} {
		if histogramReset(h[0], h[1]) {
			return true
		}
	}
	return false
}

// histogramReset: the bucket layout changed, or some bucket lost observations
// (its cumulative count, or its own population, went down).
func histogramReset(prev, cur Histogram) bool {
	if len(prev.Bounds) == 0 || len(cur.Bounds) == 0 {
		return false // absent on one side: nothing to compare
	}
	if len(prev.Bounds) != len(cur.Bounds) {
		return true
	}
	for i := range cur.Bounds {
		if cur.Bounds[i] != prev.Bounds[i] || cur.Counts[i] < prev.Counts[i] {
			return true
		}
		if i > 0 && cur.Counts[i]-cur.Counts[i-1] < prev.Counts[i]-prev.Counts[i-1] {
			return true
		}
	}
	return cur.Sum < prev.Sum
}

// latency summarizes cur - base. After a restart base is empty and cur holds
// just the new process's observations. A histogram that appeared only now
// (without a restart) has no baseline and stays unknown.
func latency(base, cur Histogram, restarted bool) Latency {
	if len(cur.Bounds) == 0 || (len(base.Bounds) == 0 && !restarted) {
		return Latency{}
	}
	delta := make([]float64, len(cur.Counts))
	for i := range cur.Counts {
		delta[i] = cur.Counts[i]
		if len(base.Counts) > 0 {
			delta[i] -= base.Counts[i]
		}
	}
	n := delta[len(delta)-1]
	if n <= 0 {
		return Latency{}
	}
	return Latency{
		Observations: n,
		P50:          quantile(0.5, cur.Bounds, delta),
		P90:          quantile(0.9, cur.Bounds, delta),
		P99:          quantile(0.99, cur.Bounds, delta),
		Mean:         (cur.Sum - base.Sum) / n,
	}
}

// Quantile estimates the q-quantile (0 < q < 1) of the histogram's
// observations, as Quantile of Latency does for a window.
func (h Histogram) Quantile(q float64) float64 {
	return quantile(q, h.Bounds, h.Counts)
}

// quantile follows Prometheus' histogram_quantile: find the first bucket whose
// cumulative count reaches rank = q*total and interpolate linearly inside it.
// The lowest bucket starts at 0 (latencies are not negative); a rank that
// falls in the +Inf bucket answers the largest finite bound, as nothing more
// is known. It returns 0 without observations or without a finite bucket.
func quantile(q float64, bounds, counts []float64) float64 {
	n := len(counts)
	if n < 2 || counts[n-1] <= 0 {
		return 0
	}
	rank := q * counts[n-1]
	b := 0
	for b < n-1 && counts[b] < rank {
		b++
	}
	if b == n-1 {
		return bounds[n-2]
	}
	if b == 0 && bounds[0] <= 0 {
		return bounds[0]
	}
	start, below := 0.0, 0.0
	if b > 0 {
		start, below = bounds[b-1], counts[b-1]
	}
	in := counts[b] - below
	if in <= 0 || math.IsInf(bounds[b], 0) {
		return bounds[b]
	}
	// Rounding can push the interpolation a hair past the bucket's bound.
	return min(bounds[b], start+(bounds[b]-start)*(rank-below)/in)
}
