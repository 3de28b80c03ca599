// Package round is one planning round of Gleaner's policy, the whole of it.
// Given the time, the nodes with the GPUs pods hold on them and each inference
// service's observed load, a round forecasts every service's demand, places
// headroom and gates the verdicts (pkg/demand, pkg/harvest), chooses what to
// evict where lent GPUs are owed (pkg/reclaim), decides the autoscaler's scale
// changes (pkg/autoscale); ProfilesDue says which learned profiles are due to
// be saved.
//
// A Planner keeps what the policy remembers between rounds: each service's
// trend, learned profile and autoscaler windows, and the gate's history. It
// talks to no API. gleaner-controller observes the cluster (listers and the
// vLLM informer's snapshot, turned into an Observation) and acts on the
// Decision (patch, evict, scale, save); gleaner simulate feeds the same
// Planner from its virtual cluster, so what it reports is what the controller
// would do.
package round

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/autoscale"
	"github.com/gleaner-dev/gleaner/pkg/demand"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
)

// Observation is what one round sees.
type Observation struct {
	Now time.Time
	// Nodes are every node with the GPUs pods hold there, in name order.
	Nodes []harvest.Node
	// Published is the harvestable GPU count each node carries now (absent: 0).
	Published map[string]int64
	// Services are the inference services, in key order.
	Services []Service
	// BestEffort lists the best-effort pods that may be evicted, as of Now. It
	// is called only when some node must return GPUs, with those nodes; the
	// result must hold every best-effort pod on them (terminating ones too) and
	// every member of a gang that has a member on them.
	BestEffort func(owing map[string]bool) []reclaim.Candidate
}

// Service is one inference service as observed.
type Service struct {
	// Key names the service: namespace/name.
	Key string
	// Replicas are its inference pods as the metrics informer sees them.
	Replicas []demand.Replica
	// Settings are its demand settings (target, metric, GPUs per replica).
	Settings demand.Settings
	// Declared: a workload object (a Deployment) stands for the service, so its
	// load is learned from even while no replica runs, and its profile is stored.
	Declared bool
	// StoredProfile is the learned profile stored with the service (JSON;
	// empty: none). It is read once, the first time the service is seen declared.
	StoredProfile string
	// Autoscale is set when Gleaner scales the service.
	Autoscale *Autoscaled
}

// Autoscaled is a service Gleaner scales: its replica count now and its limits.
type Autoscaled struct {
	Replicas int
	Limits   autoscale.Limits
}

// Decision is what one round decided.
type Decision struct {
	// Plan holds every node's verdict and the GPUs it must return.
	Plan harvest.Plan
	// Services are each service's demand, in key order.
	Services []ServiceDecision
	// Reclaims are the nodes that must return lent GPUs, in node order.
	Reclaims []reclaim.Owed
	// Candidates are the best-effort pods Observation.BestEffort listed (only
	// when some node must return GPUs); Victims are those reclaim.Take evicts
	// from them when every eviction goes through. An eviction the API refuses
	// makes the choice again: call reclaim.Take with Reclaims and Candidates.
	Candidates []reclaim.Candidate
	Victims    []reclaim.Candidate
	// Notices are the best-effort pods that the forecast over the notice
	// horizon will have evicted, though not in this round (the reclaim lead
	// defers them), each with when its eviction is expected: the warning a job gets
	// to checkpoint first. Only with a ReclaimLead shorter than the Horizon,
	// and not WithoutNotices. A pod noticed earlier is not evicted before its
	// notice's time unless inference already needs its node's GPUs.
	Notices []Notice
	// Warned holds the notice each victim had, if any.
	Warned map[types.UID]Warning
	// Scale lists the autoscaled services whose replica count should change.
	Scale []Scale
	// Availability is, for each open node, how long its lendable GPUs are
	// expected to stay lendable (forecast every AvailabilityEvery).
	Availability []Availability
}

// Notice is one best-effort pod's warning of its eviction.
type Notice struct {
	reclaim.Candidate
	// At is when the pod is expected to be evicted: the first time a later
	// round, forecasting as this one does, would need its GPUs within the
	// reclaim lead.
	At time.Time
	// Node is the node whose GPUs it must give back; Services are those the
	// node's GPUs are kept for.
	Node     string
	Services []string
}

