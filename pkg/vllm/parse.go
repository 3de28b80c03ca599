// Package vllm is Gleaner's view of vLLM inference load: it parses vLLM's
// Prometheus /metrics, scrapes it from inference pods, and keeps the latest
// sample per pod. Anything missing, stale or malformed is reported as such so
// that consumers treat the pod as busy, never as idle.
package vllm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// vLLM metric and label names: V1 (2025-2026) first, then the older name
// read only when the V1 one is absent.
const (
	metricRunning          = "vllm:num_requests_running"
	metricWaiting          = "vllm:num_requests_waiting"
	metricKVCacheUsage     = "vllm:kv_cache_usage_perc"
	metricGPUCacheUsage    = "vllm:gpu_cache_usage_perc" // up to vLLM 0.10
	metricPromptTokens     = "vllm:prompt_tokens_total"
	metricGenerationTokens = "vllm:generation_tokens_total"
	metricPreemptions      = "vllm:num_preemptions_total"

	metricQueueTime          = "vllm:request_queue_time_seconds"
	metricTimeToFirstToken   = "vllm:time_to_first_token_seconds"
	metricInterTokenLatency  = "vllm:inter_token_latency_seconds"
	metricTimePerOutputToken = "vllm:time_per_output_token_seconds" // older name of inter_token_latency_seconds
	labelEngine              = "engine"
	labelModel               = "model_name"

	// Sleep mode. vLLM (since late 2025) writes it as a state set, one
	// series per state of each engine, at most one of them 1:
	// sleep_state="awake", "weights_offloaded" (level 1) or "discard_all"
	// (level 2); all three 0 mean asleep at a level it has no state for
	// (level 0: scheduling paused, memory kept). The metric's first draft had
	// no sleep_state label (1 = asleep) and a level gauge beside it; both
	// forms are read (see sleep).
	metricSleepState      = "vllm:engine_sleep_state"
	metricSleepLevel      = "vllm:engine_sleep_level"
	labelSleepState       = "sleep_state"
	sleepAwake            = "awake"
	sleepWeightsOffloaded = "weights_offloaded"
	sleepDiscardAll       = "discard_all"
)

// Metrics is one parsed vLLM /metrics exposition.
type Metrics struct {
	Running      float64  // vllm:num_requests_running, summed over `engine` label values
	Waiting      float64  // vllm:num_requests_waiting, summed over engines
	KVCacheUsage float64  // vllm:kv_cache_usage_perc (0..1) averaged over engines; fallback vllm:gpu_cache_usage_perc; 0 if neither
	Engines      int      // distinct `engine` label values (1 when the label is absent)
	Models       []string // sorted distinct model_name values
	// Counters, summed over engines; the Informer derives rates from deltas between scrapes (see Rates).
	PromptTokensTotal     float64 // vllm:prompt_tokens_total
	GenerationTokensTotal float64 // vllm:generation_tokens_total
	PreemptionsTotal      float64 // vllm:num_preemptions_total
	// Latency histograms since the server started, buckets summed over engines;
	// empty when the server does not expose them.
	QueueTime        Histogram // vllm:request_queue_time_seconds
	TimeToFirstToken Histogram // vllm:time_to_first_token_seconds
	// vllm:inter_token_latency_seconds, fallback vllm:time_per_output_token_seconds:
	// _count and _sum only (one +Inf bucket), enough for a mean; see wanted.
	InterTokenLatency Histogram
	// Sleep mode, from vllm:engine_sleep_state (and vllm:engine_sleep_level
	// where a server has it): the engines that report a sleep state, those
	// of them asleep, and the deepest level among those (0: none asleep, or
	// no level named; 1: weights offloaded to CPU memory, KV cache dropped;
	// 2: weights and KV cache dropped). An engine asleep serves nothing until
	// woken, yet its process keeps its GPUs. An engine that reports no state
	// is awake, as before vLLM had the metric.
	SleepReported int
	Sleeping      int
	SleepLevel    int
}

// Asleep says the whole server sleeps: every engine it names reports that
// it is asleep. A server with any engine awake still serves.
func (m Metrics) Asleep() bool { return m.Sleeping > 0 && m.Sleeping >= m.Engines }

// Histogram is a cumulative Prometheus histogram: Counts[i] observations were
// at most Bounds[i]. Bounds ascend and, when not empty, end with +Inf, whose
// count equals Count.
type Histogram struct {
	Bounds []float64
	Counts []float64
	Count  float64 // observations
	Sum    float64 // sum of observed values
}

