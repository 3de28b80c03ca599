// Package simulate replays inference traffic and a best-effort job stream in
// virtual time through gleaner-controller's planning round (pkg/round, the
// code the controller runs) and gleaner-scheduler's harvest check and
// placement score (harvest.Verdict.Fit, harvest.PlacementScore), and
// accounts for what Gleaner would harvest and what it would cost inference.
//
// # Model
//
// Time advances in steps of the scrape interval. In each step:
//
//  1. Best-effort pods whose grace period has ended leave their GPUs and are
//     queued again (at the back, resuming from their last checkpoint and
//     paying the restart cost); jobs whose work is done leave theirs.
//  2. Each service's load is its trace rate at that time. With the gleaner
//     inference autoscaler (the default) the round's scale decisions create
//     and remove replicas, as the controller's scale subresource writes do;
//     with the external one each service wants what its load needs now.
//  3. Pending replicas bind, longest waiting first across services, to the
//     fullest node with GPUsPerReplica GPUs held by no pod, and serve after
//     the replica startup time. A replica that waited binds 5 s after the
//     evicted pods that made its room left within the step (bindDelay: the
//     kubelet, the API server and kube-scheduler acting), not at the step's
//     end; its load, likewise, is there from when it crossed the replica's
//     share within the step. A pending replica is left out of the demand
//     model's replicas, so the round keeps room for it and reclaims where
//     the planner places that room: this stands in for gleaner-scheduler's
//     ReclaimPreemption, which needs the framework. Only the part of a
//     wait while its load is already there counts as a wait inference sees.
//  4. The round runs with the policy's settings (Config.RoundConfig); its
//     victims are evicted (a simulated cluster has no PodDisruptionBudgets)
//     and hold their GPUs for the grace period the reclaimer gives them
//     (reclaim.Candidate.EvictionGrace: reclaim.SavedGrace for a pod evicted
//     at its noticed time after saving for it, else the time its saves take
//     and SavedGrace to exit, at most GracePeriod); its notices reach their
//     jobs at once.
//  5. Queued jobs are placed in queue order where the verdict admits them and
//     GPUs are free, on the node with the highest placement score; a job
//     that fits nowhere is skipped. Every job is a lone pod.
//
// Jobs are a backlog, submitted in trace order whenever the queued GPUs fall
// below the fleet's or free GPUs fit no queued job, so there is always more
// work than the fleet can lend; the trace replays from its start when it runs
// out. Jobs checkpoint every CheckpointInterval of progress. A noticed job
// saves a checkpoint timed to complete by the noticed time when that saves
// more than it costs (CheckpointCost x GPUs / GPUsPerNode of no progress,
// counted as lost work); a checkpoint in flight at eviction completes within
// the grace period. Without one, a pod whose save and reclaim.SavedGrace to
// exit fit the grace period it is given saves its progress on SIGTERM
// (unless NoSIGTERMSave); one whose save does not fit saves nothing then and
// loses the work since its last checkpoint.
package simulate

import (
	"fmt"
	"math"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/gleaner-dev/gleaner/pkg/availability"
	"github.com/gleaner-dev/gleaner/pkg/demand"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
	"github.com/gleaner-dev/gleaner/pkg/round"
)

// Policy is a harvesting policy to simulate.
type Policy string

// The policies.
const (
	// None lends nothing.
	None Policy = "none"
	// Nightly lends what is spare, only within NightlyWindows.
	Nightly Policy = "nightly"
	// Continuous lends what is spare now, keeping headroom from the trend alone.
	Continuous Policy = "continuous"
	// Forecast is Continuous plus each service's learned quarter-hour-of-week profile.
	Forecast Policy = "forecast"
	// Oracle knows each service's future load exactly: it lends every GPU no
	// replica will want within the grace period and a step, and evicts just in
	// time, with no margin and no open-after. No policy can harvest more
	// without making inference wait: every other policy is read against it.
	Oracle Policy = "oracle"
)