// Warning is a notice as it was given: since when, and for when.
type Warning struct{ Since, At time.Time }

// ServiceDecision is one service's demand in one round.
type ServiceDecision struct {
	Key string
	// Need is what the service needs now and over the horizon: its Spare
	// replicas are the headroom kept for it. The safety margin is in it only
	// for the service it keeps the most room for (Planner.needs).
	Need demand.Need
	// Soon is the need over the reclaim lead: what lent GPUs are evicted for.
	Soon     demand.Need
	Forecast demand.Forecast
	// Problems found with what was stored for the service (an unreadable profile).
	Problems []string

	// What the forecast was made from, to forecast later windows (notices).
	in      demand.Service
	load    float64
	trend   *demand.Trend
	profile *demand.Profile
	// gpusPerLoad turns its load into GPUs (0: its replica size is unknown);
	// complete: its load now is whole (demand.Need.Complete).
	gpusPerLoad float64
	complete    bool
	// soon is the forecast over the reclaim lead.
	soon demand.Forecast
}

// Scale is one autoscaler decision that changes a service's replicas.
type Scale struct {
	Key      string
	From     int
	Decision autoscale.Decision
}

// ProfileWrite is a service's learned profile, due to be saved.
type ProfileWrite struct {
	Key  string
	JSON string
}

// Planner runs rounds and keeps the policy's memory between them. It is not
// safe for concurrent use.
type Planner struct {
	cfg      Config
	gate     harvest.Gate
	services map[string]*service
	// noticed are the pods this planner noticed in its last round, by UID:
	// only its own notices are honoured (a pod's annotation is anyone's to write).
	noticed map[types.UID]noticed
	avail   availability
	// pool learns how the services' peaks add up (Config.ProfilePerService).
	pool demand.PoolProfile
}

// noticed is a notice as given: for when, and since when.
type noticed struct{ at, since time.Time }

// service is what the planner remembers of one service.
type service struct {
	trend   demand.Trend
	profile demand.Profile
	scaler  *autoscale.Scaler
	// loaded: the stored profile was read (or there was none to read).
	loaded   bool
	declared bool
	// savedAt / savedJSON: the profile last reported saved.
	savedAt   time.Time
	savedJSON string
}

// New returns a Planner for cfg (zero values take the defaults).
func New(cfg Config) *Planner {
	cfg = cfg.withDefaults()
	return &Planner{
		cfg:      cfg,
		gate:     harvest.Gate{OpenAfter: cfg.OpenAfter, BackoffLimit: cfg.OpenAfterBackoff, RelaxAfter: cfg.OpenAfterRelax, Windows: cfg.Windows},
		services: map[string]*service{},
	}
}

// Config is the planner's configuration with its defaults applied.
func (p *Planner) Config() Config { return p.cfg }

