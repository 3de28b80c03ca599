package round

import (
	"maps"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
)

// Notice is one best-effort pod's warning of its eviction.
type Notice struct {
	reclaim.Candidate
	// At is when the pod is expected to be evicted: the first time a later
	// round, forecasting as this one does, would need its GPUs within the
	// reclaim lead. It moves only by whole steps (Config.NoticeMoved): a
	// time that moved less stays as given, so the pod is told again only
	// when its notice changed.
	At time.Time
	// Node is the node whose GPUs it must give back; Services are those the
	// node's GPUs are kept for.
	Node     string
	Services []string
}

// Given is a notice as the planner gave it: since when, for when, and for
// the GPUs of which node (a gang member's may be another member's).
type Given struct {
	Since, At time.Time
	Node      string
}

// nearNotice is how far ahead a notice's time falls within the horizon: a
// later round whose forecast over the reclaim lead needs the pod can be no
// further off than the horizon less the lead. Times beyond are found coarser,
// and a pod held to one is held no longer than this (holdNoticed).
func (c Config) nearNotice() time.Duration { return c.Horizon - c.ReclaimLead }

// noticeStep is how finely the expected eviction times of notices are found
// within nearNotice: a minute, or a tenth of it when that is shorter (at
// least a second).
func (c Config) noticeStep() time.Duration {
	return max(time.Second, min(time.Minute, c.nearNotice()/10))
}

// onRound is the first round at or after t: the first multiple of
// RoundPeriod (time.Truncate's grid, where gleaner-controller starts its
// rounds), or t itself without a RoundPeriod. A pod whose time is t is
// evicted in that round, so that is the time it is told: to the second, as
// it reads it, and no later than it goes.
func (c Config) onRound(t time.Time) time.Time {
	if c.RoundPeriod <= 0 {
		return t
	}
	r := t.Truncate(c.RoundPeriod)
	if r.Before(t) {
		r = r.Add(c.RoundPeriod)
	}
	return r
}

// noticeFarStep is how finely they are found beyond the horizon, out to the
// notice horizon: a time half an hour away needs no minute's precision. It
// is a tenth of the notice span, at most 5 minutes (the defaults' span is 55
// minutes): a cluster that plans in seconds (a compressed day, a small lab)
// finds far times in seconds too, rather than placing every one at the
// notice horizon's end, where its pod would save for a time long after its
// eviction.
func (c Config) noticeFarStep() time.Duration {
	return max(c.noticeStep(), min(5*time.Minute, (c.noticeHorizon()-c.ReclaimLead)/10))
}

// noticeStepAt is the step an expected eviction time d after now is found
// to, and by which it must move before a given notice's time changes.
func (c Config) noticeStepAt(d time.Duration) time.Duration {
	if d <= c.nearNotice() {
		return c.noticeStep()
	}
	return c.noticeFarStep()
}

// NoticeMoved reports whether a notice's time moved from was to at, as
// seen at now, by enough to tell the pod again: by the step the time is
// found to. The round keeps a notice's time that moved less; whoever keeps
// a notice elsewhere (a pod's annotation) compares by this rule.
func (c Config) NoticeMoved(was, at, now time.Time) bool {
	return at.Sub(was).Abs() >= c.withDefaults().noticeStepAt(was.Sub(now))
}

// leadPlan is a round's headroom over the reclaim lead and its plan.
type leadPlan struct {
	headroom []harvest.Headroom
	plan     harvest.Plan
}

// warnPlan is the plan over the notice horizon, where it is longer than the
// horizon: the horizon's plan, but for the nodes whose lent GPUs the forecast
// over the notice horizon needs more of. Nodes stop lending only at the
// horizon; their pods are warned earlier.
func (p *Planner) warnPlan(v *view, horizon harvest.Plan) harvest.Plan {
	if p.cfg.noticeHorizon() <= p.cfg.Horizon {
		return horizon
	}
	far := v.plan(whatIf{from: v.now, length: p.cfg.noticeHorizon()})
	var out harvest.Plan
	for name, np := range far.Nodes {
		if np.ReclaimGPUs <= horizon.Nodes[name].ReclaimGPUs {
			continue
		}
		if out.Nodes == nil {
			out = harvest.Plan{Nodes: maps.Clone(horizon.Nodes), HeadroomFor: maps.Clone(horizon.HeadroomFor), Unplaced: horizon.Unplaced}
			if out.HeadroomFor == nil {
				out.HeadroomFor = map[string][]string{}
			}
		}
		out.Nodes[name], out.HeadroomFor[name] = np, far.HeadroomFor[name]
	}
	if out.Nodes == nil {
		return horizon
	}
	return out
}