// Policies lists every policy, in report order.
var Policies = []Policy{None, Nightly, Continuous, Forecast, Oracle}

// ParsePolicies reads "none", "nightly", "continuous", "forecast", "oracle" or "all".
func ParsePolicies(s string) ([]Policy, error) {
	if s == "all" {
		return Policies, nil
	}
	for _, p := range Policies {
		if string(p) == s {
			return []Policy{p}, nil
		}
	}
	return nil, fmt.Errorf("policy %q: want none, nightly, continuous, forecast, oracle or all", s)
}

// Config is the simulated cluster and Gleaner's settings.
type Config struct {
	// Duration simulated.
	Duration time.Duration
	// Start is the virtual time of window 0 (UTC). Zero: Monday 2024-01-01 00:00 UTC.
	Start time.Time
	// GPUsPerNode of every node.
	GPUsPerNode int64
	// GPUsPerReplica of every inference replica (on one node).
	GPUsPerReplica int64
	// ReplicaCapacity is the load (req/s) one replica carries: the demand target.
	ReplicaCapacity float64
	// Nodes in the cluster; 0 sizes each service's fleet to its peak window
	// (ceil(peak / ReplicaCapacity) replicas) and the cluster to hold them all.
	Nodes int
	// ScrapeInterval is the step: how often load is read and the plan made.
	ScrapeInterval time.Duration
	// GracePeriod of an evicted best-effort pod.
	GracePeriod time.Duration
	// CheckpointInterval: jobs checkpoint after every this much run time.
	CheckpointInterval time.Duration
	// CheckpointCost is how long a job of GPUsPerNode GPUs takes to save a
	// checkpoint when given a reclaim notice; a job of g GPUs takes
	// g/GPUsPerNode of it. It makes no progress meanwhile, and that time
	// counts as lost work. (Periodic checkpoints are taken as instant, as
	// before: their cost is the same with and without notices.)
	CheckpointCost time.Duration
	// WithoutNotices: the planner gives no reclaim notices, so every eviction
	// comes unannounced (gleaner-controller gives them).
	WithoutNotices bool
	// NoSIGTERMSave: jobs save nothing on SIGTERM and declare no save
	// duration, so every pod taken before it saved for a notice holds its
	// GPUs for its whole grace period and loses the work since its last
	// checkpoint. By default jobs keep that part of the contract as the
	// reference trainers do: they declare how long their saves take
	// (gleaner.dev/save-duration), and a pod whose grace period holds that
	// and reclaim.SavedGrace saves on SIGTERM.
	NoSIGTERMSave bool
	// InferenceAutoscaler scales the services: Gleaner's own, or one of
	// their own that follows the load (the policy none always uses that).
	InferenceAutoscaler InferenceAutoscaler
	// ReplicaStartup is how long a replica the gleaner autoscaler starts
	// takes from binding to serving (image, weights, engine start).
	ReplicaStartup time.Duration
	// RestartCost is what a best-effort pod resumed after an eviction loses
	// before its first step; a job of g GPUs loses RestartCost x (1 +
	// log2(g)) on each of them (restartCost).
	RestartCost time.Duration
	// Horizon is the reclaim horizon of the forecast.
	Horizon time.Duration
	// OpenAfter is the gate's delay before lending newly spare GPUs.
	OpenAfter time.Duration
	// OpenAfterBackoff is harvest.Gate.BackoffLimit (flap damping): each drain
	// of a node doubles its open-after, up to this multiple of OpenAfter. 0 or 1: none.
	OpenAfterBackoff int
	// OpenAfterRelax is harvest.Gate.RelaxAfter (0: the gate's default); a diagnostic.
	OpenAfterRelax int
	// ReclaimLead: lent GPUs are evicted only when the forecast over this lead
	// needs them (harvest.Gate.JustInTime); nodes stop lending at Horizon
	// already. 0, or at least Horizon, evicts at the horizon.
	ReclaimLead time.Duration
	// NoticeHorizon: pods on nodes whose lent GPUs the forecast over it needs
	// get reclaim notices (round.Config.NoticeHorizon; at least Horizon).
	NoticeHorizon time.Duration
	// Margin is the demand model's safety margin (the controller's default is
	// 0.1), kept for one service at a time unless MarginPerService.
	Margin           float64
	MarginPerService bool
	// ProfilePerService keeps room for every service's learned peak at once
	// (round.Config.ProfilePerService).
	ProfilePerService bool

	// NightlyWindows are the harvest windows of the nightly policy (UTC).
	NightlyWindows string
	// ReclaimBudget: a replica that waits longer for GPUs counts as over budget.
	// 0 means ScrapeInterval + GracePeriod + 5 s.
	ReclaimBudget time.Duration
	// PricePerGPUHour values harvested GPU-hours.
	PricePerGPUHour float64
	// BacklogGPUs is how many GPUs the queued jobs ask for at least; 0 means the fleet's GPUs.
	BacklogGPUs int64
	// NoReplay submits each job once instead of replaying the trace when it runs out.
	NoReplay bool
	// PackingWeight and IdleWeight weigh the placement score (the plugin's defaults are 1 and 1).
	PackingWeight, IdleWeight int64
	// DeclareInterval: every job declares CheckpointInterval
	// (gleaner.dev/checkpoint-interval), so the placement score weighs each
	// node's availability too, with the plugin's default weight of 1.
	DeclareInterval bool
	// SampleEvery is the timeline's resolution; 0 records no timeline.
	SampleEvery time.Duration
	// StepLoad reads each trace window's rate as constant over the window
	// instead of interpolating between window middles.
	StepLoad bool
	// NoTrend leaves the trend out of the forecast (a diagnostic: the
	// controller always uses it).
	NoTrend bool
	// OnRound, when set, is called after every planning round with what the
	// round observed and decided (RunAll calls it from one goroutine per policy).
	OnRound func(round.Observation, round.Decision)
}

