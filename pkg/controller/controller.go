// Package controller wires Gleaner's decision packages to the API: it reads
// nodes, pods and vLLM load, plans what may be lent (pkg/harvest), publishes the
// verdicts on Nodes and reclaims lent GPUs (pkg/reclaim) when inference needs them.
package controller

import (
	"context"
	"fmt"
	"sort"
	"time"

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
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/autoscale"
	"github.com/gleaner-dev/gleaner/pkg/demand"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
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
	// SyncPeriod is how often the plan is recomputed. Default: the scrape interval.
	SyncPeriod time.Duration
	// TargetLoad is the running+waiting requests one replica should carry, unless
	// a Deployment's gleaner.dev/target-load says otherwise. Default demand.DefaultTargetLoad.
	TargetLoad float64
	// TargetKVCache is the KV-cache usage one replica should carry for services
	// with gleaner.dev/load-metric: kv-cache. Default demand.DefaultTargetKVCache.
	TargetKVCache float64
	// Horizon is how far ahead demand is forecast (the reclaim horizon). Default 15m.
	Horizon time.Duration
	// TrendWindow is the recent history the trend is fitted to. Default 5m.
	TrendWindow time.Duration
	// Margin is the safety margin on forecast load, as a fraction. Zero means the
	// default 0.1; negative means none.
	Margin float64
	// OpenAfter is how long a node's capacity must stay spare before it is lent
	// (draining is never delayed). Zero lends at once.
	OpenAfter time.Duration
	// OpenAfterBackoff damps flapping nodes (harvest.Gate.BackoffLimit): each
	// time a node must take lent GPUs back, its open-after doubles, up to this
	// multiple of OpenAfter, and relaxes once the node stays undrained. Zero
	// means the default harvest.DefaultBackoffLimit; 1 switches damping off.
	OpenAfterBackoff int
	// ReclaimLead is how far ahead demand must need lent GPUs before they are
	// evicted (harvest.Gate.JustInTime); a node stops lending as soon as the
	// forecast over Horizon needs its GPUs. Zero means the default
	// demand.DefaultReclaimLead; a lead of at least Horizon evicts at the horizon.
	ReclaimLead time.Duration
	// Windows restrict lending to times of day. Default: continuous.
	Windows harvest.Windows
	// Autoscale tunes the autoscaler of Deployments annotated gleaner.dev/autoscale: "true".
	Autoscale autoscale.Config
	// DisableAutoscale switches the autoscaler off for every Deployment.
	DisableAutoscale bool
	// ProfileWriteInterval bounds how often a service's learned profile is
	// written to its Deployment (it is also written when an hour ends and on
	// shutdown). Default 5m.
	ProfileWriteInterval time.Duration
	// Metrics configures the vLLM metrics informer.
	Metrics vllm.Options
	Clock   clock.PassiveClock
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
	if c.Metrics.Interval <= 0 {
		c.Metrics.Interval = 5 * time.Second
	}
	if c.Metrics.GPUResource == "" {
		c.Metrics.GPUResource = c.GPUResource
	}
	if c.SyncPeriod <= 0 {
		c.SyncPeriod = c.Metrics.Interval
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Metrics.Clock == nil {
		c.Metrics.Clock = c.Clock
	}
	if c.Horizon <= 0 {
		c.Horizon = demand.DefaultHorizon
	}
	if c.OpenAfterBackoff <= 0 {
		c.OpenAfterBackoff = harvest.DefaultBackoffLimit
	}
	if c.ReclaimLead <= 0 {
		c.ReclaimLead = demand.DefaultReclaimLead
	}
	if c.ProfileWriteInterval <= 0 {
		c.ProfileWriteInterval = 5 * time.Minute
	}
	if c.Autoscale.MaxReplicas <= 0 {
		c.Autoscale.MaxReplicas = 64
	}
}

func (c *Config) margin() float64 {
	switch {
	case c.Margin == 0:
		return 0.1
	case c.Margin < 0:
		return 0
	default:
		return c.Margin
	}
}

// Controller plans and publishes harvest verdicts and reclaims lent GPUs.
type Controller struct {
	cfg     Config
	client  kubernetes.Interface
	factory informers.SharedInformerFactory
	nodes   corelisters.NodeLister
	pods    corelisters.PodLister
	// deployments: inference Deployments carry per-service settings, the
	// learned profile, and the autoscaler's scale subresource.
	deployments appslisters.DeploymentLister
	synced      []cache.InformerSynced
	load        *vllm.Informer
	evictor     *reclaim.Evictor
	broadcast   record.EventBroadcaster
	recorder    record.EventRecorder

	// Accounting state, touched only by Sync.
	lastSync      time.Time
	drainingSince map[string]time.Time
	seenBound     map[types.UID]bool
	// Demand and planning state, touched only by Sync.
	services map[string]*service
	gate     harvest.Gate
}

// New builds a controller. Nothing runs until Run.
func New(client kubernetes.Interface, cfg Config) *Controller {
	cfg.defaults()
	factory := informers.NewSharedInformerFactory(client, 0)
	nodes := factory.Core().V1().Nodes()
	pods := factory.Core().V1().Pods()
	deployments := factory.Apps().V1().Deployments()
	broadcast := record.NewBroadcaster()
	recorder := broadcast.NewRecorder(scheme.Scheme, v1.EventSource{Component: Component})
	return &Controller{
		cfg:         cfg,
		client:      client,
		factory:     factory,
		nodes:       nodes.Lister(),
		pods:        pods.Lister(),
		deployments: deployments.Lister(),
		synced:      []cache.InformerSynced{nodes.Informer().HasSynced, pods.Informer().HasSynced, deployments.Informer().HasSynced},
		load:        vllm.NewInformer(client, cfg.Metrics),
		evictor:     &reclaim.Evictor{Client: client, Recorder: recorder},
		broadcast:   broadcast,
		recorder:    recorder,

		drainingSince: map[string]time.Time{},
		services:      map[string]*service{},
		gate:          harvest.Gate{OpenAfter: cfg.OpenAfter, BackoffLimit: cfg.OpenAfterBackoff, Windows: cfg.Windows},
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

	c.factory.Start(ctx.Done())
	defer c.factory.Shutdown()
	loadDone := make(chan error, 1)
	go func() { loadDone <- c.load.Run(ctx) }()

	if !cache.WaitForCacheSync(ctx.Done(), append(c.synced, c.load.HasSynced)...) {
		return fmt.Errorf("%s: informers did not sync: %w", Component, ctx.Err())
	}
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(c.cfg.Metrics.Interval + c.cfg.Metrics.Timeout):
	}
	logger.Info("Planning harvest", "syncPeriod", c.cfg.SyncPeriod)
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := c.Sync(ctx); err != nil {
			logger.Error(err, "Harvest sync failed")
		}
	}, c.cfg.SyncPeriod)
	// Keep what was learned since the last write: a restart must not forget it.
	flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	c.saveProfiles(flushCtx, c.cfg.Clock.Now(), true)
	cancel()
	return <-loadDone
}

