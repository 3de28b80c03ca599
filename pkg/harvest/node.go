package harvest

import (
	"encoding/json"
	"fmt"
	"strconv"

	v1 "k8s.io/api/core/v1"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// Verdict is what the planner publishes on a Node and what the scheduler reads back.
type Verdict struct {
	State api.HarvestState
	// HarvestableGPUs is how many GPUs of the node may be held by best-effort pods.
	HarvestableGPUs int64
}

// Closed is the verdict for a node Gleaner must not lend.
var Closed = Verdict{State: api.HarvestClosed}

// ReadNode reads the verdict published on a node. A node without a verdict is
// closed; a half-written or malformed one is an error, which callers treat as closed.
func ReadNode(node *v1.Node) (Verdict, error) {
	state, ok := node.Labels[api.LabelHarvest]
	if !ok {
		return Closed, nil
	}
	v := Verdict{State: api.HarvestState(state)}
	switch v.State {
	case api.HarvestOpen, api.HarvestDraining, api.HarvestClosed:
	default:
		return Closed, fmt.Errorf("node %s: label %s=%q is not one of open, draining, closed", node.Name, api.LabelHarvest, state)
	}
	raw, ok := node.Annotations[api.AnnotationHarvestableGPUs]
	if !ok {
		if v.State == api.HarvestClosed {
			return Closed, nil
		}
		return Closed, fmt.Errorf("node %s: label %s=%s but annotation %s is missing", node.Name, api.LabelHarvest, state, api.AnnotationHarvestableGPUs)
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || n < 0 {
		return Closed, fmt.Errorf("node %s: annotation %s=%q is not a non-negative integer", node.Name, api.AnnotationHarvestableGPUs, raw)
	}
	v.HarvestableGPUs = n
	return v, nil
}

// PublishedOn reports whether node already carries exactly this verdict.
func (v Verdict) PublishedOn(node *v1.Node) bool {
	return node.Labels[api.LabelHarvest] == string(v.State) &&
		node.Annotations[api.AnnotationHarvestableGPUs] == strconv.FormatInt(v.HarvestableGPUs, 10)
}

// MergePatch is the JSON merge patch that publishes the verdict on a Node.
func (v Verdict) MergePatch() []byte {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      map[string]string{api.LabelHarvest: string(v.State)},
		"annotations": map[string]string{api.AnnotationHarvestableGPUs: strconv.FormatInt(v.HarvestableGPUs, 10)},
	}})
	return patch
}
