// Package controller wires Gleaner's decision packages to the API: it reads
// nodes, pods and vLLM load, plans what may be lent (pkg/harvest), publishes the
// verdicts on Nodes and reclaims lent GPUs (pkg/reclaim) when inference needs them.
package controller

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	schedlisters "k8s.io/client-go/listers/scheduling/v1beta1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	pgclientset "sigs.k8s.io/scheduler-plugins/pkg/generated/clientset/versioned"
	pginformers "sigs.k8s.io/scheduler-plugins/pkg/generated/informers/externalversions"
	pglisters "sigs.k8s.io/scheduler-plugins/pkg/generated/listers/scheduling/v1alpha1"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/availability"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
	"github.com/gleaner-dev/gleaner/pkg/ledger"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
	"github.com/gleaner-dev/gleaner/pkg/reclaim/evict"
	"github.com/gleaner-dev/gleaner/pkg/round"
	"github.com/gleaner-dev/gleaner/pkg/vllm"
)

// Component is the controller's name in Events.
const Component = "gleaner-controller"

// Config configures the controller. Zero values take the defaults.
type Config struct {
	// PoolSelector picks the nodes Gleaner may lend. Default gleaner.dev/pool=inference.
	PoolSelector labels.Selector
	// BestEffortPriorityThreshold: pods with a lower priority are best-effort. Default 0.
	BestEffortPriorityThreshold *int32
	// GPUResource is the resource lent. Default nvidia.com/gpu.
	GPUResource v1.ResourceName
	// InferenceNamespaceSelector picks the namespaces the admin opted in as
	// inference when Metrics.Namespaces lists none; with a list, the listed
	// namespaces are the opted-in ones. Inference pods and Deployments
	// elsewhere make no service: a tenant cannot forge demand. Default
	// gleaner.dev/inference=true.
	InferenceNamespaceSelector labels.Selector
	// SyncPeriod is how often the plan is recomputed. Default: the scrape interval.
	SyncPeriod time.Duration
	// TargetLoad is the running+waiting requests one replica should carry, unless
	// a Deployment's gleaner.dev/target-load says otherwise. Default demand.DefaultTargetLoad.
	TargetLoad float64
	// TargetKVCache is the KV-cache usage one replica should carry for services
	// with gleaner.dev/load-metric: kv-cache. Default demand.DefaultTargetKVCache.
	TargetKVCache float64
	// Policy is the planning round's configuration (forecast, gate, reclaim
	// lead, autoscaler); the simulator runs the same.
	Policy round.Config
	// StartupDeadline bounds how long a bound inference pod that has never
	// been scraped counts as starting (capacity coming, no load yet); past it,
	// it counts as unknown, that is saturated. Default 15 minutes.
	StartupDeadline time.Duration
	// MaxReclaimGrace caps the grace period of every eviction; a pod still
	// terminating past it has its GPUs counted as owed. Default
	// reclaim.DefaultMaxGrace.
	MaxReclaimGrace time.Duration
	// PDBWait is how long evictions of a pod may be refused (by a
	// PodDisruptionBudget) before it is deleted without the budget's check.
	// Default: MaxReclaimGrace.
	PDBWait time.Duration
	// WriteWorkers is how many writes (verdicts, evictions, availability)
	// a round makes at once. Default 128: each eviction waits on the API
	// server even when it has CPU to spare, so 32 writers, not the server,
	// paced a test cluster's evictions (bench/README.md).
	WriteWorkers int
	// ReclaimClient makes the writes inference waits on: verdicts and
	// evictions. Nil: the client. gleaner-controller gives it a rate limit of
	// its own, so that notices, scaling and status never queue ahead of them.
	ReclaimClient kubernetes.Interface
	// WatchProgressBound is how long the node and pod informers may take to
	// reach a resource version the API server was at before the controller
	// stops renewing the heartbeat (watch.go). Default
	// DefaultWatchProgressBound; negative turns the check off.
	WatchProgressBound time.Duration
	// DisableAutoscale switches the autoscaler off for every Deployment.
	DisableAutoscale bool
	// Metrics configures the vLLM metrics informer.
	Metrics vllm.Options
	// Heartbeat is the Lease renewed after every round that published every
	// verdict; gleaner-scheduler lends only while it sees it renewed.
	Heartbeat HeartbeatLease
	// PodGroups reads the scheduler-plugins PodGroups, for each gang's quorum
	// (minMember): an elastic gang sheds members above it instead of going
	// whole. Nil, or a PodGroup not (yet) seen: the gang goes whole. Native
	// PodGroups (minCount) are read through Client, when the API server
	// serves them.
	PodGroups pgclientset.Interface
	// Status configures the GPUPool and HarvestReports published for people.
	Status StatusConfig
	Clock  clock.PassiveClock
}

// HeartbeatLease names the controller's heartbeat Lease and its timeout.
type HeartbeatLease struct {
	// Namespace and Name of the Lease. Defaults gleaner-system and
	// api.HeartbeatLeaseName.
	Namespace, Name string
	// Identity is written as the holder. Default: the host name and a UUID.
	Identity string
	// Timeout is how long after a round the scheduler may lend on it (written
	// as the Lease's duration) and the bound /readyz holds rounds to. Default:
	// three sync periods, at least 15 s.
	Timeout time.Duration
}