// Sync runs one planning round: observe, plan, publish, reclaim.
func (c *Controller) Sync(ctx context.Context) error {
	start := c.cfg.Clock.Now()
	err := c.sync(ctx)
	syncDuration.Observe(c.cfg.Clock.Since(start).Seconds())
	if err != nil {
		syncErrors.Inc()
	}
	return err
}

func (c *Controller) sync(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	nodeList, err := c.nodes.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	podList, err := c.pods.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	threshold := *c.cfg.BestEffortPriorityThreshold
	now := c.cfg.Clock.Now()

	byNode := map[string]*harvest.Node{}
	var planned []harvest.Node
	published := map[string]int64{}
	var largestNodeGPUs int64
	for _, n := range nodeList {
		gpus := n.Status.Allocatable[c.cfg.GPUResource]
		byNode[n.Name] = &harvest.Node{
			Name:            n.Name,
			InPool:          c.cfg.PoolSelector.Matches(labels.Set(n.Labels)),
			Schedulable:     !n.Spec.Unschedulable && nodeReady(n),
			AllocatableGPUs: gpus.Value(),
		}
		if byNode[n.Name].InPool {
			largestNodeGPUs = max(largestNodeGPUs, gpus.Value())
		}
		if v, err := harvest.ReadNode(n); err == nil {
			published[n.Name] = v.HarvestableGPUs
		}
	}
	var candidates []reclaim.Candidate
	for _, p := range podList {
		n, ok := byNode[p.Spec.NodeName]
		if !ok || !api.HoldsResources(p) {
			continue
		}
		gpus := api.PodGPUs(p, c.cfg.GPUResource)
		switch {
		case api.IsBestEffort(p, threshold):
			n.LentGPUs += gpus
			candidates = append(candidates, reclaim.NewCandidate(p, c.cfg.GPUResource, now))
		default:
			n.ReservedGPUs += gpus
		}
		if api.IsInference(p) {
			n.HostsInference = true
		}
	}
	for _, n := range byNode {
		planned = append(planned, *n)
	}
	c.account(now, podList, byNode)
	sort.Slice(planned, func(i, j int) bool { return planned[i].Name < planned[j].Name })

	rounds := c.assessServices(ctx, now, largestNodeGPUs)
	var headroom []harvest.Headroom
	for _, r := range rounds {
		need := r.need
		if need.Spare > 0 {
			logger.V(2).Info("Keeping headroom", "service", need.Service, "replicas", need.Spare, "gpusPerReplica", need.GPUsPerReplica, "reason", need.Reason)
			headroom = append(headroom, harvest.Headroom{Service: need.Service, GPUsPerReplica: need.GPUsPerReplica, Replicas: need.Spare})
		}
	}
	plan := c.gate.Apply(now, planned, harvest.MakePlan(planned, headroom), published)
	if c.cfg.ReclaimLead < c.cfg.Horizon {
		var soon []harvest.Headroom
		for _, r := range rounds {
			if r.soon.Spare > 0 {
				soon = append(soon, harvest.Headroom{Service: r.soon.Service, GPUsPerReplica: r.soon.GPUsPerReplica, Replicas: r.soon.Spare})
			}
		}
		plan = c.gate.JustInTime(now, plan, harvest.MakePlan(planned, soon))
	}
	for _, u := range plan.Unplaced {
		logger.Info("Headroom replica fits on no node", "service", u.Service, "gpus", u.GPUsPerReplica)
	}
	c.observePlan(now, planned, plan)

	var errs []error
	for _, n := range nodeList {
		np := plan.Nodes[n.Name]
		if err := c.publish(ctx, n, np.Verdict); err != nil {
			errs = append(errs, err)
		}
		if np.ReclaimGPUs > 0 {
			why := fmt.Sprintf("node %s must return %d GPUs (harvestable %d, lent %d, headroom %d)", n.Name, np.ReclaimGPUs, np.HarvestableGPUs, byNode[n.Name].LentGPUs, np.HeadroomGPUs)
			evicted, owed, evictErrs := c.evictor.ReclaimNode(ctx, n.Name, candidates, np.ReclaimGPUs, why)
			// Gang members elsewhere are on their way out too: no other node may pick them again.
			gone := map[types.UID]bool{}
			for _, v := range evicted {
				gone[v.Pod.UID] = true
			}
			for i, cand := range candidates {
				if gone[cand.Pod.UID] && cand.Pod.DeletionTimestamp == nil {
					p := cand.Pod.DeepCopy()
					ts := metav1.NewTime(now)
					p.DeletionTimestamp = &ts
					candidates[i].Pod = p
				}
			}
			for _, v := range evicted {
				logger.Info("Reclaimed GPUs", "pod", klog.KObj(v.Pod), "node", n.Name, "why", why)
				evictionsTotal.WithLabelValues("evicted").Inc()
				lostWorkGPUSeconds.Add(v.LostWork)
			}
			for _, err := range evictErrs {
				if apierrors.IsTooManyRequests(err) {
					evictionsTotal.WithLabelValues("blocked").Inc()
				} else {
					evictionsTotal.WithLabelValues("error").Inc()
				}
			}
			if owed > 0 {
				logger.Info("Could not reclaim all GPUs owed", "node", n.Name, "owedGPUs", owed)
			}
			errs = append(errs, evictErrs...)
		}
	}
	if !c.cfg.DisableAutoscale {
		errs = append(errs, c.autoscaleServices(ctx, now, rounds)...)
	}
	c.saveProfiles(ctx, now, false)
	if len(errs) > 0 {
		return fmt.Errorf("%d errors, first: %w", len(errs), errs[0])
	}
	return nil
}

