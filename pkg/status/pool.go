// Package status turns what gleaner-controller observes and decides into
// what it publishes for people (pkg/api/v1alpha1): the pool at a glance,
// its history and outlook, and each namespace's harvest and jobs. It talks
// to no API.
package status

import (
	"fmt"
	"math"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/api/v1alpha1"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
	"github.com/gleaner-dev/gleaner/pkg/round"
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
		c := v1alpha1.GPUCounts{Total: n.AllocatableGPUs, Serving: min(n.ReservedGPUs, n.AllocatableGPUs)}
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
	h.samples = append(h.samples, v1alpha1.PoolSample{Time: metav1.NewTime(now), Inference: g.Serving, Lent: g.Lent, Lendable: g.Lendable})
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

// Outlook is the round's outlook as published.
func Outlook(points []round.OutlookPoint) []v1alpha1.OutlookPoint {
	out := make([]v1alpha1.OutlookPoint, 0, len(points))
	for _, p := range points {
		out = append(out, v1alpha1.OutlookPoint{Time: metav1.NewTime(p.Time), Inference: p.InferenceGPUs, LendableLow: p.LendableLow, LendableHigh: p.LendableHigh})
	}
	return out
}

// Survival is the planner's record of its availability forecasts as the
// GPUPool publishes it.
func Survival(counts []round.SurvivalCount) []v1alpha1.SurvivalRecord {
	out := make([]v1alpha1.SurvivalRecord, 0, len(counts))
	for _, c := range counts {
		out = append(out, v1alpha1.SurvivalRecord{NeededAtPercent: int32(c.NeededAtPercent),
			Given1h: c.Given[0], Survived1h: c.Survived[0], Given4h: c.Given[1], Survived4h: c.Survived[1]})
	}
	return out
}

// SurvivalFrom reads a published record back, for the planner to check and
// take back (round.Planner.RestoreSurvival).
func SurvivalFrom(records []v1alpha1.SurvivalRecord) []round.SurvivalCount {
	out := make([]round.SurvivalCount, 0, len(records))
	for _, r := range records {
		out = append(out, round.SurvivalCount{NeededAtPercent: int(r.NeededAtPercent),
			Given: [2]int64{r.Given1h, r.Given4h}, Survived: [2]int64{r.Survived1h, r.Survived4h}})
	}
	return out
}

// Recalibration is the planner's recalibration record as the GPUPool
// publishes it.
func Recalibration(counts []round.RecalibrationCount) []v1alpha1.RecalibrationRecord {
	out := make([]v1alpha1.RecalibrationRecord, 0, len(counts))
	for _, c := range counts {
		out = append(out, v1alpha1.RecalibrationRecord{LogOddsMilli: int32(c.LogOddsMilli),
			Given1h: c.Given[0], Survived1h: c.Survived[0], Given4h: c.Given[1], Survived4h: c.Survived[1]})
	}
	return out
}

// RecalibrationFrom reads a published recalibration record back, for the
// planner to check and take back (round.Planner.RestoreRecalibration).
func RecalibrationFrom(records []v1alpha1.RecalibrationRecord) []round.RecalibrationCount {
	out := make([]round.RecalibrationCount, 0, len(records))
	for _, r := range records {
		out = append(out, round.RecalibrationCount{LogOddsMilli: int(r.LogOddsMilli),
			Given: [2]int64{r.Given1h, r.Given4h}, Survived: [2]int64{r.Survived1h, r.Survived4h}})
	}
	return out
}

// ParsePrice reads a GPU-hour price and its currency, as an admin sets them:
// a non-negative decimal, and a currency of 1 to 8 letters.
func ParsePrice(perGPUHour, currency string) (*v1alpha1.Price, error) {
	if perGPUHour == "" {
		return nil, nil
	}
	if _, err := parsePrice(perGPUHour); err != nil {
		return nil, err
	}
	if len(currency) == 0 || len(currency) > 8 {
		return nil, fmt.Errorf("currency %q: want 1 to 8 letters (USD, EUR, credits)", currency)
	}
	for _, r := range currency {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z') {
			return nil, fmt.Errorf("currency %q: want 1 to 8 letters (USD, EUR, credits)", currency)
		}
	}
	return &v1alpha1.Price{PerGPUHour: perGPUHour, Currency: currency}, nil
}

func parsePrice(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("GPU-hour price %q: want a non-negative decimal such as 2.50", s)
	}
	return v, nil
}