func (c *Config) defaults() {
	if c.PoolSelector == nil {
		c.PoolSelector = labels.SelectorFromSet(labels.Set{api.LabelPool: api.PoolInference})
	}
	if c.BestEffortPriorityThreshold == nil {
		t := api.DefaultBestEffortPriorityThreshold
		c.BestEffortPriorityThreshold = &t
	}
	if c.GPUResource == "" {
		c.GPUResource = api.GPUResource
	}
	if c.InferenceNamespaceSelector == nil {
		c.InferenceNamespaceSelector = labels.SelectorFromSet(labels.Set{api.LabelInferenceNamespace: "true"})
	}
	if c.Metrics.NamespaceSelector == nil {
		// Scrape only what counts: a tenant's pods are not even read.
		c.Metrics.NamespaceSelector = c.InferenceNamespaceSelector
	}
	if c.Metrics.Interval <= 0 {
		c.Metrics.Interval = 5 * time.Second
	}
	if c.Metrics.GPUResource == "" {
		c.Metrics.GPUResource = c.GPUResource
	}
	if c.SyncPeriod <= 0 {
		c.SyncPeriod = c.Metrics.Interval
	}
	if c.Policy.RoundPeriod <= 0 {
		c.Policy.RoundPeriod = c.SyncPeriod // rounds start on its grid (Run)
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Metrics.Clock == nil {
		c.Metrics.Clock = c.Clock
	}
	if c.Policy.Autoscale.MaxReplicas <= 0 {
		c.Policy.Autoscale.MaxReplicas = 64
	}
	if c.WatchProgressBound == 0 {
		c.WatchProgressBound = DefaultWatchProgressBound
	}
	if c.WriteWorkers <= 0 {
		c.WriteWorkers = 128
	}
	if c.StartupDeadline <= 0 {
		c.StartupDeadline = DefaultStartupDeadline
	}
	if c.MaxReclaimGrace <= 0 {
		c.MaxReclaimGrace = reclaim.DefaultMaxGrace
	}
	if c.PDBWait <= 0 {
		c.PDBWait = c.MaxReclaimGrace
	}
	if c.Heartbeat.Namespace == "" {
		c.Heartbeat.Namespace = api.SystemNamespace
	}
	if c.Heartbeat.Name == "" {
		c.Heartbeat.Name = api.HeartbeatLeaseName
	}
	if c.Heartbeat.Identity == "" {
		c.Heartbeat.Identity = DefaultLeaderElection().Identity
	}
	if c.Heartbeat.Timeout <= 0 {
		c.Heartbeat.Timeout = max(15*time.Second, 3*c.SyncPeriod)
	}
	c.Status.defaults()
}

// ReclaimBudgetSlack is what the reclaim budget allows, beyond a round and
// the grace cap, for the schedulers, the kubelet and the API server to act.
const ReclaimBudgetSlack = 5 * time.Second

// ReclaimBudget is the longest an inference replica should wait for lent
// GPUs to come back:
//
//	budget = max(sync period, scrape interval) + max reclaim grace + ReclaimBudgetSlack
//
// a round to see the replica pending or its service's requests waiting, the
// capped grace period of the best-effort pods evicted for it, and the slack.
// docs/reliability.md says what it rests on. Call it on a defaulted Config.
func (c *Config) ReclaimBudget() time.Duration {
	return max(c.SyncPeriod, c.Metrics.Interval) + c.MaxReclaimGrace + ReclaimBudgetSlack
}

// DefaultStartupDeadline is how long an inference pod may take from creation
// to its first scrape (image pull, model load) before it reads as saturated.
const DefaultStartupDeadline = 15 * time.Minute

// loadSource is the services' observed load: the vLLM metrics informer.
type loadSource interface {
	Run(ctx context.Context) error
	HasSynced() bool
	Snapshot() []vllm.PodLoad
}

// Controller observes the cluster, runs the planning round (pkg/round) and
// acts on its decision: publishes verdicts, evicts, scales, saves profiles.
type Controller struct {
	cfg    Config
	client kubernetes.Interface
	// reclaimer writes verdicts and evictions (Config.ReclaimClient).
	reclaimer kubernetes.Interface
	factory   informers.SharedInformerFactory
	nodes     corelisters.NodeLister
	pods      corelisters.PodLister
	// deployments: inference Deployments carry per-service settings, the
	// learned profile, and the autoscaler's scale subresource.
	deployments appslisters.DeploymentLister
	namespaces  corelisters.NamespaceLister
	synced      []cache.InformerSynced
	// podGroups is nil without Config.PodGroups. Its cache is not waited for:
	// the CRD may be missing, and a gang whose PodGroup is not seen goes whole.
	podGroups pglisters.PodGroupLister
	pgFactory pginformers.SharedInformerFactory
	// nativeGroups reads native PodGroups; nil when the API server does not
	// serve them (set once, by Run, before any round: startNativeGroups).
	nativeGroups schedlisters.PodGroupLister
	// dra counts GPUs published through DRA; nil when the API server does
	// not serve it.
	dra       *draGPUs
	load      loadSource
	evictor   *evict.Evictor
	broadcast record.EventBroadcaster
	recorder  record.EventRecorder
	planner   *round.Planner
	heartbeat *heartbeat
	progress  *watchProgress
	// ledger keeps each namespace's harvest and jobs, and each inference
	// service's waits; status publishes them.
	ledger *ledger.Ledger
	status *publisher
	// waits keeps the per-service wait metrics (waits.go).
	waits *serviceWaits

	// State touched only by Sync (and Run after the last Sync).
	lastSync      time.Time
	drainingSince map[string]time.Time
	seenBound     map[types.UID]bool
	// served: each service's Deployment in the last round, where it has one.
	served map[string]*appsv1.Deployment
	// reported: each service's last set of problems reported as an Event.
	reported map[string]string
	// services: the services of the last round (each with a forecast load
	// series).
	services map[string]bool
	// terminations: when each terminating pod was asked to stop, on this
	// controller's clock; observed: when a round last looked at the pods.
	terminations reclaim.Terminations
	observed     time.Time
	// gpusOf is each pod's GPUs, counted once per informer object.
	gpusOf api.PodMemo[int64]
	// noticed: the pods this controller gave a reclaim notice that stands;
	// foreign: the pods whose notice, not one it gave, it withdrew once.
	noticed, foreign map[types.UID]bool
}

// New builds a controller, or says what is wrong with cfg. Nothing runs until
// Run. Call it before campaigning for leadership: a controller that cannot
// plan must not hold the Lease.
func New(client kubernetes.Interface, cfg Config) (*Controller, error) {
	cfg.defaults()
	if err := cfg.Policy.Validate(); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	load := vllm.NewInformer(client, cfg.Metrics)
	if err := load.Err(); err != nil {
		return nil, err
	}
	return newController(client, cfg, load), nil
}

func newController(client kubernetes.Interface, cfg Config, load loadSource) *Controller {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(slimObjects(cfg.GPUResource)))
	nodes := factory.Core().V1().Nodes()
	pods := factory.Core().V1().Pods()
	deployments := factory.Apps().V1().Deployments()
	namespaces := factory.Core().V1().Namespaces()
	broadcast := record.NewBroadcaster()
	recorder := broadcast.NewRecorder(scheme.Scheme, v1.EventSource{Component: Component})
	var pgFactory pginformers.SharedInformerFactory
	var podGroups pglisters.PodGroupLister
	if cfg.PodGroups != nil {
		pgFactory = pginformers.NewSharedInformerFactory(cfg.PodGroups, 0)
		podGroups = pgFactory.Scheduling().V1alpha1().PodGroups().Lister()
	}
	reclaimClient := cfg.ReclaimClient
	if reclaimClient == nil {
		reclaimClient = client
	}
	jobs := &ledger.Ledger{Threshold: *cfg.BestEffortPriorityThreshold, GPUResource: cfg.GPUResource}
	return &Controller{
		podGroups:   podGroups,
		pgFactory:   pgFactory,
		cfg:         cfg,
		client:      client,
		reclaimer:   reclaimClient,
		factory:     factory,
		nodes:       nodes.Lister(),
		pods:        pods.Lister(),
		deployments: deployments.Lister(),
		namespaces:  namespaces.Lister(),
		synced: []cache.InformerSynced{nodes.Informer().HasSynced, pods.Informer().HasSynced, deployments.Informer().HasSynced,
			namespaces.Informer().HasSynced},
		load:      load,
		evictor:   &evict.Evictor{Client: reclaimClient, Recorder: recorder, MaxGrace: cfg.MaxReclaimGrace, PDBWait: cfg.PDBWait, Clock: cfg.Clock},
		broadcast: broadcast,
		recorder:  recorder,
		planner:   round.New(cfg.Policy),
		ledger:    jobs,
		status:    &publisher{cfg: cfg.Status, ledger: jobs},
		waits:     newServiceWaits(),
		progress:  newWatchProgress(client, nodes.Informer(), pods.Informer(), cfg.WatchProgressBound),
		heartbeat: &heartbeat{client: client, clock: cfg.Clock, ns: cfg.Heartbeat.Namespace, name: cfg.Heartbeat.Name,
			identity: cfg.Heartbeat.Identity, timeout: cfg.Heartbeat.Timeout},

		drainingSince: map[string]time.Time{},
		served:        map[string]*appsv1.Deployment{},
		reported:      map[string]string{},
		noticed:       map[types.UID]bool{},
		foreign:       map[types.UID]bool{},
	}
}