// notices warns the pods the notice horizon's forecast will have evicted
// from the deferred nodes but this round does not evict. A node's pods are
// expected to go at the first later round (in steps of noticeStepAt, as far
// as the notice horizon allows) whose forecast over the reclaim lead needs
// more of its lent GPUs than this round does; by the notice horizon's end at
// the latest.
func (p *Planner) notices(v *view, d Decision, warn harvest.Plan, lead leadPlan, deferred []reclaim.Owed) []Notice {
	now := v.now
	span := p.cfg.noticeHorizon() - p.cfg.ReclaimLead
	latest := p.cfg.onRound(now.Add(span))
	at := make(map[string]time.Time, len(deferred))
	// Each step's plan is of every node (headroom goes where it fits best),
	// but only the deferred nodes' plans are read: by their place in the nodes.
	index := make(map[string]int, len(deferred))
	for _, o := range deferred {
		index[o.Node] = -1
	}
	for i, n := range v.nodes {
		if _, ok := index[n.Name]; ok {
			index[n.Name] = i
		}
	}
	// A later forecast that asks for the headroom of one already planned has
	// the same plan: start from this round's over the lead.
	later := make([]harvest.NodePlan, len(v.nodes))
	headroom := lead.headroom
	for _, o := range deferred {
		later[index[o.Node]] = lead.plan.Nodes[o.Node]
	}
	for step := p.cfg.noticeStep(); len(at) < len(deferred) && step <= span; step += p.cfg.noticeStepAt(step) {
		h := v.headroom(whatIf{from: now.Add(step), length: p.cfg.ReclaimLead})
		later, headroom = v.nodePlans(later, headroom, h), h
		for _, o := range deferred {
			if _, found := at[o.Node]; found {
				continue
			}
			if harvest.JustInTimeReclaim(warn.Nodes[o.Node], later[index[o.Node]]) > d.Plan.Nodes[o.Node].ReclaimGPUs {
				at[o.Node] = p.cfg.onRound(now.Add(step))
			}
		}
	}
	evicted := make(map[*v1.Pod]bool, len(d.Victims))
	for _, vic := range d.Victims {
		evicted[vic.Pod] = true
	}
	var out []Notice
	// Take hands each pod over once (a gang through the node it is chosen for).
	_, _, _ = reclaim.Take(deferred, d.Candidates, func(c reclaim.Candidate, o reclaim.Owed) error {
		if evicted[c.Pod] {
			return nil
		}
		when, ok := at[o.Node]
		if !ok {
			when = latest
		}
		out = append(out, Notice{Candidate: c, At: when, Node: o.Node, Services: warn.HeadroomFor[o.Node]})
		return nil
	})
	gangsGoTogether(out, at, warn.HeadroomFor)
	// A time that moved by less than the step it is found to stays as given:
	// what the pod was told is what holds it (holdNoticed).
	for i := range out {
		if g, ok := p.given[out[i].Pod.UID]; ok && !p.cfg.NoticeMoved(g.At, out[i].At, now) {
			out[i].At = g.At
		}
	}
	return out
}

// gangsGoTogether gives every member of a gang among the notices the time of
// the first of its members' nodes to need it. reclaim.Take chooses a gang
// through one node and counts its members on the others as leaving for
// theirs, so each notice names the node it was chosen through; a node
// whose time comes sooner takes the gang then.
func gangsGoTogether(notices []Notice, at map[string]time.Time, headroomFor map[string][]string) {
	first := map[string]int{}
	for i := range notices {
		n := &notices[i]
		key := api.GangKey(n.Pod)
		if key == "" {
			continue
		}
		if t, ok := at[n.Pod.Spec.NodeName]; ok && t.Before(n.At) {
			n.At, n.Node, n.Services = t, n.Pod.Spec.NodeName, headroomFor[n.Pod.Spec.NodeName]
		}
		if j, ok := first[key]; !ok || n.At.Before(notices[j].At) {
			first[key] = i
		}
	}
	for i := range notices {
		if j, ok := first[api.GangKey(notices[i].Pod)]; ok {
			notices[i].At, notices[i].Node, notices[i].Services = notices[j].At, notices[j].Node, notices[j].Services
		}
	}
}

