package harvest

import (
	"fmt"
	"strings"
	"time"
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

// DefaultBackoffLimit is gleaner-controller's cap on flap damping: a node that
// keeps draining waits at most 16 times OpenAfter before it opens again.
const DefaultBackoffLimit = 16

// Gate turns each round's plan into the verdicts to publish: outside the
// harvest windows nothing is lent, and a node's harvestable GPUs rise only after
// the plan has offered at least that many for the node's open-after, while they
// fall at once:
//
//	effective(node, now) = min over [now - openAfter(node), now] of planned(node)
//
// so a node opens only once its capacity has been spare for its open-after, and
// starts draining in the same round headroom needs it.
//
// Flap damping, as CrashLoopBackOff damps a crashing container: each drain
// (lent GPUs taken back) doubles the node's open-after, and each RelaxAfter
// times its open-after without one forgets a doubling:
//
//	openAfter(node) = min(OpenAfter * 2^drains(node), OpenAfter * BackoffLimit)
//
// A node left alone (the night) keeps the short OpenAfter; one that lends
// GPUs only to take them back minutes later soon lends only after a longer
// quiet spell, which saves the evicted jobs' work. BackoffLimit 0 or 1
// switches the damping off.
//
// A Gate is pure state, driven by the caller's clock. A restart forgets it:
// every node then starts without drains, except that one found draining
// (lending more than it publishes) counts one drain just now.
type Gate struct {
	OpenAfter time.Duration
	// BackoffLimit caps a node's open-after at this multiple of OpenAfter
	// (rounded down to a power of two); 0 or 1 means no flap damping.
	BackoffLimit int
	// RelaxAfter: a node forgets one doubling of its open-after each time it goes
	// this many times its current open-after without a drain. 0 means 2.
	RelaxAfter int
	Windows    Windows

	nodes map[string]*gateNode
}

// gateNode is what the gate remembers of one node.
type gateNode struct {
	// history holds the planned harvestable GPUs whenever they changed, over
	// the longest open-after, plus the last sample before it.
	history []sample
	// effective is what the gate gave the node in its last round.
	effective int64
	// drains is how many times its open-after is doubled now.
	drains int
	// since is when the node last drained or forgot a doubling.
	since time.Time
}

type sample struct {
	at   time.Time
	gpus int64
}

// maxDoublings is how often OpenAfter may double under BackoffLimit.
func (g *Gate) maxDoublings() int {
	d := 0
	for g.BackoffLimit>>(d+1) > 0 {
		d++
	}
	return d
}

// openAfter is the open-after of a node whose open-after has doubled this often.
func (g *Gate) openAfter(doublings int) time.Duration {
	return g.OpenAfter << doublings
}

func (g *Gate) relaxAfter(doublings int) time.Duration {
	k := g.RelaxAfter
	if k <= 0 {
		k = 2
	}
	return time.Duration(k) * g.openAfter(doublings)
}

// Apply gates plan at time now. published is the harvestable GPU count each
// node carries now (0 if none): a node the gate has no history for (a new node,
// or every node after a restart) is taken to have offered only that much so far,
// so a restart never opens more than was open before it.
func (g *Gate) Apply(now time.Time, nodes []Node, plan Plan, published map[string]int64) Plan {
	if g.nodes == nil {
		g.nodes = map[string]*gateNode{}
	}
	open := g.Windows.Open(now)
	maxDoublings := g.maxDoublings()
	keep := g.openAfter(maxDoublings)
	out := Plan{Nodes: make(map[string]NodePlan, len(plan.Nodes)), Unplaced: plan.Unplaced, HeadroomFor: plan.HeadroomFor}
	seen := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		seen[n.Name] = true
		np := plan.Nodes[n.Name]
		if !n.InPool || !n.Schedulable || n.AllocatableGPUs-n.ServingGPUs-n.StuckGPUs < 0 {
			// Closed for reasons of its own: when it comes back it waits OpenAfter again.
			delete(g.nodes, n.Name)
			out.Nodes[n.Name] = np
			continue
		}
		planned := np.HarvestableGPUs
		if !open {
			planned = 0
		}
		st, ok := g.nodes[n.Name]
		if !ok {
			pub := published[n.Name]
			st = &gateNode{history: []sample{{at: now, gpus: min(pub, planned)}}, effective: pub, since: now}
			if n.LentGPUs > pub && maxDoublings > 0 {
				st.drains = 1 // draining when we came: it has just drained
			}
			g.nodes[n.Name] = st
		}
		if last := st.history[len(st.history)-1]; last.gpus != planned {
			st.history = append(st.history, sample{at: now, gpus: planned})
		}
		// Keep the samples inside the longest window and the last one before
		// it, which was still in effect when the window began.
		cut := 0
		for cut+1 < len(st.history) && !st.history[cut+1].at.After(now.Add(-keep)) {
			cut++
		}
		st.history = st.history[cut:]

		for st.drains > 0 && !now.Before(st.since.Add(g.relaxAfter(st.drains))) {
			st.since = st.since.Add(g.relaxAfter(st.drains))
			st.drains--
		}
		effective := g.effective(st, now, planned)
		if effective < st.effective && n.LentGPUs > effective && maxDoublings > 0 {
			// A drain: the node takes lent GPUs back.
			st.drains = min(st.drains+1, maxDoublings)
			st.since = now
		}
		st.effective = effective
		out.Nodes[n.Name] = planFor(np.HeadroomGPUs, n.LentGPUs, effective)
	}
	for name := range g.nodes {
		if !seen[name] {
			delete(g.nodes, name)
		}
	}
	return out
}

