package harvest

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

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

// Fit says whether a best-effort pod fits on a node under its verdict, and if not, why.
type Fit int

const (
	// Fits: the node is open and its harvestable GPUs, minus those lent there, cover the pod.
	Fits Fit = iota
	// NotOpen: the node lends nothing new (draining or closed).
	NotOpen
	// NotEnoughGPUs: open, but too few harvestable GPUs are left.
	NotEnoughGPUs
)

// Fit is the harvest check of a best-effort pod asking for gpus on a node
// where best-effort pods already hold lent GPUs (the pods just assumed there
// included): the node must be open and lent + gpus <= harvestable.
// GPUHarvest's Filter and the simulator's scheduler both ask it.
func (v Verdict) Fit(lent, gpus int64) Fit {
	switch {
	case v.State != api.HarvestOpen:
		return NotOpen
	case lent+gpus > v.HarvestableGPUs:
		return NotEnoughGPUs
	}
	return Fits
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

// planFor is a node's plan once its harvestable GPUs are decided; its state and
// the GPUs it must take back follow from the GPUs lent there:
//
//	draining (reclaim lent - harvestable) when lent > harvestable
//	closed when nothing is harvestable, open otherwise
func planFor(headroom, lent, harvestable int64) NodePlan {
	np := NodePlan{HeadroomGPUs: headroom, Verdict: Verdict{HarvestableGPUs: harvestable}}
	switch {
	case lent > harvestable:
		np.State = api.HarvestDraining
		np.ReclaimGPUs = lent - harvestable
	case harvestable == 0:
		np.State = api.HarvestClosed
	default:
		np.State = api.HarvestOpen
	}
	return np
}

// Availability is what an open node's lendable GPUs are expected to do: the
// forecast time until the node next needs any of them back (For; at least
// that long when AtLeast) and the learned chances that they stay lendable
// for an hour and for four (NotLearned until the controller has judged a
// forecast over the span). gleaner-controller publishes it on open nodes
// (api.AnnotationAvailability); GPUHarvest's Score reads it.
type Availability struct {
	For                  time.Duration
	AtLeast              bool
	Survive1h, Survive4h float64
}

// NotLearned is a chance not given: the annotation leaves it out.
const NotLearned = -1.0

// String is the annotation's value: "for=1h45m0s,survive-1h=0.93,survive-4h=0.41"
// ("for>=4h0m0s" when AtLeast; a chance NotLearned is left out).
func (a Availability) String() string {
	op := "="
	if a.AtLeast {
		op = ">="
	}
	out := fmt.Sprintf("for%s%s", op, a.For)
	for _, c := range []struct {
		key string
		p   float64
	}{{"survive-1h", a.Survive1h}, {"survive-4h", a.Survive4h}} {
		if c.p != NotLearned {
			out += fmt.Sprintf(",%s=%.2f", c.key, c.p)
		}
	}
	return out
}

// ReadAvailability reads a node's availability; ok is false when it carries
// none or one that does not parse (a node whose future is unknown). A chance
// the annotation leaves out is NotLearned.
func ReadAvailability(node *v1.Node) (a Availability, ok bool) {
	raw, found := node.Annotations[api.AnnotationAvailability]
	if !found || len(raw) > 100 {
		return Availability{}, false
	}
	a.Survive1h, a.Survive4h = NotLearned, NotLearned
	seen := map[string]bool{}
	for _, kv := range strings.Split(raw, ",") {
		k, v, _ := strings.Cut(kv, "=")
		if seen[strings.TrimSuffix(k, ">")] {
			return Availability{}, false
		}
		seen[strings.TrimSuffix(k, ">")] = true
		var err error
		switch k {
		case "for", "for>":
			a.AtLeast = k == "for>"
			a.For, err = time.ParseDuration(v)
			if a.For < 0 {
				return Availability{}, false
			}
		case "survive-1h":
			a.Survive1h, err = parseProbability(v)
		case "survive-4h":
			a.Survive4h, err = parseProbability(v)
		default:
			return Availability{}, false
		}
		if err != nil {
			return Availability{}, false
		}
	}
	if !seen["for"] {
		return Availability{}, false
	}
	return a, true
}

func parseProbability(s string) (float64, error) {
	p, err := strconv.ParseFloat(s, 64)
	if err != nil || !(p >= 0 && p <= 1) {
		return 0, fmt.Errorf("%q is not a probability", s)
	}
	return p, nil
}

// MergePatch is the JSON merge patch that publishes a on a Node (nil: removes it).
func (a *Availability) MergePatch() []byte {
	var value any
	if a != nil {
		value = a.String()
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{api.AnnotationAvailability: value}}})
	return patch
}
