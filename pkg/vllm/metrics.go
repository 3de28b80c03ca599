package vllm

import (
	"k8s.io/component-base/metrics"

	"github.com/gleaner-dev/gleaner/pkg/metricset"
)

// Reasons a scrape fails: the values of ScrapeError.Reason and of the
// `reason` label of gleaner_vllm_scrape_errors_total.
const (
	// ReasonTimeout: no complete answer within the scrape timeout.
	ReasonTimeout = "timeout"
	// ReasonConnection: the connection could not be made or broke (refused,
	// reset, TLS handshake or certificate failure).
	ReasonConnection = "connection"
	// ReasonHTTPStatus: the server answered with a status other than 2xx.
	ReasonHTTPStatus = "http_status"
	// ReasonBodyTooLarge: the body exceeded the body-size cap.
	ReasonBodyTooLarge = "body_too_large"
	// ReasonParse: the body is not valid Prometheus text, or a value Gleaner
	// reads is invalid (negative, NaN, inconsistent histogram).
	ReasonParse = "parse"
	// ReasonNotVLLM: valid text without vLLM's load metrics.
	ReasonNotVLLM = "not_vllm"
	// ReasonTooManySeries: more series, or more distinct values of one label,
	// than Limits allow.
	ReasonTooManySeries = "too_many_series"
	// ReasonInvalidTarget: the pod's metrics annotations do not make a URL.
	ReasonInvalidTarget = "invalid_target"
)

// Endpoint states: the values of the `state` label of gleaner_vllm_scrape_endpoints.
const (
	// StateFresh: the last scrape succeeded within StaleAfter.
	StateFresh = "fresh"
	// StateFailing: the last scrape failed.
	StateFailing = "failing"
	// StateStale: the last scrape succeeded but longer ago than StaleAfter.
	StateStale = "stale"
	// StatePending: Ready, but not scraped since it became Ready.
	StatePending = "pending"
	// StateNotReady: not Running and Ready, or without a pod IP; not scraped.
	StateNotReady = "not_ready"
)

var endpointStates = []string{StateFresh, StateFailing, StateStale, StatePending, StateNotReady}

// scrapeMetrics are the informer's metrics, gleaner_vllm_scrape_NAME.
var scrapeMetrics = metricset.New("vllm_scrape")

var (
	scrapeDuration = scrapeMetrics.Histogram("duration_seconds",
		"Duration of one scrape of a vLLM /metrics endpoint, successful or not, including parsing.", metrics.ExponentialBuckets(0.001, 2, 14))
	// reason: timeout, connection, http_status, body_too_large, parse, not_vllm, too_many_series, invalid_target.
	scrapeErrors = scrapeMetrics.CounterVec("errors_total",
		"Failed scrapes of vLLM /metrics endpoints, by reason: timeout, connection, http_status, body_too_large, parse, not_vllm, too_many_series, invalid_target.", "reason")
	// state: fresh, failing, stale, pending, not_ready. Every state but fresh counts as busy.
	endpointsGauge = scrapeMetrics.GaugeVec("endpoints",
		"Inference pods known to the vLLM metrics informer, by state: fresh, failing, stale, pending, not_ready. All but fresh count as busy.", "state")
)

// RegisterMetrics adds the informer's metrics to the legacy registry that
// kube-scheduler and gleaner-controller serve on /metrics. NewInformer calls it.
func RegisterMetrics() {
	scrapeMetrics.Register()
}