// DefaultReplicaStartup is how long a vLLM replica takes from binding to
// serving, by vLLM's own reports: about a minute for a small model with
// warm caches (vllm-project/vllm#20264: 59 s to the first response), about
// three and a half for a 70B model on 8 GPUs (#19824: weights, compile and
// graph capture), four and a half for a 35B model with no compile cache
// (#44881). Two minutes is the middle of that range.
const DefaultReplicaStartup = 2 * time.Minute

// DefaultRestartCost is what a resumed 1-GPU job loses before its first
// step: measured on an H200, a 368M-parameter model took 9.7 s from launch
// to its first step with a 4.4 GB checkpoint on local disk; a pod adds its
// container's start, and a checkpoint read from shared storage takes
// longer. Larger jobs lose more (restartCost).
const DefaultRestartCost = 30 * time.Second

// DefaultConfig is the evaluation default: every trace is judged with it.
func DefaultConfig() Config {
	return Config{
		Duration:            14 * 24 * time.Hour,
		GPUsPerNode:         8,
		GPUsPerReplica:      4,
		ReplicaCapacity:     20,
		ScrapeInterval:      30 * time.Second,
		GracePeriod:         reclaim.DefaultMaxGrace, // gleaner-controller --max-reclaim-grace default
		CheckpointInterval:  30 * time.Minute,
		CheckpointCost:      3 * time.Minute,
		InferenceAutoscaler: GleanerAutoscaler,
		ReplicaStartup:      DefaultReplicaStartup,
		RestartCost:         DefaultRestartCost,
		Horizon:             demand.DefaultHorizon,
		OpenAfter:           2 * time.Minute, // gleaner-controller --open-after default
		OpenAfterBackoff:    harvest.DefaultBackoffLimit,
		ReclaimLead:         demand.DefaultReclaimLead,
		NoticeHorizon:       demand.DefaultNoticeHorizon,
		Margin:              0.1, // gleaner-controller --headroom-margin default
		NightlyWindows:      "20:00-08:00",
		PricePerGPUHour:     2.0,
		PackingWeight:       1,
		IdleWeight:          1,
		SampleEvery:         10 * time.Minute,
	}
}

