package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gleaner-dev/gleaner/pkg/vllm"
)

// probeResult is what `gleaner probe` prints. Tooling relies on these field
// names: add fields, never rename or remove them.
type probeResult struct {
	URL                   string   `json:"url"`
	Running               float64  `json:"running"`
	Waiting               float64  `json:"waiting"`
	KVCacheUsage          float64  `json:"kvCacheUsage"` // 0..1, averaged over engines
	Engines               int      `json:"engines"`      // distinct `engine` label values; 1 without the label
	Models                []string `json:"models"`       // distinct model_name values, sorted; [] when none
	PromptTokensTotal     float64  `json:"promptTokensTotal"`
	GenerationTokensTotal float64  `json:"generationTokensTotal"`
	PreemptionsTotal      float64  `json:"preemptionsTotal"`
	// Latencies over the server's lifetime (one scrape has no window to
	// difference); omitted when the server does not expose the histogram.
	QueueTimeSeconds         *probeLatency `json:"queueTimeSeconds,omitempty"`
	TimeToFirstTokenSeconds  *probeLatency `json:"timeToFirstTokenSeconds,omitempty"`
	InterTokenLatencySeconds *probeLatency `json:"interTokenLatencySeconds,omitempty"`
	ScrapeSeconds            float64       `json:"scrapeSeconds"` // how long the scrape took, parsing included
	// SleepState is vLLM's sleep mode as Gleaner reads it: see sleepState.
	SleepState      string `json:"sleepState"`
	SleepingEngines int    `json:"sleepingEngines"`
	// SleepLevel is the deepest level among the sleeping engines: 0 (none
	// named), 1 (weights offloaded to CPU memory) or 2 (weights discarded);
	// omitted when no engine sleeps.
	SleepLevel *int `json:"sleepLevel,omitempty"`
}

// The values of probeResult.SleepState.
const (
	// sleepAsleep: every engine sleeps; the server serves nothing until
	// woken, and holds its GPUs. Gleaner counts it as capacity to wake.
	sleepAsleep = "asleep"
	// sleepPartly: some engines sleep; the others serve, so Gleaner counts
	// the server as awake.
	sleepPartly = "partly-asleep"
	sleepAwake  = "awake"
	// sleepUnreported: no engine reports a sleep state (vLLM before late
	// 2025, or another server): read as awake.
	sleepUnreported = "unreported"
)

func sleepState(m vllm.Metrics) string {
	switch {
	case m.Asleep():
		return sleepAsleep
	case m.Sleeping > 0:
		return sleepPartly
	case m.SleepReported > 0:
		return sleepAwake
	}
	return sleepUnreported
}

// probeLatency is in seconds. Quantiles are omitted without observations or
// where Gleaner does not read the buckets (inter-token latency).
type probeLatency struct {
	Observations float64 `json:"observations"`
	P50          float64 `json:"p50,omitempty"`
	P90          float64 `json:"p90,omitempty"`
	P99          float64 `json:"p99,omitempty"`
	Mean         float64 `json:"mean"`
}

func lifetimeLatency(h vllm.Histogram) *probeLatency {
	if len(h.Bounds) == 0 {
		return nil
	}
	l := &probeLatency{Observations: h.Count}
	if h.Count > 0 {
		l.Mean = h.Sum / h.Count
		if len(h.Bounds) > 1 {
			l.P50, l.P90, l.P99 = h.Quantile(0.5), h.Quantile(0.9), h.Quantile(0.99)
		}
	}
	return l
}

func newProbeCommand() *cobra.Command {
	var (
		scraper = vllm.Scraper{Timeout: vllm.DefaultScrapeTimeout, MaxBodyBytes: vllm.DefaultMaxBodyBytes}
		client  vllm.ClientOptions
	)
	cmd := &cobra.Command{
		Use:   "probe URL",
		Short: "Scrape one vLLM /metrics endpoint once and print what Gleaner reads from it",
		Long: `Scrape one vLLM /metrics endpoint the way gleaner-controller does and print
one JSON object: running, waiting, kvCacheUsage, engines, models,
promptTokensTotal, generationTokensTotal, preemptionsTotal, lifetime latency
quantiles, scrapeSeconds, and vLLM's sleep mode: sleepState (awake, asleep,
partly-asleep or unreported), sleepingEngines and sleepLevel. On failure
print the problem (HTTP status, timeout, body too large, parse error with
its line, not vLLM) on stderr and exit 1.

URL may omit the scheme (http) and the path (/metrics): 10.0.3.7:8000 works.`,
		Example: `  gleaner probe http://10.0.3.7:8000/metrics
  gleaner probe --ca-file ca.crt --bearer-token-file token https://10.0.3.7:8443`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			target, err := probeURL(args[0])
			if err != nil {
				return err
			}
			if scraper.Client, err = vllm.NewHTTPClient(client); err != nil {
				return err
			}
			start := time.Now()
			m, err := scraper.Scrape(context.Background(), target)
			if err != nil {
				return err
			}
			res := probeResult{
				URL:                      target,
				Running:                  m.Running,
				Waiting:                  m.Waiting,
				KVCacheUsage:             m.KVCacheUsage,
				Engines:                  m.Engines,
				Models:                   m.Models,
				PromptTokensTotal:        m.PromptTokensTotal,
				GenerationTokensTotal:    m.GenerationTokensTotal,
				PreemptionsTotal:         m.PreemptionsTotal,
				QueueTimeSeconds:         lifetimeLatency(m.QueueTime),
				TimeToFirstTokenSeconds:  lifetimeLatency(m.TimeToFirstToken),
				InterTokenLatencySeconds: lifetimeLatency(m.InterTokenLatency),
				ScrapeSeconds:            time.Since(start).Seconds(),
				SleepState:               sleepState(m),
				SleepingEngines:          m.Sleeping,
			}
			if m.Sleeping > 0 {
				res.SleepLevel = &m.SleepLevel
			}
			if res.Models == nil {
				res.Models = []string{}
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(res)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&scraper.Timeout, "timeout", scraper.Timeout, "Timeout of the scrape, reading the body included.")
	f.Int64Var(&scraper.MaxBodyBytes, "max-body-bytes", scraper.MaxBodyBytes, "Largest body accepted; a larger one is an error.")
	f.StringVar(&client.CAFile, "ca-file", "", "PEM bundle of the CAs that sign the server's certificate (HTTPS).")
	f.StringVar(&client.TLSServerName, "tls-server-name", "", "Name to verify the server's certificate against, instead of the URL's host.")
	f.BoolVar(&client.InsecureSkipTLSVerify, "insecure-skip-tls-verify", false, "Do not verify the server's certificate (not recommended).")
	f.StringVar(&client.BearerTokenFile, "bearer-token-file", "", "File holding a token sent as \"Authorization: Bearer\".")
	return cmd
}

// probeURL completes what operators type by hand: host:port means
// http://host:port/metrics.
func probeURL(raw string) (string, error) {
	s := raw
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("URL %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("URL %q: scheme %q is neither http nor https", raw, u.Scheme)
	}
	if u.Host == "" {
		return "", fmt.Errorf("URL %q has no host; give e.g. http://10.0.3.7:8000/metrics", raw)
	}
	if u.Path == "" {
		u.Path = "/metrics"
	}
	return u.String(), nil
}