// ErrNotVLLM: the exposition parsed but has none of vLLM's load metrics.
var ErrNotVLLM = errors.New("not a vLLM metrics endpoint")

// ErrTooManySeries and ErrTooManyLabelValues: the exposition has more series
// of the families Gleaner reads, or more distinct values of one of their
// labels, than a vLLM server exposes (see Limits). Nothing of it is read: its
// pod counts as busy, and parsing it costs no more memory than the cap allows.
var (
	ErrTooManySeries      = errors.New("too many series")
	ErrTooManyLabelValues = errors.New("too many distinct label values")
)

// Defaults of Limits. A vLLM server exposes about 60 series of the families
// Gleaner reads per engine (most of them histogram buckets), with one engine
// label value per engine and one model_name: 8 data-parallel engines come to
// about 500 series and 9 label values.
const (
	DefaultMaxSeries      = 4096
	DefaultMaxLabelValues = 256
)

// Limits bound what one exposition may hold of the families Gleaner reads.
// A scrape body is written by whoever runs the pod: 10^5 series cost tens of
// megabytes to parse, and every distinct model_name is kept per pod, so
// without a cap one endpoint could grow the controller's memory until it is
// killed. Zero values take the defaults.
type Limits struct {
	// MaxSeries: sample lines (each histogram bucket is one), counted before
	// parsing, so the parser never sees more.
	MaxSeries int
	// MaxLabelValues: distinct values of any one label (but a bucket's "le")
	// over those series.
	MaxLabelValues int
}

func (l Limits) withDefaults() Limits {
	if l.MaxSeries <= 0 {
		l.MaxSeries = DefaultMaxSeries
	}
	if l.MaxLabelValues <= 0 {
		l.MaxLabelValues = DefaultMaxLabelValues
	}
	return l
}

// Parse reads one Prometheus text exposition from a vLLM server. It fails when
// the text is malformed, when a value Gleaner reads is negative or not finite,
// when a histogram's buckets are inconsistent, when a sleep state is not 0 or
// 1 or contradicts itself (an engine reads as asleep only when its series
// agree), or when the exposition has neither vllm:num_requests_running nor
// vllm:num_requests_waiting (ErrNotVLLM: the endpoint is not vLLM, or the
// scrape is truncated before them). On error the returned Metrics is zero: a
// partly read exposition must not look idle. A parse error names the line by
// its number and quotes it. An exposition over the default Limits fails with
// ErrTooManySeries or ErrTooManyLabelValues.
//
// Only the families Gleaner reads go through the parser (see selectLines);
// lines of other families are skipped unchecked. The lines kept are read by
// a scanner of the form vLLM writes them in (exposition.scan), which
// allocates almost nothing; whatever it declines, expfmt's text parser
// reads, so errors and edge cases are expfmt's.
func Parse(r io.Reader) (Metrics, error) {
	body, err := io.ReadAll(r)
	if err != nil {
		return Metrics{}, fmt.Errorf("reading vLLM metrics: %w", err)
	}
	return parseBytes(body, Limits{})
}

func parseBytes(body []byte, limits Limits) (Metrics, error) {
	limits = limits.withDefaults()
	selected := bodies.Get().(*bytes.Buffer)
	selected.Reset()
	defer func() {
		if selected.Cap() <= maxPooledBody {
			bodies.Put(selected)
		}
	}()
	whole, series := selectLines(selected, body, limits.MaxSeries)
	if series > limits.MaxSeries {
		return Metrics{}, fmt.Errorf("%w: more than %d series of the vLLM families Gleaner reads, where a vLLM server has about 60 per engine", ErrTooManySeries, limits.MaxSeries)
	}
	e := expositions.Get().(*exposition)
	defer func() {
		e.reset()
		expositions.Put(e)
	}()
	if whole || !e.scan(selected.Bytes()) {
		families, err := parseText(bytes.NewReader(selected.Bytes()))
		if err != nil {
			return Metrics{}, fmt.Errorf("parsing vLLM metrics: %w", explainParseError(body, whole, err))
		}
		e.fromFamilies(families)
	}
	if err := e.checkLabelValues(limits.MaxLabelValues); err != nil {
		return Metrics{}, err
	}
	return e.extract()
}

// expositions recycles what scans read into between scrapes.
var expositions = sync.Pool{New: func() any { return newExposition() }}

