package demand

import (
	"strings"
	"testing"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

func TestParseSettings(t *testing.T) {
	d := Defaults{TargetLoad: 20}
	tests := []struct {
		name        string
		annotations map[string]string
		template    int64
		want        Settings
		wantProblem string
	}{
		{"no annotations: controller defaults", nil, 4, Settings{Metric: Requests, TargetLoad: 20, GPUsPerReplica: 4}, ""},
		{"target override", map[string]string{api.AnnotationTargetLoad: "8"}, 4, Settings{Requests, 8, 4}, ""},
		{"kv-cache with its default target", map[string]string{api.AnnotationLoadMetric: "kv-cache"}, 2, Settings{KVCache, DefaultTargetKVCache, 2}, ""},
		{"kv-cache target", map[string]string{api.AnnotationLoadMetric: "kv-cache", api.AnnotationTargetLoad: "0.6"}, 2, Settings{KVCache, 0.6, 2}, ""},
		{"negative target", map[string]string{api.AnnotationTargetLoad: "-3"}, 4, Settings{Requests, 20, 4}, "must be greater than 0"},
		{"unparsable target", map[string]string{api.AnnotationTargetLoad: "lots"}, 4, Settings{Requests, 20, 4}, "is not a number"},
		{"NaN target", map[string]string{api.AnnotationTargetLoad: "NaN"}, 4, Settings{Requests, 20, 4}, "is not a number"},
		{"kv-cache target above 1", map[string]string{api.AnnotationLoadMetric: "kv-cache", api.AnnotationTargetLoad: "80"}, 4, Settings{KVCache, DefaultTargetKVCache, 4}, "at most 1"},
		{"unknown metric", map[string]string{api.AnnotationLoadMetric: "tokens"}, 4, Settings{Requests, 20, 4}, `is not "requests" or "kv-cache"`},
		{"GPUs per replica for a template without requests", map[string]string{api.AnnotationGPUsPerReplica: "4"}, 0, Settings{Requests, 20, 4}, ""},
		{"GPUs per replica above any node", map[string]string{api.AnnotationGPUsPerReplica: "16"}, 0, Settings{Requests, 20, 0}, "exceeds the largest pool node (8 GPUs)"},
		{"GPUs per replica contradicting the template", map[string]string{api.AnnotationGPUsPerReplica: "2"}, 4, Settings{Requests, 20, 4}, "contradicts the pod template's request of 4"},
		{"GPUs per replica zero", map[string]string{api.AnnotationGPUsPerReplica: "0"}, 4, Settings{Requests, 20, 4}, "not a positive integer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, problems := ParseSettings(tt.annotations, tt.template, 8, d)
			if got != tt.want {
				t.Errorf("settings = %+v, want %+v", got, tt.want)
			}
			switch {
			case tt.wantProblem == "" && len(problems) > 0:
				t.Errorf("problems %q, want none", problems)
			case tt.wantProblem != "" && (len(problems) != 1 || !strings.Contains(problems[0], tt.wantProblem)):
				t.Errorf("problems %q, want one containing %q", problems, tt.wantProblem)
			}
		})
	}
}
