package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gleaner-dev/gleaner/internal/testobj"
	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/vllm"
)

// BenchmarkDecideFleet is one round's observe and plan (decide: what the
// controller_plan_cpu_seconds metric measures, no API calls) at fleet size:
// 5,000 8-GPU pool nodes, 1,000 services of two 4-GPU replicas on the first
// 1,000 nodes, and 20,000 one-GPU best-effort pods on the rest. The listers
// read indexers, as the informers' caches are read. Each iteration is a
// round 5 s after the last; the load stays, so the plan settles as a steady
// state does. make bench-controller measures the same step in the real
// binary; this shows where its time goes (go test -cpuprofile).
func BenchmarkDecideFleet(b *testing.B) {
	const nodes, services, bestEffort = 5000, 1000, 20000
	tc := newTestCluster(b, Config{})
	objs := make([]runtime.Object, 0, nodes+3*services+bestEffort)
	for i := range nodes {
		objs = append(objs, testobj.Node(fmt.Sprintf("n%05d", i), 8))
	}
	loads := make([]vllm.PodLoad, 0, 2*services)
	for s := range services {
		name := fmt.Sprintf("svc%04d", s)
		objs = append(objs, testobj.Deployment("serving", name, 2, 4, nil))
		for r := range 2 {
			node := fmt.Sprintf("n%05d", s)
			pod := fmt.Sprintf("%s-%d", name, r)
			objs = append(objs, testobj.Inference("serving", pod, name, node, 4))
			l := fresh("serving", name, 6, 0, 4)
			l.Name, l.NodeName = pod, node
			loads = append(loads, l)
		}
	}
	for j := range bestEffort {
		node := fmt.Sprintf("n%05d", services+j%(nodes-services))
		objs = append(objs, testobj.BestEffort("research", fmt.Sprintf("job%05d", j), node, 1, t0.Add(-time.Hour)))
	}
	tc.set(b, objs...)
	tc.load.loads = loads
	ctx := context.Background()
	now := t0
	if _, d, err := tc.c.decide(ctx, now, api.Stop{}); err != nil || len(d.Services) != services {
		b.Fatalf("first round: %v, %d services", err, len(d.Services))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now = now.Add(5 * time.Second)
		tc.clock.SetTime(now)
		if _, _, err := tc.c.decide(ctx, now, api.Stop{}); err != nil {
			b.Fatal(err)
		}
	}
}