// checkLabelValues fails when a label other than a bucket's "le" takes more
// than limit distinct values over the families read.
func (e *exposition) checkLabelValues(limit int) error {
	values := map[string]map[string]struct{}{}
	check := func(name string, f *family) error {
		for _, s := range f.series {
			for _, l := range s.labels {
				if string(l.name) == model.BucketLabel {
					continue
				}
				seen := values[string(l.name)]
				if seen == nil {
					seen = map[string]struct{}{}
					values[string(l.name)] = seen
				}
				if _, ok := seen[string(l.value)]; ok {
					continue
				}
				if seen[string(l.value)] = struct{}{}; len(seen) > limit {
					return fmt.Errorf("%w: label %s of %s takes more than %d values", ErrTooManyLabelValues, l.name, name, limit)
				}
			}
		}
		return nil
	}
	for _, fi := range e.touched {
		if err := check(wantedNames[fi], &e.families[fi]); err != nil {
			return err
		}
	}
	for i := range e.others {
		if err := check(e.others[i].name, &e.others[i]); err != nil {
			return err
		}
	}
	return nil
}

// extract computes Metrics from the families read.
func (e *exposition) extract() (Metrics, error) {
	if e.family(metricRunning) == nil && e.family(metricWaiting) == nil {
		return Metrics{}, fmt.Errorf("%w: neither %s nor %s is present", ErrNotVLLM, metricRunning, metricWaiting)
	}
	var err error
	var m Metrics
	if m.Running, _, err = e.sum(metricRunning); err != nil {
		return Metrics{}, err
	}
	if m.Waiting, _, err = e.sum(metricWaiting); err != nil {
		return Metrics{}, err
	}
	kvTotal, kvSeries, err := e.sum(e.first(metricKVCacheUsage, metricGPUCacheUsage))
	if err != nil {
		return Metrics{}, err
	}
	if kvSeries > 0 {
		m.KVCacheUsage = kvTotal / float64(kvSeries)
	}
	if m.PromptTokensTotal, _, err = e.sum(metricPromptTokens); err != nil {
		return Metrics{}, err
	}
	if m.GenerationTokensTotal, _, err = e.sum(metricGenerationTokens); err != nil {
		return Metrics{}, err
	}
	if m.PreemptionsTotal, _, err = e.sum(metricPreemptions); err != nil {
		return Metrics{}, err
	}
	if m.QueueTime, err = e.histogram(metricQueueTime); err != nil {
		return Metrics{}, err
	}
	if m.TimeToFirstToken, err = e.histogram(metricTimeToFirstToken); err != nil {
		return Metrics{}, err
	}
	if m.InterTokenLatency, err = e.histogram(e.first(metricInterTokenLatency, metricTimePerOutputToken)); err != nil {
		return Metrics{}, err
	}
	if m.SleepReported, m.Sleeping, m.SleepLevel, err = e.sleep(); err != nil {
		return Metrics{}, err
	}

	// Series without an engine label land under "", so a pre-V1 server counts as one engine.
	m.Engines = len(e.engines)
	for model := range e.models {
		m.Models = append(m.Models, model)
	}
	slices.Sort(m.Models)
	return m, nil
}

// first returns the first of names the exposition has, else the last: the
// newest vLLM name is preferred and an older one read only in its absence.
// Families are looked up by exact name, so `_created` series never count.
func (e *exposition) first(names ...string) string {
	for _, name := range names {
		if e.family(name) != nil {
			return name
		}
	}
	return names[len(names)-1]
}

// note records which engine and model a series Gleaner reads covers. It
// looks before it stores: storing a key converted from bytes copies it,
// looking up does not, and most series repeat an engine and model.
func (e *exposition) note(s *series) {
	if engine := labelValue(s.labels, labelEngine); !e.engines[string(engine)] {
		e.engines[string(engine)] = true
	}
	if model := labelValue(s.labels, labelModel); len(model) > 0 && !e.models[string(model)] {
		e.models[string(model)] = true
	}
}

// sum adds up a gauge or counter family's samples; n is how many series it has.
func (e *exposition) sum(name string) (total float64, n int, err error) {
	f := e.family(name)
	if f == nil {
		return 0, 0, nil
	}
	for i := range f.series {
		s := &f.series[i]
		v, err := sampleValue(name, f, s)
		if err != nil {
			return 0, 0, err
		}
		total += v
		n++
		e.note(s)
	}
	if math.IsInf(total, 0) {
		return 0, 0, fmt.Errorf("vLLM metric %s overflows when summed over its %d series", name, n)
	}
	return total, n, nil
}