// holdNoticed keeps this round from evicting a pod before the time its notice
// gave, unless inference already needs its GPUs or the pod saves within the
// grace period it would be given (reclaim.Candidate.SavesInGrace) and that
// time is further off than its save and a notice step (held, it would only
// keep a replica waiting): the GPUs its node owes to
// what the services need for their load now (forecast aside) are taken from
// the pods without a standing notice first, then from the noticed ones, and
// only what that leaves is held. A held pod's node owes that much less for
// now, and the victims are chosen again without it. A time given beyond the
// horizon is pulled in to the horizon's span. A pod that has not started
// (a gang member waiting at Permit) has nothing to save and is not held. A
// gang is held whole or not at all: only when every live member is a
// victim (a rigid gang, or an elastic one taken whole; one shedding members
// counts every running member toward its quorum, so none of them is held)
// and every member could be held, and it goes whole if any member's node
// needs its GPUs for the load now. It returns the held pods' notices, which
// stand.
func (p *Planner) holdNoticed(v *view, d *Decision) []Notice {
	if len(p.given) == 0 {
		return nil
	}
	var urgent map[string]int64
	var held []Notice
	holdable := func(c reclaim.Candidate) bool {
		g, ok := p.given[c.Pod.UID]
		if !ok || !g.At.After(v.now) || notStarted(c.Pod) {
			return false
		}
		// Held, a pod saves for its notice and leaves SavedGrace after its
		// time; taken now, one that saves in its grace leaves its save and
		// SavedGrace after now (EvictionGrace). A time within a notice step
		// is as near as notices are told: it stands.
		d, ok := reclaim.DeclaredSave(c.Pod)
		if !c.SavesInGrace || !ok {
			return true
		}
		early := reclaim.SaveGrace(d) - reclaim.SavedGrace
		return !g.At.After(v.now.Add(max(early, p.cfg.noticeStep())))
	}
	for {
		units := evictedTogether(d.Victims, d.Candidates)
		canHold := make([]bool, len(units))
		for i, u := range units {
			canHold[i] = u.whole && !slices.ContainsFunc(u.members, func(c reclaim.Candidate) bool { return !holdable(c) })
		}
		if urgent == nil && slices.Contains(canHold, true) {
			urgent = owedToLoadNow(v)
		}
		// What each node's victims that cannot be held give back already.
		given := map[string]int64{}
		for i, u := range units {
			if !canHold[i] {
				for _, vic := range u.members {
					given[vic.Pod.Spec.NodeName] += vic.GPUs
				}
			}
		}
		var hold []reclaim.Candidate
		for i, u := range units {
			if !canHold[i] {
				continue
			}
			if slices.ContainsFunc(u.members, func(c reclaim.Candidate) bool { return given[c.Pod.Spec.NodeName] < urgent[c.Pod.Spec.NodeName] }) {
				for _, vic := range u.members {
					given[vic.Pod.Spec.NodeName] += vic.GPUs
				}
				continue
			}
			hold = append(hold, u.members...)
		}
		if len(hold) == 0 {
			return held
		}
		out := map[*v1.Pod]bool{}
		// A notice given beyond the horizon holds its pod, once the lead needs
		// it, no longer than one given within the horizon could: its time is
		// pulled in, and the pod told so.
		limit := p.cfg.onRound(v.now.Add(p.cfg.nearNotice()))
		owing := make(map[string]int, len(d.Reclaims))
		for i, o := range d.Reclaims {
			owing[o.Node] = i
		}
		for _, h := range hold {
			out[h.Pod] = true
			g := p.given[h.Pod.UID]
			at := g.At
			if at.After(limit) {
				at = limit
			}
			held = append(held, Notice{Candidate: h, At: at, Node: g.Node, Services: d.Plan.HeadroomFor[g.Node]})
			if i, ok := owing[h.Pod.Spec.NodeName]; ok {
				d.Reclaims[i].GPUs -= h.GPUs
			}
		}
		d.Reclaims = slices.DeleteFunc(d.Reclaims, func(o reclaim.Owed) bool { return o.GPUs <= 0 })
		d.Candidates = slices.DeleteFunc(slices.Clone(d.Candidates), func(c reclaim.Candidate) bool { return out[c.Pod] })
		d.Victims = victims(d.Reclaims, d.Candidates)
	}
}

