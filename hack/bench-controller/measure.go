package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape reads a Prometheus text endpoint.
func scrape(ctx context.Context, url, token string) (map[string]*dto.MetricFamily, error) {
	body, err := get(ctx, url, token)
	if err != nil {
		return nil, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(bytes.NewReader(body))
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// gauge is the value of the first series of a gauge or counter family.
func gauge(mfs map[string]*dto.MetricFamily, name string) float64 {
	mf := mfs[name]
	if mf == nil || len(mf.Metric) == 0 {
		return 0
	}
	m := mf.Metric[0]
	if m.Gauge != nil {
		return m.Gauge.GetValue()
	}
	return m.Counter.GetValue()
}

// requests are the API server's apiserver_request_total by "VERB resource[/subresource]".
type requests map[string]float64

func apiRequests(mfs map[string]*dto.MetricFamily) requests {
	out := requests{}
	mf := mfs["apiserver_request_total"]
	if mf == nil {
		return out
	}
	for _, m := range mf.Metric {
		res := label(m, "resource")
		if res == "" {
			continue // non-resource URLs: /metrics, /readyz
		}
		if sub := label(m, "subresource"); sub != "" {
			res += "/" + sub
		}
		out[label(m, "verb")+" "+res] += m.Counter.GetValue()
	}
	return out
}

func (r requests) minus(before requests) requests {
	out := requests{}
	for k, v := range r {
		if d := v - before[k]; d > 0.5 {
			out[k] = d
		}
	}
	return out
}

func isWrite(key string) bool {
	verb, _, _ := strings.Cut(key, " ")
	switch verb {
	case "POST", "PUT", "PATCH", "DELETE", "APPLY", "CREATE", "UPDATE":
		return true
	}
	return false
}

// byVerb sums requests per verb.
func (r requests) byVerb() map[string]float64 {
	out := map[string]float64{}
	for k, v := range r {
		verb, _, _ := strings.Cut(k, " ")
		out[verb] += v
	}
	return out
}

func formatCounts(m map[string]float64, per float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		v := m[k] / per
		if per == 1 {
			parts = append(parts, fmt.Sprintf("%s %.0f", k, v))
		} else {
			parts = append(parts, fmt.Sprintf("%s %.1f", k, v))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// logLine is one klog line of the controller's: its time, message and key=value pairs.
type logLine struct {
	at   time.Time
	msg  string
	kv   map[string]string
	file string
}

// klog's text header: Lmmdd hh:mm:ss.uuuuuu threadid file:line] "msg" k=v ...
var klogLine = regexp.MustCompile(`^[IWEF](\d{2})(\d{2}) (\d{2}:\d{2}:\d{2}\.\d{6})\s+\d+ ([^\]]+)\] "((?:[^"\\]|\\.)*)"(.*)$`)
var kvPair = regexp.MustCompile(`([A-Za-z]+)=("(?:[^"\\]|\\.)*"|\S+)`)

// readLog parses the controller log lines with one of msgs.
func readLog(path string, msgs ...string) ([]logLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	want := map[string]bool{}
	for _, m := range msgs {
		want[m] = true
	}
	year := time.Now().Year()
	var out []logLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := klogLine.FindStringSubmatch(sc.Text())
		if m == nil || !want[m[5]] {
			continue
		}
		at, err := time.ParseInLocation("2006-01-02 15:04:05.000000", fmt.Sprintf("%d-%s-%s %s", year, m[1], m[2], m[3]), time.Local)
		if err != nil {
			continue
		}
		l := logLine{at: at, msg: m[5], file: m[4], kv: map[string]string{}}
		for _, p := range kvPair.FindAllStringSubmatch(m[6], -1) {
			l.kv[p[1]] = strings.Trim(p[2], `"`)
		}
		out = append(out, l)
	}
	return out, sc.Err()
}

func (l logLine) float(key string) float64 {
	v, _ := strconv.ParseFloat(l.kv[key], 64)
	return v
}

func within(lines []logLine, from, to time.Time) []logLine {
	var out []logLine
	for _, l := range lines {
		if !l.at.Before(from) && !l.at.After(to) {
			out = append(out, l)
		}
	}
	return out
}

func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	i := int(q * float64(len(s)-1))
	return s[i]
}

// sampler keeps the controller process's peak resident memory.
type sampler struct {
	mu     sync.Mutex
	pid    int
	maxRSS float64
}

func (s *sampler) run(ctx context.Context) {
	for ctx.Err() == nil {
		s.mu.Lock()
		if s.pid != 0 {
			s.maxRSS = max(s.maxRSS, rssBytes(s.pid))
		}
		s.mu.Unlock()
		_ = sleep(ctx, 250*time.Millisecond)
	}
}

// reset follows pid from now on and returns the peak since the last reset.
func (s *sampler) reset(pid int) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	peak := s.maxRSS
	s.pid, s.maxRSS = pid, rssBytes(pid)
	return peak
}