// histogram sums a histogram family's series (one per engine) bucket by
// bucket. Absent, it is the zero Histogram.
func (e *exposition) histogram(name string) (Histogram, error) {
	f := e.family(name)
	if f == nil {
		return Histogram{}, nil
	}
	if f.typ != dto.MetricType_HISTOGRAM {
		return Histogram{}, fmt.Errorf("vLLM metric %s has type %s, want histogram", name, f.typ)
	}
	var total Histogram
	for i := range f.series {
		s := &f.series[i]
		h, err := seriesHistogram(name, s)
		if err != nil {
			return Histogram{}, err
		}
		e.note(s)
		if i == 0 {
			total = h
			continue
		}
		// vLLM gives every engine the same buckets; summing different layouts
		// would need guessing how observations spread inside buckets.
		if !slices.Equal(total.Bounds, h.Bounds) {
			return Histogram{}, fmt.Errorf("vLLM histogram %s%s has buckets %v, but an earlier series has %v; series can only be summed with equal buckets",
				name, formatLabels(s.labels), h.Bounds, total.Bounds)
		}
		for j := range total.Counts {
			total.Counts[j] += h.Counts[j]
		}
		total.Count += h.Count
		total.Sum += h.Sum
	}
	if math.IsInf(total.Count, 0) || math.IsInf(total.Sum, 0) {
		return Histogram{}, fmt.Errorf("vLLM histogram %s overflows when summed over its %d series", name, len(f.series))
	}
	return total, nil
}

// seriesHistogram checks one histogram series and puts it in the Histogram
// shape: ascending bounds ending with +Inf. A series without a +Inf bucket
// (as in vLLM's own docs) gets one holding _count.
func seriesHistogram(name string, s *series) (Histogram, error) {
	raw := &s.hist
	where := name + formatLabels(s.labels)
	bad := func(format string, args ...any) (Histogram, error) {
		return Histogram{}, fmt.Errorf("vLLM histogram %s: "+format, append([]any{where}, args...)...)
	}
	var h Histogram
	h.Bounds = make([]float64, 0, len(raw.bounds)+1)
	h.Counts = make([]float64, 0, len(raw.bounds)+1)
	for i, bound := range raw.bounds {
		count := raw.counts[i]
		switch {
		case math.IsNaN(bound):
			return bad("bucket bound le=NaN")
		case len(h.Bounds) > 0 && bound <= h.Bounds[len(h.Bounds)-1]:
			return bad("bucket le=%g follows le=%g; bounds must ascend", bound, h.Bounds[len(h.Bounds)-1])
		case math.IsNaN(count) || math.IsInf(count, 0) || count < 0:
			return bad("bucket le=%g has count %v, want a finite non-negative number", bound, count)
		case len(h.Counts) > 0 && count < h.Counts[len(h.Counts)-1]:
			return bad("bucket le=%g has count %v, below the %v of the bucket before; counts must be cumulative", bound, count, h.Counts[len(h.Counts)-1])
		}
		h.Bounds = append(h.Bounds, bound)
		h.Counts = append(h.Counts, count)
	}
	h.Count, h.Sum = raw.count, raw.sum
	if math.IsNaN(h.Count) || math.IsInf(h.Count, 0) || h.Count < 0 {
		return bad("_count is %v, want a finite non-negative number", h.Count)
	}
	if math.IsNaN(h.Sum) || math.IsInf(h.Sum, 0) || h.Sum < 0 {
		return bad("_sum is %v, want a finite non-negative number", h.Sum)
	}
	n := len(h.Bounds)
	switch {
	case n > 0 && math.IsInf(h.Bounds[n-1], +1):
		// The +Inf bucket is the count; _count may be missing (read as 0).
		h.Count = h.Counts[n-1]
	case n > 0 && h.Count < h.Counts[n-1]:
		return bad("_count is %v, below its largest bucket (%v); the histogram is incomplete", h.Count, h.Counts[n-1])
	default:
		h.Bounds = append(h.Bounds, math.Inf(+1))
		h.Counts = append(h.Counts, h.Count)
	}
	return h, nil
}

