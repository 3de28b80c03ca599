// Package gpuharvest is the scheduler plugin that places best-effort pods only on
// GPUs the gleaner-controller has declared harvestable, and packs them so that
// reclaiming GPUs for inference evicts as few of them as possible.
package gpuharvest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/clock"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
	"github.com/gleaner-dev/gleaner/pkg/plugins/kubecompat"
	"github.com/gleaner-dev/gleaner/pkg/plugins/pluginargs"
	"github.com/gleaner-dev/gleaner/pkg/plugins/pluginmetrics"
)

// Name of the plugin in the scheduler configuration.
const Name = "GPUHarvest"

const stateKey fwk.StateKey = Name

// Failure reasons, phrased for the scheduler's per-node aggregation.
const (
	ErrReasonNotOpen         = "node(s) were not open for harvest"
	ErrReasonBadVerdict      = "node(s) had an unreadable harvest verdict"
	ErrReasonNotEnoughGPUs   = "node(s) didn't have enough harvestable GPUs"
	ErrReasonHeartbeatStale  = "gleaner-controller heartbeat is stale, so no GPUs are lent"
	ErrReasonLendingStopped  = "the cluster admin stopped all lending"
	ErrReasonNewNode         = "node(s) joined after gleaner-controller's last planning round"
	ErrReasonResourceClaims  = "a best-effort pod may take GPUs only by its extended request (which DRA may back through a DeviceClass's extendedResourceName): Gleaner cannot count what the pod's own ResourceClaims would hold; remove spec.resourceClaims"
	priorityFragmentKey      = "v1.Pod.Spec.Priority"
	bestEffortGPUFragmentKey = "gleaner.dev/BestEffortGPUs()"
	// The declared checkpoint interval changes the score.
	checkpointIntervalFragmentKey = "gleaner.dev/CheckpointInterval()"
)

// GPUHarvest implements PreFilter, Filter, PreScore and Score for best-effort pods.
// Pods that are not best-effort are skipped at PreFilter and PreScore.
type GPUHarvest struct {
	handle    fwk.Handle
	args      Args
	gpu       v1.ResourceName
	threshold int32
	clock     clock.PassiveClock
	heartbeat *heartbeat
	rejected  rejectionCounters
	nodes     nodeCache
}

var (
	_ fwk.PreFilterPlugin   = &GPUHarvest{}
	_ fwk.FilterPlugin      = &GPUHarvest{}
	_ fwk.PreScorePlugin    = &GPUHarvest{}
	_ fwk.ScorePlugin       = &GPUHarvest{}
	_ fwk.EnqueueExtensions = &GPUHarvest{}
	_ fwk.SignPlugin        = &GPUHarvest{}
)

// nodeCache keeps, for each node, what Filter and Score read of it: the
// parsed verdict beside the Node object it was read from, and the GPUs lent
// there beside the NodeInfo generation they were counted in, because both
// run for thousands of nodes per pod. A Node object is immutable in the
// scheduler's cache, so a pointer match means the verdict is current; every
// change to a NodeInfo takes a new generation, so a generation match means
// the count is.
//
// It also keeps when each node arrived, counted in heartbeat renewals: a
// node's verdict is trusted only once trustAfterRenewals renewals were seen
// after the node appeared. The round that ended in the first of them may have
// listed the nodes before this one joined, so a node deleted and re-added with
// its old labels, or registered with a forged verdict, lends nothing until a
// round that saw it has published its verdict.
type nodeCache struct {
	// fast finds a node's slot by the Node object the scheduler holds, as
	// of the last promotion: a map no one writes to, keyed by a pointer, as
	// Filter and Score look up nearly every node here and the lookup is
	// most of the plugin's cost (bench/README.md compares the others tried).
	fast atomic.Pointer[map[*v1.Node]*nodeSlot]

	mu sync.Mutex
	// all is the slot of every node whose arrival was recorded, by name.
	all map[string]*nodeSlot
	// misses counts the lookups fast could not answer since the last
	// promotion: once they are as many as the nodes, fast is rebuilt from
	// all, so rebuilding costs no more than the lookups it saves.
	misses int
}

const trustAfterRenewals = 2

// nodeSlot is one node's place in the cache, from its arrival to its
// deletion. A node deleted and created again under its name is another node
// (another UID), with a slot and an arrival of its own.
type nodeSlot struct {
	uid     types.UID
	arrived uint64 // heartbeat renewals seen when the node appeared
	// gone is set when the node is deleted or replaced under its name: fast
	// may hold the slot until the next promotion, and must not serve it.
	gone atomic.Bool
	seen atomic.Pointer[nodeSeen]
	// object is the Node object the slot was last looked up with, which
	// the next promotion keys it by in fast (under mu).
	object *v1.Node
}

