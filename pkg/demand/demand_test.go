package demand

import (
	"math"
	"testing"
)

func TestAssess(t *testing.T) {
	known := func(running, waiting float64, gpus int64) Replica {
		return Replica{Known: true, Running: running, Waiting: waiting, GPUs: gpus}
	}
	unknown := func(gpus int64) Replica { return Replica{GPUs: gpus} }
	starting := func(gpus int64) Replica { return Replica{Starting: true, GPUs: gpus} }

	tests := []struct {
		name        string
		svc         Service
		wantCurrent int
		wantNeeded  int
		wantSpare   int
		wantGPUs    int64
	}{
		{
			name:        "empty service needs nothing",
			svc:         Service{Name: "s", TargetLoad: 10},
			wantCurrent: 0, wantNeeded: 0, wantSpare: 0, wantGPUs: 0,
		},
		{
			name:        "idle service needs no replica and keeps no spare",
			svc:         Service{Name: "s", TargetLoad: 10, Replicas: []Replica{known(0, 0, 1), known(0, 0, 1)}},
			wantCurrent: 2, wantNeeded: 0, wantSpare: 0, wantGPUs: 1,
		},
		{
			name:        "load within target keeps current replicas",
			svc:         Service{Name: "s", TargetLoad: 10, Replicas: []Replica{known(10, 0, 1), known(10, 0, 1)}},
			wantCurrent: 2, wantNeeded: 2, wantSpare: 0, wantGPUs: 1,
		},
		{
			name:        "load above target rounds up",
			svc:         Service{Name: "s", TargetLoad: 10, Replicas: []Replica{known(15, 0, 2), known(16, 0, 2)}},
			wantCurrent: 2, wantNeeded: 4, wantSpare: 2, wantGPUs: 2,
		},
		{
			name:        "load just above target needs one more",
			svc:         Service{Name: "s", TargetLoad: 10, Replicas: []Replica{known(10.5, 0, 1)}},
			wantCurrent: 1, wantNeeded: 2, wantSpare: 1, wantGPUs: 1,
		},
		{
			name: "waiting requests force current+1 even below target",
			// load 3 -> ceil(3/10)=1, but waiting > 0 forces 2+1.
			svc:         Service{Name: "s", TargetLoad: 10, Replicas: []Replica{known(1, 1, 1), known(1, 0, 1)}},
			wantCurrent: 2, wantNeeded: 3, wantSpare: 1, wantGPUs: 1,
		},
		{
			name: "waiting requests while a replica starts: that replica is the one more",
			// load 3 -> ceil(3/10)=1; the starting replica counts in current (3), so no
			// further room is kept for the waiting request.
			svc:         Service{Name: "s", TargetLoad: 10, Replicas: []Replica{known(1, 1, 1), known(1, 0, 1), starting(1)}},
			wantCurrent: 3, wantNeeded: 1, wantSpare: 0, wantGPUs: 1,
		},
		{
			name: "waiting requests do not lower a larger load-based need",
			// load 50 -> 5 > current+1 = 2.
			svc:         Service{Name: "s", TargetLoad: 10, Replicas: []Replica{known(20, 30, 1)}},
			wantCurrent: 1, wantNeeded: 5, wantSpare: 4, wantGPUs: 1,
		},
		{
			name:        "unknown replica on an idle service forces headroom",
			svc:         Service{Name: "s", TargetLoad: 10, Replicas: []Replica{known(0, 0, 4), unknown(4)}},
			wantCurrent: 2, wantNeeded: 3, wantSpare: 1, wantGPUs: 4,
		},
		{
			name:        "only unknown replicas",
			svc:         Service{Name: "s", TargetLoad: 10, Replicas: []Replica{unknown(1), unknown(1), unknown(1)}},
			wantCurrent: 3, wantNeeded: 4, wantSpare: 1, wantGPUs: 1,
		},
		{
			name: "unknown replicas add to load-based need",
			// ceil(35/10)=4 + 2 unknown = 6 > current+1 = 4.
			svc:         Service{Name: "s", TargetLoad: 10, Replicas: []Replica{known(35, 0, 1), unknown(1), unknown(1)}},
			wantCurrent: 3, wantNeeded: 6, wantSpare: 3, wantGPUs: 1,
		},
		{
			name:        "starting replicas add capacity but no load",
			svc:         Service{Name: "s", TargetLoad: 10, Replicas: []Replica{known(15, 0, 1), starting(1)}},
			wantCurrent: 2, wantNeeded: 2, wantSpare: 0, wantGPUs: 1,
		},
		{
			name:        "starting replicas are not unknown",
			svc:         Service{Name: "s", TargetLoad: 10, Replicas: []Replica{starting(2), starting(2)}},
			wantCurrent: 2, wantNeeded: 0, wantSpare: 0, wantGPUs: 2,
		},
		{
			name:        "known and starting counts as known",
			svc:         Service{Name: "s", TargetLoad: 10, Replicas: []Replica{{Known: true, Starting: true, Running: 25, GPUs: 1}}},
			wantCurrent: 1, wantNeeded: 3, wantSpare: 2, wantGPUs: 1,
		},
		{
			name:        "GPUsPerReplica is the max over replicas",
			svc:         Service{Name: "s", TargetLoad: 10, Replicas: []Replica{known(0, 0, 1), starting(8), unknown(2), known(0, 0, 4)}},
			wantCurrent: 4, wantNeeded: 5, wantSpare: 1, wantGPUs: 8,
		},
		{
			name: "TargetLoad zero means default",
			// 2*DefaultTargetLoad+1 = 33 -> 3 replicas.
			svc:         Service{Name: "s", TargetLoad: 0, Replicas: []Replica{known(2*DefaultTargetLoad+1, 0, 1)}},
			wantCurrent: 1, wantNeeded: 3, wantSpare: 2, wantGPUs: 1,
		},
		{
			name:        "negative TargetLoad means default",
			svc:         Service{Name: "s", TargetLoad: -5, Replicas: []Replica{known(DefaultTargetLoad, 0, 1)}},
			wantCurrent: 1, wantNeeded: 1, wantSpare: 0, wantGPUs: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Assess(tt.svc)
			if got.Service != tt.svc.Name {
				t.Errorf("Service = %q, want %q", got.Service, tt.svc.Name)
			}
			if got.Current != tt.wantCurrent {
				t.Errorf("Current = %d, want %d", got.Current, tt.wantCurrent)
			}
			if got.Needed != tt.wantNeeded {
				t.Errorf("Needed = %d, want %d", got.Needed, tt.wantNeeded)
			}
			if got.HeadroomReplicas != tt.wantSpare {
				t.Errorf("Spare = %d, want %d", got.HeadroomReplicas, tt.wantSpare)
			}
			if got.GPUsPerReplica != tt.wantGPUs {
				t.Errorf("GPUsPerReplica = %d, want %d", got.GPUsPerReplica, tt.wantGPUs)
			}
			if (got.Reason != "") != (got.HeadroomReplicas > 0) {
				t.Errorf("Reason = %q with Spare = %d: want a reason exactly when Spare > 0", got.Reason, got.HeadroomReplicas)
			}
		})
	}
}