// RoundConfig is the planning round's configuration for policy: the
// controller's policy with this simulation's settings.
func (c Config) RoundConfig(policy Policy) (round.Config, error) {
	r := round.Config{
		Horizon:           c.Horizon,
		ReclaimLead:       c.ReclaimLead,
		NoticeHorizon:     c.NoticeHorizon,
		Margin:            c.Margin,
		MarginPerService:  c.MarginPerService,
		ProfilePerService: c.ProfilePerService,
		OpenAfter:         c.OpenAfter,
		OpenAfterBackoff:  max(c.OpenAfterBackoff, 1),
		OpenAfterRelax:    c.OpenAfterRelax,
		WithoutProfile:    policy != Forecast,
		WithoutTrend:      c.NoTrend,
		WithoutNotices:    c.WithoutNotices,
		RoundPeriod:       c.ScrapeInterval,
	}
	if c.Margin == 0 {
		r.Margin = -1 // none: the round reads zero as its default
	}
	if r.Horizon == 0 {
		r.Horizon = demand.DefaultHorizon
	}
	if r.ReclaimLead == 0 {
		r.ReclaimLead = r.Horizon // evict at the horizon
	}
	switch policy {
	case None, Continuous, Forecast:
	case Oracle:
		// Set by Run, which knows the future.
		r.Horizon = c.GracePeriod + c.ScrapeInterval
		r.ReclaimLead, r.Margin, r.OpenAfter, r.OpenAfterBackoff = r.Horizon, -1, 0, 1
	case Nightly:
		w, err := harvest.ParseWindows(c.NightlyWindows, "UTC")
		if err != nil {
			return round.Config{}, err
		}
		r.Windows = w
	default:
		return round.Config{}, fmt.Errorf("unknown policy %q", policy)
	}
	return r, r.Validate()
}

func (c Config) budget() time.Duration {
	if c.ReclaimBudget > 0 {
		return c.ReclaimBudget
	}
	return c.ScrapeInterval + c.GracePeriod + 5*time.Second
}

func (c Config) start() time.Time {
	if c.Start.IsZero() {
		return time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC) // a Monday
	}
	return c.Start.UTC()
}

func (c Config) validate() error {
	switch {
	case c.Duration <= 0:
		return fmt.Errorf("duration %v: must be positive", c.Duration)
	case c.ScrapeInterval <= 0:
		return fmt.Errorf("scrape interval %v: must be positive", c.ScrapeInterval)
	case c.GPUsPerNode <= 0 || c.GPUsPerReplica <= 0:
		return fmt.Errorf("GPUs per node (%d) and per replica (%d) must be positive", c.GPUsPerNode, c.GPUsPerReplica)
	case c.GPUsPerReplica > c.GPUsPerNode:
		return fmt.Errorf("a replica of %d GPUs fits on no node of %d GPUs", c.GPUsPerReplica, c.GPUsPerNode)
	case c.ReplicaCapacity <= 0:
		return fmt.Errorf("replica capacity %g: must be positive", c.ReplicaCapacity)
	case c.GracePeriod < 0:
		return fmt.Errorf("grace period %v: must not be negative", c.GracePeriod)
	case c.CheckpointInterval <= 0:
		return fmt.Errorf("checkpoint interval %v: must be positive", c.CheckpointInterval)
	case c.CheckpointCost < 0:
		return fmt.Errorf("checkpoint cost %v: must not be negative", c.CheckpointCost)
	case c.ReplicaStartup < 0 || c.RestartCost < 0:
		return fmt.Errorf("replica startup %v and restart cost %v must not be negative", c.ReplicaStartup, c.RestartCost)
	case c.Nodes < 0 || c.OpenAfter < 0 || c.Horizon < 0 || c.ReclaimLead < 0 || c.NoticeHorizon < 0 || c.PricePerGPUHour < 0:
		return fmt.Errorf("nodes, open-after, horizon, reclaim lead, notice horizon and price must not be negative")
	case c.OpenAfterBackoff < 0 || c.OpenAfterRelax < 0:
		return fmt.Errorf("open-after backoff %d and relax %d must not be negative", c.OpenAfterBackoff, c.OpenAfterRelax)
	case c.PackingWeight < 0 || c.IdleWeight < 0 || c.PackingWeight+c.IdleWeight == 0:
		return fmt.Errorf("placement weights %d, %d: not negative, at least one positive", c.PackingWeight, c.IdleWeight)
	}
	return nil
}

