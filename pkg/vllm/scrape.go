package vllm

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/transport"
)

// Scraper defaults, exported so command-line flags can show them.
const (
	DefaultScrapeTimeout   = 2 * time.Second
	DefaultMaxBodyBytes    = 4 << 20
	DefaultIdleConnTimeout = 90 * time.Second
)

// ClientOptions say how /metrics endpoints are reached over HTTP(S).
type ClientOptions struct {
	// CAFile is a PEM bundle of the CAs that sign the endpoints' serving
	// certificates; empty: the system roots.
	CAFile string
	// TLSServerName is the name certificates are verified against; empty: the
	// host of the URL. Pod IPs are rarely in certificates, so a fleet with one
	// serving certificate usually names it here.
	TLSServerName string
	// InsecureSkipTLSVerify skips certificate verification. Not recommended:
	// anything on the pod network could then answer for a pod.
	InsecureSkipTLSVerify bool
	// BearerTokenFile holds a token sent as "Authorization: Bearer". It is
	// re-read every minute, so rotated (projected) tokens are picked up.
	BearerTokenFile string
	// IdleConnTimeout is how long a kept-alive connection may sit idle;
	// default 90s. Keep it above the scrape interval, or every scrape dials anew.
	IdleConnTimeout time.Duration
}

// NewHTTPClient builds a client for scraping: keep-alive connections (one idle
// per endpoint), no proxy, no compression, no redirects, and the TLS and
// bearer-token settings of o. It fails when the CA or token file is unusable.
func NewHTTPClient(o ClientOptions) (*http.Client, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// Pod IPs are reached directly, as Prometheus does; an HTTP(S)_PROXY meant
	// for egress must not swallow in-cluster scrapes.
	t.Proxy = nil
	// One idle connection per pod; the stock limit of 100 in total would churn
	// connections in fleets with more pods than that.
	t.MaxIdleConns = 0
	t.MaxIdleConnsPerHost = 1
	t.IdleConnTimeout = o.IdleConnTimeout
	if t.IdleConnTimeout <= 0 {
		t.IdleConnTimeout = DefaultIdleConnTimeout
	}
	// Gzip would cost the vLLM server CPU on every scrape, in the process that
	// serves inference, to save pod-network bytes that are cheap.
	t.DisableCompression = true
	// A scrape's request is one GET of a few hundred bytes (a bearer token
	// adds about one KiB): the stock 4 KiB write buffer, held by every idle
	// connection, is 40 MB over 10,000 endpoints.
	t.WriteBufferSize = 1 << 10

	if o.CAFile != "" || o.TLSServerName != "" || o.InsecureSkipTLSVerify {
		tc := &tls.Config{ServerName: o.TLSServerName, InsecureSkipVerify: o.InsecureSkipTLSVerify, MinVersion: tls.VersionTLS12}
		if o.CAFile != "" {
			pem, err := os.ReadFile(o.CAFile)
			if err != nil {
				return nil, fmt.Errorf("reading the CA file for scraping vLLM over HTTPS: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("CA file %s holds no PEM certificate; give the CA bundle that signs the vLLM servers' certificates", o.CAFile)
			}
		}
		t.TLSClientConfig = tc
	}

	var rt http.RoundTripper = t
	if o.BearerTokenFile != "" {
		var err error
		if rt, err = transport.NewBearerAuthWithRefreshRoundTripper("", o.BearerTokenFile, t); err != nil {
			return nil, fmt.Errorf("reading the bearer-token file for scraping vLLM: %w", err)
		}
	}
	return &http.Client{
		Transport: rt,
		// A redirect would carry the bearer token to wherever a pod points; a
		// 3xx is reported as an HTTP status error instead.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, nil
}

// defaultClient is shared by all Scrapers without their own Client so that
// connections to pods are kept alive across scrapes.
var defaultClient = func() *http.Client {
	c, err := NewHTTPClient(ClientOptions{})
	if err != nil {
		panic(err) // no files to read: cannot happen
	}
	return c
}()

// Scraper fetches and parses one vLLM /metrics endpoint.
type Scraper struct {
	Client       *http.Client  // nil: a shared default client with keep-alives
	Timeout      time.Duration // per request, including reading the body; default 2s
	MaxBodyBytes int64         // default 4 MiB; a larger body is an error
	// Limits bound the series and label values a body may hold (see Limits);
	// a body over them is an error.
	Limits Limits
}

// ScrapeError is a failed scrape: where, why (one of the Reason* values), and
// the underlying error.
type ScrapeError struct {
	URL    string
	Reason string
	Err    error
}

func (e *ScrapeError) Error() string { return "scraping " + e.URL + ": " + e.Err.Error() }
func (e *ScrapeError) Unwrap() error { return e.Err }

// bodies recycles read buffers: at a 5 s interval a large fleet reads hundreds
// of bodies a second, and most are the same size every time.
var bodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBody keeps a rare huge body from pinning its buffer in the pool.
const maxPooledBody = 1 << 20

// Scrape fetches url and parses it with Parse. A non-2xx status, a timeout, a
// body over MaxBodyBytes or Limits or a parse failure is a *ScrapeError, and
// the Metrics is zero.
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
	fail := func(reason string, err error) (Metrics, error) {
		return Metrics{}, &ScrapeError{URL: url, Reason: reason, Err: err}
	}

	reqCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, url, nil)
	if err != nil {
		return fail(ReasonInvalidTarget, err)
	}
	// Ask for the classic text format that Parse reads; prometheus_client (which vLLM
	// uses) serves OpenMetrics only when asked for it.
	req.Header.Set("Accept", "text/plain;version=0.0.4")

	resp, err := client.Do(req)
	if err != nil {
		return fail(transportError(ctx, timeout, err))
	}
	defer resp.Body.Close()

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// A short excerpt of the body usually says why (e.g. "engine dead").
		excerpt, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		msg := strings.TrimSpace(string(excerpt))
		if msg != "" {
			msg = ": " + msg
		}
		return fail(ReasonHTTPStatus, fmt.Errorf("HTTP status %s%s", resp.Status, msg))
	}

	buf := bodies.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= maxPooledBody {
			bodies.Put(buf)
		}
	}()
	if resp.ContentLength > maxBytes {
		return fail(ReasonBodyTooLarge, bodyTooLarge(maxBytes))
	}
	if resp.ContentLength > 0 {
		buf.Grow(int(resp.ContentLength) + 1)
	}
	// Reading one byte past the cap tells an exactly-full body from an oversized one
	// while keeping memory bounded by MaxBodyBytes.
	if _, err := buf.ReadFrom(io.LimitReader(resp.Body, maxBytes+1)); err != nil {
		return fail(transportError(ctx, timeout, err))
	}
	if int64(buf.Len()) > maxBytes {
		return fail(ReasonBodyTooLarge, bodyTooLarge(maxBytes))
	}
	m, err := parseBytes(buf.Bytes(), s.Limits)
	switch {
	case errors.Is(err, ErrNotVLLM):
		return fail(ReasonNotVLLM, err)
	case errors.Is(err, ErrTooManySeries), errors.Is(err, ErrTooManyLabelValues):
		return fail(ReasonTooManySeries, err)
	case err != nil:
		return fail(ReasonParse, err)
	}
	return m, nil
}

func bodyTooLarge(maxBytes int64) error {
	return fmt.Errorf("body exceeds %d bytes; raise the body-size cap if this vLLM server legitimately exposes that much", maxBytes)
}

// transportError names a timeout as such (the transport's own wording for it
// varies); anything else on the wire is a connection problem.
func transportError(parent context.Context, timeout time.Duration, err error) (string, error) {
	// The URL is already in ScrapeError; url.Error would repeat it.
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		err = urlErr.Err
	}
	var netErr net.Error
	if parent.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout())) {
		return ReasonTimeout, fmt.Errorf("timeout after %s: %w", timeout, err)
	}
	return ReasonConnection, err
}
