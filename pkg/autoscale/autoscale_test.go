package autoscale

import (
	"strings"
	"testing"
	"time"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

func TestDesired(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	cfg := Config{StableWindow: 60 * time.Second, PanicWindow: 6 * time.Second, MaxScaleUp: 4, MaxScaleDown: 1}
	type obs struct {
		at       time.Duration
		load     float64
		complete bool
	}
	steady := func(load float64, from, to time.Duration) []obs {
		var out []obs
		for at := from; at <= to; at += 2 * time.Second {
			out = append(out, obs{at, load, true})
		}
		return out
	}
	tests := []struct {
		name      string
		obs       []obs
		at        time.Duration
		current   int
		floor     Floor
		lim       Limits
		want      int
		wantPanic bool
	}{
		{"steady load at target keeps replicas", steady(32, 0, 120*time.Second), 120 * time.Second, 2, Floor{}, Limits{1, 10}, 2, false},
		{"low load for a full window scales in one step", steady(4, 0, 120*time.Second), 120 * time.Second, 3, Floor{}, Limits{1, 10}, 2, false},
		{"low load for less than a window holds", steady(4, 0, 30*time.Second), 30 * time.Second, 3, Floor{}, Limits{1, 10}, 3, false},
		{"never below min", steady(0, 0, 120*time.Second), 120 * time.Second, 1, Floor{}, Limits{1, 10}, 1, false},
		{"min zero lets an idle service go", steady(0, 0, 120*time.Second), 120 * time.Second, 1, Floor{}, Limits{0, 10}, 0, false},
		{"the forecast floor stops scaling in", steady(4, 0, 120*time.Second), 120 * time.Second, 3, Floor{Grow: 3, Keep: 3}, Limits{1, 10}, 3, false},
		// The horizon's forecast keeps the replicas that run, and starts none.
		{"the horizon keeps, and does not grow", steady(4, 0, 120*time.Second), 120 * time.Second, 2, Floor{Grow: 1, Keep: 3}, Limits{1, 10}, 2, false},
		{"the horizon keeps no more than run", steady(4, 0, 120*time.Second), 120 * time.Second, 3, Floor{Grow: 1, Keep: 2}, Limits{1, 10}, 2, false},
		{"the lead grows", steady(4, 0, 120*time.Second), 120 * time.Second, 1, Floor{Grow: 3, Keep: 4}, Limits{1, 10}, 3, false},
		{"incomplete metrics never scale in", []obs{{0, 0, false}, {70 * time.Second, 0, false}}, 70 * time.Second, 3, Floor{}, Limits{1, 10}, 3, false},
		{
			"a burst panics and scales out at once, bounded by the step",
			append(steady(16, 0, 100*time.Second), obs{102 * time.Second, 160, true}, obs{104 * time.Second, 160, true}),
			104 * time.Second, 1, Floor{}, Limits{1, 10}, 5, true,
		},
		{"ordinary rise scales out on the stable mean", steady(40, 0, 60*time.Second), 60 * time.Second, 2, Floor{}, Limits{1, 10}, 3, false},
		{"never above max", steady(1000, 0, 60*time.Second), 60 * time.Second, 8, Floor{}, Limits{1, 10}, 10, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(cfg)
			for _, o := range tt.obs {
				s.Observe(t0.Add(o.at), o.load, o.complete)
			}
			d := s.Desired(t0.Add(tt.at), tt.current, 16, tt.floor, tt.lim)
			if d.Replicas != tt.want || d.Panic != tt.wantPanic {
				t.Fatalf("Desired = %+v, want %d replicas, panic %v", d, tt.want, tt.wantPanic)
			}
		})
	}
}

func TestPanicHoldsScaleIn(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	s := New(Config{StableWindow: 60 * time.Second, PanicWindow: 6 * time.Second})
	for at := time.Duration(0); at < 60*time.Second; at += 2 * time.Second {
		s.Observe(t0.Add(at), 8, true)
	}
	s.Observe(t0.Add(60*time.Second), 200, true)
	if d := s.Desired(t0.Add(60*time.Second), 1, 16, Floor{}, Limits{1, 20}); !d.Panic || d.Replicas != 4 {
		t.Fatalf("burst: %+v, want panic to 4 (mean 56 over the panic window)", d)
	}
	// The burst is gone, but panic mode lasts a stable window: no scale-in yet.
	for at := 62 * time.Second; at < 110*time.Second; at += 2 * time.Second {
		s.Observe(t0.Add(at), 8, true)
	}
	if d := s.Desired(t0.Add(110*time.Second), 4, 16, Floor{}, Limits{1, 20}); !d.Panic || d.Replicas != 4 {
		t.Fatalf("after the burst: %+v, want to hold 4 in panic", d)
	}
	for at := 110 * time.Second; at <= 130*time.Second; at += 2 * time.Second {
		s.Observe(t0.Add(at), 8, true)
	}
	if d := s.Desired(t0.Add(130*time.Second), 4, 16, Floor{}, Limits{1, 20}); d.Panic || d.Replicas != 3 {
		t.Fatalf("a stable window later: %+v, want one step in to 3", d)
	}
}

func TestParseLimits(t *testing.T) {
	tests := []struct {
		ann         map[string]string
		want        Limits
		wantProblem string
	}{
		{nil, Limits{1, 64}, ""},
		{map[string]string{api.AnnotationMinReplicas: "2", api.AnnotationMaxReplicas: "8"}, Limits{2, 8}, ""},
		{map[string]string{api.AnnotationMinReplicas: "0"}, Limits{0, 64}, ""},
		{map[string]string{api.AnnotationMinReplicas: "-1"}, Limits{1, 64}, "not a non-negative integer"},
		{map[string]string{api.AnnotationMaxReplicas: "many"}, Limits{1, 64}, "not a non-negative integer"},
		{map[string]string{api.AnnotationMinReplicas: "9", api.AnnotationMaxReplicas: "3"}, Limits{1, 64}, "is below"},
	}
	for _, tt := range tests {
		got, problems := ParseLimits(tt.ann, 64)
		if got != tt.want {
			t.Errorf("ParseLimits(%v) = %+v, want %+v", tt.ann, got, tt.want)
		}
		if (tt.wantProblem == "") != (len(problems) == 0) || tt.wantProblem != "" && !strings.Contains(strings.Join(problems, ";"), tt.wantProblem) {
			t.Errorf("ParseLimits(%v) problems %q, want %q", tt.ann, problems, tt.wantProblem)
		}
	}
}