// ClusterNodes is the node count the simulation uses for fleet under c.
func ClusterNodes(c Config, fleet *Fleet) int {
	if c.Nodes > 0 {
		return c.Nodes
	}
	perNode := c.GPUsPerNode / c.GPUsPerReplica
	var replicas int64
	for s := range fleet.Services {
		replicas += max(1, int64(math.Ceil(fleet.Peak(s)/c.ReplicaCapacity-1e-9)))
	}
	return int((replicas + perNode - 1) / perNode)
}

// sim is one policy's run.
type sim struct {
	cfg    Config
	policy Policy
	fleet  *Fleet
	jobs   []Job
	t0     time.Time
	nodes  []simNode
	svcs   []simService
	// planner is the controller's planning round; observed are the services
	// as it sees them (their replicas are refilled every step).
	planner  *round.Planner
	observed []round.Service
	index    map[string]int // of each service, by name
	jobOf    map[*v1.Pod]*simJob
	// published harvestable GPUs per node, as the Nodes would carry them.
	published map[string]int64
	// avail is each open node's availability as published (DeclareInterval).
	avail    map[string]harvest.Availability
	verdicts []harvest.NodePlan
	hnodes   []harvest.Node

	waiting     []waitingReplica
	queue       []*simJob
	queuedGPUs  int64
	running     []*simJob
	nextJob     int
	submissions int

	// graceSeconds is every job's terminationGracePeriodSeconds: GracePeriod.
	graceSeconds int64

	res        Result
	round      int
	waits      []time.Duration // each wait inference saw, as wait counts it
	leads      []time.Duration // notice to eviction, of each noticed eviction
	firmLeads  []time.Duration // the notice's time last moved earlier to eviction
	fleetGPUs  int64
	lastSample time.Duration
}

// Run simulates one policy.
func Run(cfg Config, policy Policy, fleet *Fleet, jobs []Job) (Result, error) {
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	if len(fleet.Services) == 0 {
		return Result{}, fmt.Errorf("no inference services")
	}
	if len(jobs) > 0 {
		smallest := jobs[0].GPUs
		for _, j := range jobs {
			smallest = min(smallest, j.GPUs)
		}
		if smallest > cfg.GPUsPerNode {
			return Result{}, fmt.Errorf("no job fits on a node of %d GPUs: the smallest asks for %d", cfg.GPUsPerNode, smallest)
		}
	}
	policyCfg, err := cfg.RoundConfig(policy)
	if err != nil {
		return Result{}, err
	}
	s := &sim{cfg: cfg, policy: policy, fleet: fleet, jobs: jobs, t0: cfg.start(), published: map[string]int64{}, avail: map[string]harvest.Availability{},
		jobOf: map[*v1.Pod]*simJob{}, graceSeconds: int64((cfg.GracePeriod + time.Second - 1) / time.Second)}
	if policy == Oracle {
		policyCfg.Oracle = s.futurePeak
	}
	s.planner = round.New(policyCfg)
	s.index = make(map[string]int, len(fleet.Services))
	for i, svc := range fleet.Services {
		s.index[svc.Name] = i
		s.observed = append(s.observed, round.Service{Key: svc.Name, Declared: true,
			Settings: demand.Settings{Metric: demand.Requests, TargetLoad: cfg.ReplicaCapacity, GPUsPerReplica: cfg.GPUsPerReplica}})
	}
	n := ClusterNodes(cfg, fleet)
	s.nodes = make([]simNode, n)
	for i := range s.nodes {
		s.nodes[i] = simNode{name: fmt.Sprintf("node-%04d", i), alloc: cfg.GPUsPerNode}
	}
	s.fleetGPUs = int64(n) * cfg.GPUsPerNode
	s.verdicts = make([]harvest.NodePlan, n)
	s.hnodes = make([]harvest.Node, n)
	s.svcs = make([]simService, len(fleet.Services))
	for i := range s.svcs {
		s.svcs[i].max = max(1, int(math.Ceil(fleet.Peak(i)/cfg.ReplicaCapacity-1e-9)))
	}
	s.res = Result{Policy: policy, Days: cfg.Duration.Hours() / 24, Nodes: n, FleetGPUs: s.fleetGPUs,
		ReclaimBudgetSeconds: cfg.budget().Seconds(), PricePerGPUHour: cfg.PricePerGPUHour, InferenceAutoscaler: ExternalAutoscaler}
	if s.autoscaled(0) != nil {
		s.res.InferenceAutoscaler = GleanerAutoscaler
	}
	s.run()
	return s.res, nil
}

