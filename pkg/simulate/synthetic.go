package simulate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// SyntheticFleet generates a diurnal inference fleet: services request rates
// in 600 s windows over days days, window 0 at 00:00 on a Monday. Each service
// has its own peak (log-uniform, 5 to 500 req/s), peak hour (11:00-16:00),
// night trough (2% to 40% of peak) and a weekend dip, with 10% noise per
// window. It is seeded, so every run replays the same fleet.
func SyntheticFleet(services, days int, seed uint64) *Fleet {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	const window = 600
	perDay := 86400 / window
	f := &Fleet{Window: window * time.Second}
	for s := range services {
		peak := 5 * math.Pow(100, rng.Float64())
		peakHour := 11 + 5*rng.Float64()
		trough := 0.02 + 0.38*rng.Float64()
		weekend := 0.5 + 0.4*rng.Float64()
		rates := make([]float64, days*perDay)
		for i := range rates {
			hour := float64(i%perDay) * window / 3600
			// A raised cosine peaking at peakHour, sharpened so nights are long.
			shape := math.Pow(0.5+0.5*math.Cos(2*math.Pi*(hour-peakHour)/24), 2)
			r := peak * (trough + (1-trough)*shape)
			if day := i / perDay % 7; day >= 5 {
				r *= weekend
			}
			r *= 1 + 0.1*rng.NormFloat64()
			rates[i] = max(r, 0)
		}
		f.Services = append(f.Services, ServiceTrace{Name: fmt.Sprintf("synthetic-%02d", s), Rates: rates})
	}
	return f
}

// SyntheticJobs generates a best-effort job mix: mostly 1-GPU jobs (80%), then
// 2 (8%), 4 (7%) and 8 GPUs (5%); run times log-normal around 40 minutes with
// a long tail (5% run 12 to 48 hours). Seeded, so every run is the same.
func SyntheticJobs(n int, seed uint64) []Job {
	rng := rand.New(rand.NewPCG(seed, 0x70b5))
	jobs := make([]Job, n)
	for i := range jobs {
		var gpus int64
		switch p := rng.Float64(); {
		case p < 0.80:
			gpus = 1
		case p < 0.88:
			gpus = 2
		case p < 0.95:
			gpus = 4
		default:
			gpus = 8
		}
		work := 40 * time.Minute.Seconds() * math.Exp(1.2*rng.NormFloat64())
		if rng.Float64() < 0.05 {
			work = (12 + 36*rng.Float64()) * time.Hour.Seconds()
		}
		jobs[i] = Job{Name: fmt.Sprintf("synthetic-job-%05d", i), GPUs: gpus, Work: time.Duration(max(work, 60) * float64(time.Second))}
	}
	return jobs
}