// evictedTogether groups victims by what is evicted together: a lone pod
// alone, a gang's members as one. A gang some of whose live candidates are
// not victims (an elastic gang shedding members) is not whole, and cannot be
// held. Victims are live: reclaim.Take never takes a terminating pod.
func evictedTogether(victims, candidates []reclaim.Candidate) []evictionUnit {
	var out []evictionUnit
	gang := map[string]int{}
	for _, vic := range victims {
		key := api.GangKey(vic.Pod)
		if key == "" {
			out = append(out, evictionUnit{members: []reclaim.Candidate{vic}, whole: true})
			continue
		}
		if i, ok := gang[key]; ok {
			out[i].members = append(out[i].members, vic)
			continue
		}
		gang[key] = len(out)
		out = append(out, evictionUnit{members: []reclaim.Candidate{vic}})
	}
	live := map[string]int{}
	for _, c := range candidates {
		if key := api.GangKey(c.Pod); key != "" && c.Pod.DeletionTimestamp == nil {
			live[key]++
		}
	}
	for key, i := range gang {
		out[i].whole = len(out[i].members) >= live[key]
	}
	return out
}

// evictionUnit is victims evicted together; whole: every live member is
// among them.
type evictionUnit struct {
	members []reclaim.Candidate
	whole   bool
}

// notStarted: the pod has not run (a gang member waiting at Permit, counted
// on the node it was nominated to): it has nothing to save for a notice.
func notStarted(pod *v1.Pod) bool {
	return pod.Status.StartTime == nil && pod.Status.Phase != v1.PodRunning
}

// owedToLoadNow is the lent GPUs each node owes to what the services need
// for their load now, forecast aside: inference is already waiting for them.
func owedToLoadNow(v *view) map[string]int64 {
	out := map[string]int64{}
	for name, np := range v.plan(whatIf{kind: loadNow}).Nodes {
		if np.ReclaimGPUs > 0 {
			out[name] = np.ReclaimGPUs
		}
	}
	return out
}

// markPrepared marks the candidates that checkpointed after this planner
// noticed them: victims are chosen among them first. Those whose noticed
// time has come at now, and whose checkpoint was saved for it, are Saved
// too: saved within savedWithin before that time, as the pod read it (to
// the second), as a pod timing its save to complete by then does, and at
// most twice that before now, so that an eviction delayed past its time
// (rounds that failed) gives the pod its grace to save what it did since.
func (p *Planner) markPrepared(candidates []reclaim.Candidate, now time.Time) {
	for i := range candidates {
		c := &candidates[i]
		if g, ok := p.given[c.Pod.UID]; ok {
			c.Noticed = true
			if t, ok := api.LastCheckpoint(c.Pod); ok && !t.Before(g.Since) {
				c.Prepared = true
				c.Saved = !now.Before(g.At) && !t.Before(g.At.Truncate(time.Second).Add(-savedWithin)) && now.Sub(t) <= 2*savedWithin
			}
		}
	}
}

// savedWithin is how long before its noticed time a pod's checkpoint counts
// as saved for it: the notice step at most (times within the horizon are
// found to a minute or less), and room for trainers that start that save
// ahead of the time by twice its length and more (the reference step: 21 s
// ahead before it has timed a save).
const savedWithin = time.Minute

// remember keeps this round's notices, each since when it was first given.
func (p *Planner) remember(now time.Time, notices []Notice) {
	if len(notices) == 0 && len(p.given) == 0 {
		return
	}
	next := make(map[types.UID]Given, len(notices))
	for _, n := range notices {
		since := now
		if g, ok := p.given[n.Pod.UID]; ok {
			since = g.Since
		}
		next[n.Pod.UID] = Given{At: n.At, Since: since, Node: n.Node}
	}
	p.given = next
}
