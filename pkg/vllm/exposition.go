package vllm

import (
	"bytes"
	"math"
	"strconv"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"
)

// exposition is what Parse reads of one scrape: the families named in
// wanted, each with its series in the order the text gave them. scan fills
// it from the selected lines where they keep to the form vLLM writes;
// anywhere they do not, expfmt's parser reads them and fromFamilies fills
// it, so a scan can only be faster, never different (FuzzParse holds the
// two to the same Metrics and errors). What it holds refers to the text it
// was read from and is valid until the next read.
type exposition struct {
	families []family // by index in wantedNames
	touched  []int    // the families this read created
	// others are the families expfmt read of names Parse does not read
	// (from a line selectLines could not classify): only their labels
	// count, toward Limits.MaxLabelValues.
	others  []family
	labels  []label // the series' labels, one after another
	scratch []label // one line's labels while it is read
	engines map[string]bool
	models  map[string]bool
}

// Beyond these, scan declines a line to expfmt: vLLM writes 2 or 3 labels a
// series and one histogram series per engine. They bound scan's own cost
// (a line's duplicate labels, a histogram line's series) on hostile input.
const (
	scanMaxLabels          = 16
	scanMaxHistogramSeries = 64
)

// family is one metric family: its type and its series.
type family struct {
	name    string // set in others only
	typ     dto.MetricType
	created bool // a TYPE line or a sample named it
	series  []series
}

// series is one series: its labels (in a histogram, without "le") and its
// value, or its buckets, count and sum.
type series struct {
	labels []label
	value  float64
	hist   rawHistogram
}

// rawHistogram is a histogram series as written: seriesHistogram checks it.
type rawHistogram struct {
	bounds, counts   []float64
	count, sum       float64
	hasCount, hasSum bool
}

type label struct{ name, value []byte }

func newExposition() *exposition {
	return &exposition{families: make([]family, len(wantedNames)), engines: map[string]bool{}, models: map[string]bool{}}
}

// reset forgets the last read, keeping the memory it used but no reference
// into the text it read, so that a pooled exposition holds no scrape body.
func (e *exposition) reset() {
	for _, i := range e.touched {
		f := &e.families[i]
		for j := range f.series {
			f.series[j].labels = nil
		}
		f.typ, f.created, f.series = 0, false, f.series[:0]
	}
	e.others = nil
	if cap(e.labels) > 4*DefaultMaxSeries { // let a hostile scrape's arena go
		e.labels = nil
	}
	clear(e.labels)
	clear(e.scratch[:cap(e.scratch)]) // a line with fewer labels left those of the one before
	e.touched, e.labels, e.scratch = e.touched[:0], e.labels[:0], e.scratch[:0]
	clear(e.engines)
	clear(e.models)
}

// family returns the family of a name Parse reads, or nil when the
// exposition has no series of it (as expfmt drops families without samples).
func (e *exposition) family(name string) *family {
	if i, ok := wanted[name]; ok && len(e.families[i].series) > 0 {
		return &e.families[i]
	}
	return nil
}

func (e *exposition) create(i int, typ dto.MetricType) *family {
	f := &e.families[i]
	f.typ, f.created = typ, true
	e.touched = append(e.touched, i)
	return f
}

// A sample's part of its family, as expfmt tells them apart by suffix.
type part int

const (
	plainSample part = iota
	bucketSample
	countSample
	sumSample
)

// scan reads text, the selected lines of an exposition, and reports whether
// it could: it declines (false) anything it does not read exactly as
// expfmt's text parser would, leaving the exposition to fromFamilies. It
// reads TYPE lines of gauges, counters, untyped metrics and histograms,
// then samples of those families with quoted label values without escapes
// and a value without a timestamp, every line ended by a newline.
func (e *exposition) scan(text []byte) bool {
	e.reset()
	for len(text) > 0 {
		line, rest, ok := bytes.Cut(text, []byte("\n"))
		if !ok {
			return false // unterminated: expfmt reports the end of input
		}
		text = rest
		if len(trimBlanks(line)) == 0 {
			continue
		}
		if line[0] == '#' {
			if !e.typeLine(line) {
				return false
			}
			continue
		}
		if !e.sample(line) {
			return false
		}
	}
	return true
}