// nodeSeen is what was read of one Node object and one NodeInfo generation.
// It is never changed once published: a change publishes a new one.
type nodeSeen struct {
	node       *v1.Node
	verdict    harvest.Verdict
	err        error
	generation int64
	gpus       nodeGPUs // in that generation
}

// nodeGPUs are a node's GPUs as its NodeInfo counts them.
type nodeGPUs struct {
	allocatable int64
	requested   int64 // by every pod on the node, including assumed ones
	lent        int64 // requested by best-effort pods
}

// forget drops a deleted node's slot, so a cluster whose nodes come and go
// does not grow the cache. The deletion of a node already replaced under its
// name (its successor arrived first) leaves the successor's slot alone.
func (c *nodeCache) forget(obj interface{}) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	node, ok := obj.(*v1.Node)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if slot, ok := c.all[node.Name]; ok && slot.uid == node.UID {
		slot.gone.Store(true)
		delete(c.all, node.Name)
	}
}

// arrive records that a node appeared when renewals renewals had been seen.
// The node informer calls it on every add and update: a relist reports a
// node deleted and created again under its name as an update, and the new
// UID makes it a new arrival.
func (c *nodeCache) arrive(node *v1.Node, renewals uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.all == nil {
		c.all = map[string]*nodeSlot{}
	}
	if old, ok := c.all[node.Name]; ok {
		if old.uid == node.UID {
			return
		}
		old.gone.Store(true)
	}
	c.all[node.Name] = &nodeSlot{uid: node.UID, arrived: renewals}
}

// slot is the node's slot. A node whose arrival is not recorded (this
// plugin's handler has not seen it yet, or it was deleted, or it is another
// node under a known name) gets a slot of its own that arrives at renewals
// and is not kept: nothing Filter reads can make the cache trust a node.
func (c *nodeCache) slot(node *v1.Node, renewals uint64) *nodeSlot {
	if fast := c.fast.Load(); fast != nil {
		if slot, ok := (*fast)[node]; ok && !slot.gone.Load() {
			return slot
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	slot, ok := c.all[node.Name]
	if !ok || slot.uid != node.UID {
		return &nodeSlot{uid: node.UID, arrived: renewals}
	}
	slot.object = node
	if c.misses++; c.misses >= len(c.all) {
		fast := make(map[*v1.Node]*nodeSlot, len(c.all))
		for _, s := range c.all {
			if s.object != nil {
				fast[s.object] = s
			}
		}
		c.fast.Store(&fast)
		c.misses = 0
	}
	return slot
}

// newlyTrusted reports whether some node became trusted at exactly renewals.
func (c *nodeCache) newlyTrusted(renewals uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, slot := range c.all {
		if slot.arrived+trustAfterRenewals == renewals {
			return true
		}
	}
	return false
}

// read returns what Filter and Score need of the node: its verdict, its GPUs
// (counted by count when the NodeInfo's generation is new), and when it
// arrived, in heartbeat renewals (see slot for a node not known yet).
func (c *nodeCache) read(nodeInfo fwk.NodeInfo, renewals uint64, count func(fwk.NodeInfo) nodeGPUs) (*nodeSeen, uint64) {
	node, generation := nodeInfo.Node(), nodeInfo.GetGeneration()
	slot := c.slot(node, renewals)
	seen := slot.seen.Load()
	if seen != nil && seen.node == node && seen.generation == generation {
		return seen, slot.arrived
	}
	next := &nodeSeen{node: node, generation: generation, gpus: count(nodeInfo)}
	if seen != nil && seen.node == node {
		next.verdict, next.err = seen.verdict, seen.err
	} else {
		next.verdict, next.err = nodeVerdict(node)
	}
	slot.seen.Store(next)
	return next, slot.arrived
}

// nodeVerdict is the verdict the scheduler acts on: the published one, except
// that a node that is not Ready counts as closed at once, before the
// controller's next round says so (its GPUs' state is unknown).
func nodeVerdict(node *v1.Node) (harvest.Verdict, error) {
	v, err := harvest.ReadNode(node)
	if err == nil && !api.NodeReady(node) {
		v = harvest.Verdict{State: api.HarvestClosed}
	}
	return v, err
}

// rejectionCounters are resolved once, after registration (an unregistered
// vector hands out no-op counters): Filter runs for every node of every pod.
type rejectionCounters struct {
	heartbeat, stopped, notOpen, badVerdict, notEnough, newNode, claims metrics.CounterMetric
}

func newRejectionCounters() rejectionCounters {
	c := pluginmetrics.FilterRejections
	return rejectionCounters{
		heartbeat:  c.WithLabelValues(pluginmetrics.ReasonHeartbeatStale),
		stopped:    c.WithLabelValues(pluginmetrics.ReasonLendingStopped),
		notOpen:    c.WithLabelValues(pluginmetrics.ReasonNotOpen),
		badVerdict: c.WithLabelValues(pluginmetrics.ReasonBadVerdict),
		notEnough:  c.WithLabelValues(pluginmetrics.ReasonNotEnoughGPUs),
		newNode:    c.WithLabelValues(pluginmetrics.ReasonNewNode),
		claims:     c.WithLabelValues(pluginmetrics.ReasonResourceClaims),
	}
}

// New builds the plugin from its args.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, err := pluginargs.Load[Args](Name, obj)
	if err != nil {
		return nil, err
	}
	pl := &GPUHarvest{
		handle:    h,
		args:      args,
		gpu:       args.Resource(),
		threshold: args.Threshold(),
		clock:     clock.RealClock{},
		rejected:  newRejectionCounters(),
	}
	var timeout time.Duration
	if args.HeartbeatTimeoutSeconds != nil {
		timeout = time.Duration(*args.HeartbeatTimeoutSeconds) * time.Second
	}
	pl.heartbeat, err = startHeartbeat(ctx, h.ClientSet(), args.ControllerLease, timeout, pl.clock, pl.onRenew)
	if err != nil {
		return nil, fmt.Errorf("%s: watching controller lease: %w", Name, err)
	}
	if _, err := h.SharedInformerFactory().Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    pl.recordArrival,
		UpdateFunc: func(_, obj interface{}) { pl.recordArrival(obj) },
		DeleteFunc: pl.nodes.forget,
	}); err != nil {
		return nil, fmt.Errorf("%s: watching nodes: %w", Name, err)
	}
	return pl, nil
}

