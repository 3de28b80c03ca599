// Package simulate replays inference traffic and a best-effort job stream in
// virtual time through gleaner-controller's planning round (pkg/round: the
// demand model, planner, gate and victim choice, the very code the controller
// runs) and gleaner-scheduler's harvest check and placement score
// (harvest.Verdict.Fit, harvest.PlacementScore), and accounts for what Gleaner
// would harvest and what it would cost inference.
//
// # Model
//
// Time advances in steps of the scrape interval. In each step:
//
//  1. Best-effort pods whose grace period has ended leave their GPUs and are
//     queued again (as a retried pod, at the back of the queue, resuming from
//     their last checkpoint); jobs whose work is done leave theirs.
//  2. Each service's load is its trace rate at that time (constant within a
//     trace window). The service wants max(1, ceil(load / capacity))
//     replicas at once (the traffic model: inference scaled by an autoscaler
//     of its own, not by Gleaner's); replicas it no longer wants go at once
//     (pending ones first, then those on the node serving the least inference).
//  3. Pending replicas bind, in the order they were wanted across services (as
//     kube-scheduler's queue pops pods of equal priority), to a node with
//     GPUsPerReplica GPUs held neither by inference nor by best-effort pods
//     (the fullest such node). A replica that
//     finds none waits; its wait, from the step it was wanted to the step it
//     binds, is inference wait. A waiting replica is left out of the demand
//     model's replicas, so the round below keeps headroom for it and reclaims
//     GPUs where the planner places that headroom. This stands in for
//     gleaner-scheduler's ReclaimPreemption PostFilter, which evicts for a
//     pending inference pod but runs the upstream preemption Evaluator and
//     cannot run without the framework. (The real controller counts a pending
//     pod as a Starting replica, which is capacity, not headroom.)
//  4. The controller's round, round.Planner.Plan, with the policy's settings
//     (Config.RoundConfig): each bound replica is a Known replica carrying an equal
//     share of the load (load beyond the capacity of a replica is waiting
//     requests); the forecast policy uses the quarter-hour-of-week profile learned
//     online, the others the load and its trend alone; the nightly policy
//     lends only within NightlyWindows. The round's victims are evicted (every
//     eviction goes through: a simulated cluster has no PodDisruptionBudgets);
//     an evicted pod holds its GPUs for the grace period and loses the work
//     since its last completed checkpoint. The round's reclaim notices reach
//     their jobs at once (as the downward API would, a little later).
//  5. The scheduler places queued best-effort jobs in queue order on nodes
//     whose verdict admits them (harvest.Verdict.Fit, GPUHarvest's Filter) and
//     whose GPUs are free, on the node with the highest harvest.PlacementScore
//     (ties: the first node). A job that fits nowhere is skipped; the jobs
//     behind it still get their chance. Every job is a lone pod.
//
// The job stream is a backlog: jobs are submitted in trace order, with the
// trace's GPU counts and run times, whenever the GPUs requested by queued jobs
// fall below the fleet's GPU count, and whenever lendable GPUs stay free
// because every queued job is too big for them, so researchers always have
// more work queued than the fleet could ever lend, of every size; the trace is
// replayed from its start when it runs out.
//
// Jobs checkpoint every CheckpointInterval of progress, at no cost (the same
// with and without notices). A job with a reclaim notice follows the
// checkpoint contract: it works on and saves a checkpoint timed to complete
// by the noticed time, if that saves more work than the checkpoint costs and
// can complete within the grace period after it. The checkpoint takes
// CheckpointCost x GPUs / GPUsPerNode, during which the job makes no
// progress: that time counts as lost work. A checkpoint in flight when the
// job is evicted goes on through the grace period; otherwise nothing is
// saved on eviction (SIGTERM), with or without notice.
package simulate

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gleaner-dev/gleaner/pkg/api"
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

