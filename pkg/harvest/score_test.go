package harvest

import "testing"

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