// Run starts the informers and the metrics scraper, waits until every inference
// pod has had one scrape interval to report, then plans every SyncPeriod until ctx
// ends. Planning earlier would read every service as unknown and reclaim GPUs that
// no one needs.
func (c *Controller) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	c.broadcast.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.client.CoreV1().Events("")})
	defer c.broadcast.Shutdown()

	// From here on this process owes the scheduler rounds: /readyz and the
	// round-age metric hold it to the heartbeat timeout, and on the way out
	// the heartbeat is released so nothing is lent on verdicts no one keeps.
	c.heartbeat.start()
	defer func() {
		releaseCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := c.heartbeat.release(releaseCtx); err != nil {
			logger.Error(err, "Releasing the heartbeat; the scheduler stops lending when it times out")
		}
	}()
	go wait.UntilWithContext(ctx, func(context.Context) { roundAge.Set(c.heartbeat.age().Seconds()) }, time.Second)

	defer c.startNativeGroups(ctx)()
	draSynced, stopDRA := c.startDRA(ctx)
	defer stopDRA()
	c.factory.Start(ctx.Done())
	defer c.factory.Shutdown()
	if c.pgFactory != nil {
		c.pgFactory.Start(ctx.Done())
		defer c.pgFactory.Shutdown()
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	loadDone := make(chan error, 1)
	go func() {
		err := c.load.Run(loadCtx)
		loadDone <- err
		if err != nil {
			stopLoad() // nothing to wait for: stop waiting for caches
		}
	}()

	if !cache.WaitForCacheSync(loadCtx.Done(), append(append(c.synced, draSynced...), c.load.HasSynced)...) {
		if ctx.Err() == nil {
			return fmt.Errorf("%s: metrics informer stopped: %w", Component, <-loadDone)
		}
		return fmt.Errorf("%s: informers did not sync: %w", Component, ctx.Err())
	}
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(c.cfg.Metrics.Interval + c.cfg.Metrics.Timeout):
	}
	// Before the first round, so that pods placed before a restart are not
	// placed again in their jobs' timelines (retried each round if it fails).
	restoreCtx, cancelRestore := context.WithTimeout(ctx, c.cfg.Heartbeat.Timeout)
	if err := c.status.restore(restoreCtx, c.planner); err != nil {
		logger.Error(err, "Reading back the published status; retrying each round")
	}
	cancelRestore()
	logger.Info("Planning harvest", "syncPeriod", c.cfg.SyncPeriod)
	for ctx.Err() == nil {
		if err := c.Sync(ctx); err != nil {
			logger.Error(err, "Harvest sync failed")
		}
		next := time.NewTimer(nextRound(c.cfg.SyncPeriod, time.Now()))
		select {
		case <-ctx.Done():
			next.Stop()
		case <-next.C:
		}
	}
	// Keep what was learned since the last write: a restart must not forget it.
	flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	now := c.cfg.Clock.Now()
	c.saveProfiles(flushCtx, now, c.planner.ProfilesDue(now, true))
	cancel()
	return <-loadDone
}

