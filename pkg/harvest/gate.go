package harvest

import (
	"fmt"
	"strings"
	"time"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// Window is a daily span of time, in minutes after midnight, during which GPUs
// may be lent. A span whose end is not after its start runs across midnight
// ("20:00-08:00"); "00:00-00:00" is the whole day.
type Window struct {
	Start, End int // minutes after midnight, 0..1439
}

// Windows are the harvest windows in a time zone. No windows means continuous
// harvesting.
type Windows struct {
	Spans    []Window
	Location *time.Location
}

// ParseWindows reads a comma-separated list of HH:MM-HH:MM spans in the named
// time zone (an IANA name such as "Europe/Berlin"; empty means UTC). An empty
// spec means continuous harvesting.
func ParseWindows(spec, zone string) (Windows, error) {
	w := Windows{Location: time.UTC}
	if zone != "" {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			return Windows{}, fmt.Errorf("harvest window time zone %q: %w (use an IANA name such as Europe/Berlin)", zone, err)
		}
		w.Location = loc
	}
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		from, to, ok := strings.Cut(part, "-")
		if !ok {
			return Windows{}, fmt.Errorf("harvest window %q: want HH:MM-HH:MM, e.g. 20:00-08:00", part)
		}
		start, err := minuteOfDay(from)
		if err != nil {
			return Windows{}, fmt.Errorf("harvest window %q: start: %w", part, err)
		}
		end, err := minuteOfDay(to)
		if err != nil {
			return Windows{}, fmt.Errorf("harvest window %q: end: %w", part, err)
		}
		w.Spans = append(w.Spans, Window{Start: start, End: end})
	}
	return w, nil
}

func minuteOfDay(s string) (int, error) {
	t, err := time.Parse("15:04", strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%q is not a time of day HH:MM (00:00-23:59)", s)
	}
	return t.Hour()*60 + t.Minute(), nil
}

// Open reports whether lending is allowed at t.
func (w Windows) Open(t time.Time) bool {
	if len(w.Spans) == 0 {
		return true
	}
	loc := w.Location
	if loc == nil {
		loc = time.UTC
	}
	local := t.In(loc)
	m := local.Hour()*60 + local.Minute()
	for _, s := range w.Spans {
		switch {
		case s.Start < s.End:
			if m >= s.Start && m < s.End {
				return true
			}
		default: // across midnight, or all day when Start == End
			if m >= s.Start || m < s.End {
				return true
			}
		}
	}
	return false
}

// String renders the windows as ParseWindows reads them.
func (w Windows) String() string {
	if len(w.Spans) == 0 {
		return "continuous"
	}
	parts := make([]string, len(w.Spans))
	for i, s := range w.Spans {
		parts[i] = fmt.Sprintf("%02d:%02d-%02d:%02d", s.Start/60, s.Start%60, s.End/60, s.End%60)
	}
	return strings.Join(parts, ",") + " " + w.Location.String()
}

// Gate turns each round's plan into the verdicts to publish: outside the
// harvest windows nothing is lent, and a node's harvestable GPUs rise only after
// the plan has offered at least that many for OpenAfter, while they fall at
// once:
//
//	effective(node, now) = min over [now - OpenAfter, now] of planned(node)
//
// so a node opens only once its capacity has been spare for OpenAfter, and
// starts draining in the same round headroom needs it. A Gate keeps a short
// history per node; it is pure state, driven by the caller's clock.
type Gate struct {
	OpenAfter time.Duration
	Windows   Windows

	history map[string][]sample
}

type sample struct {
	at   time.Time
	gpus int64
}

// Apply gates plan at time now. published is the harvestable GPU count each
// node carries now (0 if none): a node the gate has no history for (a new node,
// or every node after a restart) is taken to have offered only that much so far,
// so a restart never opens more than was open before it.
func (g *Gate) Apply(now time.Time, nodes []Node, plan Plan, published map[string]int64) Plan {
	if g.history == nil {
		g.history = map[string][]sample{}
	}
	open := g.Windows.Open(now)
	out := Plan{Nodes: make(map[string]NodePlan, len(plan.Nodes)), Unplaced: plan.Unplaced}
	seen := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		seen[n.Name] = true
		np := plan.Nodes[n.Name]
		if !n.InPool || !n.Schedulable || n.AllocatableGPUs-n.ReservedGPUs < 0 {
			// Closed for reasons of its own: when it comes back it waits OpenAfter again.
			delete(g.history, n.Name)
			out.Nodes[n.Name] = np
			continue
		}
		planned := np.HarvestableGPUs
		if !open {
			planned = 0
		}
		h, ok := g.history[n.Name]
		if !ok {
			h = []sample{{at: now, gpus: min(published[n.Name], planned)}}
		}
		h = append(h, sample{at: now, gpus: planned})
		// Keep the samples inside the window and the last one before it, which
		// was still in effect when the window began.
		cut := 0
		for cut+1 < len(h) && !h[cut+1].at.After(now.Add(-g.OpenAfter)) {
			cut++
		}
		h = h[cut:]
		g.history[n.Name] = h
		effective := planned
		for _, s := range h {
			effective = min(effective, s.gpus)
		}
		out.Nodes[n.Name] = withHarvestable(np, n.LentGPUs, effective)
	}
	for name := range g.history {
		if !seen[name] {
			delete(g.history, name)
		}
	}
	return out
}

// withHarvestable sets a node's harvestable GPUs and derives its state as
// MakePlan does.
func withHarvestable(np NodePlan, lent, harvestable int64) NodePlan {
	np.HarvestableGPUs = harvestable
	np.ReclaimGPUs = 0
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