// Plan runs one round:
//
//	per service: need  = demand.Assess(load, forecast over Horizon)
//	             soon  = demand.Assess(load, forecast over ReclaimLead)
//	verdicts = Gate.Apply(MakePlan(nodes, need.Spare of every service))
//	           then, with a ReclaimLead shorter than the Horizon,
//	           Gate.JustInTime(verdicts, MakePlan(nodes, soon.Spare of every service))
//	victims  = reclaim.Take(every node's ReclaimGPUs), without the pods held
//	           to an earlier notice's time (holdNoticed)
//	notices  = reclaim.Take(the ReclaimGPUs over the notice horizon, at
//	           least the horizon's) but the victims, each with when a later
//	           round is expected to evict it (notices)
//	scale    = autoscale.Desired(never below the forecast's replicas)
func (p *Planner) Plan(obs Observation) Decision {
	now := obs.Now
	d := Decision{Services: p.assess(obs)}
	var headroom, soon []harvest.Headroom
	for _, s := range d.Services {
		headroom = appendHeadroom(headroom, s.Key, s.Need)
		soon = appendHeadroom(soon, s.Key, s.Soon)
	}
	d.Plan = p.gate.Apply(now, obs.Nodes, harvest.MakePlan(obs.Nodes, headroom), obs.Published)
	horizon := d.Plan
	var lead leadPlan
	if p.cfg.justInTime() {
		soonPlan := harvest.MakePlan(obs.Nodes, soon)
		d.Plan = p.gate.JustInTime(now, d.Plan, soonPlan)
		lead = leadPlan{soon, soonPlan}
		horizon = p.warnPlan(obs, d.Services, horizon)
	}

	// Nodes owing GPUs now, and those the forecast over the notice horizon
	// will have owe more (deferred by the reclaim lead): their pods get notices.
	var owing map[string]bool
	var deferred []reclaim.Owed
	for _, n := range obs.Nodes {
		np, later := d.Plan.Nodes[n.Name], horizon.Nodes[n.Name].ReclaimGPUs
		if p.cfg.WithoutNotices {
			later = 0
		}
		if np.ReclaimGPUs <= 0 && later <= 0 {
			continue
		}
		if owing == nil {
			owing = map[string]bool{}
		}
		owing[n.Name] = true
		if np.ReclaimGPUs > 0 {
			d.Reclaims = append(d.Reclaims, reclaim.Owed{Node: n.Name, GPUs: np.ReclaimGPUs,
				Why: fmt.Sprintf("node %s must return %d GPUs (harvestable %d, lent %d, headroom %d)", n.Name, np.ReclaimGPUs, np.HarvestableGPUs, n.LentGPUs, np.HeadroomGPUs)})
		}
		if later > np.ReclaimGPUs {
			deferred = append(deferred, reclaim.Owed{Node: n.Name, GPUs: later})
		}
	}
	if owing != nil && obs.BestEffort != nil {
		d.Candidates = obs.BestEffort(owing)
		p.markPrepared(d.Candidates)
		d.Victims, _, _ = reclaim.Take(d.Reclaims, d.Candidates, func(reclaim.Candidate, reclaim.Owed) error { return nil })
		held := p.holdNoticed(obs, &d)
		for _, v := range d.Victims {
			if g, ok := p.noticed[v.Pod.UID]; ok {
				if d.Warned == nil {
					d.Warned = map[types.UID]Warning{}
				}
				d.Warned[v.Pod.UID] = Warning{Since: g.since, At: g.at}
			}
		}
		if len(deferred) > 0 {
			d.Notices = p.notices(obs, d, horizon, lead, deferred)
		}
		d.Notices = append(d.Notices, held...)
	}
	p.rememberNotices(now, d.Notices)
	d.Availability = p.availabilityOf(obs, d)

	for i, s := range obs.Services {
		if s.Autoscale == nil {
			continue
		}
		sd := d.Services[i]
		svc := p.services[s.Key]
		svc.scaler.Observe(now, sd.Need.Load, sd.Need.Complete)
		floor := int(math.Ceil(sd.Forecast.Peak/sd.Need.Target - 1e-9))
		dec := svc.scaler.Desired(now, s.Autoscale.Replicas, sd.Need.Target, floor, s.Autoscale.Limits)
		if dec.Replicas != s.Autoscale.Replicas {
			d.Scale = append(d.Scale, Scale{Key: s.Key, From: s.Autoscale.Replicas, Decision: dec})
		}
	}
	return d
}