// recordArrival hands a node the informer added or updated to the node cache,
// with the heartbeat renewals seen so far.
func (pl *GPUHarvest) recordArrival(obj interface{}) {
	if node, ok := obj.(*v1.Node); ok {
		pl.nodes.arrive(node, pl.heartbeat.renewalCount())
	}
}

// Name returns the plugin name.
func (pl *GPUHarvest) Name() string { return Name }

type preFilterState struct {
	gpus     int64
	renewals uint64 // heartbeat renewals seen when the cycle began
	// interval is the pod's declared checkpoint interval (0: none).
	interval time.Duration
}

func (pl *GPUHarvest) newState(pod *v1.Pod) preFilterState {
	interval, _ := api.CheckpointInterval(pod)
	return preFilterState{gpus: api.PodGPUs(pod, pl.gpu), renewals: pl.heartbeat.renewalCount(), interval: interval}
}

func (s *preFilterState) Clone() fwk.StateData { return s }

// PreFilter skips pods that are not best-effort and rejects every best-effort pod
// while the controller's heartbeat is stale: a stale planner means every node is closed.
func (pl *GPUHarvest) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if !api.IsBestEffort(pod, pl.threshold) {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	if len(pod.Spec.ResourceClaims) > 0 {
		// Lent GPUs are counted from requests, here and in the controller:
		// devices a claim of the pod's own would hold are not, so it could
		// take more than the verdict lends.
		pl.rejected.claims.Inc()
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, ErrReasonResourceClaims)
	}
	if err := pl.heartbeat.check(pl.clock.Now()); err != nil {
		pluginmetrics.HeartbeatFresh.Set(0)
		if stopped := (stoppedError{}); errors.As(err, &stopped) {
			klog.FromContext(ctx).V(4).Info("Lending stopped by the admin, nothing is lent", "pod", klog.KObj(pod), "reason", err)
			pl.rejected.stopped.Inc()
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, ErrReasonLendingStopped+": "+err.Error())
		}
		klog.FromContext(ctx).V(4).Info("Heartbeat stale, nothing is lent", "pod", klog.KObj(pod), "reason", err)
		pl.rejected.heartbeat.Inc()
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, ErrReasonHeartbeatStale+": "+err.Error())
	}
	pluginmetrics.HeartbeatFresh.Set(1)
	st := pl.newState(pod)
	state.Write(stateKey, &st)
	return nil, nil
}