// DefaultConfig is the evaluation default: every trace is judged with it.
func DefaultConfig() Config {
	return Config{
		Duration:           14 * 24 * time.Hour,
		GPUsPerNode:        8,
		GPUsPerReplica:     4,
		ReplicaCapacity:    20,
		ScrapeInterval:     30 * time.Second,
		GracePeriod:        reclaim.DefaultMaxGrace, // gleaner-controller --max-reclaim-grace default
		CheckpointInterval: 30 * time.Minute,
		CheckpointCost:     3 * time.Minute,
		Horizon:            demand.DefaultHorizon,
		OpenAfter:          2 * time.Minute, // gleaner-controller --open-after default
		OpenAfterBackoff:   harvest.DefaultBackoffLimit,
		ReclaimLead:        demand.DefaultReclaimLead,
		NoticeHorizon:      demand.DefaultNoticeHorizon,
		Margin:             0.1, // gleaner-controller --headroom-margin default
		NightlyWindows:     "20:00-08:00",
		PricePerGPUHour:    2.0,
		PackingWeight:      1,
		IdleWeight:         1,
		SampleEvery:        10 * time.Minute,
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

// Sample is the cluster at one time of the timeline, in GPUs.
type Sample struct {
	Days float64 `json:"days"`
	// Serving: held by bound inference replicas.
	Serving int64 `json:"serving"`
	// Needed: what the replicas inference wants need (serving plus waiting replicas).
	Needed int64 `json:"needed"`
	// Lent: held by best-effort pods, terminating ones included.
	Lent int64 `json:"lent"`
	// Idle: held by no one.
	Idle int64 `json:"idle"`
}

// Result is one policy's outcome. GPU-hours integrate GPU counts held
// constant over each step.
type Result struct {
	Policy    Policy  `json:"policy"`
	Days      float64 `json:"days"`
	Nodes     int     `json:"nodes"`
	FleetGPUs int64   `json:"fleetGpus"`
	// IdleGPUHours: fleet GPUs minus the GPUs of the replicas inference wants
	// (max(1, ceil(load/capacity)) per service), integrated over time. It does
	// not depend on the policy.
	IdleGPUHours float64 `json:"idleGpuHours"`
	// ServingGPUHours: GPUs held by bound inference replicas.
	ServingGPUHours float64 `json:"servingGpuHours"`
	// HarvestedGPUHours: GPUs held by best-effort pods (as gleaner-controller
	// counts harvested GPU-seconds: terminating pods included).
	HarvestedGPUHours float64 `json:"harvestedGpuHours"`
	// HarvestedFraction = HarvestedGPUHours / IdleGPUHours.
	HarvestedFraction float64 `json:"harvestedFraction"`
	// LostGPUHours: work lost to preemption (the progress since each evicted
	// job's last completed checkpoint) and the time jobs spent saving
	// checkpoints for notices.
	LostGPUHours float64 `json:"lostGpuHours"`
	// Preemptions: best-effort pods evicted.
	Preemptions int `json:"preemptions"`
	// NoticedEvictions: preemptions of pods that had a reclaim notice.
	NoticedEvictions int `json:"noticedEvictions"`
	// Notices: reclaim notices given; NoticesWithdrawn: taken back.
	Notices          int `json:"notices"`
	NoticesWithdrawn int `json:"noticesWithdrawn"`
	// NoticeLeadP50Seconds, NoticeLeadP10Seconds: notice to eviction, over the
	// noticed evictions (the median and the shortest tenth).
	NoticeLeadP50Seconds float64 `json:"noticeLeadP50Seconds"`
	NoticeLeadP10Seconds float64 `json:"noticeLeadP10Seconds"`
	// NoticeFirmLeadP50Seconds: the same, counted from when the notice's
	// time was last moved earlier (or first given): how long before its
	// eviction a job knew the time it would have to stop by.
	NoticeFirmLeadP50Seconds float64 `json:"noticeFirmLeadP50Seconds"`
	// NoticeCheckpointGPUHours: time jobs spent saving checkpoints because of
	// notices, included in LostGPUHours.
	NoticeCheckpointGPUHours float64 `json:"noticeCheckpointGpuHours"`
	// ReclaimedGPUs: GPUs of the evicted pods.
	ReclaimedGPUs int64 `json:"reclaimedGpus"`
	// ReclaimedUnusedGPUs: reclaimed GPUs lent again on their node before an
	// inference replica bound there (each binding uses up to GPUsPerReplica of them).
	ReclaimedUnusedGPUs int64 `json:"reclaimedUnusedGpus"`
	// InferenceReplicaStarts: replicas bound after the start (the initial ones excluded).
	InferenceReplicaStarts int `json:"inferenceReplicaStarts"`
	// InferenceWaitSeconds: total time wanted replicas waited for GPUs.
	InferenceWaitSeconds float64 `json:"inferenceWaitSeconds"`
	// InferenceWaitsOverBudget: replicas that waited longer than ReclaimBudgetSeconds.
	InferenceWaitsOverBudget int     `json:"inferenceWaitsOverBudget"`
	MaxInferenceWaitSeconds  float64 `json:"maxInferenceWaitSeconds"`
	ReclaimBudgetSeconds     float64 `json:"reclaimBudgetSeconds"`
	JobsStarted              int     `json:"jobsStarted"`
	JobsCompleted            int     `json:"jobsCompleted"`
	// Savings = HarvestedGPUHours x PricePerGPUHour.
	Savings         float64 `json:"savings"`
	PricePerGPUHour float64 `json:"pricePerGpuHour"`
	// Availability is the check of the survival probabilities the planner
	// gives open nodes: per span, what became of the GPUs given each tenth of
	// probability.
	Availability []Calibration `json:"availability,omitempty"`
	Timeline     []Sample      `json:"-"`
}

// Calibration is how well the survival probabilities over one span held.
type Calibration struct {
	Hours   float64             `json:"hours"`
	Buckets []CalibrationBucket `json:"buckets"`
	// WorstPoints is the largest gap, in percentage points, between the
	// probability given and the fraction that survived, over the buckets
	// holding at least 1% of the GPU-hours.
	WorstPoints float64 `json:"worstPoints"`
	// MeanPoints is the gap averaged over the GPU-hours of every bucket.
	MeanPoints float64 `json:"meanPoints"`
}

// CalibrationBucket is one tenth of probability and how far its gap could
// move with other days of the same traffic.
type CalibrationBucket struct {
	availability.CalibrationBucket
	// GapLow and GapHigh bound, in points, 90% of the gap (Survived -
	// Predicted) over the run's days drawn again with replacement
	// (calibrationResamples times, the same draws every run). The
	// forecast's errors come in spells of a day or two that strike every
	// node at once, so a tenth that a few days fill can be several points
	// off on one run's days alone; a bucket whose range holds 0 is as
	// calibrated as those days can tell. A tenth that one day fills has no
	// range: the draws cannot tell.
	GapLow  float64 `json:"gapLow"`
	GapHigh float64 `json:"gapHigh"`
	// Days is how many of the run's days gave the tenth any GPU-hours.
	Days int `json:"days"`
}

// calibrationResamples is how many times the days are drawn again.
const calibrationResamples = 2000

// newCalibration checks the probabilities given over span, from the
// planner's record by day (round.Planner.Calibration).
func newCalibration(span time.Duration, days [][]availability.CalibrationBucket) Calibration {
	c := Calibration{Hours: span.Hours()}
	var total float64
	for _, b := range availability.SumCalibration(days) {
		total += b.GPUHours
		c.MeanPoints += b.GPUHours * 100 * math.Abs(b.Predicted-b.Survived)
		c.Buckets = append(c.Buckets, CalibrationBucket{CalibrationBucket: b})
	}
	if total == 0 {
		return Calibration{}
	}
	c.MeanPoints /= total
	for _, b := range c.Buckets {
		if b.GPUHours >= total/100 {
			c.WorstPoints = max(c.WorstPoints, 100*math.Abs(b.Predicted-b.Survived))
		}
	}
	// of is the place in c.Buckets of a day's bucket.
	of := func(b availability.CalibrationBucket) int {
		return slices.IndexFunc(c.Buckets, func(cb CalibrationBucket) bool { return cb.From == b.From })
	}
	for _, day := range days {
		for _, b := range day {
			c.Buckets[of(b)].Days++
		}
	}
	// Each draw takes len(days) days with replacement and adds them up.
	gaps := make([][]float64, len(c.Buckets))
	rng := rand.New(rand.NewPCG(1, 2))
	drawn := make([][]availability.CalibrationBucket, len(days))
	for range calibrationResamples {
		for i := range drawn {
			drawn[i] = days[rng.IntN(len(days))]
		}
		for _, b := range availability.SumCalibration(drawn) {
			i := of(b)
			gaps[i] = append(gaps[i], 100*(b.Survived-b.Predicted))
		}
	}
	for i, g := range gaps {
		if len(g) == 0 {
			continue
		}
		slices.Sort(g)
		c.Buckets[i].GapLow, c.Buckets[i].GapHigh = g[(len(g)-1)*5/100], g[(len(g)-1)*95/100]
	}
	return c
}

type simNode struct {
	name      string
	alloc     int64
	serving   int64 // GPUs of bound inference replicas
	lent      int64 // GPUs of best-effort pods, terminating included
	returning int64 // GPUs of terminating best-effort pods
	reclaimed int64 // reclaimed GPUs no replica has bound to yet
}

type simService struct {
	bound   []int           // node of each bound replica
	pending []time.Duration // when each pending replica was wanted
	desired int
	buf     []demand.Replica
}

type simJob struct {
	Job
	name string
	runs int           // runs started; each is a new pod
	node int           // -1: queued
	done time.Duration // work saved by checkpoints of earlier runs
	// The current run: when it started, the time it spent saving notice
	// checkpoints (no progress), the progress its last completed checkpoint
	// holds and when that checkpoint completed (start: none yet).
	start, paused, saved, savedAt time.Duration
	// A notice checkpoint in flight, from ckptFrom to ckptTo, saving the
	// progress made by ckptFrom.
	saving           bool
	ckptFrom, ckptTo time.Duration
	// The reclaim notice standing on the pod: for when, since when; jit: the
	// checkpoint due to complete by noticeAt was started or judged not worth
	// taking.
	noticed               bool
	noticeAt, noticeSince time.Duration
	// noticeFirm: when noticeAt was last moved earlier (or first given).
	noticeFirm  time.Duration
	jit         bool
	noticeRound int // the last round that gave the notice
	// evicted: terminating; freeAt is when its GPUs come back.
	evicted bool
	freeAt  time.Duration
	// pod is the current run's pod as last built, for the checkpoint and
	// eviction it shows.
	pod        *v1.Pod
	podSavedAt time.Duration
	podEvicted bool
}

// progress is the work job j's current run has done by t.
func (j *simJob) progress(t time.Duration) time.Duration {
	p := t - j.start - j.paused
	if j.saving {
		p -= max(0, min(t, j.ckptTo)-j.ckptFrom)
	}
	return p
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

	res        Result
	round      int
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
		jobOf: map[*v1.Pod]*simJob{}}
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
	s.res = Result{Policy: policy, Days: cfg.Duration.Hours() / 24, Nodes: n, FleetGPUs: s.fleetGPUs,
		ReclaimBudgetSeconds: cfg.budget().Seconds(), PricePerGPUHour: cfg.PricePerGPUHour}
	s.run()
	return s.res, nil
}

func (s *sim) run() {
	cfg := s.cfg
	dt := cfg.ScrapeInterval
	// The initial replicas are in place before the first step.
	for i := range s.svcs {
		s.autoscale(i, 0)
		sv := &s.svcs[i]
		for range sv.pending {
			if n := s.bindNode(); n >= 0 {
				s.bind(i, n)
			}
		}
		sv.pending = sv.pending[:0]
	}
	s.lastSample = -1
	for t := time.Duration(0); t < cfg.Duration; t += dt {
		s.release(t)
		for i := range s.svcs {
			s.autoscale(i, t)
		}
		s.bindPending(t)
		if s.policy != None {
			s.plan(t)
			s.schedule(t)
		}
		s.account(t, min(dt, cfg.Duration-t))
	}
	// Replicas still waiting at the end have waited this long so far.
	for i := range s.svcs {
		for _, w := range s.svcs[i].pending {
			s.wait(cfg.Duration - w)
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

// release ends grace periods and finished jobs, after moving each running
// job's checkpoints on to t.
func (s *sim) release(t time.Duration) {
	kept := s.running[:0]
	for _, j := range s.running {
		if !j.evicted {
			s.checkpoint(j, t)
		}
		switch {
		case j.evicted && j.freeAt <= t:
			s.nodes[j.node].lent -= j.GPUs
			s.nodes[j.node].returning -= j.GPUs
			j.node, j.evicted = -1, false
			s.queue = append(s.queue, j) // retried as a new pod: the back of the queue
			s.queuedGPUs += j.GPUs
		case !j.evicted && j.progress(t) >= j.Work-j.done:
			s.nodes[j.node].lent -= j.GPUs
			s.res.JobsCompleted++
		default:
			kept = append(kept, j)
		}
	}
	clear(s.running[len(kept):])
	s.running = kept
}

// autoscale sets service i's wanted replicas from its load at t.
func (s *sim) autoscale(i int, t time.Duration) {
	sv := &s.svcs[i]
	load := s.load(i, t)
	want := max(1, int(math.Ceil(load/s.cfg.ReplicaCapacity-1e-9)))
	sv.desired = want
	have := len(sv.bound) + len(sv.pending)
	for ; have < want; have++ {
		sv.pending = append(sv.pending, t)
	}
	for ; have > want && len(sv.pending) > 0; have-- {
		w := sv.pending[len(sv.pending)-1]
		sv.pending = sv.pending[:len(sv.pending)-1]
		s.wait(t - w) // wanted, then no longer: it waited this long
	}
	for ; have > want; have-- {
		// Scale in on the node serving the least inference, so nodes empty.
		k := 0
		for x, n := range sv.bound {
			if s.nodes[n].serving < s.nodes[sv.bound[k]].serving || s.nodes[n].serving == s.nodes[sv.bound[k]].serving && n > sv.bound[k] {
				k = x
			}
		}
		s.nodes[sv.bound[k]].serving -= s.cfg.GPUsPerReplica
		sv.bound = append(sv.bound[:k], sv.bound[k+1:]...)
	}
}

func (s *sim) wait(d time.Duration) {
	if d <= 0 {
		return
	}
	s.res.InferenceWaitSeconds += d.Seconds()
	s.res.MaxInferenceWaitSeconds = max(s.res.MaxInferenceWaitSeconds, d.Seconds())
	if d > s.cfg.budget() {
		s.res.InferenceWaitsOverBudget++
	}
}

// bindNode is the node a new replica binds to: GPUsPerReplica GPUs held by no
// pod, on the fullest such node (first by name on ties); -1 if none.
func (s *sim) bindNode() int {
	best, bestFree := -1, int64(0)
	for i := range s.nodes {
		n := &s.nodes[i]
		free := n.alloc - n.serving - n.lent
		if free >= s.cfg.GPUsPerReplica && (best < 0 || free < bestFree) {
			best, bestFree = i, free
		}
	}
	return best
}

func (s *sim) bind(svc, node int) {
	n := &s.nodes[node]
	n.serving += s.cfg.GPUsPerReplica
	n.reclaimed -= min(n.reclaimed, s.cfg.GPUsPerReplica)
	s.svcs[svc].bound = append(s.svcs[svc].bound, node)
}

// bindPending binds waiting replicas in the order they were wanted, across
// services, as kube-scheduler's queue pops pods of equal priority: the GPUs an
// eviction frees go to the replica that has waited longest, not to whichever
// service comes first.
func (s *sim) bindPending(t time.Duration) {
	s.waiting = s.waiting[:0]
	for i := range s.svcs {
		for _, w := range s.svcs[i].pending {
			s.waiting = append(s.waiting, waitingReplica{svc: i, since: w})
		}
	}
	if len(s.waiting) == 0 {
		return
	}
	slices.SortStableFunc(s.waiting, func(a, b waitingReplica) int { return cmp.Compare(a.since, b.since) })
	bound := 0
	for _, w := range s.waiting {
		n := s.bindNode()
		if n < 0 {
			break
		}
		s.bind(w.svc, n)
		s.res.InferenceReplicaStarts++
		s.wait(t - w.since)
		bound++
	}
	// Each service's pending replicas are in the order wanted: the bound ones
	// are its first.
	for _, w := range s.waiting[:bound] {
		sv := &s.svcs[w.svc]
		sv.pending = sv.pending[1:]
	}
}

// waitingReplica is a pending replica of service svc, wanted since since.
type waitingReplica struct {
	svc   int
	since time.Duration
}

// plan runs the controller's planning round (pkg/round) on the virtual
// cluster and evicts the victims it chooses (every eviction goes through).
func (s *sim) plan(t time.Duration) {
	cfg := s.cfg
	for i := range s.nodes {
		n := &s.nodes[i]
		s.hnodes[i] = harvest.Node{Name: n.name, InPool: true, Schedulable: true, AllocatableGPUs: n.alloc,
			ServingGPUs: n.serving, LentGPUs: n.lent, ReturningGPUs: n.returning, HostsInference: n.serving > 0}
	}
	for i := range s.svcs {
		sv := &s.svcs[i]
		load := s.load(i, t)
		sv.buf = sv.buf[:0]
		if b := len(sv.bound); b > 0 {
			per := load / float64(b)
			for range b {
				sv.buf = append(sv.buf, demand.Replica{Known: true, Running: min(per, cfg.ReplicaCapacity),
					Waiting: max(0, per-cfg.ReplicaCapacity), GPUs: cfg.GPUsPerReplica})
			}
		}
		s.observed[i].Replicas = sv.buf
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
		s.evict(s.jobOf[v.Pod], t)
	}
	s.notify(d.Notices, t)
	clear(s.jobOf)
}

// candidates are the running jobs on the owing nodes as the reclaimer sees
// them at t (every job is a lone pod, so no gang reaches another node).
func (s *sim) candidates(owing map[string]bool, t time.Duration) []reclaim.Candidate {
	now := s.now(t)
	var out []reclaim.Candidate
	for _, j := range s.running {
		if owing[s.nodes[j.node].name] {
			p := s.pod(j, t)
			s.jobOf[p] = j
			out = append(out, reclaim.NewCandidate(p, api.GPUResource, now, s.cfg.GracePeriod, nil))
		}
	}
	return out
}

// evict starts job j's grace period: it loses the progress since its last
// completed checkpoint. A notice checkpoint in flight goes on through the
// grace period and counts if it completes within it; one not yet started is
// not started (the job is told to stop before it began).
func (s *sim) evict(j *simJob, t time.Duration) {
	if j.saving && j.ckptFrom > t {
		j.saving = false // due to start later: never started
	}
	if j.saving {
		// The job goes on saving through its grace period.
		s.checkpointed(j, t, j.ckptTo <= t+s.cfg.GracePeriod)
	}
	lost := j.progress(t) - j.saved
	j.done += j.saved
	j.evicted, j.freeAt = true, t+s.cfg.GracePeriod
	s.res.Preemptions++
	s.res.ReclaimedGPUs += j.GPUs
	s.nodes[j.node].reclaimed += j.GPUs
	s.nodes[j.node].returning += j.GPUs
	s.res.LostGPUHours += float64(j.GPUs) * lost.Hours()
	if j.noticed {
		s.res.NoticedEvictions++
		s.leads = append(s.leads, t-j.noticeSince)
		s.firmLeads = append(s.firmLeads, t-j.noticeFirm)
	}
}

// checkpoint moves job j's checkpoints on to t: a notice checkpoint in flight
// that has completed, the periodic ones (every CheckpointInterval of
// progress, taken as instant), and the one due to complete by the noticed
// time.
func (s *sim) checkpoint(j *simJob, t time.Duration) {
	if j.saving && j.ckptTo <= t {
		s.checkpointed(j, j.ckptTo, true)
	}
	p := j.progress(t)
	if k := p / s.cfg.CheckpointInterval * s.cfg.CheckpointInterval; k > j.saved {
		j.saved, j.savedAt = k, t-(p-k)
	}
	s.justInTime(j, t)
}

// justInTime starts, in the step from t, the checkpoint due to complete by
// the noticed time (at t if that is already too late).
func (s *sim) justInTime(j *simJob, t time.Duration) {
	if !j.noticed || j.jit || j.saving {
		return
	}
	c := s.checkpointCost(j)
	from := j.noticeAt - c
	if from >= t+s.cfg.ScrapeInterval {
		return // not in this step
	}
	from = max(t, from)
	j.jit = true
	// Only a checkpoint that saves more work than it costs, and that can
	// complete before the job is stopped (its grace period after the noticed
	// time), is worth taking.
	if j.progress(from)-j.saved < c || from+c > j.noticeAt+s.cfg.GracePeriod {
		return
	}
	s.startCheckpoint(j, from)
}

// checkpointCost is how long job j takes to save a checkpoint.
func (s *sim) checkpointCost(j *simJob) time.Duration {
	return time.Duration(float64(s.cfg.CheckpointCost) * float64(j.GPUs) / float64(s.cfg.GPUsPerNode))
}

func (s *sim) startCheckpoint(j *simJob, t time.Duration) {
	j.saving, j.ckptFrom, j.ckptTo = true, t, t+s.checkpointCost(j)
}

// checkpointed ends job j's notice checkpoint: completed, or stopped at t by
// an eviction (completed if it completes within the grace period). The time
// it took until then counts as lost work, the job made no progress; the time
// it goes on taking in the grace period does not (no job makes progress
// there).
func (s *sim) checkpointed(j *simJob, t time.Duration, completed bool) {
	held := j.progress(j.ckptFrom)
	spent := min(t, j.ckptTo) - j.ckptFrom
	j.saving = false
	j.paused += spent
	gpuHours := float64(j.GPUs) * spent.Hours()
	s.res.LostGPUHours += gpuHours
	s.res.NoticeCheckpointGPUHours += gpuHours
	if completed && held > j.saved {
		j.saved, j.savedAt = held, j.ckptTo
	}
}

// notify hands the round's reclaim notices to the jobs. A noticed job works
// on and checkpoints so as to complete by the noticed time (again if the time
// moves: the round keeps a time that moved by less than its step), when that
// saves more work than the checkpoint costs. Notices not given again are
// withdrawn.
func (s *sim) notify(notices []round.Notice, t time.Duration) {
	s.round++
	for _, n := range notices {
		j := s.jobOf[n.Pod]
		at := n.At.Sub(s.t0)
		if !j.noticed {
			j.noticed, j.noticeSince, j.noticeFirm, j.noticeAt, j.jit = true, t, t, at, false
			s.res.Notices++
		} else if at != j.noticeAt {
			if at < j.noticeAt {
				j.noticeFirm = t
			}
			j.noticeAt, j.jit = at, false
		}
		s.justInTime(j, t)
		j.noticeRound = s.round
	}
	for _, j := range s.running {
		if j.noticed && !j.evicted && j.noticeRound != s.round {
			j.noticed = false
			s.res.NoticesWithdrawn++
		}
	}
}

// pod is job j as the reclaimer sees it at t.
func (s *sim) pod(j *simJob, t time.Duration) *v1.Pod {
	if j.pod != nil && j.podSavedAt == j.savedAt && j.podEvicted == j.evicted {
		return j.pod // nothing the reclaimer reads has changed
	}
	j.podSavedAt, j.podEvicted = j.savedAt, j.evicted
	start := metav1.NewTime(s.now(j.start))
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "research", Name: j.name, UID: types.UID(fmt.Sprintf("%s/%d", j.name, j.runs))},
		Spec: v1.PodSpec{NodeName: s.nodes[j.node].name, Containers: []v1.Container{{Name: "job",
			Resources: v1.ResourceRequirements{Requests: v1.ResourceList{api.GPUResource: *resource.NewQuantity(j.GPUs, resource.DecimalSI)}}}}},
		Status: v1.PodStatus{Phase: v1.PodRunning, StartTime: &start},
	}
	if j.savedAt > j.start {
		p.Annotations = map[string]string{api.AnnotationLastCheckpoint: api.FormatTime(s.now(j.savedAt))}
	}
	if j.evicted {
		// As the API server marks a pod asked to stop: the end of its grace period.
		del := metav1.NewTime(s.now(j.freeAt))
		grace := int64(s.cfg.GracePeriod / time.Second)
		p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &del, &grace
	}
	j.pod = p
	return p
}

// refill submits jobs until the queue asks for at least the backlog's GPUs.
func (s *sim) refill() {
	target := s.cfg.BacklogGPUs
	if target <= 0 {
		target = s.fleetGPUs
	}
	for s.queuedGPUs < target && len(s.jobs) > 0 {
		if s.nextJob == len(s.jobs) && s.cfg.NoReplay {
			return
		}
		s.submit()
	}
}

// submit queues the trace's next job (replaying the trace from its start when
// it runs out, unless NoReplay) and returns it; nil when nothing was queued.
func (s *sim) submit() *simJob {
	if s.nextJob == len(s.jobs) {
		if s.cfg.NoReplay {
			return nil
		}
		s.nextJob = 0
	}
	job := s.jobs[s.nextJob]
	name := job.Name
	if replay := s.submissions / len(s.jobs); replay > 0 {
		name = fmt.Sprintf("%s-r%d", job.Name, replay)
	}
	s.nextJob++
	s.submissions++
	if job.GPUs > s.cfg.GPUsPerNode {
		return nil // fits on no node
	}
	j := &simJob{Job: job, name: name, node: -1}
	s.queue = append(s.queue, j)
	s.queuedGPUs += job.GPUs
	return j
}

// schedule places queued jobs as gleaner-scheduler would. When lendable GPUs
// stay free because every queued job is too big for them, more jobs are
// submitted until one fits: the backlog holds work of every size, so a queue
// of whole-node jobs does not keep smaller work off the GPUs.
func (s *sim) schedule(t time.Duration) {
	s.refill()
	for s.place(t) && s.submitFitting(s.largestHole()) {
	}
}

// largestHole is the most GPUs one more job could take on a single open node.
func (s *sim) largestHole() int64 {
	var hole int64
	for i := range s.nodes {
		n, v := &s.nodes[i], s.verdicts[i]
		if v.State == api.HarvestOpen {
			hole = max(hole, min(v.HarvestableGPUs-n.lent, n.alloc-n.serving-n.lent))
		}
	}
	return hole
}

// submitFitting submits jobs in trace order until one of at most gpus GPUs is
// queued, and reports whether one was (trying the trace once round at most).
func (s *sim) submitFitting(gpus int64) bool {
	for tries := 0; gpus > 0 && tries < len(s.jobs); tries++ {
		if j := s.submit(); j != nil && j.GPUs <= gpus {
			return true
		}
	}
	return false
}

// place runs one pass over the queue and reports whether a queued job found
// no node.
func (s *sim) place(t time.Duration) bool {
	minFail := int64(math.MaxInt64)
	placed := false
	for qi, j := range s.queue {
		if j.GPUs >= minFail {
			continue
		}
		best, bestScore := -1, int64(-1)
		for i := range s.nodes {
			n, v := &s.nodes[i], s.verdicts[i]
			// GPUHarvest's Filter, then NodeResourcesFit's GPU check.
			if v.Fit(n.lent, j.GPUs) != harvest.Fits || n.alloc-n.serving-n.lent < j.GPUs {
				continue
			}
			score := harvest.PlacementScore(harvest.PlacementNode{HarvestableGPUs: v.HarvestableGPUs, LentGPUs: n.lent,
				AllocatableGPUs: n.alloc, ServingGPUs: n.serving}, j.GPUs, s.cfg.PackingWeight, s.cfg.IdleWeight, 100)
			if s.cfg.DeclareInterval {
				var avail int64 // unknown: no credit, as the plugin gives
				if a, ok := s.avail[n.name]; ok {
					avail = harvest.AvailabilityScore(a, s.cfg.CheckpointInterval, 100)
				}
				score = harvest.WithAvailability(score, s.cfg.PackingWeight+s.cfg.IdleWeight, avail, 1)
			}
			if score > bestScore {
				best, bestScore = i, score
			}
		}
		if best < 0 {
			minFail = j.GPUs
			if minFail <= 1 {
				break
			}
			continue
		}
		j.node, j.runs = best, j.runs+1
		j.start, j.paused, j.saved, j.savedAt, j.noticed, j.pod = t, 0, 0, t, false, nil
		n := &s.nodes[best]
		n.lent += j.GPUs
		unused := min(n.reclaimed, j.GPUs)
		n.reclaimed -= unused
		s.res.ReclaimedUnusedGPUs += unused
		s.queuedGPUs -= j.GPUs
		s.running = append(s.running, j)
		s.queue[qi] = nil
		s.res.JobsStarted++
		placed = true
	}
	if placed {
		kept := s.queue[:0]
		for _, j := range s.queue {
			if j != nil {
				kept = append(kept, j)
			}
		}
		clear(s.queue[len(kept):])
		s.queue = kept
	}
	return minFail != math.MaxInt64
}

func (s *sim) account(t, dt time.Duration) {
	var serving, lent, needed int64
	for i := range s.nodes {
		serving += s.nodes[i].serving
		lent += s.nodes[i].lent
	}
	for i := range s.svcs {
		needed += int64(s.svcs[i].desired) * s.cfg.GPUsPerReplica
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
