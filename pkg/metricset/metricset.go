// Package metricset declares Gleaner's metrics: each named
// gleaner_[SUBSYSTEM_]NAME at the ALPHA stability level, and kept by the Set
// that declared it, which registers all of them at once. A metric declared
// through a Set cannot be left out of its registration or of the docs tests
// that range over All.
package metricset

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Metric is a metric a Set declared.
type Metric interface {
	metrics.Registerable
	FQName() string
}

// Set is the metrics of one part of Gleaner. Declare them in package-level
// variables, then Register the Set where that part starts.
type Set struct {
	subsystem string
	all       []Metric
	once      sync.Once
}

// New is a Set of metrics named gleaner_SUBSYSTEM_NAME, or gleaner_NAME
// where subsystem is "".
func New(subsystem string) *Set { return &Set{subsystem: subsystem} }

// Counter declares a counter without labels.
func (s *Set) Counter(name, help string) *metrics.Counter {
	return add(s, metrics.NewCounter((*metrics.CounterOpts)(s.opts(name, help))))
}

// CounterVec declares a counter with labels.
func (s *Set) CounterVec(name, help string, labels ...string) *metrics.CounterVec {
	return add(s, metrics.NewCounterVec((*metrics.CounterOpts)(s.opts(name, help)), labels))
}

// Gauge declares a gauge without labels.
func (s *Set) Gauge(name, help string) *metrics.Gauge {
	return add(s, metrics.NewGauge((*metrics.GaugeOpts)(s.opts(name, help))))
}

// GaugeVec declares a gauge with labels.
func (s *Set) GaugeVec(name, help string, labels ...string) *metrics.GaugeVec {
	return add(s, metrics.NewGaugeVec((*metrics.GaugeOpts)(s.opts(name, help)), labels))
}

// Histogram declares a histogram without labels.
func (s *Set) Histogram(name, help string, buckets []float64) *metrics.Histogram {
	return add(s, metrics.NewHistogram(s.histogramOpts(name, help, buckets)))
}

// HistogramVec declares a histogram with labels.
func (s *Set) HistogramVec(name, help string, buckets []float64, labels ...string) *metrics.HistogramVec {
	return add(s, metrics.NewHistogramVec(s.histogramOpts(name, help, buckets), labels))
}

// All is every metric declared so far, in the order declared.
func (s *Set) All() []Metric { return s.all }

// Register adds every metric of the Set to the legacy registry, which the
// binaries serve on /metrics; calls after the first do nothing. A metric
// records nothing until it is registered.
func (s *Set) Register() {
	s.once.Do(func() {
		for _, m := range s.all {
			legacyregistry.MustRegister(m)
		}
	})
}

func (s *Set) opts(name, help string) *metrics.KubeOpts {
	return &metrics.KubeOpts{Namespace: "gleaner", Subsystem: s.subsystem, Name: name, Help: help, StabilityLevel: metrics.ALPHA}
}

func (s *Set) histogramOpts(name, help string, buckets []float64) *metrics.HistogramOpts {
	return &metrics.HistogramOpts{Namespace: "gleaner", Subsystem: s.subsystem, Name: name, Help: help, Buckets: buckets, StabilityLevel: metrics.ALPHA}
}

func add[M Metric](s *Set, m M) M {
	s.all = append(s.all, m)
	return m
}