// PreFilterExtensions is not needed: the per-node state is read from NodeInfo.
func (pl *GPUHarvest) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// cycle is what PreFilter worked out for this pod's cycle.
func (pl *GPUHarvest) cycle(state fwk.CycleState, pod *v1.Pod) preFilterState {
	if d, err := state.Read(stateKey); err == nil {
		if s, ok := d.(*preFilterState); ok {
			return *s
		}
	}
	return pl.newState(pod)
}

// Filter admits a best-effort pod on a node only if the node is open and its
// harvestable GPUs, minus those already lent there, cover the pod's request.
func (pl *GPUHarvest) Filter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	node := nodeInfo.Node()
	cycle := pl.cycle(state, pod)
	seen, arrived := pl.nodes.read(nodeInfo, cycle.renewals, pl.countGPUs)
	if err := seen.err; err != nil {
		klog.FromContext(ctx).V(2).Info("Treating node as closed", "node", klog.KObj(node), "err", err)
		pl.rejected.badVerdict.Inc()
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, ErrReasonBadVerdict)
	}
	fit := seen.verdict.Fit(pl.gpusOn(state, nodeInfo, seen).lent, cycle.gpus)
	if fit == harvest.Fits && cycle.renewals < arrived+trustAfterRenewals {
		pl.rejected.newNode.Inc()
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, ErrReasonNewNode)
	}
	switch fit {
	case harvest.NotOpen:
		pl.rejected.notOpen.Inc()
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, ErrReasonNotOpen)
	case harvest.NotEnoughGPUs:
		pl.rejected.notEnough.Inc()
		return fwk.NewStatus(fwk.Unschedulable, ErrReasonNotEnoughGPUs)
	}
	return nil
}

// countGPUs counts the node's GPUs, and those held there by best-effort pods,
// including pods the scheduler has just assumed there, so a burst of
// placements cannot overcommit before the controller's next verdict. The node
// cache keeps the counts for the NodeInfo's generation: between two pods only
// the node the first went to changes.
func (pl *GPUHarvest) countGPUs(nodeInfo fwk.NodeInfo) nodeGPUs {
	c := nodeGPUs{
		allocatable: nodeInfo.GetAllocatable().GetScalarResources()[pl.gpu],
		requested:   nodeInfo.GetRequested().GetScalarResources()[pl.gpu],
	}
	for _, pi := range nodeInfo.GetPods() {
		if api.IsBestEffort(pi.GetPod(), pl.threshold) {
			// CalculateResource is computed once per pod and cached by the framework.
			c.lent += pi.CalculateResource().Resource.GetScalarResources()[pl.gpu]
		}
	}
	return c
}

// gpusOn is the node's GPUs in this cycle. A pod group's scheduling cycle
// assumes its members in the snapshot and puts the NodeInfo's generation
// back, so there the counts kept for the generation may be stale: they are
// counted afresh.
func (pl *GPUHarvest) gpusOn(state fwk.CycleState, nodeInfo fwk.NodeInfo, seen *nodeSeen) nodeGPUs {
	if kubecompat.PodGroupCycle(state) {
		return pl.countGPUs(nodeInfo)
	}
	return seen.gpus
}

