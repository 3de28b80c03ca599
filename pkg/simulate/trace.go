package simulate

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// ServiceTrace is one inference service's request rate, one value per window.
type ServiceTrace struct {
	Name string
	// Rates[i] is the mean request rate (req/s) of window i, which starts at i x Window.
	Rates []float64
}

// Fleet is the inference traffic to replay.
type Fleet struct {
	// Window is the length of one trace window (600 s in ServeGen).
	Window   time.Duration
	Services []ServiceTrace
}

// RateAt is the request rate of service s at offset t from the start, read
// as steps: constant within a window. Past the end, the trace repeats from window 0.
func (f *Fleet) RateAt(s int, t time.Duration) float64 {
	r := f.Services[s].Rates
	return r[int(t/f.Window)%len(r)]
}

// LinearRateAt is the request rate of service s at offset t, interpolated
// linearly between the middles of consecutive windows (each window's rate is
// its mean, reached at its middle). Before the middle of window 0 it is window
// 0's rate; past the end, the trace repeats from window 0.
func (f *Fleet) LinearRateAt(s int, t time.Duration) float64 {
	r := f.Services[s].Rates
	x := float64(t)/float64(f.Window) - 0.5
	if x <= 0 {
		return r[0]
	}
	i := int(x)
	frac := x - float64(i)
	return r[i%len(r)]*(1-frac) + r[(i+1)%len(r)]*frac
}

// Peak is the highest window rate of service s.
func (f *Fleet) Peak(s int) float64 {
	var p float64
	for _, r := range f.Services[s].Rates {
		p = max(p, r)
	}
	return p
}

// Job is one best-effort job from the job stream.
type Job struct {
	Name string
	GPUs int64
	// Work is how long the job runs on its GPUs, uninterrupted, to finish.
	Work time.Duration
}

// lineError names the file and line of a bad trace row.
func lineError(file string, line int, format string, args ...any) error {
	return fmt.Errorf("%s:%d: %s", file, line, fmt.Sprintf(format, args...))
}

// csvReader reads a CSV with a header and maps the required columns.
type csvReader struct {
	file string
	r    *csv.Reader
	col  map[string]int
}

func newCSVReader(file string, in io.Reader, required []string) (*csvReader, error) {
	r := csv.NewReader(in)
	r.FieldsPerRecord = -1
	r.ReuseRecord = true
	header, err := r.Read()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s:1: empty file, want a header with columns %s", file, strings.Join(required, ","))
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	col := map[string]int{}
	for i, h := range header {
		col[strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))] = i
	}
	var missing []string
	for _, c := range required {
		if _, ok := col[c]; !ok {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return nil, lineError(file, 1, "header lacks column(s) %s (have %s)", strings.Join(missing, ","), strings.Join(header, ","))
	}
	return &csvReader{file: file, r: r, col: col}, nil
}

// next returns the next record and its line, or io.EOF.
func (c *csvReader) next() ([]string, int, error) {
	rec, err := c.r.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, 0, io.EOF
		}
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			return nil, 0, lineError(c.file, pe.Line, "%v", pe.Err)
		}
		return nil, 0, fmt.Errorf("%s: %w", c.file, err)
	}
	line, _ := c.r.FieldPos(0)
	if len(rec) < len(c.col) {
		return nil, 0, lineError(c.file, line, "%d fields, the header has %d", len(rec), len(c.col))
	}
	return rec, line, nil
}

func (c *csvReader) field(rec []string, name string) string {
	return strings.TrimSpace(rec[c.col[name]])
}

func (c *csvReader) float(rec []string, line int, name string) (float64, error) {
	s := c.field(rec, name)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, lineError(c.file, line, "column %s: %q is not a number", name, s)
	}
	return v, nil
}

// ReadServices reads a per-service rate trace from path (see ParseServices).
func ReadServices(path string) (*Fleet, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseServices(path, f)
}