// nextRound is how long to wait, at now after a round, for the next: rounds
// start on multiples of the sync period (time.Truncate's grid), where the
// planner puts the times of its notices (round.Config.RoundPeriod), so that
// a noticed pod is evicted when it was told and not up to a period later.
// A round long in its writes (a load step at fleet scale evicts for seconds)
// does not put its own length between its evictions and the next round's,
// but the next starts no sooner than a fifth of a period after it, so that
// the informers and the API server get a breath between rounds; the one
// after is on the grid again.
func nextRound(period time.Duration, now time.Time) time.Duration {
	return max(now.Truncate(period).Add(period).Sub(now), period/5)
}

// Sync runs one planning round: observe, plan, act. A round gets at most the
// heartbeat timeout: past it the scheduler has stopped lending on it anyway,
// and an API call that hangs (a black-holed connection, a stuck webhook) must
// not wedge the controller after the fault clears; the next round starts over.
func (c *Controller) Sync(ctx context.Context) error {
	// The round's own thread, so that its CPU can be told from the rest of
	// the process's (planCPU).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := c.cfg.Clock.Now()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Heartbeat.Timeout)
	defer cancel()
	err := c.sync(ctx)
	took := c.cfg.Clock.Since(start)
	syncDuration.Observe(took.Seconds())
	klog.FromContext(ctx).V(2).Info("Finished round", "seconds", took.Seconds(), "failed", err != nil)
	if err != nil {
		syncErrors.Inc()
	}
	return err
}

func (c *Controller) sync(ctx context.Context) error {
	now := c.cfg.Clock.Now()
	stop := c.heartbeat.readStop(ctx) // an API call: before the plan is timed
	cpuStart, cpuOK := threadCPU()
	wallStart := time.Now()
	o, d, err := c.decide(ctx, now, stop)
	if err != nil {
		return err
	}
	// Observing and planning make no API calls: their cost is the round's
	// own, whatever the API server's latency.
	planWall := time.Since(wallStart)
	planDuration.Observe(planWall.Seconds())
	var planCPU time.Duration
	if cpuEnd, ok := threadCPU(); ok && cpuOK {
		planCPU = cpuEnd - cpuStart
		planCPUSeconds.Observe(planCPU.Seconds())
	}
	klog.FromContext(ctx).V(2).Info("Planned round", "nodes", len(o.Nodes), "services", len(d.Services),
		"reclaims", len(d.Reclaims), "planSeconds", planWall.Seconds(), "planCPUSeconds", planCPU.Seconds())
	return c.act(ctx, now, o, d)
}

// decide observes the cluster and plans the round, under the admin's stop:
// everything a round does before its API calls.
func (c *Controller) decide(ctx context.Context, now time.Time, stop api.Stop) (observed, round.Decision, error) {
	o, err := c.observe(ctx, now)
	if err != nil {
		return observed{}, round.Decision{}, err
	}
	o.stop, o.Drain = stop, stop.Drain()
	c.account(ctx, now, o)
	d := c.planner.Plan(o.Observation)
	c.observePlan(now, o, d)
	for _, s := range d.Services {
		c.report(s.Key, append(o.problems[s.Key], s.Problems...))
	}
	for key := range c.reported {
		if !c.services[key] {
			delete(c.reported, key) // a service gone; seen again, its problems are news
		}
	}
	return o, d, nil
}