// account adds the GPU-seconds lent since the last round, per namespace, and
// records how long newly bound inference pods on pool nodes waited to be scheduled.
func (c *Controller) account(now time.Time, pods []*v1.Pod, nodes map[string]*harvest.Node) {
	threshold := *c.cfg.BestEffortPriorityThreshold
	// A pause longer than two periods (e.g. a new leader) is not counted: the
	// pods may have changed in between.
	var elapsed float64
	if !c.lastSync.IsZero() && now.Sub(c.lastSync) <= 2*c.cfg.SyncPeriod {
		elapsed = now.Sub(c.lastSync).Seconds()
	}
	c.lastSync = now
	// On the first round every bound pod is history: a restart must not count its wait again.
	first := c.seenBound == nil
	present := make(map[types.UID]bool, len(c.seenBound))
	for _, p := range pods {
		n, ok := nodes[p.Spec.NodeName]
		if !ok || !n.InPool || !api.HoldsResources(p) {
			continue
		}
		switch {
		case api.IsBestEffort(p, threshold):
			if elapsed > 0 {
				harvestedGPUSeconds.WithLabelValues(p.Namespace).Add(float64(api.PodGPUs(p, c.cfg.GPUResource)) * elapsed)
			}
		case api.IsInference(p):
			scheduled := scheduledAt(p)
			if scheduled.IsZero() {
				continue // seen again once its PodScheduled condition is written
			}
			present[p.UID] = true
			if !first && !c.seenBound[p.UID] {
				inferenceWait.Observe(scheduled.Sub(p.CreationTimestamp.Time).Seconds())
			}
		}
	}
	c.seenBound = present
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

// observePlan exports the plan's totals and how long nodes took to drain.
func (c *Controller) observePlan(now time.Time, nodes []harvest.Node, plan harvest.Plan) {
	var serving, lent, headroom, harvestable, idle int64
	states := map[api.HarvestState]float64{api.HarvestOpen: 0, api.HarvestDraining: 0, api.HarvestClosed: 0}
	for _, n := range nodes {
		if !n.InPool {
			continue
		}
		np := plan.Nodes[n.Name]
		serving += n.ReservedGPUs
		lent += n.LentGPUs
		headroom += np.HeadroomGPUs
		harvestable += np.HarvestableGPUs
		idle += max(0, n.AllocatableGPUs-n.ReservedGPUs-n.LentGPUs)
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
	for state, v := range map[string]int64{"serving": serving, "lent": lent, "headroom": headroom, "harvestable": harvestable, "idle": idle} {
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
	if _, err := c.client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, v.MergePatch(), metav1.PatchOptions{FieldManager: Component}); err != nil {
		return fmt.Errorf("publishing verdict on node %s: %w", node.Name, err)
	}
	klog.FromContext(ctx).Info("Published harvest verdict", "node", node.Name, "state", v.State, "harvestableGPUs", v.HarvestableGPUs)
	return nil
}

func nodeReady(n *v1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}