// PreScore skips pods that are not best-effort.
func (pl *GPUHarvest) PreScore(_ context.Context, _ fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	if !api.IsBestEffort(pod, pl.threshold) {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// Score is harvest.PlacementScore, weighted by the args' scoreWeights (the
// simulator scores with the same function). Serving GPUs are those requested
// by pods that are not best-effort. For a pod that declares its checkpoint
// interval, harvest.AvailabilityScore joins in with its own weight (0 on a
// node whose availability is unknown).
func (pl *GPUHarvest) Score(_ context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	cycle := pl.cycle(state, pod)
	seen, _ := pl.nodes.read(nodeInfo, cycle.renewals, pl.countGPUs)
	if seen.err != nil || seen.verdict.HarvestableGPUs <= 0 {
		return 0, nil
	}
	gpus := pl.gpusOn(state, nodeInfo, seen)
	n := harvest.PlacementNode{
		HarvestableGPUs: seen.verdict.HarvestableGPUs,
		LentGPUs:        gpus.lent,
		AllocatableGPUs: gpus.allocatable,
		ServingGPUs:     max(gpus.requested-gpus.lent, 0),
	}
	wp, wi := int64(*pl.args.ScoreWeights.Packing), int64(*pl.args.ScoreWeights.IdleWindow)
	score := harvest.PlacementScore(n, cycle.gpus, wp, wi, fwk.MaxNodeScore)
	if wa := int64(*pl.args.ScoreWeights.Availability); cycle.interval > 0 && wa > 0 {
		var avail int64
		if a, ok := harvest.ReadAvailability(nodeInfo.Node()); ok {
			avail = harvest.AvailabilityScore(a, cycle.interval, fwk.MaxNodeScore)
		}
		score = harvest.WithAvailability(score, wp+wi, avail, wa)
	}
	return score, nil
}

// ScoreExtensions: scores are already within [0, MaxNodeScore].
func (pl *GPUHarvest) ScoreExtensions() fwk.ScoreExtensions { return nil }

// SignPod lets the scheduler batch pods with the same signature: the plugin's
// decisions depend only on the pod's priority, its resource requests and its
// declared checkpoint interval.
func (pl *GPUHarvest) SignPod(_ context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	var prio int32
	if pod.Spec.Priority != nil {
		prio = *pod.Spec.Priority
	}
	interval, _ := api.CheckpointInterval(pod)
	return []fwk.SignFragment{
		{Key: priorityFragmentKey, Value: prio},
		{Key: bestEffortGPUFragmentKey, Value: api.PodGPUs(pod, pl.gpu)},
		{Key: checkpointIntervalFragmentKey, Value: interval},
	}, nil
}

// EventsToRegister: a rejected best-effort pod can fit after a node opens (or
// turns Ready) or gains harvestable GPUs, or after a lent pod leaves. A stale
// heartbeat turning fresh, and a new node becoming trusted, are not cluster
// events; onRenew re-activates pods for them.
func (pl *GPUHarvest) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeLabel | fwk.UpdateNodeAnnotation | fwk.UpdateNodeCondition}, QueueingHintFn: pl.isSchedulableAfterNodeChange},
		{Event: fwk.ClusterEvent{Resource: kubecompat.AssignedPod, ActionType: fwk.Delete}, QueueingHintFn: pl.isSchedulableAfterPodDeletion},
	}, nil
}

func (pl *GPUHarvest) isSchedulableAfterNodeChange(logger klog.Logger, pod *v1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	if !api.IsBestEffort(pod, pl.threshold) {
		return fwk.QueueSkip, nil
	}
	newNode, ok := newObj.(*v1.Node)
	if !ok {
		return fwk.Queue, fmt.Errorf("expected *v1.Node, got %T", newObj)
	}
	cur, err := nodeVerdict(newNode)
	if err != nil || cur.State != api.HarvestOpen || cur.HarvestableGPUs < api.PodGPUs(pod, pl.gpu) {
		return fwk.QueueSkip, nil
	}
	if oldNode, ok := oldObj.(*v1.Node); ok {
		if prev, err := nodeVerdict(oldNode); err == nil && prev.State == api.HarvestOpen && prev.HarvestableGPUs >= cur.HarvestableGPUs {
			return fwk.QueueSkip, nil
		}
	}
	logger.V(5).Info("Node opened or gained harvestable GPUs", "pod", klog.KObj(pod), "node", klog.KObj(newNode))
	return fwk.Queue, nil
}

func (pl *GPUHarvest) isSchedulableAfterPodDeletion(_ klog.Logger, pod *v1.Pod, oldObj, _ interface{}) (fwk.QueueingHint, error) {
	if !api.IsBestEffort(pod, pl.threshold) {
		return fwk.QueueSkip, nil
	}
	gone, ok := oldObj.(*v1.Pod)
	if !ok {
		return fwk.Queue, nil
	}
	if api.IsBestEffort(gone, pl.threshold) && api.PodGPUs(gone, pl.gpu) > 0 {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

// onRenew re-activates pending best-effort pods when a renewal made the
// heartbeat fresh again or made a new node's verdict trusted: neither is a
// cluster event the scheduler requeues pods for, and its periodic flush of
// unschedulable pods comes only every few minutes.
func (pl *GPUHarvest) onRenew(renewals uint64, becameFresh bool) {
	if becameFresh || pl.nodes.newlyTrusted(renewals) {
		pl.activatePending()
	}
}

// activatePending moves every pending best-effort pod back to the active queue.
func (pl *GPUHarvest) activatePending() {
	pods, err := pl.handle.SharedInformerFactory().Core().V1().Pods().Lister().List(labels.Everything())
	if err != nil {
		return
	}
	pending := map[string]*v1.Pod{}
	for _, p := range pods {
		if p.Spec.NodeName == "" && p.DeletionTimestamp == nil && api.IsBestEffort(p, pl.threshold) {
			pending[p.Namespace+"/"+p.Name] = p
		}
	}
	if len(pending) > 0 {
		pl.handle.Activate(klog.Background(), pending)
	}
}