// parseText runs expfmt's text parser. A scrape body is untrusted input, and
// expfmt v0.70.0 panics on some malformed lines (a nil dereference on
// "# TYPE x gauge\n{}", fixed in v0.74.0), so a panic becomes a parse error.
func parseText(r io.Reader) (families map[string]*dto.MetricFamily, err error) {
	parser := textParsers.Get().(*expfmt.TextParser)
	defer func() {
		if p := recover(); p != nil {
			// The parser is dropped: its state after a panic is unknown.
			families, err = nil, fmt.Errorf("text parser failed on malformed input: %v", p)
			return
		}
		textParsers.Put(parser)
	}()
	families, err = parser.TextToMetricFamilies(r)
	// The parser holds what it parsed until its next parse; parked in the
	// pool, one per scrape in flight, that was most of the informer's heap at
	// 10,000 endpoints. Parsing nothing lets it go and keeps the buffer.
	_, _ = parser.TextToMetricFamilies(strings.NewReader(""))
	return families, err
}

// textParsers recycles parsers (and their read buffers) between scrapes.
var textParsers = sync.Pool{New: func() any {
	// vLLM names contain ':', which the legacy scheme allows too; UTF-8
	// validation additionally accepts quoted names rather than failing on them.
	p := expfmt.NewTextParser(model.UTF8Validation)
	return &p
}}

// The text format puts every sample and every HELP or TYPE comment on a line
// of its own, naming its metric first. Parsing a vLLM exposition whole costs
// about 1 ms for 45 KB, mostly in histograms Gleaner never reads; at 2,000
// pods every 5 s that is half a core. So selectLines passes to the parser only
// the lines of the families Gleaner reads, and every line it cannot classify
// with certainty, so that malformed input still reaches the parser and fails
// there. It drops only lines that start (after blanks) with a well-formed
// legacy metric name outside wanted followed by a blank or '{', TYPE comments
// of such names, HELP comments (Gleaner reads no help text) and other
// comments, which the parser skips anyway. An unterminated last line is
// always kept, so truncation is still reported. One kind of line does not name
// its metric: a label set first, without a quoted name, belongs to the family
// of the line before it. vLLM never writes those; a body that has one is
// parsed whole.

// wanted holds the sample names Parse reads: each family's name and the
// _bucket, _sum and _count series of histograms. Of inter-token latency only
// _sum and _count are read, for its mean: its buckets would cost a fifth of
// the whole scrape, for quantiles no consumer needs.
var wantedNames = func() []string {
	var names []string
	for _, family := range []string{metricRunning, metricWaiting, metricKVCacheUsage, metricGPUCacheUsage,
		metricPromptTokens, metricGenerationTokens, metricPreemptions, metricQueueTime, metricTimeToFirstToken,
		metricSleepState, metricSleepLevel} {
		for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
			names = append(names, family+suffix)
		}
	}
	for _, family := range []string{metricInterTokenLatency, metricTimePerOutputToken} {
		for _, suffix := range []string{"", "_sum", "_count"} {
			names = append(names, family+suffix)
		}
	}
	return names
}()

// wanted is each of wantedNames by its index.
var wanted = func() map[string]int {
	index := make(map[string]int, len(wantedNames))
	for i, name := range wantedNames {
		index[name] = i
	}
	return index
}()

// classifier tells the lines the parser needs from those it does not.
// Families come in runs of lines with the same name, so it reuses the verdict
// on the previous name instead of looking each one up.
type classifier struct {
	lastName    []byte
	lastKeep    bool
	sawLabelSet bool // a line starts with a label set
}

func (c *classifier) keep(line []byte) bool {
	s := trimBlanks(line)
	if len(s) > 0 && s[0] == '#' {
		s = trimBlanks(s[1:])
		help := bytes.HasPrefix(s, []byte("HELP"))
		if !help && !bytes.HasPrefix(s, []byte("TYPE")) {
			return false // a plain comment: the parser skips it
		}
		s = s[len("HELP"):]
		if len(s) == 0 || (s[0] != ' ' && s[0] != '\t') {
			return true
		}
		name, after := legacyName(trimBlanks(s))
		if name == nil || (len(after) > 0 && after[0] != ' ' && after[0] != '\t') {
			return true
		}
		_, ok := wanted[string(name)]
		return !help && ok
	}
	if len(s) > 0 && s[0] == '{' {
		c.sawLabelSet = true
		return true
	}
	name, after := legacyName(s)
	if name == nil || len(after) == 0 || (after[0] != '{' && after[0] != ' ' && after[0] != '\t') {
		return true
	}
	if !bytes.Equal(name, c.lastName) {
		_, c.lastKeep = wanted[string(name)]
		c.lastName = name
	}
	return c.lastKeep
}

// trimBlanks drops leading spaces and tabs, as the parser skips them.
func trimBlanks(s []byte) []byte {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	return s
}

