// Package vllm is Gleaner's view of vLLM inference load: it parses vLLM's
// Prometheus /metrics, scrapes it from inference pods, and keeps the latest
// sample per pod. Anything missing, stale or malformed is reported as such so
// that consumers treat the pod as busy, never as idle.
package vllm

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// vLLM metric and label names (V1, 2025-2026; gpu_cache_usage_perc up to 0.10).
const (
	metricRunning          = "vllm:num_requests_running"
	metricWaiting          = "vllm:num_requests_waiting"
	metricKVCacheUsage     = "vllm:kv_cache_usage_perc"
	metricGPUCacheUsage    = "vllm:gpu_cache_usage_perc"
	metricPromptTokens     = "vllm:prompt_tokens_total"
	metricGenerationTokens = "vllm:generation_tokens_total"

	labelEngine = "engine"
	labelModel  = "model_name"
)

// Metrics is one parsed vLLM /metrics exposition.
type Metrics struct {
	Running      float64  // vllm:num_requests_running, summed over `engine` label values
	Waiting      float64  // vllm:num_requests_waiting, summed over engines
	KVCacheUsage float64  // vllm:kv_cache_usage_perc (0..1) averaged over engines; fallback vllm:gpu_cache_usage_perc; 0 if neither
	Engines      int      // distinct `engine` label values (1 when the label is absent)
	Models       []string // sorted distinct model_name values
	// Counters, summed over engines; consumers derive token rates from deltas between scrapes.
	PromptTokensTotal     float64 // vllm:prompt_tokens_total
	GenerationTokensTotal float64 // vllm:generation_tokens_total
}

// Parse reads one Prometheus text exposition from a vLLM server. It fails when
// the text is malformed, when a value Gleaner reads is negative or not finite,
// or when the exposition has neither vllm:num_requests_running nor
// vllm:num_requests_waiting (the endpoint is not vLLM, or the scrape is
// truncated before them). On error the returned Metrics is zero.
func Parse(r io.Reader) (Metrics, error) {
	families, err := parseText(r)
	if err != nil {
		return Metrics{}, err
	}
	if families[metricRunning] == nil && families[metricWaiting] == nil {
		return Metrics{}, fmt.Errorf("not a vLLM metrics endpoint: neither %s nor %s is present (%d other metric families)",
			metricRunning, metricWaiting, len(families))
	}

	var m Metrics
	engines := map[string]bool{}
	models := map[string]bool{}
	// sum adds up a family's samples and notes which engines and models it covers.
	// Families are looked up by exact name, so `_created` series never count.
	sum := func(name string) (total float64, n int, err error) {
		mf := families[name]
		if mf == nil {
			return 0, 0, nil
		}
		for _, metric := range mf.GetMetric() {
			v, err := sampleValue(mf, metric)
			if err != nil {
				return 0, 0, err
			}
			total += v
			n++
			engines[labelValue(metric, labelEngine)] = true
			if model := labelValue(metric, labelModel); model != "" {
				models[model] = true
			}
		}
		if math.IsInf(total, 0) {
			return 0, 0, fmt.Errorf("vLLM metric %s overflows when summed over its %d series", name, n)
		}
		return total, n, nil
	}

	if m.Running, _, err = sum(metricRunning); err != nil {
		return Metrics{}, err
	}
	if m.Waiting, _, err = sum(metricWaiting); err != nil {
		return Metrics{}, err
	}
	kvName := metricKVCacheUsage
	if families[kvName] == nil {
		kvName = metricGPUCacheUsage
	}
	kvTotal, kvSeries, err := sum(kvName)
	if err != nil {
		return Metrics{}, err
	}
	if kvSeries > 0 {
		m.KVCacheUsage = kvTotal / float64(kvSeries)
	}
	if m.PromptTokensTotal, _, err = sum(metricPromptTokens); err != nil {
		return Metrics{}, err
	}
	if m.GenerationTokensTotal, _, err = sum(metricGenerationTokens); err != nil {
		return Metrics{}, err
	}

	// Series without an engine label land under "", so a pre-V1 server counts as one engine.
	m.Engines = len(engines)
	for model := range models {
		m.Models = append(m.Models, model)
	}
	slices.Sort(m.Models)
	return m, nil
}

// parseText runs expfmt's text parser. A scrape body is untrusted input, and
// expfmt v0.70.0 panics on some malformed lines (a nil dereference on
// "# TYPE x gauge\n{}", fixed in v0.74.0), so a panic becomes a parse error.
func parseText(r io.Reader) (families map[string]*dto.MetricFamily, err error) {
	defer func() {
		if p := recover(); p != nil {
			families, err = nil, fmt.Errorf("parsing vLLM metrics: text parser failed on malformed input: %v", p)
		}
	}()
	// vLLM names contain ':', which the legacy scheme allows too; UTF-8
	// validation additionally accepts quoted names rather than failing on them.
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err = parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing vLLM metrics: %w", err)
	}
	return families, nil
}

// sampleValue returns a gauge, counter or untyped sample, rejecting values that
// would make a load figure meaningless (NaN, ±Inf, negative).
func sampleValue(mf *dto.MetricFamily, metric *dto.Metric) (float64, error) {
	var v float64
	switch mf.GetType() {
	case dto.MetricType_GAUGE:
		v = metric.GetGauge().GetValue()
	case dto.MetricType_COUNTER:
		v = metric.GetCounter().GetValue()
	case dto.MetricType_UNTYPED:
		v = metric.GetUntyped().GetValue()
	default:
		return 0, fmt.Errorf("vLLM metric %s has type %s, want gauge or counter", mf.GetName(), mf.GetType())
	}
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, fmt.Errorf("vLLM metric %s%s has value %v, want a finite non-negative number",
			mf.GetName(), formatLabels(metric), v)
	}
	return v, nil
}

func labelValue(metric *dto.Metric, name string) string {
	for _, lp := range metric.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

// formatLabels renders a series' labels for error messages, e.g. {engine="0"}.
func formatLabels(metric *dto.Metric) string {
	if len(metric.GetLabel()) == 0 {
		return ""
	}
	parts := make([]string, 0, len(metric.GetLabel()))
	for _, lp := range metric.GetLabel() {
		parts = append(parts, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
	}
	return "{" + strings.Join(parts, ",") + "}"
}
