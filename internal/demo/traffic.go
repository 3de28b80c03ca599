package demo

import "math"

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