// observed is one round's view of the cluster: the round's Observation and
// what acting on its decision needs.
type observed struct {
	round.Observation
	nodes []*v1.Node
	pods  []*v1.Pod
	// gpus[i] is pods[i]'s GPUs, counted once a round: reading every pod's
	// requests is most of what a round costs at fleet scale.
	gpus []int64
	// node[i] is the index in Nodes of the node pods[i] is on (-1: none
	// observed), looked up once a round rather than by name at each use
	// (onPool).
	node []int
	// problems are each service's annotation problems.
	problems map[string][]string
	// stop is the admin's kill switch (api.ReadStop).
	stop api.Stop
	// services are the round's services with their replicas and those
	// pending, in key order.
	services []ledger.ServiceNow
}

// onPool is whether pods[i] is bound to a pool node.
func (o *observed) onPool(i int) bool { return o.node[i] >= 0 && o.Nodes[o.node[i]].InPool }

// observe turns the listers and the metrics informer's snapshot into the
// round's Observation.
func (c *Controller) observe(ctx context.Context, now time.Time) (observed, error) {
	obs := round.Observation{Now: now, Published: map[string]int64{}}
	nodeList, err := c.nodes.List(labels.Everything())
	if err != nil {
		return observed{}, fmt.Errorf("listing nodes: %w", err)
	}
	podList, err := c.pods.List(labels.Everything())
	if err != nil {
		return observed{}, fmt.Errorf("listing pods: %w", err)
	}
	slices.SortFunc(nodeList, func(a, b *v1.Node) int { return strings.Compare(a.Name, b.Name) })
	// Terminations count on this controller's clock: between the round that
	// first saw them and the one before (the first round of all takes the
	// API server's word, unless later than now). Only terminating pods are
	// tracked, so only they are kept.
	terminating := map[types.UID]bool{}
	podGPUs := make([]int64, len(podList))
	countGPUs := func(p *v1.Pod) int64 { return api.PodGPUs(p, c.cfg.GPUResource) }
	for i, p := range podList {
		if p.DeletionTimestamp != nil {
			c.terminations.Saw(p, c.observed, now)
			terminating[p.UID] = true
		}
		podGPUs[i] = c.gpusOf.Get(p, countGPUs)
	}
	c.gpusOf.Next()
	c.terminations.Forget(func(uid types.UID) bool { return terminating[uid] })
	c.observed = now
	// GPUs DRA publishes are counted by device: what claims hold (other
	// than for extended requests, which podGPUs counts) is held on its node.
	draCount, err := c.dra.count(ctx, podList)
	if err != nil {
		return observed{}, fmt.Errorf("counting DRA GPUs: %w", err)
	}
	threshold := *c.cfg.BestEffortPriorityThreshold
	optedIn := c.inferenceNamespaces()

	index := make(map[string]int, len(nodeList))
	obs.Nodes = make([]harvest.Node, 0, len(nodeList))
	var largestNodeGPUs int64
	var draNodes map[string]*v1.Node
	for i, n := range nodeList {
		allocatable := n.Status.Allocatable[c.cfg.GPUResource]
		d := draCount.Nodes[n.Name]
		gpus := allocatable.Value() + d.GPUs
		hn := harvest.Node{
			Name:            n.Name,
			InPool:          c.cfg.PoolSelector.Matches(labels.Set(n.Labels)),
			Schedulable:     !n.Spec.Unschedulable && api.NodeReady(n) && d.Problem == "",
			AllocatableGPUs: gpus,
			// GPUs that claims hold (inference's, or no pod's yet), or
			// that taints keep from pods, can be lent to no one.
			ServingGPUs: d.Held,
			DRA:         d.GPUs > 0,
		}
		if d.Problem != "" {
			if draNodes == nil {
				draNodes = map[string]*v1.Node{}
			}
			draNodes[n.Name] = n
		}
		if hn.InPool {
			largestNodeGPUs = max(largestNodeGPUs, gpus)
		}
		if v, err := harvest.ReadNode(n); err == nil {
			obs.Published[n.Name] = v.HarvestableGPUs
		}
		index[n.Name] = i
		obs.Nodes = append(obs.Nodes, hn)
	}
	var bestEffort []*v1.Pod
	podNode := make([]int, len(podList))
	for pi, p := range podList {
		podNode[pi] = -1
		i, ok := index[p.Spec.NodeName]
		if ok {
			podNode[pi] = i
		} else if r := reservedAt(p, threshold); r != nil {
			// A gang member waiting at Permit holds its GPUs there: counted
			// there, though not bound there.
			p = r
			i, ok = index[p.Spec.NodeName]
		}
		if !ok || !api.HoldsResources(p) {
			continue
		}
		n := &obs.Nodes[i]
		gpus := podGPUs[pi]
		if api.IsBestEffort(p, threshold) {
			switch {
			case p.DeletionTimestamp == nil:
				n.LentGPUs += gpus
				// How soon the node's lent GPUs come back: a pod holding
				// none gives nothing back, and one waiting at Permit is not
				// bound, so it goes the moment it is deleted.
				if gpus > 0 && podNode[pi] >= 0 {
					n.LeavesIn = max(n.LeavesIn, reclaim.LeavesIn(p, c.cfg.MaxReclaimGrace))
				}
			case c.terminations.Returning(p, now, c.cfg.MaxReclaimGrace):
				n.LentGPUs += gpus
				n.ReturningGPUs += gpus
			default:
				n.StuckGPUs += gpus
			}
			bestEffort = append(bestEffort, p)
		} else {
			if !c.leaving(p, now, optedIn) {
				n.ServingGPUs += gpus
			}
			// The role label is the pod's own to write: it counts only on a
			// pod of inference's priority in a namespace the admin opted in,
			// so a tenant's pod cannot draw reclaims to another's node.
			if api.IsInference(p) && optedIn(p.Namespace) {
				n.HostsInference = true
			}
		}
	}
	c.reportDRA(ctx, draCount, draNodes)
	c.evictor.Prune(bestEffort)
	obs.BestEffort = func(map[string]bool) []reclaim.Candidate {
		out := make([]reclaim.Candidate, 0, len(bestEffort))
		for _, p := range bestEffort {
			cand := reclaim.NewCandidate(p, c.cfg.GPUResource, now, c.cfg.MaxReclaimGrace, &c.terminations)
			cand.Quorum = evict.GangQuorum(c.podGroups, c.nativeGroups, p)
			out = append(out, cand)
		}
		return out
	}
	var problems map[string][]string
	var services []ledger.ServiceNow
	var claimed map[types.NamespacedName]int64
	for _, p := range podList {
		if n := draCount.Held[p.UID]; n > 0 || len(p.Spec.ResourceClaims) > 0 {
			if claimed == nil {
				claimed = map[types.NamespacedName]int64{}
			}
			claimed[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = n
		}
	}
	obs.Services, services, problems = c.observeServices(ctx, now, largestNodeGPUs, claimed)
	return observed{Observation: obs, nodes: nodeList, pods: podList, gpus: podGPUs, node: podNode, problems: problems, services: services}, nil
}

// reservedAt is a best-effort pod that gleaner-scheduler holds at Permit (a
// gang member waiting for the rest of its group), placed on the node it is
// reserved on: a copy with that node as its own, or nil for any other pod.
// The scheduler keeps such a pod's GPUs from everyone else for up to the
// group's timeout (15 minutes at most) and says where in the pod's
// status.nominatedNodeName (Kubernetes 1.35 and later, while the pod waits
// on Permit). Counted as lent there, its GPUs are seen and reclaimed like
// any lent pod's: evicting it rejects the wait at once, and it has lost no
// work. The status is not the tenant's to write.
func reservedAt(p *v1.Pod, threshold int32) *v1.Pod {
	if p.Spec.NodeName != "" || p.Status.NominatedNodeName == "" || p.DeletionTimestamp != nil ||
		p.Spec.SchedulerName != api.SchedulerName || !api.IsBestEffort(p, threshold) ||
		p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
		return nil
	}
	r := p.DeepCopy()
	r.Spec.NodeName = p.Status.NominatedNodeName
	return r
}

