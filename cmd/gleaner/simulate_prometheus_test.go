package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gleaner-dev/gleaner/internal/promtest"
	"github.com/gleaner-dev/gleaner/pkg/simulate"
)

// history is a day of vLLM scrapes, every 30 s, in 10-minute windows from a
// Monday: chat's replica b restarts at noon (a new series; the old one marked
// stale, as Prometheus does), embed's replica restarts halfway through a
// window, code appears at 08:00, and summarize's scrapes fail from window 100
// to 102. want is each
// service's load per window as --prometheus must read it: the gap taken at
// the higher load either side, nothing before code appears.
func history() (samples []promtest.Sample, want map[string][]float64) {
	const windows = 144
	from := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	want = map[string][]float64{"chat": make([]float64, windows), "code": make([]float64, windows), "summarize": make([]float64, windows)}
	// scrapes writes the k-th scrapes of window i in [from, to).
	scrapes := func(service, pod string, i, first, last int, running, waiting float64) {
		for k := first; k < last; k++ {
			at := from.Add(time.Duration(i)*10*time.Minute + 15*time.Second + time.Duration(k)*30*time.Second)
			for name, v := range map[string]float64{"vllm:num_requests_running": running, "vllm:num_requests_waiting": waiting} {
				samples = append(samples, promtest.Sample{Labels: map[string]string{"__name__": name, "model_name": service, "namespace": "serving", "pod": pod}, T: at, V: v})
			}
		}
	}
	scrape := func(service, pod string, i int, running, waiting float64) {
		want[service][i] += running + waiting
		scrapes(service, pod, i, 0, 20, running, waiting)
	}
	// Prometheus marks a series stale at the first scrape that misses it.
	stale := func(service, pod string, i, k int) {
		at := from.Add(time.Duration(i)*10*time.Minute + 15*time.Second + time.Duration(k)*30*time.Second)
		for _, name := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting"} {
			samples = append(samples, promtest.Sample{Labels: map[string]string{"__name__": name, "model_name": service, "namespace": "serving", "pod": pod}, T: at, V: promtest.Stale})
		}
	}
	stale("chat", "chat-b", 72, 0)
	stale("summarize", "summarize-a", 100, 0)
	// embed's replica restarts halfway through window 30: one replica all along.
	want["embed"] = make([]float64, windows)
	stale("embed", "embed-a", 30, 10)
	for i := range windows {
		want["embed"][i] = 2
		switch {
		case i < 30:
			scrapes("embed", "embed-a", i, 0, 20, 2, 0)
		case i == 30:
			scrapes("embed", "embed-a", i, 0, 10, 2, 0)
			scrapes("embed", "embed-a2", i, 10, 20, 2, 0)
		default:
			scrapes("embed", "embed-a2", i, 0, 20, 2, 0)
		}
	}
	for i := range windows {
		scrape("chat", "chat-a", i, float64(3+i%7), float64(i%3))
		if i < 72 {
			scrape("chat", "chat-b", i, 2, 0)
		} else {
			scrape("chat", "chat-b2", i, float64(i%4), 1)
		}
		if i >= 48 {
			scrape("code", "code-a", i, float64(5+i%4), 1)
		}
		if i < 100 || i > 102 {
			scrape("summarize", "summarize-a", i, float64(4+i%5), 0)
		}
	}
	s := want["summarize"]
	for i := 100; i <= 102; i++ {
		s[i] = max(s[99], s[103])
	}
	return samples, want
}

const (
	historyUntil = "2026-11-24T00:00:00Z"
	historyFrom  = "2026-11-23T00:00:00Z"
)

