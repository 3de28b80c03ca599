package round

import (
	"fmt"
	"testing"
	"time"

	"github.com/gleaner-dev/gleaner/pkg/demand"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
)

// BenchmarkPlanFleet is one planning round, pkg/round's part of
// gleaner-controller's round (no informers, no API), at 1,000 and 5,000
// nodes of 8 GPUs with 1,000 services of one 2-GPU replica each, every node
// lending 4 GPUs, after a warm-up that fills the trends.
func BenchmarkPlanFleet(b *testing.B) {
	for _, nodes := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) { benchmarkPlan(b, nodes, 1000) })
	}
}

func benchmarkPlan(b *testing.B, nodes, services int) {
	p := New(DefaultConfig())
	t0 := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	obs := func(now time.Time, step int) Observation {
		o := Observation{Now: now}
		for i := range nodes {
			o.Nodes = append(o.Nodes, harvest.Node{Name: fmt.Sprintf("n%05d", i), InPool: true, Schedulable: true, AllocatableGPUs: 8, ServingGPUs: 2, LentGPUs: 4})
		}
		for i := range services {
			o.Services = append(o.Services, Service{Key: fmt.Sprintf("s/%05d", i), Declared: true,
				Replicas: []demand.Replica{{Known: true, Running: float64(5 + (i+step)%7), GPUs: 2}}})
		}
		return o
	}
	for s := range 60 {
		p.Plan(obs(t0.Add(time.Duration(s)*5*time.Second), s))
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		p.Plan(obs(t0.Add(time.Duration(60+i)*5*time.Second), 60+i))
	}
}
