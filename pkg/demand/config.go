package demand

import (
	"fmt"
	"strconv"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// Settings are a service's demand settings after annotations and defaults.
type Settings struct {
	Metric     Metric
	TargetLoad float64
	// GPUsPerReplica is 0 when neither the annotation nor the pod template says:
	// the replicas' own requests then decide.
	GPUsPerReplica int64
}

// Defaults are the controller-wide settings that annotations override.
type Defaults struct {
	// TargetLoad for Requests; <= 0 means DefaultTargetLoad.
	TargetLoad float64
	// TargetKVCache for KVCache; <= 0 means DefaultTargetKVCache.
	TargetKVCache float64
}

// ParseSettings reads a service's settings from its Deployment's annotations.
// templateGPUs is the GPU request of the Deployment's pod template (0 if none);
// largestNodeGPUs is the largest allocatable GPU count of any pool node (0 if
// unknown). Every value that is unparsable, out of range or contradicts the
// cluster is replaced by its documented default and described in problems, for
// the caller to report as an Event; the result is always usable.
//
//	gleaner.dev/load-metric       requests | kv-cache          default requests
//	gleaner.dev/target-load       > 0 (kv-cache: in (0, 1])    default Defaults.TargetLoad / TargetKVCache
//	gleaner.dev/gpus-per-replica  1..largestNodeGPUs           default the pod template's GPU request
func ParseSettings(annotations map[string]string, templateGPUs, largestNodeGPUs int64, d Defaults) (Settings, []string) {
	var problems []string
	s := Settings{Metric: Requests}
	if raw, ok := annotations[api.AnnotationLoadMetric]; ok {
		switch raw {
		case api.LoadMetricRequests:
		case api.LoadMetricKVCache:
			s.Metric = KVCache
		default:
			problems = append(problems, fmt.Sprintf("%s=%q is not %q or %q; using %q", api.AnnotationLoadMetric, raw, api.LoadMetricRequests, api.LoadMetricKVCache, api.LoadMetricRequests))
		}
	}
	s.TargetLoad = d.TargetLoad
	if s.TargetLoad <= 0 {
		s.TargetLoad = DefaultTargetLoad
	}
	if s.Metric == KVCache {
		s.TargetLoad = d.TargetKVCache
		if s.TargetLoad <= 0 || s.TargetLoad > 1 {
			s.TargetLoad = DefaultTargetKVCache
		}
	}
	if raw, ok := annotations[api.AnnotationTargetLoad]; ok {
		v, err := strconv.ParseFloat(raw, 64)
		switch {
		case err != nil || v != v:
			problems = append(problems, fmt.Sprintf("%s=%q is not a number; using %g", api.AnnotationTargetLoad, raw, s.TargetLoad))
		case v <= 0:
			problems = append(problems, fmt.Sprintf("%s=%q must be greater than 0; using %g", api.AnnotationTargetLoad, raw, s.TargetLoad))
		case s.Metric == KVCache && v > 1:
			problems = append(problems, fmt.Sprintf("%s=%q is a KV-cache fraction and must be at most 1; using %g", api.AnnotationTargetLoad, raw, s.TargetLoad))
		default:
			s.TargetLoad = v
		}
	}
	s.GPUsPerReplica = templateGPUs
	if raw, ok := annotations[api.AnnotationGPUsPerReplica]; ok {
		v, err := strconv.ParseInt(raw, 10, 64)
		switch {
		case err != nil || v <= 0:
			problems = append(problems, fmt.Sprintf("%s=%q is not a positive integer; using the pod template's request (%d)", api.AnnotationGPUsPerReplica, raw, templateGPUs))
		case largestNodeGPUs > 0 && v > largestNodeGPUs:
			problems = append(problems, fmt.Sprintf("%s=%q exceeds the largest pool node (%d GPUs), so no replica could ever fit; using the pod template's request (%d)", api.AnnotationGPUsPerReplica, raw, largestNodeGPUs, templateGPUs))
		case templateGPUs > 0 && v != templateGPUs:
			problems = append(problems, fmt.Sprintf("%s=%q contradicts the pod template's request of %d GPUs; using %d", api.AnnotationGPUsPerReplica, raw, templateGPUs, templateGPUs))
		default:
			s.GPUsPerReplica = v
		}
	}
	return s, problems
}