// act publishes every node's verdict, then evicts and scales as the round
// decided, and saves the learned profiles that are due.
func (c *Controller) act(ctx context.Context, now time.Time, o observed, d round.Decision) error {
	nodes := o.nodes
	logger := klog.FromContext(ctx)
	for _, u := range d.Plan.Unplaced {
		logger.Info("Headroom replicas fit on no node", "service", u.Service, "replicas", u.Replicas, "gpusPerReplica", u.GPUsPerReplica)
	}
	byName := make(map[string]*v1.Node, len(nodes))
	for _, n := range nodes {
		byName[n.Name] = n
	}
	// Verdicts and evictions in the order inference needs them (writes.go).
	less, more := splitVerdicts(nodes, d)
	done, verdictErrs, evictErrs := c.reclaimOwed(ctx, byName, d)
	c.recordEvictions(now, d, done)
	stillOwed(ctx, d, done)
	errs := append(verdictErrs, evictErrs...)
	errs = append(errs, c.capTerminations(ctx, o)...)
	lessErrs := c.publishVerdicts(ctx, less, d)
	errs = append(errs, lessErrs...)
	// The round counts for the scheduler only if every verdict that lends
	// less is current (one that lends more and is not written yet only
	// keeps the node stricter than planned) and its watches deliver.
	watchErr := c.progress.check(ctx, now)
	if watchErr != nil {
		errs = append(errs, watchErr)
	}
	planning := false
	if len(verdictErrs) == 0 && len(lessErrs) == 0 && watchErr == nil {
		if err := c.heartbeat.beat(ctx); err != nil {
			errs = append(errs, err)
		} else {
			planning = true
		}
	}
	left, moreErrs := c.publishOpenings(ctx, more, d, max(time.Second, c.cfg.SyncPeriod/2))
	if left > 0 {
		logger.V(2).Info("Left verdicts that lend more for the next round", "nodes", left)
	}
	errs = append(errs, moreErrs...)
	errs = append(errs, c.notify(ctx, o.pods, d)...)
	c.ledger.Noticed(now, noticesOf(d))
	errs = append(errs, c.scale(ctx, d.Scale)...)
	// Availability only ranks nodes for the scheduler: last, so its writes
	// never delay a verdict, an eviction or a scale change.
	if err := c.publishAvailability(ctx, nodes, d.Availability); err != nil {
		errs = append(errs, err)
	}
	c.saveProfiles(ctx, now, c.planner.ProfilesDue(now, false))
	// What people read comes after everything Gleaner's promise rests on, and
	// may not hold up the next round: a slow API costs the status, not a
	// reclaim.
	publishCtx, cancelPublish := context.WithTimeout(ctx, max(time.Second, c.cfg.SyncPeriod/2))
	errs = append(errs, c.status.publish(publishCtx, now, o, d, c.planner, planning)...)
	cancelPublish()
	if len(errs) > 0 {
		return fmt.Errorf("%d errors, first: %w", len(errs), errs[0])
	}
	return nil
}

