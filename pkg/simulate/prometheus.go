package simulate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// The vLLM gauges a service's load is read from: the controller's measure of
// demand (pkg/vllm) is running plus waiting requests, summed over replicas.
const (
	metricRunning = "vllm:num_requests_running"
	metricWaiting = "vllm:num_requests_waiting"
)

// PrometheusQuery says which history to read from a Prometheus HTTP API.
type PrometheusQuery struct {
	// URL is the Prometheus server (or anything serving its HTTP API:
	// Thanos, Mimir, VictoriaMetrics).
	URL string
	// RoundTripper carries credentials and TLS settings; nil: plain HTTP(S).
	// Redirects are followed only within the URL's scheme and host: the
	// credentials it adds to every request go nowhere else.
	RoundTripper http.RoundTripper
	// MaxResponseBytes caps one answer's body (0: DefaultMaxResponseBytes):
	// a larger one is an error, not a process out of memory.
	MaxResponseBytes int64
	// From and To bound the history; Step is one window of the fleet: each
	// window's load is the mean over it.
	From, To time.Time
	Step     time.Duration
	// GroupBy is the label that names a service (model_name, namespace, ...).
	GroupBy string
}

// Validate checks the query's own settings.
func (q PrometheusQuery) Validate() error {
	u, err := url.Parse(q.URL)
	switch {
	case err != nil:
		return fmt.Errorf("%q is not a URL: %w", q.URL, err)
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return fmt.Errorf("%q: want an http:// or https:// URL of the Prometheus server", q.URL)
	case q.Step < time.Minute:
		return fmt.Errorf("step %v: must be at least a minute", q.Step)
	case !q.To.After(q.From.Add(q.Step)):
		return fmt.Errorf("from %s to %s holds fewer than two steps of %v", q.From.Format(time.RFC3339), q.To.Format(time.RFC3339), q.Step)
	case !model.LabelName(q.GroupBy).IsValid() || q.GroupBy == model.MetricNameLabel:
		return fmt.Errorf("group-by %q is not a label name", q.GroupBy)
	case q.To.Sub(q.From)/q.Step > maxWindows:
		return fmt.Errorf("from %s to %s in steps of %v is more than %d windows: take a longer step or a shorter span",
			q.From.Format(time.RFC3339), q.To.Format(time.RFC3339), q.Step, maxWindows)
	}
	return nil
}

// DefaultMaxResponseBytes caps an answer: 14 days in 10-minute windows of
// 300 services come to about 20 MB.
const DefaultMaxResponseBytes = 128 << 20

// maxWindows bounds a history: a year in 5-minute windows.
const maxWindows = 366 * 24 * 12

// maxPoints bounds one range query: Prometheus refuses more than 11,000
// points per series, so longer histories are read in pieces.
const maxPoints = 10000

// ReadPrometheus reads each service's vLLM load from a Prometheus HTTP API:
// per window of q.Step, the mean of running plus waiting requests summed over
// the service's replicas (series grouped by q.GroupBy), the load the
// controller plans on. Replicas restarting (series ending and new ones
// starting) need nothing special: the sum covers whichever run.
//
// A service seen only part of the time has no load before it first appears
// and after it last disappears; a window without samples in between (failed
// scrapes) takes the higher load of the windows either side, since demand
// unknown is not demand absent. Each is reported in notes. Errors name what
// went wrong: an unreachable server, refused credentials, no vLLM series.
func ReadPrometheus(ctx context.Context, q PrometheusQuery) (*Fleet, []string, error) {
	if err := q.Validate(); err != nil {
		return nil, nil, err
	}
	status := &statusRecorder{next: q.RoundTripper}
	if status.next == nil {
		status.next = promapi.DefaultRoundTripper
	}
	maxBytes := q.MaxResponseBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxResponseBytes
	}
	httpClient := &http.Client{Transport: &cappedBodies{next: status, max: maxBytes}, CheckRedirect: sameOrigin}
	client, err := promapi.NewClient(promapi.Config{Address: q.URL, Client: httpClient})
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", q.URL, err)
	}
	api := promv1.NewAPI(client)
	step := q.Step
	windows := int(q.To.Sub(q.From) / step)
	// Window i is [From+i*step, From+(i+1)*step): its mean is evaluated at its end.
	g := q.GroupBy
	r := model.Duration(step).String()
	// The mean over the window of the load summed at each minute: a replica
	// that restarts (one series ending, another starting) counts once.
	query := fmt.Sprintf("avg_over_time((sum by (%s) (%s) + sum by (%s) (%s))[%s:1m])", g, metricRunning, g, metricWaiting, r)
	loads := map[string][]float64{}
	seen := map[string][]bool{}
	for first := 0; first < windows; first += maxPoints {
		last := min(first+maxPoints, windows) - 1
		rng := promv1.Range{Start: q.From.Add(time.Duration(first+1) * step), End: q.From.Add(time.Duration(last+1) * step), Step: step}
		value, warnings, _, err := api.QueryRange(ctx, query, rng)
		if err != nil {
			return nil, nil, explain(q, status.last.Load(), err)
		}
		if len(warnings) > 0 {
			return nil, nil, fmt.Errorf("%s: the query's answer may be partial: %s", q.URL, strings.Join(warnings, "; "))
		}
		matrix, ok := value.(model.Matrix)
		if !ok {
			return nil, nil, fmt.Errorf("%s: a range query answered %s, not a matrix: is this a Prometheus HTTP API?", q.URL, value.Type())
		}
		for _, series := range matrix {
			name := string(series.Metric[model.LabelName(g)])
			for _, p := range series.Values {
				i := int(p.Timestamp.Time().Sub(q.From)/step) - 1
				v := float64(p.Value)
				if i < 0 || i >= windows || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
					continue
				}
				if _, ok := loads[name]; !ok {
					loads[name], seen[name] = make([]float64, windows), make([]bool, windows)
				}
				loads[name][i], seen[name][i] = v, true
			}
		}
	}
	if len(loads) == 0 {
		return nil, nil, fmt.Errorf("%s: no %s and %s series from %s to %s: does this Prometheus scrape vLLM (its metrics carry the vllm: prefix)?",
			q.URL, metricRunning, metricWaiting, q.From.Format(time.RFC3339), q.To.Format(time.RFC3339))
	}
	if _, ok := loads[""]; ok {
		return nil, nil, fmt.Errorf("%s: some vLLM series have no %s label: group services by a label every series carries (--group-by)", q.URL, g)
	}
	names := make([]string, 0, len(loads))
	for name := range loads {
		names = append(names, name)
	}
	sort.Strings(names)
	fleet := &Fleet{Window: step}
	var notes []string
	at := func(i int) string { return q.From.Add(time.Duration(i) * step).UTC().Format(time.RFC3339) }
	for _, name := range names {
		load, ok := loads[name], seen[name]
		first, last := 0, windows-1
		for !ok[first] {
			first++
		}
		for !ok[last] {
			last--
		}
		if first > 0 {
			notes = append(notes, fmt.Sprintf("service %s: first seen at %s; no load before", name, at(first)))
		}
		if last < windows-1 {
			notes = append(notes, fmt.Sprintf("service %s: last seen at %s; no load after", name, at(last+1)))
		}
		for i := first; i <= last; {
			if ok[i] {
				i++
				continue
			}
			j := i
			for !ok[j] {
				j++
			}
			fill := max(load[i-1], load[j])
			for k := i; k < j; k++ {
				load[k] = fill
			}
			notes = append(notes, fmt.Sprintf("service %s: no samples from %s to %s (%d windows of %v, failed scrapes?); taken as %.4g, the higher load either side",
				name, at(i), at(j), j-i, step, fill))
			i = j
		}
		fleet.Services = append(fleet.Services, ServiceTrace{Name: name, Rates: load})
	}
	return fleet, notes, nil
}

