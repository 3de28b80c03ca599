package demo

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"time"

	"github.com/gleaner-dev/gleaner/pkg/demand"
)

// Service is one inference Deployment of the demo and its day of traffic.
type Service struct {
	Name, Model string
	GPUs        int64   // per replica
	Min, Max    int32   // autoscaler bounds
	Target      float64 // running+waiting requests one replica should carry
	Base, Peak  float64 // requests in flight at the quietest time and at the peak
	PeakHours   []float64
	Width       float64 // hours; how wide each peak is
}

// Load is the requests in flight across the service at hour (0..24) of the
// day: a quiet base plus smooth peaks around PeakHours (wrapping at
// midnight), with a small deterministic ripple so the autoscaler sees noise.
func (s Service) Load(hour float64) float64 {
	bump := 0.0
	for _, p := range s.PeakHours {
		d := math.Abs(math.Mod(hour-p+36, 24) - 12) // hours from p, 0..12, across midnight
		bump = math.Max(bump, math.Exp(-d*d/(2*s.Width*s.Width)))
	}
	ripple := 1 + 0.04*math.Sin(2*math.Pi*hour*1.7+float64(len(s.Name)))
	return math.Max(0, (s.Base+(s.Peak-s.Base)*bump)*ripple)
}

// demoServices are three services whose peaks differ, as in a real fleet:
// chat follows the working day, code the office hours, summarisation runs as
// a nightly batch. Peak demand (about 52 GPUs with the headroom margin, at
// different times) stays below the pool's 64, so inference always fits.
func demoServices() []Service {
	return []Service{
		{Name: "chat", Model: "llama-3.1-70b-instruct", GPUs: 4, Min: 1, Max: 8, Target: 16,
			Base: 10, Peak: 96, PeakHours: []float64{14}, Width: 3.5},
		{Name: "code", Model: "qwen2.5-coder-32b", GPUs: 2, Min: 1, Max: 8, Target: 16,
			Base: 6, Peak: 80, PeakHours: []float64{10.5, 16}, Width: 1.8},
		{Name: "summarize", Model: "llama-3.1-8b-instruct", GPUs: 1, Min: 1, Max: 8, Target: 16,
			Base: 6, Peak: 90, PeakHours: []float64{2.5}, Width: 2},
	}
}

// podLoad splits a service's load over its ready replicas as a load balancer
// would: each runs up to twice its target (vLLM's batch limit here), the rest waits.
func podLoad(s Service, total float64, replicas int) (running, waiting, kv float64) {
	if replicas <= 0 {
		return 0, 0, 0
	}
	per := total / float64(replicas)
	limit := 2 * s.Target
	running = math.Round(math.Min(per, limit))
	waiting = math.Round(math.Max(0, per-limit))
	kv = math.Min(1, 0.05+0.9*running/limit)
	return running, waiting, math.Round(kv*1000) / 1000
}

// lastWeekSeed draws the day before the demo's week began, the same on every run.
const lastWeekSeed = 7

// lastWeek is the day of s a week before the demo's: the same service on
// another day, each peak up to half an hour earlier or later, up to 15%
// higher or lower above the base, and up to 10% wider or narrower.
func (s Service) lastWeek(rng *rand.Rand) Service {
	prev := s
	prev.PeakHours = make([]float64, len(s.PeakHours))
	for i, h := range s.PeakHours {
		prev.PeakHours[i] = h + rng.Float64() - 0.5
	}
	prev.Peak = s.Base + (s.Peak-s.Base)*(0.85+0.3*rng.Float64())
	prev.Width = s.Width * (0.9 + 0.2*rng.Float64())
	return prev
}

// storedProfile is the week of history s brings to the demo, as
// gleaner-controller stores it (gleaner.dev/demand-profile): every quarter
// hour's peak load of its day a week before (lastWeek), for the slots from
// the demo's hour 0 to the end of its day and the notice horizon after it.
// zero is the profiles' time at hour 0 (demand.Clock.At of the day's start).
func (s Service) storedProfile(rng *rand.Rand, zero time.Time, hours float64) (string, error) {
	prev := s.lastWeek(rng)
	var p demand.Profile
	end := zero.Add(time.Duration(hours * float64(time.Hour)))
	for slot := zero.UTC().Truncate(demand.SlotLength); slot.Before(end); slot = slot.Add(demand.SlotLength) {
		from := slot.Sub(zero).Hours()
		peak := 0.0
		for m := 0.0; m <= demand.SlotLength.Minutes(); m++ {
			peak = math.Max(peak, prev.Load(from+m/60))
		}
		i := demand.SlotOfWeek(slot)
		p.Peak[i], p.Weeks[i] = math.Round(peak), 1
	}
	raw, err := json.Marshal(p)
	return string(raw), err
}
