package main

import (
	"context"
	"fmt"
	"time"

	promconfig "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"github.com/spf13/pflag"

	"github.com/gleaner-dev/gleaner/pkg/simulate"
)

// prometheusFlags are gleaner simulate's flags for reading the services'
// history from Prometheus.
type prometheusFlags struct {
	url, since, until, groupBy         string
	step, timeout                      time.Duration
	bearerTokenFile                    string
	basicAuthUser, basicAuthPassword   string
	caFile, certFile, keyFile, sniName string
	insecureSkipVerify                 bool
	maxResponseBytes                   int64

	from time.Time // the history's start, once read
}

func (p *prometheusFlags) add(f *pflag.FlagSet) {
	f.StringVar(&p.url, "prometheus", "", "Read each service's load history from this Prometheus HTTP API (the server scraping vLLM) instead of --services.")
	f.StringVar(&p.since, "since", "14d", "With --prometheus: how far back the history starts (Prometheus duration: 14d, 36h).")
	f.StringVar(&p.until, "until", "", "With --prometheus: when the history ends (RFC 3339); empty for now.")
	f.DurationVar(&p.step, "query-step", 10*time.Minute, "With --prometheus: one window of the history; each window's load is the mean over it.")
	f.StringVar(&p.groupBy, "group-by", "model_name", "With --prometheus: the label that names a service (model_name, namespace, or any label every vLLM series carries).")
	f.DurationVar(&p.timeout, "prometheus-timeout", 2*time.Minute, "With --prometheus: how long reading the history may take.")
	f.StringVar(&p.bearerTokenFile, "bearer-token-file", "", "With --prometheus: send the token in this file as a bearer token.")
	f.StringVar(&p.basicAuthUser, "basic-auth-user", "", "With --prometheus: basic-auth user name (with --basic-auth-password-file).")
	f.StringVar(&p.basicAuthPassword, "basic-auth-password-file", "", "With --prometheus: file holding the basic-auth password.")
	f.StringVar(&p.caFile, "tls-ca-file", "", "With --prometheus: CA certificates to verify the server with.")
	f.StringVar(&p.certFile, "tls-cert-file", "", "With --prometheus: client certificate (with --tls-key-file).")
	f.StringVar(&p.keyFile, "tls-key-file", "", "With --prometheus: client certificate's key.")
	f.StringVar(&p.sniName, "tls-server-name", "", "With --prometheus: the server name to verify instead of the URL's host.")
	f.BoolVar(&p.insecureSkipVerify, "tls-insecure-skip-verify", false, "With --prometheus: do not verify the server's certificate.")
	f.Int64Var(&p.maxResponseBytes, "prometheus-max-response-bytes", simulate.DefaultMaxResponseBytes, "With --prometheus: the largest answer read; a larger one is an error. Redirects are followed only within the URL's scheme and host, so the credentials go nowhere else.")
}

// read reads the fleet's history.
func (p *prometheusFlags) read(ctx context.Context) (*simulate.Fleet, []string, error) {
	since, err := model.ParseDuration(p.since)
	if err != nil || since <= 0 {
		return nil, nil, fmt.Errorf("--since %q: want a positive duration such as 14d or 36h", p.since)
	}
	to := time.Now().UTC()
	if p.until != "" {
		if to, err = time.Parse(time.RFC3339, p.until); err != nil {
			return nil, nil, fmt.Errorf("--until %q: want an RFC 3339 time: %w", p.until, err)
		}
	}
	if p.maxResponseBytes < 1 {
		return nil, nil, fmt.Errorf("--prometheus-max-response-bytes %d: must be positive", p.maxResponseBytes)
	}
	if p.step < time.Minute {
		return nil, nil, fmt.Errorf("--query-step %v: must be at least a minute", p.step)
	}
	// Whole windows, aligned to the step, so the history starts on a window.
	to = to.Truncate(p.step)
	p.from = to.Add(-time.Duration(since)).Truncate(p.step)

	http := promconfig.HTTPClientConfig{
		BearerTokenFile: p.bearerTokenFile,
		TLSConfig: promconfig.TLSConfig{CAFile: p.caFile, CertFile: p.certFile, KeyFile: p.keyFile,
			ServerName: p.sniName, InsecureSkipVerify: p.insecureSkipVerify},
	}
	switch {
	case p.basicAuthUser != "" && p.basicAuthPassword == "":
		return nil, nil, fmt.Errorf("--basic-auth-user needs --basic-auth-password-file")
	case p.basicAuthUser == "" && p.basicAuthPassword != "":
		return nil, nil, fmt.Errorf("--basic-auth-password-file needs --basic-auth-user")
	case p.basicAuthUser != "":
		http.BasicAuth = &promconfig.BasicAuth{Username: p.basicAuthUser, PasswordFile: p.basicAuthPassword}
	}
	if err := http.Validate(); err != nil {
		return nil, nil, err
	}
	rt, err := promconfig.NewRoundTripperFromConfig(http, "gleaner-simulate")
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	return simulate.ReadPrometheus(ctx, simulate.PrometheusQuery{URL: p.url, RoundTripper: rt, From: p.from, To: to, Step: p.step, GroupBy: p.groupBy,
		MaxResponseBytes: p.maxResponseBytes})
}