// explain turns a failed query into what the user can act on.
func explain(q PrometheusQuery, status int32, err error) error {
	var dns *net.DNSError
	var op *net.OpError
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return fmt.Errorf("%s refused the credentials (HTTP %d): check the bearer token or basic-auth password file", q.URL, status)
	case status == http.StatusNotFound:
		return fmt.Errorf("%s has no Prometheus query API (HTTP 404 on /api/v1/query_range): give the server's base URL", q.URL)
	case errors.As(err, &dns), errors.As(err, &op):
		return fmt.Errorf("%s cannot be reached: %w", q.URL, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s did not answer in time: %w", q.URL, err)
	}
	return fmt.Errorf("%s: %w", q.URL, err)
}

// sameOrigin follows a redirect only to the scheme and host of the request
// it answers. The RoundTripper adds the bearer token or basic-auth password
// to every request it sends, redirected or not, so a redirect elsewhere (to
// another host, or from https to http) would hand them to whoever the server
// points at.
func sameOrigin(req *http.Request, via []*http.Request) error {
	first := via[0].URL
	switch {
	case req.URL.Scheme != first.Scheme || req.URL.Host != first.Host:
		return fmt.Errorf("refusing to follow a redirect from %s://%s to %s://%s, which would carry the credentials there: give that server's URL to --prometheus if it is the one meant",
			first.Scheme, first.Host, req.URL.Scheme, req.URL.Host)
	case len(via) >= 10:
		return errors.New("stopped after 10 redirects")
	}
	return nil
}

// cappedBodies fails an answer whose body is larger than max bytes, as soon
// as its Content-Length says so or as much has been read.
type cappedBodies struct {
	next http.RoundTripper
	max  int64
}

func (c *cappedBodies) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	if resp.ContentLength > c.max {
		resp.Body.Close()
		return nil, tooLarge(c.max)
	}
	resp.Body = &cappedBody{ReadCloser: resp.Body, max: c.max}
	return resp, nil
}

// cappedBody reads at most one byte past max, and fails there.
type cappedBody struct {
	io.ReadCloser
	read, max int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if left := b.max + 1 - b.read; int64(len(p)) > left {
		p = p[:left]
	}
	n, err := b.ReadCloser.Read(p)
	if b.read += int64(n); b.read > b.max {
		return n, tooLarge(b.max)
	}
	return n, err
}

func tooLarge(max int64) error {
	return fmt.Errorf("the answer is larger than %d bytes (--prometheus-max-response-bytes): read a shorter span, or raise the cap if the server is the one meant", max)
}

// statusRecorder remembers the status of the last response.
type statusRecorder struct {
	next http.RoundTripper
	last atomic.Int32
}

func (s *statusRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(r)
	if resp != nil {
		s.last.Store(int32(resp.StatusCode))
	}
	return resp, err
}