// TestSimulatePrometheusMatchesTheCSV: the history read from Prometheus'
// query engine gives the loads written, and a simulation over it the same
// figures as --services over the equivalent CSV.
func TestSimulatePrometheusMatchesTheCSV(t *testing.T) {
	samples, want := history()
	prom := promtest.Start(t, samples)

	from, _ := time.Parse(time.RFC3339, historyFrom)
	to, _ := time.Parse(time.RFC3339, historyUntil)
	fleet, notes, err := simulate.ReadPrometheus(context.Background(), simulate.PrometheusQuery{URL: prom.URL, From: from, To: to, Step: 10 * time.Minute, GroupBy: "model_name"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]float64{}
	for _, s := range fleet.Services {
		got[s.Name] = s.Rates
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("loads read:\n%v\nwant\n%v", got, want)
	}
	for _, n := range []string{
		"service code: first seen at 2026-11-23T08:00:00Z; no load before",
		"service summarize: no samples from 2026-11-23T16:40:00Z to 2026-11-23T17:10:00Z (3 windows of 10m0s",
	} {
		if !strings.Contains(strings.Join(notes, "\n"), n) {
			t.Errorf("notes %q lack %q", notes, n)
		}
	}

	var csv strings.Builder
	csv.WriteString("window_start_s,service,rate_req_per_s\n")
	for i := range 144 {
		for _, name := range []string{"chat", "code", "embed", "summarize"} {
			fmt.Fprintf(&csv, "%d,%s,%s\n", i*600, name, strconv.FormatFloat(want[name][i], 'g', -1, 64))
		}
	}
	path := filepath.Join(t.TempDir(), "services.csv")
	if err := os.WriteFile(path, []byte(csv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	common := []string{"simulate", "--days", "1", "--policy", "forecast", "--format", "json"}
	fromCSV, stderr, code := gleaner(t, append(common, "--services", path, "--replica-capacity", "16")...)
	if code != 0 {
		t.Fatalf("--services: exit %d: %s", code, stderr)
	}
	fromProm, stderr, code := gleaner(t, append(common, "--prometheus", prom.URL, "--since", "1d", "--until", historyUntil)...)
	if code != 0 {
		t.Fatalf("--prometheus: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "note: service code: first seen") {
		t.Errorf("stderr %q: want the notes", stderr)
	}
	if _, stderr, _ := gleaner(t, "simulate", "--days", "2", "--policy", "none", "--prometheus", prom.URL, "--since", "1d", "--until", historyUntil); !strings.Contains(stderr, "note: the history covers 24h0m0s; --days 2 replays it") {
		t.Errorf("stderr %q: want a note that two days replay a one-day history", stderr)
	}
	if fromProm != fromCSV {
		t.Fatalf("--prometheus gave\n%s\n--services on the same loads gave\n%s", fromProm, fromCSV)
	}
	if !strings.Contains(fromProm, `"harvestedGpuHours"`) {
		t.Fatalf("no figures in %s", fromProm)
	}
}

// TestSimulatePrometheusErrors: what a new user gets wrong, each said plainly.
func TestSimulatePrometheusErrors(t *testing.T) {
	samples, _ := history()
	secured := promtest.Start(t, samples)
	secured.Token = "right"
	other := promtest.Start(t, []promtest.Sample{{Labels: map[string]string{"__name__": "up", "job": "node"}, T: time.Date(2026, 11, 23, 1, 0, 0, 0, time.UTC), V: 1}})
	dir := t.TempDir()
	wrong := filepath.Join(dir, "token")
	if err := os.WriteFile(wrong, []byte("wrong\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	right := filepath.Join(dir, "right")
	if err := os.WriteFile(right, []byte("right\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	window := []string{"--since", "1d", "--until", historyUntil, "--days", "1", "--policy", "none"}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--prometheus", "http://127.0.0.1:1"}, "http://127.0.0.1:1 cannot be reached"},
		{[]string{"--prometheus", "prometheus:9090"}, `want an http:// or https:// URL`},
		{[]string{"--prometheus", secured.URL, "--bearer-token-file", wrong}, "refused the credentials (HTTP 401)"},
		{[]string{"--prometheus", secured.URL}, "refused the credentials (HTTP 401)"},
		{[]string{"--prometheus", other.URL}, "no vllm:num_requests_running and vllm:num_requests_waiting series"},
		{[]string{"--prometheus", secured.URL, "--bearer-token-file", right, "--group-by", "team"}, "some vLLM series have no team label"},
		{[]string{"--prometheus", secured.URL, "--since", "a while"}, `--since "a while"`},
		{[]string{"--prometheus", secured.URL, "--services", "x.csv"}, "give one source of inference load"},
		{[]string{"--prometheus", secured.URL, "--basic-auth-user", "me"}, "--basic-auth-user needs --basic-auth-password-file"},
	} {
		args := append(append([]string{"simulate"}, window...), tt.args...)
		_, stderr, code := gleaner(t, args...)
		if code != 1 || !strings.Contains(stderr, tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 1 and %q", tt.args, code, stderr, tt.want)
		}
	}
	// The right token reads the history.
	if _, stderr, code := gleaner(t, append(append([]string{"simulate"}, window...), "--prometheus", secured.URL, "--bearer-token-file", right)...); code != 0 {
		t.Fatalf("with the right token: exit %d: %s", code, stderr)
	}
}

// TestSimulatePrometheusKeepsCredentialsHome: the token or password goes only
// to the server given. A redirect to another host, or from https to http, is
// refused before anything reaches it; one within the server is followed; an
// answer over the size cap is an error, not a process out of memory.
func TestSimulatePrometheusKeepsCredentialsHome(t *testing.T) {
	samples, _ := history()
	prom := promtest.Start(t, samples)
	prom.Token = "right"
	var reached, credentials atomic.Int64
	stranger := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		if r.Header.Get("Authorization") != "" {
			credentials.Add(1)
		}
		http.NotFound(w, r)
	}))
	defer stranger.Close()
	redirect := func(to string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, to+r.URL.RequestURI(), http.StatusTemporaryRedirect)
		}
	}
	elsewhere := httptest.NewServer(redirect(stranger.URL))
	defer elsewhere.Close()
	downgrade := httptest.NewTLSServer(redirect("http://" + stranger.Listener.Addr().String()))
	defer downgrade.Close()
	// within moved its API under /prom, and says so.
	promURL, _ := url.Parse(prom.URL)
	proxy := httputil.NewSingleHostReverseProxy(promURL)
	within := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rest, ok := strings.CutPrefix(r.URL.Path, "/prom/"); ok {
			r.URL.Path = "/" + rest
			proxy.ServeHTTP(w, r)
			return
		}
		http.Redirect(w, r, "/prom"+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	}))
	defer within.Close()
	huge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"status":"success","data":{"resultType":"matrix","result":[`)
		for i := range 100_000 { // 5 MB of series, streamed
			fmt.Fprintf(w, `{"metric":{"model_name":"m%d"},"values":[]},`, i)
		}
		fmt.Fprint(w, `{"metric":{},"values":[]}]}}`)
	}))
	defer huge.Close()

	dir := t.TempDir()
	token, password := filepath.Join(dir, "token"), filepath.Join(dir, "password")
	for path, secret := range map[string]string{token: "right\n", password: "secret\n"} {
		if err := os.WriteFile(path, []byte(secret), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	window := []string{"simulate", "--since", "1d", "--until", historyUntil, "--days", "1", "--policy", "none"}
	for _, tt := range []struct {
		name string
		args []string
		want string // "" for success
	}{
		{"a redirect to another host", []string{"--prometheus", elsewhere.URL, "--bearer-token-file", token},
			"refusing to follow a redirect from http://" + elsewhere.Listener.Addr().String() + " to http://" + stranger.Listener.Addr().String()},
		{"a redirect from https to http", []string{"--prometheus", downgrade.URL, "--tls-insecure-skip-verify", "--basic-auth-user", "me", "--basic-auth-password-file", password},
			"refusing to follow a redirect from https://"},
		{"a redirect within the server", []string{"--prometheus", within.URL, "--bearer-token-file", token}, ""},
		{"an answer over the cap", []string{"--prometheus", huge.URL, "--prometheus-max-response-bytes", "1048576"},
			"the answer is larger than 1048576 bytes"},
	} {
		_, stderr, code := gleaner(t, append(window, tt.args...)...)
		switch {
		case tt.want == "" && code != 0:
			t.Errorf("%s: exit %d: %s", tt.name, code, stderr)
		case tt.want != "" && (code != 1 || !strings.Contains(stderr, tt.want)):
			t.Errorf("%s: exit %d, stderr %q; want exit 1 and %q", tt.name, code, stderr, tt.want)
		}
	}
	if n, c := reached.Load(), credentials.Load(); n != 0 {
		t.Errorf("the server redirected to was reached %d times, %d with credentials", n, c)
	}
}