// assess asks the demand model what each service needs, learning its load.
// Services not observed are forgotten.
func (p *Planner) assess(obs Observation) []ServiceDecision {
	now := obs.Now
	out := make([]ServiceDecision, 0, len(obs.Services))
	seen := make(map[string]bool, len(obs.Services))
	pool := poolFit{nodes: obs.Nodes}
	loads, complete := make(map[string]float64, len(obs.Services)), true
	for _, s := range obs.Services {
		seen[s.Key] = true
		svc := p.services[s.Key]
		if svc == nil {
			svc = &service{trend: demand.Trend{Window: p.cfg.TrendWindow}, scaler: autoscale.New(p.cfg.Autoscale)}
			p.services[s.Key] = svc
		}
		sd := ServiceDecision{Key: s.Key}
		svc.declared = s.Declared
		if !svc.loaded {
			sd.Problems = svc.load(s)
		}
		in := demand.Service{Name: s.Key, Replicas: s.Replicas, Metric: s.Settings.Metric, TargetLoad: s.Settings.TargetLoad,
			GPUsPerReplica: s.Settings.GPUsPerReplica, Margin: p.cfg.margin(), MaxReplicas: pool.maxReplicas(s)}
		now0 := demand.Assess(in)
		if now0.GPUsPerReplica > 0 {
			sd.gpusPerLoad = float64(now0.GPUsPerReplica) / now0.Target
		}
		sd.complete = now0.Complete
		if len(s.Replicas) > 0 || s.Declared {
			if now0.Complete {
				svc.trend.Add(demand.Sample{At: now, Load: now0.Load})
				svc.profile.Observe(now, now0.Load)
			}
			loads[s.Key] = now0.Load * sd.gpusPerLoad
			complete = complete && now0.Complete
		}
		trend, profile := &svc.trend, &svc.profile
		if p.cfg.WithoutTrend {
			trend = nil
		}
		if p.cfg.WithoutProfile {
			profile = nil
		}
		sd.in, sd.load, sd.trend, sd.profile = in, now0.Load, trend, profile
		forecast := func(window time.Duration) demand.Forecast {
			if p.cfg.Oracle != nil {
				peak := p.cfg.Oracle(s.Key, now, window)
				return demand.Now(peak)
			}
			return demand.PeakForecast(now, now0.Load, window, trend, profile)
		}
		sd.Forecast = forecast(p.cfg.Horizon)
		if p.cfg.justInTime() {
			sd.soon = forecast(p.cfg.ReclaimLead)
		}
		out = append(out, sd)
	}
	if len(loads) > 0 {
		p.pool.Observe(now, loads, complete)
	}
	need := p.needs(out, func(s ServiceDecision) demand.Forecast { return s.Forecast }, window{now, p.cfg.Horizon})
	soon := need
	if p.cfg.justInTime() {
		soon = p.needs(out, func(s ServiceDecision) demand.Forecast { return s.soon }, window{now, p.cfg.ReclaimLead})
	}
	for i := range out {
		out[i].Need, out[i].Soon = need[i], soon[i]
	}
	for key := range p.services {
		if !seen[key] {
			delete(p.services, key)
		}
	}
	return out
}

// poolFit counts, once per round and replica size, how many replicas the
// pool's nodes could hold: services mostly share a few sizes, and a round must
// not walk every node once per service.
type poolFit struct {
	nodes []harvest.Node
	fits  map[int64]int
}

// maxReplicas is the most replicas a service could run, which bounds the
// headroom kept for it: its autoscaler's maximum, else what the pool's nodes
// could hold of its replicas (0: no bound, when its replica size is unknown).
func (p *poolFit) maxReplicas(s Service) int {
	if s.Autoscale != nil && s.Autoscale.Limits.Max > 0 {
		return s.Autoscale.Limits.Max
	}
	gpus := s.Settings.GPUsPerReplica
	if gpus <= 0 {
		for _, r := range s.Replicas {
			gpus = max(gpus, r.GPUs) // as demand.Assess sizes replicas
		}
	}
	if gpus <= 0 {
		return 0
	}
	if fit, ok := p.fits[gpus]; ok {
		return fit
	}
	var fit int64
	for _, n := range p.nodes {
		if n.InPool {
			fit += n.AllocatableGPUs / gpus
		}
	}
	if p.fits == nil {
		p.fits = map[int64]int{}
	}
	p.fits[gpus] = int(max(fit, 1))
	return p.fits[gpus]
}

// load reads the service's stored profile, once. A service first seen without
// a workload object keeps its profile in memory only.
func (svc *service) load(s Service) []string {
	if !s.Declared {
		svc.loaded = true
		return nil
	}
	svc.loaded = true
	if s.StoredProfile == "" {
		return nil
	}
	var p demand.Profile
	if err := json.Unmarshal([]byte(s.StoredProfile), &p); err != nil {
		return []string{fmt.Sprintf("the stored demand profile is unreadable (%v); learning the profile afresh", err)}
	}
	svc.profile = p
	svc.savedJSON = s.StoredProfile
	return nil
}