// account adds the GPU-seconds lent since the last round, per namespace, and
// records how long newly bound inference pods on pool nodes waited to be
// scheduled: in the pool's histogram and, for the services of namespaces
// opted in as inference, in their own metrics and their namespace's report.
func (c *Controller) account(ctx context.Context, now time.Time, o observed) {
	threshold := *c.cfg.BestEffortPriorityThreshold
	// A pause longer than the longest round (the heartbeat timeout) and a
	// period is not counted: the pods may have changed in between. Rounds
	// that evict for seconds at fleet scale are counted, each pod of the
	// later round for the whole gap.
	var elapsed time.Duration
	if !c.lastSync.IsZero() && now.Sub(c.lastSync) <= c.cfg.Heartbeat.Timeout+c.cfg.SyncPeriod {
		elapsed = now.Sub(c.lastSync)
	}
	c.lastSync = now
	for ns, s := range c.ledger.Observe(now, o.pods, o.gpus, o.onPool, elapsed) {
		harvestedGPUSeconds.WithLabelValues(ns).Add(s)
	}
	budget := c.cfg.ReclaimBudget()
	c.ledger.Services(now, o.services, budget)
	c.waits.services(ctx, now, o.services, budget)
	optedIn := c.inferenceNamespaces()
	// On the first round every bound pod is history: a restart must not count its wait again.
	first := c.seenBound == nil
	present := make(map[types.UID]bool, len(c.seenBound))
	for i, p := range o.pods {
		if !o.onPool(i) || !api.HoldsResources(p) || api.IsBestEffort(p, threshold) || !api.IsInference(p) {
			continue
		}
		scheduled := scheduledAt(p)
		if scheduled.IsZero() {
			continue // seen again once its PodScheduled condition is written
		}
		present[p.UID] = true
		if first || c.seenBound[p.UID] {
			continue
		}
		wait := scheduled.Sub(p.CreationTimestamp.Time)
		inferenceWait.Observe(wait.Seconds())
		if optedIn(p.Namespace) {
			service := api.ServiceName(p)
			c.waits.observe(p.Namespace+"/"+service, scheduled, wait, budget)
			c.ledger.Waited(p.Namespace, service, p.Name, scheduled, wait, budget)
		}
	}
	c.seenBound = present
	// A namespace that is gone takes its ledger and its series with it:
	// tenants' namespaces come and go, and the controller's memory must not
	// grow with them. Every namespace with a series is in the ledger.
	for _, ns := range c.ledger.Namespaces() {
		if _, err := c.namespaces.Get(ns); apierrors.IsNotFound(err) {
			c.ledger.Forget(ns)
			harvestedGPUSeconds.DeleteLabelValues(ns)
		}
	}
}

// evictedWhy is the sentence a job's timeline gives for an eviction.
func evictedWhy(node string, services []string) string {
	who := "inference"
	if len(services) > 0 {
		who = strings.Join(services, ", ")
	}
	return fmt.Sprintf("evicted: the GPUs of node %s are needed by %s", node, who)
}

