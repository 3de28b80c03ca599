package status

import (
	"fmt"
	"testing"
	"time"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/api/v1alpha1"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
)

var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

func TestPoolCountsEveryGPUOnce(t *testing.T) {
	nodes := []harvest.Node{
		{Name: "a", InPool: true, Schedulable: true, AllocatableGPUs: 8, ServingGPUs: 2, LentGPUs: 3},
		{Name: "b", InPool: true, Schedulable: true, AllocatableGPUs: 8, ServingGPUs: 4, LentGPUs: 4, StuckGPUs: 1},
		{Name: "c", InPool: true, AllocatableGPUs: 8},
		{Name: "cpu", AllocatableGPUs: 0},
	}
	plan := harvest.Plan{Nodes: map[string]harvest.NodePlan{
		"a": {HeadroomGPUs: 2, Verdict: harvest.Verdict{State: api.HarvestOpen, HarvestableGPUs: 4}},
		"b": {HeadroomGPUs: 4, ReclaimGPUs: 5, Verdict: harvest.Verdict{State: api.HarvestDraining}},
	}}
	st := Pool(t0, nodes, plan, true)
	want := v1alpha1.GPUCounts{Total: 24, Serving: 6, Lent: 7, Headroom: 2, Idle: 9, Lendable: 4}
	if st.GPUs != want {
		t.Errorf("GPUs = %+v, want %+v", st.GPUs, want)
	}
	if st.Nodes != (v1alpha1.NodeCounts{Open: 1, Draining: 1, Closed: 1}) {
		t.Errorf("Nodes = %+v", st.Nodes)
	}
	if len(st.NodeStates) != 3 || st.NodeStates[2].Verdict != "closed" {
		t.Fatalf("NodeStates = %+v, want a, b and c (closed)", st.NodeStates)
	}
	// b: 4 serving, 4 lent (one stuck terminating counts as lent, capped at what is left), no room for headroom.
	if b := st.NodeStates[1].GPUCounts; b.Lent != 4 || b.Headroom != 0 || b.Idle != 0 {
		t.Errorf("b = %+v", b)
	}
	for _, n := range st.NodeStates {
		if n.Serving+n.Lent+n.Headroom+n.Idle != n.Total {
			t.Errorf("%s: states sum to %d of %d GPUs", n.Name, n.Serving+n.Lent+n.Headroom+n.Idle, n.Total)
		}
	}
}

func TestPoolBoundsNodeStates(t *testing.T) {
	var nodes []harvest.Node
	for i := range v1alpha1.MaxNodeStates + 5 {
		nodes = append(nodes, harvest.Node{Name: fmt.Sprintf("n%05d", i), InPool: true, AllocatableGPUs: 8})
	}
	st := Pool(t0, nodes, harvest.Plan{}, false)
	if len(st.NodeStates) != v1alpha1.MaxNodeStates || !st.NodeStatesTruncated {
		t.Fatalf("%d node states, truncated %v", len(st.NodeStates), st.NodeStatesTruncated)
	}
	if st.GPUs.Total != int64(8*len(nodes)) {
		t.Errorf("totals count every node: %d", st.GPUs.Total)
	}
}

func TestHistoryStepsAndSpan(t *testing.T) {
	var h History
	for m := 0; m <= 26*60; m++ {
		h.Add(t0.Add(time.Duration(m)*time.Minute), v1alpha1.GPUCounts{Serving: int64(m)})
	}
	s := h.Samples()
	if len(s) != int(HistorySpan/HistoryStep)+1 {
		t.Fatalf("%d samples, want one per step over the span", len(s))
	}
	if got := s[len(s)-1].Time.Sub(s[0].Time.Time); got != HistorySpan {
		t.Errorf("span %v", got)
	}
	var restored History
	restored.Restore(s)
	restored.Add(s[len(s)-1].Time.Add(time.Minute), v1alpha1.GPUCounts{})
	if len(restored.Samples()) != len(s) {
		t.Errorf("a sample within a step of the last was added")
	}
}