// Loads a tenant could report or forge: whatever they are, Assess gives a
// bounded, non-negative answer, and an unreadable one fails closed.
func TestAssessBoundsExtremeLoads(t *testing.T) {
	extremes := []float64{0, 1, 1e6, 1e20, 1e300, math.MaxFloat64, math.Inf(1), math.Inf(-1), math.NaN(), -1}
	for _, running := range extremes {
		for _, forecast := range extremes {
			for _, maxReplicas := range []int{0, 8} {
				s := Service{Name: "s", TargetLoad: 16, GPUsPerReplica: 4, ForecastLoad: forecast, MaxReplicas: maxReplicas, Margin: 0.1,
					Replicas: []Replica{{Known: true, Running: running, GPUs: 4}, {Known: true, Running: 1, GPUs: 4}}}
				n := Assess(s)
				limit := maxNeeded
				if maxReplicas > 0 {
					limit = maxReplicas
				}
				if n.Needed < 0 || n.Needed > max(limit, n.Current) || n.HeadroomReplicas < 0 || n.HeadroomReplicas > n.Needed {
					t.Fatalf("running %g, forecast %g, max %d: needed %d spare %d", running, forecast, maxReplicas, n.Needed, n.HeadroomReplicas)
				}
				if math.IsNaN(n.Load) || math.IsInf(n.Load, 0) || n.Load < 0 {
					t.Fatalf("running %g: load %g", running, n.Load)
				}
				if !usable(running) && (n.Complete || n.Needed < n.Current+1) {
					t.Fatalf("running %g is unreadable but the replica was trusted: %+v", running, n)
				}
				if math.IsNaN(forecast) && n.Needed != max(limit, n.Current) {
					t.Fatalf("an unreadable forecast needs %d, want the limit %d (fail closed)", n.Needed, limit)
				}
			}
		}
	}
}
