package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// writePrometheusConfig writes a config that scrapes every endpoint, and
// nothing else (not Prometheus itself), every interval with the informer's
// timeout.
func writePrometheusConfig(path string, endpoints, port int, interval, timeout time.Duration) error {
	var b strings.Builder
	fmt.Fprintf(&b, "global:\n  scrape_interval: %s\n  scrape_timeout: %s\n  evaluation_interval: 1m\n", model.Duration(interval), model.Duration(timeout))
	b.WriteString("scrape_configs:\n  - job_name: vllm\n    static_configs:\n      - targets:\n")
	for n := range endpoints {
		fmt.Fprintf(&b, "          - %s:%d\n", address(n), port)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// promClient talks to the Prometheus under test on its loopback address.
type promClient struct {
	base string // http://127.0.0.1:PORT
	http *http.Client
}

func (c *promClient) get(ctx context.Context, path string, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("prometheus %s: %s: %.200s", path, resp.Status, body)
	}
	return body, nil
}

func (c *promClient) ready(ctx context.Context) bool {
	_, err := c.get(ctx, "/-/ready", 5*time.Second)
	return err == nil
}

// promSelf is what Prometheus says of itself on /metrics.
type promSelf struct {
	Scrapes   float64 // prometheus_target_interval_length_seconds_count: one per scrape after a target's first
	HeapInuse float64 // go_memstats_heap_inuse_bytes
}

func (c *promClient) self(ctx context.Context, interval time.Duration) (promSelf, error) {
	body, err := c.get(ctx, "/metrics", 30*time.Second)
	if err != nil {
		return promSelf{}, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		return promSelf{}, fmt.Errorf("prometheus /metrics: %w", err)
	}
	var s promSelf
	found := false
	if mf := families["prometheus_target_interval_length_seconds"]; mf != nil {
		for _, m := range mf.GetMetric() {
			if label(m, "interval") == model.Duration(interval).String() {
				s.Scrapes += float64(m.GetSummary().GetSampleCount())
				found = true
			}
		}
	}
	if !found {
		return promSelf{}, fmt.Errorf("prometheus /metrics has no prometheus_target_interval_length_seconds{interval=%q}", model.Duration(interval))
	}
	if mf := families["go_memstats_heap_inuse_bytes"]; mf != nil && len(mf.GetMetric()) > 0 {
		s.HeapInuse = mf.GetMetric()[0].GetGauge().GetValue()
	}
	return s, nil
}

func label(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

// query evaluates a PromQL expression that yields one number, at t.
func (c *promClient) query(ctx context.Context, expr string, t time.Time) (float64, error) {
	body, err := c.get(ctx, "/api/v1/query?"+url.Values{
		"query": {expr},
		"time":  {strconv.FormatFloat(float64(t.UnixNano())/1e9, 'f', 3, 64)},
	}.Encode(), time.Minute)
	if err != nil {
		return 0, err
	}
	var resp struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return 0, fmt.Errorf("prometheus query %s: %w", expr, err)
	}
	if resp.Status != "success" || len(resp.Data.Result) != 1 {
		return 0, fmt.Errorf("prometheus query %s: %.300s", expr, body)
	}
	s, _ := resp.Data.Result[0].Value[1].(string)
	return strconv.ParseFloat(s, 64)
}
