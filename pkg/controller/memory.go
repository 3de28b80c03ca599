package controller

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gleaner-dev/gleaner/pkg/api/v1alpha1"
	"github.com/gleaner-dev/gleaner/pkg/availability"
	"github.com/gleaner-dev/gleaner/pkg/round"
)

// The planner's memory of the pool (round.Memory) is kept in the GPUPool's
// status, beside what people read there: written with every status
// publish, read back once before the first round after a start.

// storeMemory puts the planner's memory into a GPUPool's status.
func storeMemory(m round.Memory, st *v1alpha1.GPUPoolStatus) {
	st.SurvivalByLoad = make([]v1alpha1.SurvivalRecord, 0, len(m.Survival))
	for _, c := range m.Survival {
		st.SurvivalByLoad = append(st.SurvivalByLoad, v1alpha1.SurvivalRecord{NeededAtPercent: int32(c.NeededAtPercent), JudgedCounts: judgedCounts(c.Judged)})
	}
	st.Recalibration = make([]v1alpha1.RecalibrationRecord, 0, len(m.Recalibration))
	for _, c := range m.Recalibration {
		st.Recalibration = append(st.Recalibration, v1alpha1.RecalibrationRecord{LogOddsMilli: int32(c.LogOddsMilli), JudgedCounts: judgedCounts(c.Judged)})
	}
	st.PoolProfile = m.PoolProfile
}

// loadMemory reads the planner's memory back from a published GPUPool's
// status; the planner checks what it takes back (round.Planner.Restore).
func loadMemory(st v1alpha1.GPUPoolStatus) (round.Memory, error) {
	m := round.Memory{At: st.ObservedTime.Time}
	for _, r := range st.SurvivalByLoad {
		m.Survival = append(m.Survival, availability.SurvivalCount{NeededAtPercent: int(r.NeededAtPercent), Judged: judged(r.JudgedCounts)})
	}
	for _, r := range st.Recalibration {
		m.Recalibration = append(m.Recalibration, availability.RecalibrationCount{LogOddsMilli: int(r.LogOddsMilli), Judged: judged(r.JudgedCounts)})
	}
	if len(st.PoolProfile) > v1alpha1.MaxPoolProfile {
		return m, fmt.Errorf("the pool profile is too long (%d bytes, at most %d) and is refused; it is learned afresh", len(st.PoolProfile), v1alpha1.MaxPoolProfile)
	}
	m.PoolProfile = st.PoolProfile
	return m, nil
}

func judgedCounts(j availability.Judged) v1alpha1.JudgedCounts {
	return v1alpha1.JudgedCounts{Given1h: j.Given[0], Survived1h: j.Survived[0], Given4h: j.Given[1], Survived4h: j.Survived[1]}
}

func judged(c v1alpha1.JudgedCounts) availability.Judged {
	return availability.Judged{Given: [2]int64{c.Given1h, c.Given4h}, Survived: [2]int64{c.Survived1h, c.Survived4h}}
}

// outlookOf is the round's outlook as published.
func outlookOf(points []round.OutlookPoint) []v1alpha1.OutlookPoint {
	out := make([]v1alpha1.OutlookPoint, 0, len(points))
	for _, p := range points {
		out = append(out, v1alpha1.OutlookPoint{Time: metav1.NewTime(p.Time), Serving: p.ServingGPUs, LendableLow: p.LendableLow, LendableHigh: p.LendableHigh})
	}
	return out
}
