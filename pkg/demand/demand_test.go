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

// A rollout's surge replicas above MaxReplicas are pods that exist: each
// pending one keeps its room, though no load asks for more than the maximum.
func TestAssessKeepsRoomForSurgeAboveMaxReplicas(t *testing.T) {
	for _, tt := range []struct {
		name                  string
		bound, pending, max   int
		running               float64
		wantNeeded, wantSpare int
	}{
		{name: "one surge replica above a maximum of 1", bound: 1, pending: 1, max: 1, wantNeeded: 2, wantSpare: 1},
		{name: "two surge replicas above a maximum of 2", bound: 2, pending: 2, max: 2, wantNeeded: 4, wantSpare: 2},
		{name: "no surge: the maximum still bounds load", bound: 1, max: 2, running: 1e9, wantNeeded: 2, wantSpare: 1},
		{name: "surge and a forged load: the pods, not the load", bound: 1, pending: 1, max: 1, running: 1e9, wantNeeded: 2, wantSpare: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := Service{Name: "s", TargetLoad: 16, MaxReplicas: tt.max}
			for i := range tt.bound {
				r := Replica{Known: true, GPUs: 4}
				if i == 0 {
					r.Running = tt.running
				}
				s.Replicas = append(s.Replicas, r)
			}
			for range tt.pending {
				s.Replicas = append(s.Replicas, Replica{Pending: true, GPUs: 4})
			}
			n := Assess(s)
			if n.Needed != tt.wantNeeded || n.HeadroomReplicas != tt.wantSpare {
				t.Fatalf("needed %d spare %d, want %d and %d (%s)", n.Needed, n.HeadroomReplicas, tt.wantNeeded, tt.wantSpare, n.Reason)
			}
		})
	}
}

