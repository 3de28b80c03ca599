package autoscale

import (
	"fmt"
	"strconv"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// Enabled reports whether a Deployment opted in with gleaner.dev/autoscale: "true".
func Enabled(annotations map[string]string) bool {
	return annotations[api.AnnotationAutoscale] == "true"
}

// ParseLimits reads gleaner.dev/min-replicas (default 1; 0 allows scaling a
// service away entirely) and gleaner.dev/max-replicas (default
// maxDefault). Invalid or contradictory values fall back to the defaults and
// are described in problems, for an Event on the Deployment.
func ParseLimits(annotations map[string]string, maxDefault int) (Limits, []string) {
	var problems []string
	lim := Limits{Min: 1, Max: maxDefault}
	read := func(key string, into *int) {
		raw, ok := annotations[key]
		if !ok {
			return
		}
		v, err := strconv.Atoi(raw)
		if err != nil || v < 0 {
			problems = append(problems, fmt.Sprintf("%s=%q is not a non-negative integer; using %d", key, raw, *into))
			return
		}
		*into = v
	}
	read(api.AnnotationMinReplicas, &lim.Min)
	read(api.AnnotationMaxReplicas, &lim.Max)
	if lim.Max < lim.Min || lim.Max == 0 {
		problems = append(problems, fmt.Sprintf("%s=%d is below %s=%d or zero; using %d..%d", api.AnnotationMaxReplicas, lim.Max, api.AnnotationMinReplicas, lim.Min, 1, maxDefault))
		lim = Limits{Min: 1, Max: maxDefault}
	}
	return lim, problems
}
