// Package status turns what gleaner-controller observes and decides into
// the pool's status it publishes for people (the GPUPool of
// pkg/api/v1alpha1): every GPU by state, and their history. Each
// namespace's harvest and jobs are pkg/ledger's. It talks to no API.
package status

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/api/v1alpha1"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
)

// History is sampled every HistoryStep and kept for HistorySpan.
const (
	HistoryStep = 10 * time.Minute
	HistorySpan = 24 * time.Hour
)

// Pool is the pool's status for one round: every pool node's GPUs by state
// under its verdict. Each GPU is counted once: serving (held by pods that are
// not best-effort), lent (held by best-effort pods, terminating ones too),
// headroom (kept free for inference) or idle (the rest).
func Pool(now time.Time, nodes []harvest.Node, plan harvest.Plan, planning bool) v1alpha1.GPUPoolStatus {
	st := v1alpha1.GPUPoolStatus{ObservedTime: metav1.NewTime(now), Planning: planning}
	for _, n := range nodes {
		if !n.InPool {
			continue
		}
		np := plan.Nodes[n.Name]
		c := v1alpha1.GPUCounts{Total: n.AllocatableGPUs, Serving: min(n.ServingGPUs, n.AllocatableGPUs)}
		c.Lent = min(n.LentGPUs+n.StuckGPUs, c.Total-c.Serving)
		c.Headroom = max(0, min(np.HeadroomGPUs, c.Total-c.Serving-c.Lent))
		c.Idle = c.Total - c.Serving - c.Lent - c.Headroom
		if np.State == api.HarvestOpen {
			c.Lendable = np.HarvestableGPUs
		}
		switch np.State {
		case api.HarvestOpen:
			st.Nodes.Open++
		case api.HarvestDraining:
			st.Nodes.Draining++
		default:
			st.Nodes.Closed++
		}
		st.GPUs.Total += c.Total
		st.GPUs.Serving += c.Serving
		st.GPUs.Lent += c.Lent
		st.GPUs.Headroom += c.Headroom
		st.GPUs.Idle += c.Idle
		st.GPUs.Lendable += c.Lendable
		if len(st.NodeStates) < v1alpha1.MaxNodeStates {
			verdict := string(np.State)
			if verdict == "" {
				verdict = string(api.HarvestClosed)
			}
			st.NodeStates = append(st.NodeStates, v1alpha1.NodeState{Name: n.Name, Verdict: verdict, GPUCounts: c})
		} else {
			st.NodeStatesTruncated = true
		}
	}
	return st
}

// History keeps the pool's samples of the last HistorySpan, one per HistoryStep.
type History struct {
	samples []v1alpha1.PoolSample
}

// Restore takes back published samples (after a restart).
func (h *History) Restore(samples []v1alpha1.PoolSample) {
	h.samples = append(h.samples[:0], samples...)
}

// Add records the pool's GPUs now, if a step has passed since the last
// sample, and forgets samples older than HistorySpan.
func (h *History) Add(now time.Time, g v1alpha1.GPUCounts) {
	if k := len(h.samples); k > 0 && now.Sub(h.samples[k-1].Time.Time) < HistoryStep && !now.Before(h.samples[k-1].Time.Time) {
		return
	}
	h.samples = append(h.samples, v1alpha1.PoolSample{Time: metav1.NewTime(now), Serving: g.Serving, Lent: g.Lent, Lendable: g.Lendable})
	i := 0
	for i < len(h.samples) && (now.Sub(h.samples[i].Time.Time) > HistorySpan || h.samples[i].Time.After(now)) {
		i++
	}
	h.samples = h.samples[i:]
}

// Samples are the kept samples, oldest first.
func (h *History) Samples() []v1alpha1.PoolSample {
	return append([]v1alpha1.PoolSample(nil), h.samples...)
}
