package api

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A pod's declared checkpoint interval is read only when it is a positive
// duration of at most a week: anything else a tenant writes there is ignored.
func TestCheckpointInterval(t *testing.T) {
	for raw, want := range map[string]time.Duration{
		"45m": 45 * time.Minute, "2h30m": 150 * time.Minute, "168h": MaxCheckpointInterval,
		"0s": 0, "-5m": 0, "169h": 0, "soon": 0, "": 0, "1h" + string(make([]byte, 40)): 0,
	} {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationCheckpointInterval: raw}}}
		got, ok := CheckpointInterval(pod)
		if got != want || ok != (want > 0) {
			t.Errorf("%q: %v, %v; want %v", raw, got, ok, want)
		}
	}
	if _, ok := CheckpointInterval(&v1.Pod{}); ok {
		t.Error("a pod without the annotation declares an interval")
	}
}

func TestReadStop(t *testing.T) {
	long := strings.Repeat("é", 200)
	for _, tt := range []struct {
		name        string
		annotations map[string]string
		want        Stop
	}{
		{"no annotations", nil, Stop{}},
		{"a reason alone stops nothing", map[string]string{AnnotationStopLendingReason: "x"}, Stop{}},
		{"hold", map[string]string{AnnotationStopLending: "Hold", AnnotationStopLendingReason: "upgrade"}, Stop{Mode: StopHold, Reason: "upgrade"}},
		{"drain", map[string]string{AnnotationStopLending: "HoldAndDrain"}, Stop{Mode: StopHoldAndDrain}},
		{"empty value holds", map[string]string{AnnotationStopLending: ""}, Stop{Mode: StopHold, Problem: `value "" is neither Hold nor HoldAndDrain, so it holds`}},
		{"misspelt drain holds, it does not drain", map[string]string{AnnotationStopLending: "drain"}, Stop{Mode: StopHold, Problem: `value "drain" is neither Hold nor HoldAndDrain, so it holds`}},
		{"a long reason is cut", map[string]string{AnnotationStopLending: "Hold", AnnotationStopLendingReason: long}, Stop{Mode: StopHold, Reason: Truncate(long, MaxStopReason)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := ReadStop(tt.annotations)
			if got != tt.want {
				t.Fatalf("ReadStop = %+v, want %+v", got, tt.want)
			}
			if len(got.Reason) > MaxStopReason || !utf8.ValidString(got.Reason) {
				t.Fatalf("reason of %d bytes, valid UTF-8 %v", len(got.Reason), utf8.ValidString(got.Reason))
			}
			if got.Stopped() != (tt.want.Mode != LendingOn) || got.Drain() != (tt.want.Mode == StopHoldAndDrain) {
				t.Fatalf("Stopped %v Drain %v for %+v", got.Stopped(), got.Drain(), got)
			}
		})
	}
}