// ParseServices reads a per-service rate trace, CSV with the columns
// window_start_s, service, rate_req_per_s (others are ignored): one row per
// service per window. Each service's windows must start at 0 and follow each
// other without gaps (rows of different services may interleave), every
// service with the same window length and number of windows. Rates must not
// be negative. name is used in errors, which give the line.
func ParseServices(name string, in io.Reader) (*Fleet, error) {
	c, err := newCSVReader(name, in, []string{"window_start_s", "service", "rate_req_per_s"})
	if err != nil {
		return nil, err
	}
	index := map[string]int{}
	var services []ServiceTrace
	var starts [][]float64
	var window float64
	for {
		rec, line, err := c.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		start, err := c.float(rec, line, "window_start_s")
		if err != nil {
			return nil, err
		}
		rate, err := c.float(rec, line, "rate_req_per_s")
		if err != nil {
			return nil, err
		}
		svc := c.field(rec, "service")
		switch {
		case svc == "":
			return nil, lineError(name, line, "column service is empty")
		case start < 0:
			return nil, lineError(name, line, "window_start_s %g is negative", start)
		case rate < 0:
			return nil, lineError(name, line, "rate_req_per_s %g is negative", rate)
		}
		i, ok := index[svc]
		if !ok {
			i = len(services)
			index[svc] = i
			services = append(services, ServiceTrace{Name: svc})
			starts = append(starts, nil)
		}
		st := starts[i]
		switch n := len(st); {
		case n == 0 && start != 0:
			return nil, lineError(name, line, "service %s: first window starts at %g s, want 0", svc, start)
		case n > 0 && start <= st[n-1]:
			return nil, lineError(name, line, "service %s: window %g s is not after the previous one (%g s): windows must be sorted", svc, start, st[n-1])
		case n == 1 && window == 0:
			window = start - st[0]
		case n > 0 && start-st[n-1] != window:
			return nil, lineError(name, line, "service %s: window %g s follows %g s, want windows of %g s without gaps", svc, start, st[n-1], window)
		}
		starts[i] = append(st, start)
		services[i].Rates = append(services[i].Rates, rate)
	}
	if len(services) == 0 {
		return nil, fmt.Errorf("%s: no rows", name)
	}
	if window == 0 {
		return nil, fmt.Errorf("%s: every service has a single window; need at least two to know the window length", name)
	}
	for _, s := range services[1:] {
		if len(s.Rates) != len(services[0].Rates) {
			return nil, fmt.Errorf("%s: service %s has %d windows, service %s has %d: every service must cover the same span", name, s.Name, len(s.Rates), services[0].Name, len(services[0].Rates))
		}
	}
	return &Fleet{Window: time.Duration(window * float64(time.Second)), Services: services}, nil
}

// ReadJobs reads a job trace from path (see ParseJobs).
func ReadJobs(path string) ([]Job, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseJobs(path, f)
}

// ParseJobs reads a job trace in the openb pod-list format: CSV with the
// columns name, num_gpu, creation_time, deletion_time and scheduled_time
// (seconds; others are ignored). A job's work is deletion_time minus
// scheduled_time (creation_time when scheduled_time is empty); a row that ends
// before it starts is an error. Rows asking for no GPU, and rows that ran for
// no time, are skipped: they are not GPU work. Jobs keep the trace's order.
func ParseJobs(name string, in io.Reader) ([]Job, error) {
	c, err := newCSVReader(name, in, []string{"name", "num_gpu", "creation_time", "deletion_time", "scheduled_time"})
	if err != nil {
		return nil, err
	}
	var jobs []Job
	for {
		rec, line, err := c.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		gpus, err := c.float(rec, line, "num_gpu")
		if err != nil {
			return nil, err
		}
		if gpus < 0 || gpus != math.Trunc(gpus) {
			return nil, lineError(name, line, "num_gpu %g is not a whole number of GPUs", gpus)
		}
		if gpus == 0 {
			continue
		}
		from := "scheduled_time"
		if c.field(rec, from) == "" {
			from = "creation_time"
		}
		start, err := c.float(rec, line, from)
		if err != nil {
			return nil, err
		}
		end, err := c.float(rec, line, "deletion_time")
		if err != nil {
			return nil, err
		}
		if start < 0 || end < 0 {
			return nil, lineError(name, line, "negative time (%s %g, deletion_time %g)", from, start, end)
		}
		if end < start {
			return nil, lineError(name, line, "deletion_time %g is before %s %g", end, from, start)
		}
		if end == start {
			continue // ran for no time: no GPU work
		}
		jobs = append(jobs, Job{Name: c.field(rec, "name"), GPUs: int64(gpus), Work: time.Duration((end - start) * float64(time.Second))})
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("%s: no job asks for a GPU", name)
	}
	return jobs, nil
}