// scheduledAt is when the pod's PodScheduled condition turned true.
func scheduledAt(p *v1.Pod) time.Time {
	for _, cond := range p.Status.Conditions {
		if cond.Type == v1.PodScheduled && cond.Status == v1.ConditionTrue {
			return cond.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// observePlan exports the decision's totals and how long nodes took to drain.
func (c *Controller) observePlan(now time.Time, o observed, d round.Decision) {
	nodes, plan := o.Nodes, d.Plan
	pending := make(map[string]int32, len(o.services))
	for _, s := range o.services {
		pending[s.Namespace+"/"+s.Name] = s.Pending
	}
	seen := make(map[string]bool, len(d.Services))
	for _, s := range d.Services {
		ns, name, _ := strings.Cut(s.Key, "/")
		forecastPeakLoad.WithLabelValues(ns, name).Set(s.Forecast.Peak)
		serviceLoad.WithLabelValues(ns, name).Set(s.Need.Load)
		serviceReplicas.WithLabelValues(ns, name, "current").Set(float64(s.Need.Current))
		serviceReplicas.WithLabelValues(ns, name, "needed").Set(float64(s.Need.Needed))
		serviceReplicas.WithLabelValues(ns, name, "pending").Set(float64(pending[s.Key]))
		serviceHeadroom.WithLabelValues(ns, name).Set(float64(int64(s.Need.HeadroomReplicas) * s.Need.GPUsPerReplica))
		seen[s.Key] = true
	}
	for key := range c.services {
		if !seen[key] {
			ns, name, _ := strings.Cut(key, "/")
			forecastPeakLoad.DeleteLabelValues(ns, name)
			serviceLoad.DeleteLabelValues(ns, name)
			serviceReplicas.DeleteLabelValues(ns, name, "current")
			serviceReplicas.DeleteLabelValues(ns, name, "needed")
			serviceReplicas.DeleteLabelValues(ns, name, "pending")
			serviceHeadroom.DeleteLabelValues(ns, name)
		}
	}
	c.services = seen
	var serving, lent, stuck, headroom, harvestable, idle int64
	states := map[api.HarvestState]float64{api.HarvestOpen: 0, api.HarvestDraining: 0, api.HarvestClosed: 0}
	for _, n := range nodes {
		if !n.InPool {
			continue
		}
		np := plan.Nodes[n.Name]
		serving += n.ServingGPUs
		lent += n.LentGPUs + n.StuckGPUs
		stuck += n.StuckGPUs
		headroom += np.HeadroomGPUs
		harvestable += np.HarvestableGPUs
		idle += max(0, n.AllocatableGPUs-n.ServingGPUs-n.LentGPUs-n.StuckGPUs)
		states[np.State]++
		// Reclaim latency runs while the node owes GPUs back: a node that only
		// stopped lending (JustInTime defers its evictions) costs inference nothing yet.
		since, draining := c.drainingSince[n.Name]
		switch {
		case np.ReclaimGPUs > 0 && !draining:
			c.drainingSince[n.Name] = now
		case np.ReclaimGPUs == 0 && draining:
			reclaimLatency.Observe(now.Sub(since).Seconds())
			delete(c.drainingSince, n.Name)
		}
	}
	var oldestOwed time.Duration
	for _, since := range c.drainingSince {
		oldestOwed = max(oldestOwed, now.Sub(since))
	}
	owedSeconds.Set(oldestOwed.Seconds())
	// A node deleted while it drained is no longer timed.
	if len(c.drainingSince) > 0 {
		present := make(map[string]bool, len(nodes))
		for _, n := range nodes {
			present[n.Name] = true
		}
		for name := range c.drainingSince {
			if !present[name] {
				delete(c.drainingSince, name)
			}
		}
	}
	for state, v := range map[string]int64{"serving": serving, "lent": lent, "stuck": stuck, "headroom": headroom, "harvestable": harvestable, "idle": idle} {
		gpusGauge.WithLabelValues(state).Set(float64(v))
	}
	for state, v := range states {
		nodesGauge.WithLabelValues(string(state)).Set(v)
	}
	unplaced := 0
	for _, u := range plan.Unplaced {
		unplaced += u.Replicas
	}
	unplacedHeadroom.Set(float64(unplaced))
}

// publish writes a node's verdict only when it changed. A node Gleaner never
// labelled and that stays closed is left alone.
func (c *Controller) publish(ctx context.Context, node *v1.Node, v harvest.Verdict) error {
	if _, labelled := node.Labels[api.LabelHarvest]; !labelled && v.State == api.HarvestClosed {
		return nil
	}
	if v.PublishedOn(node) {
		return nil
	}
	if _, err := c.reclaimer.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, v.MergePatch(), metav1.PatchOptions{FieldManager: Component}); err != nil {
		return fmt.Errorf("publishing verdict on node %s: %w", node.Name, err)
	}
	klog.FromContext(ctx).Info("Published harvest verdict", "node", node.Name, "state", v.State, "harvestableGPUs", v.HarvestableGPUs)
	return nil
}

// publishAvailability writes each open node's availability where it changed,
// and removes it from the nodes no longer open, within half a sync period:
// what is left is written next round (it only ranks open nodes).
func (c *Controller) publishAvailability(ctx context.Context, nodes []*v1.Node, avail []availability.Availability) error {
	want := make(map[string]*harvest.Availability, len(avail))
	for _, av := range avail {
		published := av.Published()
		want[av.Node] = &published
	}
	var changed []*v1.Node
	for _, n := range nodes {
		a := want[n.Name]
		current, has := n.Annotations[api.AnnotationAvailability]
		if (a != nil || has) && (a == nil || current != a.String()) {
			changed = append(changed, n)
		}
	}
	left, errs := c.writeWithin(ctx, max(time.Second, c.cfg.SyncPeriod/2), len(changed), func(ctx context.Context, i int) error {
		n := changed[i]
		if _, err := c.client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, want[n.Name].MergePatch(), metav1.PatchOptions{FieldManager: Component}); err != nil {
			return fmt.Errorf("publishing availability on node %s: %w", n.Name, err)
		}
		return nil
	})
	if left > 0 {
		klog.FromContext(ctx).V(2).Info("Left availability for the next round", "nodes", left)
	}
	return errors.Join(errs...)
}

// leaving reports whether an inference replica (in a namespace the admin
// opted in) is already on its way out (scaled in, a rollout's old pod):
// terminating within its grace period, granted no longer than
// --max-reclaim-grace. Its GPUs come back without an eviction and within
// the cap, as an eviction's would, so the round counts them as free rather
// than serving: room for a replica is kept there, as the simulator frees a
// scaled-in replica's GPUs at once, rather than where GPUs are lent, whose
// pods would be evicted without notice for a replica that was running a
// round before. A replica granted more, or terminating past its grace
// period (a finalizer, a node that stopped answering), still serves, and so
// does any other pod: only the admin's inference owners may free GPUs this
// way. GPUs a replica holds through DRA claims stay held until it is gone.
func (c *Controller) leaving(p *v1.Pod, now time.Time, optedIn func(string) bool) bool {
	return p.DeletionTimestamp != nil && api.IsInference(p) && optedIn(p.Namespace) &&
		!reclaim.OverGrace(p, c.cfg.MaxReclaimGrace) && c.terminations.Returning(p, now, c.cfg.MaxReclaimGrace)
}