// An asleep replica serves nothing until woken but holds its GPUs: it stays
// current, adds only the load held in it, and stands for the one more
// replica waiting requests ask for only while no request is in it. Each case
// is also assessed with its asleep replicas awake, to show what sleep changes.
func TestAssessAsleep(t *testing.T) {
	known := func(running, waiting float64) Replica {
		return Replica{Known: true, Running: running, Waiting: waiting, GPUs: 4}
	}
	asleep := func(running, waiting float64) Replica {
		return Replica{Known: true, Asleep: true, Running: running, Waiting: waiting, GPUs: 4}
	}
	type need struct{ current, needed, headroom, asleep, wake int }
	tests := []struct {
		name      string
		svc       Service
		want      need
		wantAwake need // the same replicas, none asleep
	}{
		{
			name:      "idle: asleep replicas are current and need no wake-up",
			svc:       Service{Replicas: []Replica{known(0, 0), asleep(0, 0), asleep(0, 0)}},
			want:      need{current: 3, needed: 0, headroom: 0, asleep: 2, wake: 0},
			wantAwake: need{current: 3},
		},
		{
			name:      "load the awake replicas carry wakes none",
			svc:       Service{Replicas: []Replica{known(10, 0), known(12, 0), asleep(0, 0)}},
			want:      need{current: 3, needed: 2, headroom: 0, asleep: 1, wake: 0},
			wantAwake: need{current: 3, needed: 2},
		},
		{
			name: "load beyond the awake replicas: wake one, keep no room for a new one",
			// ceil(25/16) = 2 replicas; one is awake.
			svc:       Service{Replicas: []Replica{known(16, 9), asleep(0, 0)}},
			want:      need{current: 2, needed: 2, headroom: 0, asleep: 1, wake: 1},
			wantAwake: need{current: 2, needed: 3, headroom: 1},
		},
		{
			name: "forecast beyond the awake replicas: the asleep ones first",
			// ceil(40/16) = 3 = current: the two asleep replicas are woken, no room kept.
			svc:       Service{ForecastLoad: 40, Replicas: []Replica{known(10, 0), asleep(0, 0), asleep(0, 0)}},
			want:      need{current: 3, needed: 3, headroom: 0, asleep: 2, wake: 2},
			wantAwake: need{current: 3, needed: 3},
		},
		{
			name: "load beyond every replica, asleep or not: wake them all and keep room",
			// ceil(70/16) = 5.
			svc:       Service{Replicas: []Replica{known(30, 40), asleep(0, 0)}},
			want:      need{current: 2, needed: 5, headroom: 3, asleep: 1, wake: 1},
			wantAwake: need{current: 2, needed: 5, headroom: 3},
		},
		{
			name: "waiting requests: an idle asleep replica is the one more",
			// load 3 needs 1; the waiting request asks for a second serving replica.
			svc:       Service{Replicas: []Replica{known(2, 1), asleep(0, 0), asleep(0, 0)}},
			want:      need{current: 3, needed: 2, headroom: 0, asleep: 2, wake: 1},
			wantAwake: need{current: 3, needed: 4, headroom: 1},
		},
		{
			name:      "requests waiting in the asleep replica itself: it is no spare, room is kept",
			svc:       Service{Replicas: []Replica{known(1, 0), asleep(0, 3)}},
			want:      need{current: 2, needed: 3, headroom: 1, asleep: 1, wake: 1},
			wantAwake: need{current: 2, needed: 3, headroom: 1},
		},
		{
			name:      "requests held running in an asleep replica are load, and it is no spare",
			svc:       Service{Replicas: []Replica{known(1, 1), asleep(20, 0)}},
			want:      need{current: 2, needed: 3, headroom: 1, asleep: 1, wake: 1},
			wantAwake: need{current: 2, needed: 3, headroom: 1},
		},
		{
			name:      "an asleep reading without fresh metrics is unknown: saturated",
			svc:       Service{Replicas: []Replica{known(1, 0), {Asleep: true, GPUs: 4}}},
			want:      need{current: 2, needed: 3, headroom: 1},
			wantAwake: need{current: 2, needed: 3, headroom: 1},
		},
		{
			name:      "an asleep replica reporting NaN is unknown: saturated",
			svc:       Service{Replicas: []Replica{known(1, 0), asleep(math.NaN(), 0)}},
			want:      need{current: 2, needed: 3, headroom: 1},
			wantAwake: need{current: 2, needed: 3, headroom: 1},
		},
		{
			name: "KV-cache load: an asleep replica's dropped cache adds none",
			svc: Service{Metric: KVCache, TargetLoad: 0.5, Replicas: []Replica{
				{Known: true, KVCache: 0.9, GPUs: 4}, {Known: true, Asleep: true, GPUs: 4}}},
			want:      need{current: 2, needed: 2, headroom: 0, asleep: 1, wake: 1},
			wantAwake: need{current: 2, needed: 2},
		},
	}
	check := func(t *testing.T, which string, s Service, want need) {
		t.Helper()
		s.Name = "s"
		n := Assess(s)
		got := need{current: n.Current, needed: n.Needed, headroom: n.HeadroomReplicas, asleep: n.Asleep, wake: n.Wake}
		if got != want {
			t.Errorf("%s: got %+v, want %+v (reason %q)", which, got, want, n.Reason)
		}
		if (n.Reason != "") != (n.HeadroomReplicas > 0) {
			t.Errorf("%s: Reason = %q with headroom %d: want a reason exactly when room is kept", which, n.Reason, n.HeadroomReplicas)
		}
		if n.GPUsPerReplica != 4 {
			t.Errorf("%s: GPUsPerReplica = %d, want 4: asleep replicas are sized as any", which, n.GPUsPerReplica)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check(t, "asleep", tt.svc, tt.want)
			awake := tt.svc
			awake.Replicas = make([]Replica, len(tt.svc.Replicas))
			for i, r := range tt.svc.Replicas {
				r.Asleep = false
				awake.Replicas[i] = r
			}
			check(t, "awake", awake, tt.wantAwake)
		})
	}
}
