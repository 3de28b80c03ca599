package vllm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Scraper defaults, exported so command-line flags can show them.
const (
	DefaultScrapeTimeout = 2 * time.Second
	DefaultMaxBodyBytes  = 4 << 20
)

// defaultClient is shared by all Scrapers without their own Client so that
// connections to pods are kept alive across scrape rounds.
var defaultClient = &http.Client{Transport: newTransport()}

func newTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// Pod IPs are reached directly, as Prometheus does; an HTTP(S)_PROXY meant
	// for egress must not swallow in-cluster scrapes.
	t.Proxy = nil
	// One idle connection per pod; the stock limit of 100 would churn
	// connections in fleets with more pods than that.
	t.MaxIdleConns = 0
	t.MaxIdleConnsPerHost = 1
	return t
}

// Scraper fetches and parses one vLLM /metrics endpoint.
type Scraper struct {
	Client       *http.Client  // nil: a shared default client with keep-alives
	Timeout      time.Duration // per request, including reading the body; default 2s
	MaxBodyBytes int64         // default 4 MiB; a larger body is an error
}

// Scrape fetches url and parses it with Parse. A non-2xx status, a timeout, a
// body over MaxBodyBytes or a parse failure is an error, and the Metrics is zero.
func (s *Scraper) Scrape(ctx context.Context, url string) (Metrics, error) {
	client := s.Client
	if client == nil {
		client = defaultClient
	}
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultScrapeTimeout
	}
	maxBytes := s.MaxBodyBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBodyBytes
	}

	reqCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, url, nil)
	if err != nil {
		return Metrics{}, fmt.Errorf("scraping %s: %w", url, err)
	}
	// Ask for the classic text format that Parse reads; prometheus_client (which vLLM
	// uses) serves OpenMetrics only when asked for it.
	req.Header.Set("Accept", "text/plain;version=0.0.4")

	resp, err := client.Do(req)
	if err != nil {
		return Metrics{}, scrapeError(ctx, url, timeout, err)
	}
	defer resp.Body.Close()

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// A short excerpt of the body usually says why (e.g. "engine dead").
		excerpt, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		msg := strings.TrimSpace(string(excerpt))
		if msg != "" {
			msg = ": " + msg
		}
		return Metrics{}, fmt.Errorf("scraping %s: HTTP status %s%s", url, resp.Status, msg)
	}

	// Reading one byte past the cap tells an exactly-full body from an oversized one
	// while keeping memory bounded by MaxBodyBytes.
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBytes+1))
	if err != nil {
		return Metrics{}, scrapeError(ctx, url, timeout, err)
	}
	if int64(len(body)) > maxBytes {
		return Metrics{}, fmt.Errorf("scraping %s: body exceeds %d bytes; raise MaxBodyBytes if this vLLM server legitimately exposes that much", url, maxBytes)
	}
	m, err := Parse(bytes.NewReader(body))
	if err != nil {
		return Metrics{}, fmt.Errorf("scraping %s: %w", url, err)
	}
	return m, nil
}

// scrapeError names a timeout as such; the transport's own wording for it varies.
func scrapeError(parent context.Context, url string, timeout time.Duration, err error) error {
	if parent.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("scraping %s: timeout after %s: %w", url, timeout, err)
	}
	return fmt.Errorf("scraping %s: %w", url, err)
}