// typeLine reads "# TYPE <name> <type>" for a family not yet named.
func (e *exposition) typeLine(line []byte) bool {
	rest, ok := bytes.CutPrefix(line, []byte("# TYPE "))
	if !ok {
		return false
	}
	name, typ, ok := bytes.Cut(rest, []byte(" "))
	if !ok {
		return false
	}
	i, ok := wanted[string(name)]
	if !ok || e.families[i].created {
		return false // expfmt: a second TYPE line, or TYPE after samples
	}
	if base, _ := e.histogramOf(name); base >= 0 {
		return false // expfmt would name the histogram a second time
	}
	var t dto.MetricType
	switch string(typ) {
	case "gauge":
		t = dto.MetricType_GAUGE
	case "counter":
		t = dto.MetricType_COUNTER
	case "untyped":
		t = dto.MetricType_UNTYPED
	case "histogram":
		t = dto.MetricType_HISTOGRAM
	default:
		return false
	}
	e.create(i, t)
	return true
}

// histogramOf is the histogram family name's _bucket, _count or _sum
// series belongs to (-1 for none), as expfmt resolves a name that is not a
// family of its own.
func (e *exposition) histogramOf(name []byte) (int, part) {
	for _, s := range [...]struct {
		suffix string
		part   part
	}{{"_bucket", bucketSample}, {"_count", countSample}, {"_sum", sumSample}} {
		base, ok := bytes.CutSuffix(name, []byte(s.suffix))
		if !ok || len(base) == 0 {
			continue
		}
		if i, ok := wanted[string(base)]; ok && e.families[i].created && e.families[i].typ == dto.MetricType_HISTOGRAM {
			return i, s.part
		}
		return -1, plainSample
	}
	return -1, plainSample
}

// sample reads one sample line: name, labels, value.
func (e *exposition) sample(line []byte) bool {
	name, rest := legacyName(line)
	if name == nil || len(rest) == 0 || (rest[0] != '{' && rest[0] != ' ' && rest[0] != '\t') {
		return false
	}
	i, ok := wanted[string(name)]
	if !ok {
		return false
	}
	f, p := &e.families[i], plainSample
	if !f.created {
		if base, bp := e.histogramOf(name); base >= 0 {
			f, p = &e.families[base], bp
		} else {
			f = e.create(i, dto.MetricType_UNTYPED)
		}
	}
	histogram := f.typ == dto.MetricType_HISTOGRAM
	if histogram && p == plainSample {
		return false
	}
	rest = trimBlanks(rest)
	e.scratch = e.scratch[:0]
	le := math.NaN()
	if len(rest) > 0 && rest[0] == '{' {
		var ok bool
		if rest, ok = e.readLabels(rest[1:]); !ok {
			return false
		}
		if histogram {
			for j, l := range e.scratch {
				if string(l.name) != "le" {
					continue
				}
				if le, ok = parseValue(l.value); !ok || p != bucketSample {
					return false
				}
				e.scratch = append(e.scratch[:j], e.scratch[j+1:]...)
				break
			}
		}
	}
	if p == bucketSample && math.IsNaN(le) {
		return false
	}
	rest = trimBlanks(rest)
	end := bytes.IndexAny(rest, " \t")
	if end >= 0 {
		return false // a timestamp, or blanks expfmt would read as one
	}
	v, ok := parseValue(rest)
	if !ok {
		return false
	}
	if !histogram {
		f.series = append(f.series, series{labels: e.keep(e.scratch), value: v})
		return true
	}
	s := e.histogramSeries(f)
	if s == nil {
		return false
	}
	switch p {
	case bucketSample, countSample:
		if v < 0 || (v == 0 && math.Signbit(v)) {
			return false // expfmt: a negative count, or -0 read as 0
		}
		if p == countSample {
			if s.hist.hasCount {
				return false // expfmt keeps an integer and a fraction apart
			}
			s.hist.count, s.hist.hasCount = v, true
		} else {
			s.hist.bounds, s.hist.counts = append(s.hist.bounds, le), append(s.hist.counts, v)
		}
	case sumSample:
		if s.hist.hasSum {
			return false
		}
		s.hist.sum, s.hist.hasSum = v, true
	}
	return true
}

