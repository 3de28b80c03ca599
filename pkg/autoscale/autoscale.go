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

// Floor is what the demand forecast asks of the autoscaler.
type Floor struct {
	// Grow is the replicas to run now for the load to come: those that must
	// be started now to serve it when it arrives.
	Grow int
	// Keep is the replicas the forecast needs over the reclaim horizon: none
	// of them is scaled in, though none is started for it either.
	Keep int
}

// Desired is the replica count to run now:
//
//	stable  = ceil(mean load over StableWindow / target)
//	panic   = ceil(mean load over PanicWindow / target)
//	panic mode when panic >= PanicThreshold x current; it lasts a StableWindow
//	want    = max(panic, current) in panic mode, else stable; at least floor.Grow
//	scale in only with a full StableWindow of complete observations, and
//	never below floor.Keep
//	step    within [current - MaxScaleDown, current + MaxScaleUp], then [Min, Max]
func (s *Scaler) Desired(now time.Time, current int, target float64, floor Floor, lim Limits) Decision {
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
	if want < floor.Grow {
		want = floor.Grow
		d.Reason = fmt.Sprintf("the forecast needs %d replicas started now", floor.Grow)
	}
	if want < current {
		full := now.Sub(s.first) >= s.cfg.StableWindow
		switch {
		case !full || !stableComplete:
			want = current
			d.Reason = "holding: not a full stable window of complete metrics to scale in on"
		case want < floor.Keep:
			want = min(current, floor.Keep)
			d.Reason = fmt.Sprintf("holding: the forecast over the reclaim horizon needs %d", floor.Keep)
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