// selectLines appends to dst the lines of body the parser needs (see above),
// or all of body if a line starts with a label set (whole). series counts the
// sample lines among them (all but comments and blank lines); once it passes
// maxSeries (0: no limit) selectLines stops, with dst holding no more.
func selectLines(dst *bytes.Buffer, body []byte, maxSeries int) (whole bool, series int) {
	var c classifier
	start := dst.Len()
	for rest := body; len(rest) > 0; {
		line, after, complete := bytes.Cut(rest, []byte("\n"))
		rest = after
		keep := c.keep(line)
		if c.sawLabelSet {
			dst.Truncate(start)
			if series = sampleLines(body); maxSeries <= 0 || series <= maxSeries {
				dst.Write(body)
			}
			return true, series
		}
		if keep || !complete {
			if isSample(line) {
				if series++; maxSeries > 0 && series > maxSeries {
					return false, series
				}
			}
			dst.Write(line)
			if complete {
				dst.WriteByte('\n')
			}
		}
	}
	return false, series
}

// isSample tells a line that may hold a sample from a comment or a blank one.
func isSample(line []byte) bool {
	s := trimBlanks(line)
	return len(s) > 0 && s[0] != '#'
}

// sampleLines counts the lines of body that may hold a sample.
func sampleLines(body []byte) int {
	n := 0
	for rest := body; len(rest) > 0; {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		if isSample(line) {
			n++
		}
	}
	return n
}

// originalLine maps a line number of selectLines' output back to body.
func originalLine(body []byte, whole bool, selected int) int {
	if whole {
		return selected
	}
	var c classifier
	n, kept := 0, 0
	for len(body) > 0 {
		line, rest, complete := bytes.Cut(body, []byte("\n"))
		body = rest
		n++
		if c.keep(line) || !complete {
			if kept++; kept == selected {
				return n
			}
		}
	}
	return n + selected - kept // past the end, as for "unexpected end of input stream"
}

// nameByte marks the bytes of legacy metric names: 1 may start one, 2 only continue it.
var nameByte = func() (t [256]uint8) {
	for c := range 256 {
		switch {
		case c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'):
			t[c] = 1
		case c >= '0' && c <= '9':
			t[c] = 2
		}
	}
	return t
}()

// legacyName splits a leading [a-zA-Z_:][a-zA-Z0-9_:]* off s; name is nil if there is none.
func legacyName(s []byte) (name, after []byte) {
	if len(s) == 0 || nameByte[s[0]] != 1 {
		return nil, s
	}
	i := 1
	for i < len(s) && nameByte[s[i]] != 0 {
		i++
	}
	return s[:i], s[i:]
}

// explainParseError points a text-format error at the line of the original
// body and quotes it, so whoever reads it sees what the server sent.
func explainParseError(body []byte, whole bool, err error) error {
	var pe expfmt.ParseError
	if !errors.As(err, &pe) || pe.Line < 1 {
		return err
	}
	pe.Line = originalLine(body, whole, pe.Line)
	lines := bytes.SplitN(body, []byte("\n"), pe.Line+1)
	if len(lines) < pe.Line {
		return pe
	}
	line := string(lines[pe.Line-1])
	if len(line) > 120 {
		line = line[:120] + "..."
	}
	return fmt.Errorf("%w (line %d reads %q)", pe, pe.Line, line)
}

// sampleValue returns a gauge, counter or untyped sample, rejecting values that
// would make a load figure meaningless (NaN, ±Inf, negative).
func sampleValue(name string, f *family, s *series) (float64, error) {
	switch f.typ {
	case dto.MetricType_GAUGE, dto.MetricType_COUNTER, dto.MetricType_UNTYPED:
	default:
		return 0, fmt.Errorf("vLLM metric %s has type %s, want gauge or counter", name, f.typ)
	}
	if v := s.value; math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, fmt.Errorf("vLLM metric %s%s has value %v, want a finite non-negative number",
			name, formatLabels(s.labels), v)
	}
	return s.value, nil
}

// labelValue is the value of the label name (nil when absent).
func labelValue(labels []label, name string) []byte {
	for _, l := range labels {
		if string(l.name) == name {
			return l.value
		}
	}
	return nil
}

// formatLabels renders a series' labels for error messages, e.g. {engine="0"}.
func formatLabels(labels []label) string {
	if len(labels) == 0 {
		return ""
	}
	parts := make([]string, 0, len(labels))
	for _, l := range labels {
		parts = append(parts, fmt.Sprintf("%s=%q", l.name, l.value))
	}
	return "{" + strings.Join(parts, ",") + "}"
}
