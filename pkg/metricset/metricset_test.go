package metricset

import (
	"slices"
	"testing"
)

func TestNamesAndRegistration(t *testing.T) {
	s := New("metricset_test")
	top := New("")
	s.Counter("a_total", "A.")
	s.GaugeVec("b", "B.", "state")
	s.HistogramVec("c_seconds", "C.", []float64{1, 2}, "namespace", "service")
	top.Gauge("metricset_test_top", "Top.")
	var names []string
	for _, m := range append(s.All(), top.All()...) {
		names = append(names, m.FQName())
	}
	want := []string{"gleaner_metricset_test_a_total", "gleaner_metricset_test_b", "gleaner_metricset_test_c_seconds", "gleaner_metricset_test_top"}
	if !slices.Equal(names, want) {
		t.Errorf("names %v, want %v", names, want)
	}
	s.Register()
	s.Register() // a second registration would panic (MustRegister) if it registered again
	top.Register()
}
