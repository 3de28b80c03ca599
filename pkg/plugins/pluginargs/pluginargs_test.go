package pluginargs

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gleaner-dev/gleaner/pkg/reclaim"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

type testArgs struct {
	BestEffort `json:",inline"`
	Timeout    *int32 `json:"timeoutSeconds,omitempty"`
}

func (a *testArgs) Default() {
	a.BestEffort.Default()
	if a.Timeout == nil {
		a.Timeout = new(int32(30))
	}
}

func (a *testArgs) Validate(path *field.Path) field.ErrorList { return a.BestEffort.Validate(path) }

// A misspelt field stops the scheduler naming the plugin and the field, instead
// of leaving the default in place unnoticed; so does a wrong type.
func TestDecodeIsStrict(t *testing.T) {
	for _, tt := range []struct {
		raw, want string
	}{
		{`{"timeoutSecond": 5}`, `decoding Test args: unknown field "timeoutSecond"`},
		{`{"timeoutSeconds": 5, "timeoutSeconds": 6}`, `duplicate field "timeoutSeconds"`},
		{`{"timeoutSeconds": "five"}`, "decoding Test args: json: cannot unmarshal string"},
		{`{"gpuResourceName": "cpu"}`, `pluginConfig[Test].args.gpuResourceName: Invalid value: "cpu"`},
	} {
		var args testArgs
		err := Decode("Test", &runtime.Unknown{Raw: []byte(tt.raw), ContentType: runtime.ContentTypeJSON}, &args)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error containing %q", tt.raw, err, tt.want)
		}
	}
	var args testArgs
	if err := Decode("Test", &runtime.Unknown{Raw: []byte(`{"timeoutSeconds": 5}`)}, &args); err != nil || *args.Timeout != 5 || args.Threshold() != 0 {
		t.Fatalf("valid args: %v, %+v", err, args)
	}
	if err := Decode("Test", nil, &args); err != nil {
		t.Fatalf("no args: %v", err)
	}
}

// The controller's check of the scheduler's profile: agreement passes,
// defaults count as written, and each disagreement is named by profile,
// plugin and field.
func TestCheckProfiles(t *testing.T) {
	const profile = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
- schedulerName: gleaner-scheduler
  plugins:
    multiPoint:
      enabled:
      - name: GPUHarvest
      - name: ReclaimPreemption
  pluginConfig:
  - name: GPUHarvest
    args: {bestEffortPriorityThreshold: %d, gpuResourceName: %s}
`
	config := func(threshold int, resource string) []byte {
		return []byte(fmt.Sprintf(profile, threshold, resource))
	}
	withGrace := append(config(0, "nvidia.com/gpu"), "  - name: ReclaimPreemption\n    args: {maxGraceSeconds: 300}\n"...)
	want := func(threshold int32, resource string) BestEffort {
		return BestEffort{BestEffortPriorityThreshold: &threshold, GPUResourceName: resource}
	}
	if err := CheckProfiles(config(0, "nvidia.com/gpu"), BestEffort{}, reclaim.DefaultMaxGrace); err != nil {
		t.Errorf("an agreeing profile: %v", err)
	}
	if err := CheckProfiles(withGrace, BestEffort{}, 5*time.Minute); err != nil {
		t.Errorf("an agreeing profile with a grace of 300 s: %v", err)
	}
	for _, tt := range []struct {
		name   string
		config []byte
		want   BestEffort
		errs   []string
	}{
		{"threshold", config(10, "nvidia.com/gpu"), BestEffort{}, []string{"profile gleaner-scheduler, GPUHarvest: bestEffortPriorityThreshold 10, but 0 here"}},
		// ReclaimPreemption has no args: its default (0) disagrees with 5.
		{"defaulted args", config(5, "nvidia.com/gpu"), want(5, "nvidia.com/gpu"), []string{"ReclaimPreemption: bestEffortPriorityThreshold 0, but 5 here"}},
		{"resource", config(0, "amd.com/gpu"), BestEffort{}, []string{"gpuResourceName amd.com/gpu, but nvidia.com/gpu here"}},
		{"not a scheduler configuration", []byte("kind: ConfigMap\n"), BestEffort{}, []string{`"ConfigMap", not a KubeSchedulerConfiguration`}},
		{"no Gleaner plugin", []byte("kind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: default-scheduler\n"), BestEffort{}, []string{"no profile uses GPUHarvest or ReclaimPreemption"}},
		{"ill-typed args", []byte("kind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: s\n  pluginConfig:\n  - name: GPUHarvest\n    args: {bestEffortPriorityThreshold: low}\n"), BestEffort{}, []string{"profile s, GPUHarvest args:"}},
		{"not YAML", []byte("kind: [\n"), BestEffort{}, []string{"reading the scheduler's configuration"}},
	} {
		err := CheckProfiles(tt.config, tt.want, reclaim.DefaultMaxGrace)
		for _, w := range tt.errs {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want an error containing %q", tt.name, err, w)
			}
		}
	}
	// Defaulted, ReclaimPreemption gives 120 s; the controller would give 5 minutes.
	if err := CheckProfiles(config(0, "nvidia.com/gpu"), BestEffort{}, 5*time.Minute); err == nil || !strings.Contains(err.Error(), "ReclaimPreemption: maxGraceSeconds 120, but a reclaim grace of 5m0s here") {
		t.Errorf("a defaulted grace against 5 minutes: %v", err)
	}
	if err := CheckProfiles(withGrace, BestEffort{}, reclaim.DefaultMaxGrace); err == nil || !strings.Contains(err.Error(), "ReclaimPreemption: maxGraceSeconds 300, but a reclaim grace of 2m0s here") {
		t.Errorf("a grace of 300 s against the default: %v", err)
	}
}
