package round

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gleaner-dev/gleaner/pkg/demand"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
)

// BenchmarkPlanFleet is one planning round, pkg/round's part of
// gleaner-controller's round (no informers, no API), at 1,000 and 5,000
// nodes of 8 GPUs with 1,000 services of one 2-GPU replica each, every node
// lending 4 GPUs, after a warm-up that fills the trends.
func BenchmarkPlanFleet(b *testing.B) {
	for _, step := range []bool{false, true} {
		for _, nodes := range []int{1000, 5000} {
			b.Run(fmt.Sprintf("nodes=%d/loadstep=%t", nodes, step), func(b *testing.B) { benchmarkPlan(b, nodes, 1000, step) })
		}
	}
}

// benchmarkPlan: with step, after the warm-up every service's load needs
// twice its replicas, so most nodes owe lent GPUs: 4 one-GPU best-effort
// pods lent on every node are the candidates.
func benchmarkPlan(b *testing.B, nodes, services int, step bool) {
	p := New(DefaultConfig())
	t0 := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	loaded := step
	var candidates []reclaim.Candidate
	for i := range nodes {
		for j := range 4 {
			pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("job-%05d-%d", i, j), Namespace: "research", UID: types.UID(fmt.Sprintf("%05d-%d", i, j))},
				Spec: v1.PodSpec{NodeName: fmt.Sprintf("n%05d", i)}}
			candidates = append(candidates, reclaim.Candidate{Pod: pod, GPUs: 1, LostWork: float64(100 * (j + 1))})
		}
	}
	obs := func(now time.Time, step int) Observation {
		o := Observation{Now: now}
		for i := range nodes {
			o.Nodes = append(o.Nodes, harvest.Node{Name: fmt.Sprintf("n%05d", i), InPool: true, Schedulable: true, AllocatableGPUs: 8, ServingGPUs: 2, LentGPUs: 4})
		}
		for i := range services {
			load := float64(5 + (i+step)%7)
			if loaded && step >= 60 {
				load = 40
			}
			o.Services = append(o.Services, Service{Key: fmt.Sprintf("s/%05d", i), Declared: true,
				Replicas: []demand.Replica{{Known: true, Running: load, GPUs: 2}}})
		}
		o.BestEffort = func(map[string]bool) []reclaim.Candidate { return candidates }
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