func (s *sim) run() {
	cfg := s.cfg
	dt := cfg.ScrapeInterval
	// The initial replicas are in place, serving, before the first step.
	for i := range s.svcs {
		sv := &s.svcs[i]
		sv.wanted = s.loadWants(i, 0)
		sv.desired = sv.wanted
		for range sv.desired {
			if n := s.bindNode(); n >= 0 {
				s.bind(i, n, -s.replicaStartup())
			}
		}
	}
	gleaner := s.autoscaled(0) != nil
	s.lastSample = -1
	for t := time.Duration(0); t < cfg.Duration; t += dt {
		s.release(t)
		for i := range s.svcs {
			s.svcs[i].wanted = s.loadWants(i, t)
			if gleaner {
				s.seeLoad(i, t)
			} else {
				s.autoscale(i, t)
			}
		}
		s.bindPending(t)
		if s.policy != None {
			s.plan(t)
			s.schedule(t)
		}
		s.account(t, min(dt, cfg.Duration-t))
	}
	// Jobs still restarting at the end have lost only the restart so far.
	for _, j := range s.running {
		if j.start > cfg.Duration {
			s.restarted(j, cfg.Duration-j.start)
		}
	}
	// Replicas still waiting at the end have waited this long so far.
	for i := range s.svcs {
		for _, p := range s.svcs[i].pending {
			if p.seen >= 0 {
				s.wait(cfg.Duration - p.seen)
			}
		}
	}
	r := &s.res
	if r.IdleGPUHours > 0 {
		r.HarvestedFraction = r.HarvestedGPUHours / r.IdleGPUHours
	}
	r.Savings = r.HarvestedGPUHours * cfg.PricePerGPUHour
	for h, days := range s.planner.Calibration() {
		if c := newCalibration(availability.SurvivalHorizons[h], days); len(c.Buckets) > 0 {
			r.Availability = append(r.Availability, c)
		}
	}
	if len(s.waits) > 0 {
		slices.Sort(s.waits)
		r.InferenceWaitP99Seconds = s.waits[(len(s.waits)-1)*99/100].Seconds()
	}
	if len(s.leads) > 0 {
		slices.Sort(s.leads)
		r.NoticeLeadP50Seconds = s.leads[len(s.leads)/2].Seconds()
		r.NoticeLeadP10Seconds = s.leads[len(s.leads)/10].Seconds()
		slices.Sort(s.firmLeads)
		r.NoticeFirmLeadP50Seconds = s.firmLeads[len(s.firmLeads)/2].Seconds()
	}
}

