// Package round is one planning round of Gleaner's policy, the whole of it.
// Given the time, the nodes with the GPUs pods hold on them and each inference
// service's observed load, a round assesses every service once, asks what-ifs
// of them (whatif.go: the forecast over a window, the replicas it needs, the
// headroom and the nodes' plans), gates the verdicts (pkg/harvest), chooses
// what to evict where lent GPUs are owed (pkg/reclaim), warns the pods it
// will evict later (notices.go), forecasts each open node's availability
// (pkg/availability) and decides the autoscaler's scale changes
// (pkg/autoscale).
//
// A Planner keeps what the policy remembers between rounds (memory.go). It
// talks to no API: gleaner-controller turns the cluster into an Observation
// and acts on the Decision; gleaner simulate feeds the same Planner from its
// virtual cluster, so what it reports is what the controller would do.
package round

import (
	"fmt"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gleaner-dev/gleaner/pkg/autoscale"
	"github.com/gleaner-dev/gleaner/pkg/availability"
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
	// Drain: the admin stopped lending and wants every lent GPU back
	// (api.StopHoldAndDrain): every node is closed and owes all it lent.
	Drain bool
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
	// DRA: its replicas take their GPUs through ResourceClaims: its room
	// is kept on nodes whose GPUs DRA publishes (harvest.Headroom.DRA).
	DRA bool
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
	Warned map[types.UID]Given
	// Scale lists the autoscaled services whose replica count should change.
	Scale []Scale
	// Availability is, for each open node, how long its lendable GPUs are
	// expected to stay lendable (forecast every availability.Every).
	Availability []availability.Availability

	// view is what the round's what-ifs were asked of, for Outlook.
	view *view
}

// ServiceDecision is one service's demand in one round.
type ServiceDecision struct {
	Key string
	// Need is what the service needs now and over the horizon: the room for
	// its HeadroomReplicas is kept. The safety margin is in it only for the
	// service it keeps the most room for (view.replicasFor).
	Need demand.Need
	// Soon is the need over the reclaim lead: what lent GPUs are evicted for.
	Soon     demand.Need
	Forecast demand.Forecast
	// Problems found with what was stored for the service (an unreadable profile).
	Problems []string

	// lead is its forecast over the reclaim lead (the horizon when the lead
	// is not shorter), pooled as the round plans with it: what the
	// autoscaler starts replicas for.
	lead demand.Forecast

	// What its what-ifs are asked of: its replicas as observed this round,
	// and its trend and profile (nil when the policy leaves them out).
	observed demand.Observed
	trend    *demand.Trend
	profile  *demand.Profile
	// gpusPerLoad turns its load into GPUs (0: its replica size is unknown).
	gpusPerLoad float64
	// dra is Service.DRA.
	dra bool
}

// load is the service's load now.
func (s *ServiceDecision) load() float64 { return s.observed.Load }

// Scale is one autoscaler decision that changes a service's replicas.
type Scale struct {
	Key      string
	From     int
	Decision autoscale.Decision
}

// Planner runs rounds and keeps the policy's memory between them. It is not
// safe for concurrent use.
type Planner struct {
	cfg      Config
	gate     harvest.Gate
	services map[string]*service
	// given are the notices this planner gave in its last round, by UID:
	// only its own notices are honoured (a pod's annotation is anyone's to write).
	given map[types.UID]Given
	avail availability.Learner
	// pool learns how the services' peaks add up (Config.ProfilePerService).
	pool demand.PoolProfile
}

// New returns a Planner for cfg (zero values take the defaults).
func New(cfg Config) *Planner {
	cfg = cfg.withDefaults()
	return &Planner{
		cfg:      cfg,
		gate:     harvest.Gate{OpenAfter: cfg.OpenAfter, BackoffLimit: cfg.OpenAfterBackoff, RelaxAfter: cfg.OpenAfterRelax, Windows: cfg.Windows},
		services: map[string]*service{},
		pool:     demand.PoolProfile{Clock: cfg.ProfileClock},
	}
}

