package api

import (
	"testing"
	"time"

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