// futurePeak is the oracle's forecast: the highest load service wants at the
// steps in [from, from+window].
func (s *sim) futurePeak(service string, from time.Time, window time.Duration) float64 {
	i := s.index[service]
	var peak float64
	for t := from.Sub(s.t0); t <= from.Add(window).Sub(s.t0); t += s.cfg.ScrapeInterval {
		peak = max(peak, s.load(i, t))
	}
	return peak
}

// load is service i's load at t.
func (s *sim) load(i int, t time.Duration) float64 {
	if s.cfg.StepLoad {
		return s.fleet.RateAt(i, t)
	}
	return s.fleet.LinearRateAt(i, t)
}

func (s *sim) now(t time.Duration) time.Time { return s.t0.Add(t) }

// plan runs the controller's planning round (pkg/round) on the virtual
// cluster and evicts the victims it chooses (every eviction goes through).
func (s *sim) plan(t time.Duration) {
	for i := range s.nodes {
		n := &s.nodes[i]
		s.hnodes[i] = harvest.Node{Name: n.name, InPool: true, Schedulable: true, AllocatableGPUs: n.alloc,
			ServingGPUs: n.serving, LentGPUs: n.lent, ReturningGPUs: n.returning, HostsInference: n.serving > 0}
	}
	for _, j := range s.running {
		if !j.evicted {
			h := &s.hnodes[j.node]
			h.LeavesIn = max(h.LeavesIn, j.leaves)
		}
	}
	for i := range s.svcs {
		s.observed[i].Replicas = s.observe(i, t)
		s.observed[i].Autoscale = s.autoscaled(i)
	}
	obs := round.Observation{Now: s.now(t), Nodes: s.hnodes, Published: s.published, Services: s.observed,
		BestEffort: func(owing map[string]bool) []reclaim.Candidate { return s.candidates(owing, t) }}
	d := s.planner.Plan(obs)
	if s.cfg.OnRound != nil {
		s.cfg.OnRound(obs, d)
	}
	for i, n := range s.nodes {
		np := d.Plan.Nodes[n.name]
		s.verdicts[i] = np
		s.published[n.name] = np.HarvestableGPUs
	}
	if s.cfg.DeclareInterval {
		clear(s.avail)
		for _, av := range d.Availability {
			s.avail[av.Node] = av.Published()
		}
	}
	for _, v := range d.Victims {
		s.evict(s.jobOf[v.Pod], v, t)
	}
	s.notify(d.Notices, t)
	if len(d.Scale) > 0 {
		s.applyScale(d.Scale, t)
		s.bindPending(t)
	}
	clear(s.jobOf)
}

func (s *sim) account(t, dt time.Duration) {
	var serving, lent, needed int64
	for i := range s.nodes {
		serving += s.nodes[i].serving
		lent += s.nodes[i].lent
	}
	for i := range s.svcs {
		needed += int64(s.svcs[i].wanted) * s.cfg.GPUsPerReplica
	}
	h := dt.Hours()
	s.res.IdleGPUHours += float64(max(0, s.fleetGPUs-needed)) * h
	s.res.ServingGPUHours += float64(serving) * h
	s.res.HarvestedGPUHours += float64(lent) * h
	if s.cfg.SampleEvery > 0 && (s.lastSample < 0 || t-s.lastSample >= s.cfg.SampleEvery) {
		s.lastSample = t
		s.res.Timeline = append(s.res.Timeline, Sample{Days: t.Hours() / 24, Serving: serving, Needed: needed, Lent: lent,
			Idle: max(0, s.fleetGPUs-serving-lent)})
	}
}

// RunAll simulates each policy, concurrently, in the order given.
func RunAll(cfg Config, policies []Policy, fleet *Fleet, jobs []Job) ([]Result, error) {
	results := make([]Result, len(policies))
	errs := make([]error, len(policies))
	done := make(chan int, len(policies))
	for i, p := range policies {
		go func() {
			results[i], errs[i] = Run(cfg, p, fleet, jobs)
			done <- i
		}()
	}
	for range policies {
		<-done
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return results, nil
}
