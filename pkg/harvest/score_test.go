package harvest

import (
	"testing"
	"time"
)

func TestPlacementScore(t *testing.T) {
	tests := []struct {
		name         string
		n            PlacementNode
		request      int64
		wPack, wIdle int64
		want         int64
	}{
		// packing = 100*(2+2)/8 = 50; idle = 100*(8-0)/8 = 100; (50+100)/2 = 75.
		{"idle node half packed", PlacementNode{HarvestableGPUs: 8, LentGPUs: 2, AllocatableGPUs: 8}, 2, 1, 1, 75},
		// packing = 100*min(3+2,4)/4 = 100; idle = 100*(8-4)/8 = 50; (100+50)/2 = 75.
		{"serving node, request overfills", PlacementNode{HarvestableGPUs: 4, LentGPUs: 3, AllocatableGPUs: 8, ServingGPUs: 4}, 2, 1, 1, 75},
		// packing only: 100*(0+1)/4 = 25.
		{"packing weight only", PlacementNode{HarvestableGPUs: 4, AllocatableGPUs: 8, ServingGPUs: 4}, 1, 1, 0, 25},
		// (3*25 + 1*50)/4 = 31 (integer division of 125/4).
		{"weighted", PlacementNode{HarvestableGPUs: 4, AllocatableGPUs: 8, ServingGPUs: 4}, 1, 3, 1, 31},
		{"nothing harvestable", PlacementNode{AllocatableGPUs: 8}, 1, 1, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PlacementScore(tt.n, tt.request, tt.wPack, tt.wIdle, 100); got != tt.want {
				t.Fatalf("PlacementScore = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestAvailabilityScore(t *testing.T) {
	short := Availability{For: 75 * time.Minute, Survive1h: 0.9, Survive4h: 0.1}
	long := Availability{For: 4 * time.Hour, AtLeast: true, Survive1h: 0.95, Survive4h: 0.9}
	for _, tt := range []struct {
		name     string
		a        Availability
		interval time.Duration
		want     int64
	}{
		{"a 30-minute job: the hour's survival, less a fifth of the four hours'", short, 30 * time.Minute, 88},
		{"the same job prefers the short window to the long one", long, 30 * time.Minute, 77},
		{"a 4-hour job: the four hours' survival", short, 4 * time.Hour, 10},
		{"a 2h30m job: halfway between", long, 150 * time.Minute, 92},
		{"never below 0", Availability{Survive1h: 0.1, Survive4h: 1}, time.Hour, 0},
		{"a chance not learned counts as none", Availability{Survive1h: NotLearned, Survive4h: NotLearned}, time.Hour, 0},
		{"the hour's learned, the four hours' not: no waste counted", Availability{Survive1h: 0.8, Survive4h: NotLearned}, 30 * time.Minute, 80},
	} {
		if got := AvailabilityScore(tt.a, tt.interval, 100); got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.want)
		}
	}
}