// readLabels reads a label set after its '{' and returns what follows its '}'.
func (e *exposition) readLabels(s []byte) (rest []byte, ok bool) {
	for {
		s = trimBlanks(s)
		if len(s) == 0 {
			return nil, false
		}
		if s[0] == '}' {
			return s[1:], true
		}
		name, after := labelName(s)
		if name == nil || string(name) == "__name__" {
			return nil, false
		}
		after = trimBlanks(after)
		if len(after) == 0 || after[0] != '=' {
			return nil, false
		}
		after = trimBlanks(after[1:])
		if len(after) == 0 || after[0] != '"' {
			return nil, false
		}
		end := bytes.IndexByte(after[1:], '"')
		if end < 0 {
			return nil, false
		}
		value := after[1 : 1+end]
		if bytes.IndexByte(value, '\\') >= 0 || !utf8.Valid(value) {
			return nil, false
		}
		if len(e.scratch) >= scanMaxLabels {
			return nil, false
		}
		for _, l := range e.scratch {
			if bytes.Equal(l.name, name) {
				return nil, false
			}
		}
		e.scratch = append(e.scratch, label{name: name, value: value})
		s = trimBlanks(after[2+end:])
		if len(s) == 0 {
			return nil, false
		}
		switch s[0] {
		case ',':
			s = s[1:]
		case '}':
			return s[1:], true
		default:
			return nil, false
		}
	}
}

// keep stores one line's labels for its series.
func (e *exposition) keep(labels []label) []label {
	start := len(e.labels)
	e.labels = append(e.labels, labels...)
	return e.labels[start:len(e.labels):len(e.labels)]
}

// histogramSeries is the series of f with the line's labels (as a set, as
// expfmt signs them), made on its first line; nil past scanMaxHistogramSeries.
func (e *exposition) histogramSeries(f *family) *series {
	for i := range f.series {
		if sameLabels(f.series[i].labels, e.scratch) {
			return &f.series[i]
		}
	}
	n := len(f.series)
	if n >= scanMaxHistogramSeries {
		return nil
	}
	if n < cap(f.series) {
		f.series = f.series[:n+1]
		s := &f.series[n]
		s.hist = rawHistogram{bounds: s.hist.bounds[:0], counts: s.hist.counts[:0]}
	} else {
		f.series = append(f.series, series{})
	}
	s := &f.series[n]
	s.labels, s.value = e.keep(e.scratch), 0
	return s
}

func sameLabels(a, b []label) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		found := false
		for _, y := range b {
			if bytes.Equal(x.name, y.name) {
				found = bytes.Equal(x.value, y.value)
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// labelName splits a leading [a-zA-Z_][a-zA-Z0-9_]* off s; nil if none.
func labelName(s []byte) (name, after []byte) {
	if len(s) == 0 || nameByte[s[0]] != 1 || s[0] == ':' {
		return nil, s
	}
	i := 1
	for i < len(s) && nameByte[s[i]] != 0 && s[i] != ':' {
		i++
	}
	return s[:i], s[i:]
}

// parseValue reads a float as expfmt does.
func parseValue(s []byte) (float64, bool) {
	if len(s) == 0 || bytes.ContainsAny(s, "pP_") {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(s), 64)
	return v, err == nil
}

// fromFamilies fills the exposition from expfmt's families.
func (e *exposition) fromFamilies(families map[string]*dto.MetricFamily) {
	e.reset()
	for name, mf := range families {
		var f *family
		if i, ok := wanted[name]; ok {
			f = e.create(i, mf.GetType())
		} else {
			e.others = append(e.others, family{name: name, typ: mf.GetType()})
			f = &e.others[len(e.others)-1]
		}
		for _, metric := range mf.GetMetric() {
			var labels []label
			for _, lp := range metric.GetLabel() {
				labels = append(labels, label{name: []byte(lp.GetName()), value: []byte(lp.GetValue())})
			}
			s := series{labels: labels}
			switch mf.GetType() {
			case dto.MetricType_GAUGE:
				s.value = metric.GetGauge().GetValue()
			case dto.MetricType_COUNTER:
				s.value = metric.GetCounter().GetValue()
			case dto.MetricType_UNTYPED:
				s.value = metric.GetUntyped().GetValue()
			case dto.MetricType_HISTOGRAM:
				dh := metric.GetHistogram()
				for _, b := range dh.GetBucket() {
					count := float64(b.GetCumulativeCount())
					if b.CumulativeCountFloat != nil {
						count = b.GetCumulativeCountFloat()
					}
					s.hist.bounds = append(s.hist.bounds, b.GetUpperBound())
					s.hist.counts = append(s.hist.counts, count)
				}
				s.hist.count = float64(dh.GetSampleCount())
				if dh.SampleCountFloat != nil {
					s.hist.count = dh.GetSampleCountFloat()
				}
				s.hist.sum = dh.GetSampleSum()
			}
			f.series = append(f.series, s)
		}
	}
}