// JustInTime defers the evictions that only the forecast asks for. gated is
// Apply's result for the plan made with headroom for the forecast horizon; soon
// is MakePlan of the same nodes with the headroom inference needs within the
// reclaim lead, the time an eviction takes to free GPUs (the grace period and a
// planning round or two). A node whose lent GPUs exceed its harvestable ones
// stays draining, so nothing more is lent there from the round the horizon's
// forecast needs its GPUs, but it evicts only what soon needs back:
//
//	reclaim(node) = min(lent - harvestable, max(0, lent - soonHarvestable))
//
// Headroom the forecast asks for and then no longer wants (load rose for a few
// minutes and fell back) thus costs no job any work. Outside the harvest windows
// every lent GPU goes at once, as Apply decided; a node missing from soon evicts
// what gated says.
func (g *Gate) JustInTime(now time.Time, gated, soon Plan) Plan {
	if !g.Windows.Open(now) {
		return gated
	}
	out := Plan{Nodes: make(map[string]NodePlan, len(gated.Nodes)), Unplaced: gated.Unplaced, HeadroomFor: gated.HeadroomFor}
	for name, np := range gated.Nodes {
		if s, ok := soon.Nodes[name]; ok {
			np.ReclaimGPUs = JustInTimeReclaim(np, s)
		}
		out.Nodes[name] = np
	}
	return out
}

// JustInTimeReclaim is what a node whose gated plan is np evicts when soon is
// its plan over the reclaim lead: min(lent - harvestable, max(0, lent -
// soonHarvestable)), where lent - harvestable is np's ReclaimGPUs.
func JustInTimeReclaim(np, soon NodePlan) int64 {
	if np.ReclaimGPUs <= 0 {
		return np.ReclaimGPUs
	}
	lent := np.HarvestableGPUs + np.ReclaimGPUs
	return min(np.ReclaimGPUs, max(0, lent-soon.HarvestableGPUs))
}

// effective is the least the plan offered the node over its open-after.
func (g *Gate) effective(st *gateNode, now time.Time, planned int64) int64 {
	from := now.Add(-g.openAfter(st.drains))
	effective := planned
	for i := len(st.history) - 1; i >= 0; i-- {
		effective = min(effective, st.history[i].gpus)
		if !st.history[i].at.After(from) {
			break // in effect when the window began; older ones were not
		}
	}
	return effective
}