// Plan runs one round:
//
//	per service: need  = the what-if over Horizon
//	             soon  = the what-if over ReclaimLead
//	verdicts = Gate.Apply(MakePlan(nodes, need.HeadroomReplicas of every service))
//	           then, with a ReclaimLead shorter than the Horizon,
//	           Gate.JustInTime(verdicts, MakePlan(nodes, soon.HeadroomReplicas of every service))
//	victims  = reclaim.Take(every node's ReclaimGPUs), without the pods held
//	           to an earlier notice's time (holdNoticed)
//	notices  = reclaim.Take(the ReclaimGPUs over the notice horizon, at
//	           least the horizon's) but the victims, each with when a later
//	           round is expected to evict it (notices)
//	scale    = autoscale.Desired(starting the replicas the lead's forecast
//	           needs, keeping those the horizon's needs: scale)
func (p *Planner) Plan(obs Observation) Decision {
	now := obs.Now
	v := p.assess(obs)
	d := Decision{view: v}
	horizon := v.forecasts(whatIf{from: now, length: p.cfg.Horizon})
	overLead := horizon
	if p.cfg.justInTime() {
		overLead = v.forecasts(whatIf{from: now, length: p.cfg.ReclaimLead})
	}
	for i := range v.services {
		v.services[i].Forecast = horizon[i]
	}
	v.pool(horizon, whatIf{from: now, length: p.cfg.Horizon})
	need := v.needsFor(horizon)
	soon := need
	if p.cfg.justInTime() {
		v.pool(overLead, whatIf{from: now, length: p.cfg.ReclaimLead})
		soon = v.needsFor(overLead)
	}
	for i := range v.services {
		v.services[i].lead = overLead[i]
	}
	var headroom, soonHeadroom []harvest.Headroom
	for i := range v.services {
		s := &v.services[i]
		s.Need, s.Soon = need[i], soon[i]
		headroom = appendHeadroom(headroom, s, s.Need.GPUsPerReplica, s.Need.HeadroomReplicas, true)
		soonHeadroom = appendHeadroom(soonHeadroom, s, s.Soon.GPUsPerReplica, s.Soon.HeadroomReplicas, true)
	}
	d.Services = v.services
	d.Plan = p.gate.Apply(now, obs.Nodes, harvest.MakePlan(obs.Nodes, headroom), obs.Published)
	warn := d.Plan
	var lead leadPlan
	if p.cfg.justInTime() {
		soonPlan := harvest.MakePlan(obs.Nodes, soonHeadroom)
		d.Plan = p.gate.JustInTime(now, d.Plan, soonPlan)
		lead = leadPlan{soonHeadroom, soonPlan}
		warn = p.warnPlan(v, warn)
	}
	if obs.Drain {
		d.Plan = harvest.Drain(obs.Nodes, d.Plan)
		warn = d.Plan // owed now: nothing is left to give notice of
	}
	p.reclaim(obs, v, &d, warn, lead)
	d.Availability = p.availabilityOf(v, d.Plan)
	d.Scale = p.scale(obs, v)
	return d
}

// reclaim names the nodes that owe GPUs now, chooses the victims and warns
// the pods on the nodes the forecast over the notice horizon will have owe
// more (deferred by the reclaim lead).
func (p *Planner) reclaim(obs Observation, v *view, d *Decision, warn harvest.Plan, lead leadPlan) {
	var owing map[string]bool
	var deferred []reclaim.Owed
	for _, n := range obs.Nodes {
		np, later := d.Plan.Nodes[n.Name], warn.Nodes[n.Name].ReclaimGPUs
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
		p.markPrepared(d.Candidates, obs.Now)
		d.Victims = victims(d.Reclaims, d.Candidates)
		var held []Notice
		if !obs.Drain { // a drain takes noticed pods too, now
			held = p.holdNoticed(v, d)
		}
		for _, vic := range d.Victims {
			if g, ok := p.given[vic.Pod.UID]; ok {
				if d.Warned == nil {
					d.Warned = map[types.UID]Given{}
				}
				d.Warned[vic.Pod.UID] = g
			}
		}
		if len(deferred) > 0 {
			d.Notices = p.notices(v, *d, warn, lead, deferred)
		}
		d.Notices = append(d.Notices, held...)
	}
	p.remember(obs.Now, d.Notices)
}

// victims are the pods reclaim.Take evicts for owed when every eviction goes through.
func victims(owed []reclaim.Owed, candidates []reclaim.Candidate) []reclaim.Candidate {
	out, _, _ := reclaim.Take(owed, candidates, func(reclaim.Candidate, reclaim.Owed) error { return nil })
	return out
}

// scale is the autoscaler's decision for every service it scales:
//
//	grow = ceil(max(load, trend, profile) over the reclaim lead / target),
//	       the profile pooled as the round's plan over the lead pools it:
//	       started now
//	keep = ceil(forecast peak over the horizon / target): never scaled in
//
// A replica the forecast asks for is started when the plan over the reclaim
// lead takes GPUs back for it, not when the horizon's forecast first needs
// it: then the pods that make room have had their notices (which name that
// time), and the replica waits for nothing else. Started earlier, it would
// be inference waiting, and its GPUs would be taken at once, before the
// notices' time. The lead must cover the grace period and the replica's
// start, so that it serves when the load arrives (docs/inference.md).
func (p *Planner) scale(obs Observation, v *view) []Scale {
	var out []Scale
	for i, s := range obs.Services {
		if s.Autoscale == nil {
			continue
		}
		sd := &v.services[i]
		svc := p.services[s.Key]
		svc.scaler.Observe(obs.Now, sd.Need.Load, sd.Need.Complete)
		replicas := func(load float64) int { return int(math.Ceil(load/sd.Need.Target - 1e-9)) }
		floor := autoscale.Floor{Grow: replicas(max(sd.load(), sd.lead.Trend, sd.lead.Profile)), Keep: replicas(sd.Forecast.Peak)}
		dec := svc.scaler.Desired(obs.Now, s.Autoscale.Replicas, sd.Need.Target, floor, s.Autoscale.Limits)
		if dec.Replicas != s.Autoscale.Replicas {
			out = append(out, Scale{Key: s.Key, From: s.Autoscale.Replicas, Decision: dec})
		}
	}
	return out
}
