// Package autoscale decides how many replicas an inference Deployment should
// run from its vLLM load, with a stable window for calm decisions and a panic
// window for sudden bursts (the scheme Knative's autoscaler made familiar). It
// is pure: the controller feeds it observations and a clock and applies its
// answer through the Deployment's scale subresource.
package autoscale

import (
	"fmt"
	"math"
	"time"
)

// Config tunes the autoscaler. Zero values take the defaults.
type Config struct {
	// StableWindow is averaged over for ordinary decisions, and is how long load
	// must have been low before scaling in. Default 60s.
	StableWindow time.Duration
	// PanicWindow is averaged over to notice bursts. Default 6s.
	PanicWindow time.Duration
	// PanicThreshold: when the panic window asks for this many times the current
	// replicas, scale out on it at once and do not scale in for a stable window. Default 2.
	PanicThreshold float64
	// MaxScaleUp and MaxScaleDown bound one decision's step, in replicas. Defaults 4 and 1.
	MaxScaleUp, MaxScaleDown int
	// MaxReplicas is the ceiling for Deployments that set none. Default 64.
	MaxReplicas int
}

func (c Config) withDefaults() Config {
	if c.StableWindow <= 0 {
		c.StableWindow = 60 * time.Second
	}
	if c.PanicWindow <= 0 {
		c.PanicWindow = 6 * time.Second
	}
	if c.PanicWindow > c.StableWindow {
		c.PanicWindow = c.StableWindow
	}
	if c.PanicThreshold <= 1 {
		c.PanicThreshold = 2
	}
	if c.MaxScaleUp <= 0 {
		c.MaxScaleUp = 4
	}
	if c.MaxScaleDown <= 0 {
		c.MaxScaleDown = 1
	}
	if c.MaxReplicas <= 0 {
		c.MaxReplicas = 64
	}
	return c
}

// Limits bound one Deployment's replicas.
type Limits struct {
	Min, Max int
}

type observation struct {
	at       time.Time
	load     float64
	complete bool
}

// Scaler keeps one Deployment's recent load.
type Scaler struct {
	cfg        Config
	obs        []observation
	first      time.Time
	panicUntil time.Time
}

// New returns a Scaler with cfg's defaults applied.
func New(cfg Config) *Scaler { return &Scaler{cfg: cfg.withDefaults()} }

// Observe records the service's load at now. complete is false when some
// replica's metrics are missing: such a sample may scale out but never in.
func (s *Scaler) Observe(now time.Time, load float64, complete bool) {
	if s.first.IsZero() {
		s.first = now
	}
	s.obs = append(s.obs, observation{at: now, load: load, complete: complete})
	cut := 0
	for cut < len(s.obs) && now.Sub(s.obs[cut].at) > s.cfg.StableWindow {
		cut++
	}
	s.obs = append(s.obs[:0], s.obs[cut:]...)
}

// Decision is the autoscaler's answer.
type Decision struct {
	Replicas int
	Panic    bool
	Reason   string
}

// Desired is the replica count to run now:
//
//	stable  = ceil(mean load over StableWindow / target)
//	panic   = ceil(mean load over PanicWindow / target)
//	panic mode when panic >= PanicThreshold x current; it lasts a StableWindow
//	want    = max(panic, current) in panic mode, else stable; never below floor
//	scale in only with a full StableWindow of complete observations
//	step    within [current - MaxScaleDown, current + MaxScaleUp], then [Min, Max]
//
// floor is what the demand forecast needs over the reclaim horizon: the
// autoscaler does not scale in replicas that the forecast says will be needed.
func (s *Scaler) Desired(now time.Time, current int, target float64, floor int, lim Limits) Decision {
	if target <= 0 || len(s.obs) == 0 {
		return Decision{Replicas: clamp(current, lim, s.cfg), Reason: "no load observed yet"}
	}
	stable, stableComplete := s.mean(now, s.cfg.StableWindow)
	burst, _ := s.mean(now, s.cfg.PanicWindow)
	stableWant := int(math.Ceil(stable/target - 1e-9))
	panicWant := int(math.Ceil(burst/target - 1e-9))
	if current > 0 && float64(panicWant) >= s.cfg.PanicThreshold*float64(current) || current == 0 && panicWant > 0 {
		s.panicUntil = now.Add(s.cfg.StableWindow)
	}
	d := Decision{Panic: now.Before(s.panicUntil)}
	want := stableWant
	d.Reason = fmt.Sprintf("mean load %.4g over %v / target %.4g", stable, s.cfg.StableWindow, target)
	if d.Panic {
		want = max(panicWant, current, stableWant)
		d.Reason = fmt.Sprintf("panic: mean load %.4g over %v / target %.4g", burst, s.cfg.PanicWindow, target)
	}
	if want < floor {
		want = floor
		d.Reason = fmt.Sprintf("forecast over the reclaim horizon needs %d", floor)
	}
	if want < current {
		full := now.Sub(s.first) >= s.cfg.StableWindow
		if !full || !stableComplete {
			want = current
			d.Reason = "holding: not a full stable window of complete metrics to scale in on"
		}
	}
	want = min(max(want, current-s.cfg.MaxScaleDown), current+s.cfg.MaxScaleUp)
	d.Replicas = clamp(want, lim, s.cfg)
	return d
}

// mean averages the observations within window of now, and says whether all were complete.
func (s *Scaler) mean(now time.Time, window time.Duration) (float64, bool) {
	var sum float64
	n := 0
	complete := true
	for _, o := range s.obs {
		if now.Sub(o.at) <= window {
			sum += o.load
			n++
			complete = complete && o.complete
		}
	}
	if n == 0 {
		return 0, false
	}
	return sum / float64(n), complete
}

func clamp(n int, lim Limits, cfg Config) int {
	lo, hi := max(lim.Min, 0), lim.Max
	if hi <= 0 {
		hi = cfg.MaxReplicas
	}
	return min(max(n, lo), max(hi, lo))
}