// ProfilesDue lists the declared services' learned profiles that changed since
// last saved and are due: the profile's slot rolled over (a quarter of an
// hour ended and was learned) or ProfileWriteInterval passed since the last
// save (force: now, e.g. on shutdown). The API thus sees a few writes an hour
// per service at most. Report each one saved with ProfileSaved.
func (p *Planner) ProfilesDue(now time.Time, force bool) []ProfileWrite {
	var out []ProfileWrite
	for key, svc := range p.services {
		if !svc.declared || !svc.loaded {
			continue
		}
		slotChanged := !svc.savedAt.IsZero() && now.Truncate(demand.SlotLength) != svc.savedAt.Truncate(demand.SlotLength)
		if !force && !slotChanged && now.Sub(svc.savedAt) < p.cfg.ProfileWriteInterval {
			continue
		}
		raw, err := json.Marshal(svc.profile)
		if err != nil || string(raw) == svc.savedJSON {
			continue
		}
		out = append(out, ProfileWrite{Key: key, JSON: string(raw)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// ProfileSaved records that a profile ProfilesDue offered was saved at now.
func (p *Planner) ProfileSaved(w ProfileWrite, now time.Time) {
	if svc := p.services[w.Key]; svc != nil {
		svc.savedAt, svc.savedJSON = now, w.JSON
	}
}

// PoolProfile is the pool's learned profile in its stored form (JSON), for
// the controller to keep across restarts (the GPUPool's status).
func (p *Planner) PoolProfile() string {
	raw, err := json.Marshal(p.pool)
	if err != nil {
		return ""
	}
	return string(raw)
}

// RestorePoolProfile takes back a pool profile PoolProfile stored, refusing
// what it cannot trust (demand.PoolProfile.UnmarshalJSON). Slots this planner
// learned itself since it started keep what it learned.
func (p *Planner) RestorePoolProfile(stored string) error {
	if stored == "" {
		return nil
	}
	var in demand.PoolProfile
	if err := json.Unmarshal([]byte(stored), &in); err != nil {
		return fmt.Errorf("the stored pool profile is unreadable: %w", err)
	}
	for s := range in.Weeks {
		if p.pool.Weeks[s] == 0 {
			p.pool.Ratio[s], p.pool.Weeks[s] = in.Ratio[s], in.Weeks[s]
		}
	}
	return nil
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

// noticeFarStep is how finely they are found beyond the horizon, out to the
// notice horizon: a time half an hour away needs no minute's precision.
const noticeFarStep = 5 * time.Minute

// noticeStepAt is the step an expected eviction time d after now is found
// to, and by which it must move before a given notice's time changes.
func (c Config) noticeStepAt(d time.Duration) time.Duration {
	if d <= c.nearNotice() {
		return c.noticeStep()
	}
	return max(c.noticeStep(), noticeFarStep)
}

// warnPlan is the plan over the notice horizon, where it is longer than the
// horizon: the horizon's plan, but for the nodes whose lent GPUs the forecast
// over the notice horizon needs more of. Nodes stop lending only at the
// horizon; their pods are warned earlier.
func (p *Planner) warnPlan(obs Observation, services []ServiceDecision, horizon harvest.Plan) harvest.Plan {
	if p.cfg.noticeHorizon() <= p.cfg.Horizon {
		return horizon
	}
	far := harvest.MakePlan(obs.Nodes, p.headroomFor(services, func(s ServiceDecision) demand.Forecast {
		return demand.PeakForecast(obs.Now, s.load, p.cfg.noticeHorizon(), s.trend, s.profile)
	}, window{obs.Now, p.cfg.noticeHorizon()}))
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
func (p *Planner) notices(obs Observation, d Decision, horizon harvest.Plan, lead leadPlan, deferred []reclaim.Owed) []Notice {
	now := obs.Now
	span := p.cfg.noticeHorizon() - p.cfg.ReclaimLead
	latest := now.Add(span)
	at := make(map[string]time.Time, len(deferred))
	// Each step's plan is of every node (headroom goes where it fits best),
	// but only the deferred nodes' plans are read: by their place in obs.Nodes.
	index := make(map[string]int, len(deferred))
	for _, o := range deferred {
		index[o.Node] = -1
	}
	for i, n := range obs.Nodes {
		if _, ok := index[n.Name]; ok {
			index[n.Name] = i
		}
	}
	// A later forecast that asks for the headroom of one already planned has
	// the same plan: start from this round's over the lead.
	later := make([]harvest.NodePlan, len(obs.Nodes))
	headroom, planned := lead.headroom, lead.plan.Nodes != nil
	if planned {
		for _, o := range deferred {
			later[index[o.Node]] = lead.plan.Nodes[o.Node]
		}
	}
	for step := p.cfg.noticeStep(); len(at) < len(deferred) && step <= span; step += p.cfg.noticeStepAt(step) {
		h := p.headroomFor(d.Services, func(s ServiceDecision) demand.Forecast {
			return demand.PeakForecastFrom(now, now.Add(step), s.load, p.cfg.ReclaimLead, s.trend, s.profile)
		}, window{now.Add(step), p.cfg.ReclaimLead})
		if !planned || !slices.Equal(h, headroom) { // else the same plan again
			headroom, later, planned = h, harvest.NodePlans(later, obs.Nodes, h), true
		}
		for _, o := range deferred {
			if _, found := at[o.Node]; found {
				continue
			}
			if harvest.JustInTimeReclaim(horizon.Nodes[o.Node], later[index[o.Node]]) > d.Plan.Nodes[o.Node].ReclaimGPUs {
				at[o.Node] = now.Add(step)
			}
		}
	}
	evicted := make(map[*v1.Pod]bool, len(d.Victims))
	for _, v := range d.Victims {
		evicted[v.Pod] = true
	}
	var out []Notice
	noticed := map[*v1.Pod]int{}
	_, _, _ = reclaim.Take(deferred, d.Candidates, func(c reclaim.Candidate, o reclaim.Owed) error {
		if evicted[c.Pod] {
			return nil
		}
		when, ok := at[o.Node]
		if !ok {
			when = latest
		}
		if i, seen := noticed[c.Pod]; seen { // a gang member, through another member's node
			if when.Before(out[i].At) {
				out[i].At, out[i].Node, out[i].Services = when, o.Node, horizon.HeadroomFor[o.Node]
			}
			return nil
		}
		noticed[c.Pod] = len(out)
		out = append(out, Notice{Candidate: c, At: when, Node: o.Node, Services: horizon.HeadroomFor[o.Node]})
		return nil
	})
	// A time that moved by less than the step it is found to stays as given:
	// what the pod was told is what holds it (holdNoticed).
	for i := range out {
		if g, ok := p.noticed[out[i].Pod.UID]; ok && out[i].At.Sub(g.at).Abs() < p.cfg.noticeStepAt(g.at.Sub(now)) {
			out[i].At = g.at
		}
	}
	return out
}

// leadPlan is a round's headroom over the reclaim lead and its plan.
type leadPlan struct {
	headroom []harvest.Headroom
	plan     harvest.Plan
}

// holdNoticed keeps this round from evicting a pod before the time its notice
// gave, unless inference already needs its node's GPUs (the node owes GPUs
// to the load now, not only to the forecast over the lead): the node owes
// that much less for now, and the victims are chosen again without the pod.
// A time given beyond the horizon is pulled in to the horizon's span.
// Gang members are not held (a rigid gang goes whole; an elastic one counts
// every running member toward its quorum). It returns the held pods'
// notices, which stand.
func (p *Planner) holdNoticed(obs Observation, d *Decision) []Notice {
	if len(p.noticed) == 0 {
		return nil
	}
	var urgent map[string]bool
	var held []Notice
	for {
		var hold []reclaim.Candidate
		for _, v := range d.Victims {
			g, ok := p.noticed[v.Pod.UID]
			if !ok || !g.at.After(obs.Now) || v.Pod.Labels[api.LabelPodGroup] != "" {
				continue
			}
			if urgent == nil {
				urgent = p.owingToLoadNow(obs, *d)
			}
			if !urgent[v.Pod.Spec.NodeName] {
				hold = append(hold, v)
			}
		}
		if len(hold) == 0 {
			return held
		}
		out := map[*v1.Pod]bool{}
		// A notice given beyond the horizon holds its pod, once the lead needs
		// it, no longer than one given within the horizon could: its time is
		// pulled in, and the pod told so.
		limit := obs.Now.Add(p.cfg.nearNotice())
		for _, h := range hold {
			out[h.Pod] = true
			at := p.noticed[h.Pod.UID].at
			if at.After(limit) {
				at = limit
			}
			held = append(held, Notice{Candidate: h, At: at, Node: h.Pod.Spec.NodeName, Services: d.Plan.HeadroomFor[h.Pod.Spec.NodeName]})
			for i := range d.Reclaims {
				if d.Reclaims[i].Node == h.Pod.Spec.NodeName {
					d.Reclaims[i].GPUs -= h.GPUs
				}
			}
		}
		d.Reclaims = slices.DeleteFunc(d.Reclaims, func(o reclaim.Owed) bool { return o.GPUs <= 0 })
		d.Candidates = slices.DeleteFunc(slices.Clone(d.Candidates), func(c reclaim.Candidate) bool { return out[c.Pod] })
		d.Victims, _, _ = reclaim.Take(d.Reclaims, d.Candidates, func(reclaim.Candidate, reclaim.Owed) error { return nil })
	}
}

// markPrepared marks the candidates that checkpointed after this planner
// noticed them: victims are chosen among them first.
func (p *Planner) markPrepared(candidates []reclaim.Candidate) {
	for i := range candidates {
		c := &candidates[i]
		if g, ok := p.noticed[c.Pod.UID]; ok {
			if t, ok := reclaim.LastCheckpoint(c.Pod); ok && !t.Before(g.since) {
				c.Prepared = true
			}
		}
	}
}

// owingToLoadNow names the nodes that owe lent GPUs to what the services need
// for their load now, forecast aside: inference is already waiting there.
func (p *Planner) owingToLoadNow(obs Observation, d Decision) map[string]bool {
	headroom := p.headroomFor(d.Services, func(s ServiceDecision) demand.Forecast { return demand.Now(s.load) }, window{})
	out := map[string]bool{}
	for name, np := range harvest.MakePlan(obs.Nodes, headroom).Nodes {
		if np.ReclaimGPUs > 0 {
			out[name] = true
		}
	}
	return out
}

// headroomFor is the headroom the services need for the forecast each is
// given over w, assessed as this round assessed them (needs).
func (p *Planner) headroomFor(services []ServiceDecision, forecast func(ServiceDecision) demand.Forecast, w window) []harvest.Headroom {
	return headroomOf(services, p.needs(services, forecast, w))
}

// headroomOf is the headroom the services' needs keep.
func headroomOf(services []ServiceDecision, needs []demand.Need) []harvest.Headroom {
	var out []harvest.Headroom
	for i, need := range needs {
		out = appendHeadroom(out, services[i].Key, need)
	}
	return out
}

// needs assesses each service for the forecast it is given, with the safety
// margin kept for one service only (unless Config.MarginPerService): the one
// whose margin asks the most GPUs (the first of equals). The margin is room
// for a rise the forecast did not see, and the pool's spare GPUs serve
// whichever service it comes to; kept for every service, margins add up
// across the services as if every one rose at once. Rises in several
// services at once are what the reclaim budget is for: a replica that finds
// no room gets lent GPUs back within it.
//
// The forecasts are those of the window w; their learned profiles are
// pooled over it (pooled).
func (p *Planner) needs(services []ServiceDecision, forecast func(ServiceDecision) demand.Forecast, w window) []demand.Need {
	return p.needsOf(services, p.forecasts(services, forecast, w))
}

// forecasts is each service's forecast for the window w, pooled over it.
func (p *Planner) forecasts(services []ServiceDecision, forecast func(ServiceDecision) demand.Forecast, w window) []demand.Forecast {
	forecasts := make([]demand.Forecast, len(services))
	for i, s := range services {
		forecasts[i] = forecast(s)
	}
	p.pooled(services, forecasts, w)
	return forecasts
}

// needsOf is needs for forecasts already made.
func (p *Planner) needsOf(services []ServiceDecision, forecasts []demand.Forecast) []demand.Need {
	needs := make([]demand.Need, len(services))
	var margined demand.Need
	best, most := -1, int64(0)
	for i, s := range services {
		f, in := forecasts[i], s.in
		in.ForecastLoad = f.Planned(in.Margin)
		m := demand.Assess(in)
		if p.cfg.MarginPerService {
			needs[i] = m
			continue
		}
		in.Margin, in.ForecastLoad = -1, f.Planned(0)
		needs[i] = demand.Assess(in)
		if extra := int64(m.Spare-needs[i].Spare) * m.GPUsPerReplica; extra > most {
			best, most, margined = i, extra, m
		}
	}
	if best >= 0 {
		needs[best] = margined
	}
	return needs
}

// window is the span a plan's forecasts cover; the zero window's forecasts
// are not pooled.
type window struct {
	from   time.Time
	length time.Duration
}

// pooled scales the room the services' learned profiles keep above their
// loads now, all by one factor, so that together they keep what the pool's
// profile expects them to rise by at once over w (unless
// Config.ProfilePerService):
//
//	pooled     = the services whose profile is learned for every slot of w
//	room(i)    = gpus(profile(i) - load(i)), or 0 when the load is higher
//	pool       = demand.PoolProfile.PeakOver(w, the pooled services' learned peaks)
//	factor     = (pool - sum of gpus(load(i))) / sum of room(i), within [0, 1]
//	profile(i) = load(i) + factor x (profile(i) - load(i))
//
// Where the pool's ratio is not learned for every slot of w, or a service's
// load now is not whole, nothing is scaled: every service keeps room for its
// own peak. A service whose own profile is not learned through w (one new
// to the pool) keeps its own room and stays out of the sums. The trend and
// the load now are never scaled, and the margin is kept as needs keeps it.
//
// The room is kept in GPUs for the pool's expected rise, not for each
// service's: when one service rises while another's load falls, the
// falling one's replicas stand idle until its autoscaler scales it in, and
// the rising one's new replica waits for lent GPUs to be evicted, within the
// reclaim budget. That, like a rise in several services at once, is what
// the budget is for; --headroom-profile-per-service keeps every service's
// room whole instead.
func (p *Planner) pooled(services []ServiceDecision, forecasts []demand.Forecast, w window) {
	if p.cfg.ProfilePerService || w.length <= 0 || p.pool.Learned() == 0 {
		return
	}
	pooled := make([]bool, len(services))
	var load, rooms float64
	for i, s := range services {
		if !s.complete {
			return
		}
		if s.profile == nil || !s.profile.LearnedOver(w.from, w.length) {
			continue
		}
		pooled[i] = true
		load += s.load * s.gpusPerLoad
		rooms += max(forecasts[i].Profile-s.load, 0) * s.gpusPerLoad
	}
	if !(rooms > 0) {
		return
	}
	peak, ok := p.pool.PeakOver(w.from, w.length, func(slot int) (sum, largest float64) {
		for i, s := range services {
			if pooled[i] {
				v, _ := s.profile.PeakAt(slot)
				sum += v * s.gpusPerLoad
				largest = max(largest, v*s.gpusPerLoad)
			}
		}
		return sum, largest
	})
	if !ok {
		return
	}
	factor := min(max((peak-load)/rooms, 0), 1)
	for i, s := range services {
		if pooled[i] && forecasts[i].Profile > s.load {
			forecasts[i].Profile = s.load + factor*(forecasts[i].Profile-s.load)
		}
	}
}

// appendHeadroom adds the room a service's need keeps for its spare
// replicas, if any: one form for every plan of a round, so that equal needs
// give equal headroom (notices reuse a plan when they do).
func appendHeadroom(out []harvest.Headroom, key string, need demand.Need) []harvest.Headroom {
	if need.Spare > 0 {
		out = append(out, harvest.Headroom{Service: key, GPUsPerReplica: need.GPUsPerReplica, Replicas: need.Spare})
	}
	return out
}

// rememberNotices keeps this round's notices, each since when it was first given.
func (p *Planner) rememberNotices(now time.Time, notices []Notice) {
	if len(notices) == 0 && len(p.noticed) == 0 {
		return
	}
	next := make(map[types.UID]noticed, len(notices))
	for _, n := range notices {
		since := now
		if g, ok := p.noticed[n.Pod.UID]; ok {
			since = g.since
		}
		next[n.Pod.UID] = noticed{at: n.At, since: since}
	}
	p.noticed = next
}
