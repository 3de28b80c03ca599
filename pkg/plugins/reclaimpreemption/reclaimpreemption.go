// Package reclaimpreemption is the PostFilter plugin that lets an inference pod
// that does not fit take GPUs back from best-effort pods. It runs the upstream
// preemption Evaluator with its own implementation of the Evaluator's Interface
// (DefaultPreemption's, with Gleaner's policy): victims are best-effort pods,
// least lost work first, gangs whole; best-effort pods never preempt; and no
// one is evicted while GPUs already on their way back would do.
package reclaimpreemption

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/cache"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
	plfeature "k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"
	"k8s.io/utils/clock"
	pgclientset "sigs.k8s.io/scheduler-plugins/pkg/generated/clientset/versioned"
	pginformers "sigs.k8s.io/scheduler-plugins/pkg/generated/informers/externalversions"
	pglisters "sigs.k8s.io/scheduler-plugins/pkg/generated/listers/scheduling/v1alpha1"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/plugins/gang"
	"github.com/gleaner-dev/gleaner/pkg/plugins/pluginargs"
	"github.com/gleaner-dev/gleaner/pkg/plugins/pluginmetrics"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
	"github.com/gleaner-dev/gleaner/pkg/reclaim/evict"
)

// Name of the plugin in the scheduler configuration. Enable it in place of DefaultPreemption.
const Name = "ReclaimPreemption"

// ErrReasonBestEffort is why a best-effort pod gets no preemption.
const ErrReasonBestEffort = "best-effort pods never preempt"

// Args configures ReclaimPreemption.
type Args struct {
	pluginargs.BestEffort `json:",inline"`
	// MinCandidateNodesPercentage is the share of nodes dry-run for preemption,
	// in percent, as in DefaultPreemptionArgs. Default 10.
	MinCandidateNodesPercentage *int32 `json:"minCandidateNodesPercentage,omitempty"`
	// MinCandidateNodesAbsolute is the least number of nodes dry-run for
	// preemption, as in DefaultPreemptionArgs. Default 100.
	MinCandidateNodesAbsolute *int32 `json:"minCandidateNodesAbsolute,omitempty"`
	// MaxGraceSeconds caps the grace period of every victim (default 120, as
	// gleaner-controller's --max-reclaim-grace): a victim asking for more is
	// deleted again with this much, and a pod terminating past it no longer
	// counts as making room.
	MaxGraceSeconds *int32 `json:"maxGraceSeconds,omitempty"`
}

// Default fills unset fields.
func (a *Args) Default() {
	a.BestEffort.Default()
	if a.MinCandidateNodesPercentage == nil {
		a.MinCandidateNodesPercentage = new(int32(10))
	}
	if a.MinCandidateNodesAbsolute == nil {
		a.MinCandidateNodesAbsolute = new(int32(100))
	}
	if a.MaxGraceSeconds == nil {
		a.MaxGraceSeconds = new(int32(reclaim.DefaultMaxGrace / time.Second))
	}
}

// Validate checks defaulted args.
func (a *Args) Validate(path *field.Path) field.ErrorList {
	errs := a.BestEffort.Validate(path)
	if p := *a.MinCandidateNodesPercentage; p < 0 || p > 100 {
		errs = append(errs, field.Invalid(path.Child("minCandidateNodesPercentage"), p, "must be in [0, 100]"))
	}
	if n := *a.MinCandidateNodesAbsolute; n < 0 {
		errs = append(errs, field.Invalid(path.Child("minCandidateNodesAbsolute"), n, "must be non-negative"))
	}
	if g := *a.MaxGraceSeconds; g <= 0 {
		errs = append(errs, field.Invalid(path.Child("maxGraceSeconds"), g, "must be greater than 0"))
	}
	if *a.MinCandidateNodesPercentage == 0 && *a.MinCandidateNodesAbsolute == 0 {
		errs = append(errs, field.Invalid(path.Child("minCandidateNodesAbsolute"), 0, "must be positive when minCandidateNodesPercentage is 0"))
	}
	return errs
}

// ReclaimPreemption wraps DefaultPreemption with Gleaner's victim policy.
type ReclaimPreemption struct {
	*defaultpreemption.DefaultPreemption
	handle    fwk.Handle
	evaluator *preemption.Evaluator
	threshold int32
	gpu       v1.ResourceName
	maxGrace  time.Duration
	clock     clock.PassiveClock
	pods      cache.Indexer // the scheduler's pods, indexed terminatingOn and byGang
	groups    pglisters.PodGroupLister
	// natives reads native PodGroups (scheduling.k8s.io) for their minCount;
	// nil when the GenericWorkload gate is off, and no pod is in a native gang.
	natives evict.NativeGroups
	// terms: when each terminating pod was asked to stop, on the scheduler's
	// clock.
	terms *reclaim.Terminations
}

// terminatingOn indexes the scheduler's pods that are terminating by the node
// they are bound to, so PostFilter looks only at nodes that have some instead
// of at every pod of every node. It is an index of the informer's store, which
// is updated before any event handler runs: it is never behind the scheduler's
// own cache, from which the cycle's snapshot is taken.
const terminatingOn = "gleaner.dev/terminating-on-node"

func terminatingIndex(obj interface{}) ([]string, error) {
	if p, ok := obj.(*v1.Pod); ok && p.Spec.NodeName != "" && p.DeletionTimestamp != nil && api.HoldsResources(p) {
		return []string{p.Spec.NodeName}, nil
	}
	return nil, nil
}

// byGang indexes the scheduler's pods by their gang (api.GangKey), whichever
// kind of PodGroup names it, so a victim's gang is found without listing its
// namespace.
const byGang = "gleaner.dev/gang"

func gangIndex(obj interface{}) ([]string, error) {
	if p, ok := obj.(*v1.Pod); ok {
		if key := api.GangKey(p); key != "" {
			return []string{key}, nil
		}
	}
	return nil, nil
}

// nodesWithTerminatingPods lists the nodes with terminating pods, in a stable order.
func (pl *ReclaimPreemption) nodesWithTerminatingPods() []string {
	out := pl.pods.ListIndexFuncValues(terminatingOn)
	sort.Strings(out)
	return out
}

var (
	_ preemption.Interface  = &ReclaimPreemption{}
	_ fwk.PostFilterPlugin  = &ReclaimPreemption{}
	_ fwk.PreEnqueuePlugin  = &ReclaimPreemption{}
	_ fwk.EnqueueExtensions = &ReclaimPreemption{}
)

// New builds the plugin.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, err := pluginargs.Load[Args](Name, obj)
	if err != nil {
		return nil, err
	}
	client, err := gang.PodGroupClient(h)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	pl, err := newWithPodGroups(ctx, args, h, client)
	if err != nil {
		return nil, err
	}
	return pl, nil
}

// newWithPodGroups builds the plugin over a PodGroup client.
func newWithPodGroups(ctx context.Context, args Args, h fwk.Handle, client pgclientset.Interface) (*ReclaimPreemption, error) {
	fts := plfeature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	dp, err := defaultpreemption.New(ctx, &config.DefaultPreemptionArgs{
		MinCandidateNodesPercentage: *args.MinCandidateNodesPercentage,
		MinCandidateNodesAbsolute:   *args.MinCandidateNodesAbsolute,
	}, h, fts)
	if err != nil {
		return nil, err
	}
	pl := &ReclaimPreemption{DefaultPreemption: dp, handle: h, threshold: args.Threshold(), gpu: args.Resource(),
		maxGrace: time.Duration(*args.MaxGraceSeconds) * time.Second, clock: clock.RealClock{}}
	pl.wire(dp, h, fts)
	pods := h.SharedInformerFactory().Core().V1().Pods().Informer()
	if _, ok := pods.GetIndexer().GetIndexers()[terminatingOn]; !ok {
		if err := pods.AddIndexers(cache.Indexers{terminatingOn: terminatingIndex, byGang: gangIndex}); err != nil {
			return nil, fmt.Errorf("%s: indexing pods: %w", Name, err)
		}
	}
	pl.pods = pods.GetIndexer()
	pl.terms = &reclaim.Terminations{}
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		// Seen as it changes: at the moment of the change, but for the pods
		// the informer's first list holds (terminating for who knows how long).
		AddFunc: func(obj interface{}, initial bool) {
			if p, ok := obj.(*v1.Pod); ok {
				now := pl.clock.Now()
				since := now
				if initial {
					since = time.Time{}
				}
				pl.terms.Saw(p, since, now)
			}
		},
		UpdateFunc: func(_, obj interface{}) {
			if p, ok := obj.(*v1.Pod); ok {
				now := pl.clock.Now()
				pl.terms.Saw(p, now, now)
			}
		},
		DeleteFunc: func(obj interface{}) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*v1.Pod); ok {
				pl.terms.Drop(p.UID)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("%s: watching terminating pods: %w", Name, err)
	}
	// Each gang's quorum, for elastic gangs. Not waited for: a gang whose
	// PodGroup is not seen yet goes whole.
	groups := pginformers.NewSharedInformerFactory(client, 0)
	pl.groups = groups.Scheduling().V1alpha1().PodGroups().Lister()
	groups.Start(ctx.Done())
	// With the GenericWorkload gate on, the scheduler itself watches native
	// PodGroups (its informer factory starts and syncs them): read their
	// minCount from the same informer. With it off, the API server may not
	// serve them, and no pod names one.
	if utilfeature.DefaultFeatureGate.Enabled(features.GenericWorkload) {
		pl.natives = evict.NativeGroupsFrom(h.SharedInformerFactory())
	}
	return pl, nil
}

// Name returns the plugin name.
func (pl *ReclaimPreemption) Name() string { return Name }

// PostFilter refuses preemption to best-effort pods, whatever their
// PriorityClass's preemptionPolicy says, and runs the upstream Evaluator for the rest.
func (pl *ReclaimPreemption) PostFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, m fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	if api.IsBestEffort(pod, pl.threshold) {
		pluginmetrics.Preemptions.WithLabelValues("refused").Inc()
		return nil, fwk.NewStatus(fwk.Unschedulable, ErrReasonBestEffort)
	}
	if node := pl.nodeFreedByTerminatingPods(ctx, state, pod, m); node != "" {
		// Victims chosen earlier (by the controller or a previous preemption) are
		// already leaving this node: wait for them instead of evicting more, and
		// hold the node for this pod meanwhile.
		klog.FromContext(ctx).V(2).Info("Pods terminating on a node will make room; not preempting", "pod", klog.KObj(pod), "node", node)
		pluginmetrics.Preemptions.WithLabelValues("awaiting_terminating").Inc()
		return &fwk.PostFilterResult{NominatingInfo: &fwk.NominatingInfo{NominatedNodeName: node, NominatingMode: fwk.ModeOverride}}, nil
	}
	result, status := pl.evaluator.Preempt(ctx, state, pod, m)
	if msg := status.Message(); msg != "" {
		status = fwk.NewStatus(status.Code(), "preemption: "+msg)
	}
	if status.IsSuccess() {
		pluginmetrics.Preemptions.WithLabelValues("nominated").Inc()
	} else {
		pluginmetrics.Preemptions.WithLabelValues("failed").Inc()
	}
	return result, status
}

// nodeFreedByTerminatingPods returns a node where the pod fits once the
// lower-priority pods already terminating there are gone, or "". A pod
// terminating past its capped grace period (reclaim.Returning, counted on
// the scheduler's clock) does not count: waiting for it could take an hour,
// or forever. Only nodes that rejected the pod for a resolvable reason and
// hold such pods are tried, with the same filter run the Evaluator uses. Only nodes the informer saw pods
// terminating on are looked at: with none, this costs nothing.
func (pl *ReclaimPreemption) nodeFreedByTerminatingPods(ctx context.Context, state fwk.CycleState, pod *v1.Pod, m fwk.NodeToStatusReader) string {
	logger := klog.FromContext(ctx)
	prio := corev1helpers.PodPriority(pod)
	now := pl.clock.Now()
	for _, name := range pl.nodesWithTerminatingPods() {
		ni, err := pl.handle.SnapshotSharedLister().NodeInfos().Get(name)
		if err != nil || ni.Node() == nil {
			continue
		}
		// Which pods are leaving comes from the store (the freshest view: the
		// scheduler's cache may not have seen a deletion yet); what they hold
		// comes from the cycle's snapshot.
		returning := map[types.UID]bool{}
		objs, _ := pl.pods.ByIndex(terminatingOn, name)
		for _, obj := range objs {
			if p := obj.(*v1.Pod); pl.terms.Returning(p, now, pl.maxGrace) && corev1helpers.PodPriority(p) < prio {
				returning[p.UID] = true
			}
		}
		var leaving []fwk.PodInfo
		for _, pi := range ni.GetPods() {
			if returning[pi.GetPod().UID] {
				leaving = append(leaving, pi)
			}
		}
		if len(leaving) == 0 {
			continue
		}
		if st := m.Get(ni.Node().Name); st != nil && st.Code() != fwk.Unschedulable {
			continue // rejected for a reason removing pods cannot fix
		}
		trial := ni.Snapshot()
		trialState := state.Clone()
		for _, pi := range leaving {
			if err := trial.RemovePod(logger, pi.GetPod()); err != nil {
				return ""
			}
			if st := pl.handle.RunPreFilterExtensionRemovePod(ctx, trialState, pod, pi, trial); !st.IsSuccess() {
				return ""
			}
		}
		if pl.handle.RunFilterPluginsWithNominatedPods(ctx, trialState, pod, trial).IsSuccess() {
			return ni.Node().Name
		}
	}
	return ""
}

// withWholeGangs adds the running members of every gang that has a pod in
// victims and would fall below its quorum without them.
func (pl *ReclaimPreemption) withWholeGangs(victims []*v1.Pod) []*v1.Pod {
	if !slices.ContainsFunc(victims, func(p *v1.Pod) bool { return api.GangKey(p) != "" }) {
		return victims // no gang: nothing to add (this runs for every node the dry run tries)
	}
	chosen := make(map[types.UID]bool, len(victims))
	for _, p := range victims {
		chosen[p.UID] = true
	}
	seen := maps.Clone(chosen)
	done := map[string]bool{}
	out := victims
	for _, p := range victims {
		key := api.GangKey(p)
		if key == "" || done[key] {
			continue
		}
		done[key] = true
		members, err := pl.pods.ByIndex(byGang, key)
		if err != nil {
			continue
		}
		var running []*v1.Pod
		staying := 0
		for _, obj := range members {
			m, ok := obj.(*v1.Pod)
			if ok && m.Spec.NodeName != "" && m.DeletionTimestamp == nil && api.HoldsResources(m) && api.IsBestEffort(m, pl.threshold) {
				running = append(running, m)
				if !chosen[m.UID] {
					staying++
				}
			}
		}
		if q := int(evict.GangQuorum(pl.groups, pl.natives, p)); q > 0 && staying >= q {
			continue // elastic: the rest keep running
		}
		for _, m := range running {
			if !seen[m.UID] {
				seen[m.UID] = true
				out = append(out, m)
			}
		}
	}
	return out
}

// eligible: only best-effort pods are ever taken, and a gang only as a whole.
func (pl *ReclaimPreemption) eligible(victim []fwk.PodInfo) bool {
	for _, pi := range victim {
		if !api.IsBestEffort(pi.GetPod(), pl.threshold) {
			return false
		}
	}
	return true
}

// moreWorkToLose orders victims so the Evaluator reprieves the ones with the
// most work to lose first and so evicts those with the least lost work:
// decided is false on a tie, which upstream's order (priority, then age)
// breaks. It runs for every comparison of the victims' sort: the GPUs come
// from the PodInfo's request, which the framework computes once per pod.
func (pl *ReclaimPreemption) moreWorkToLose(a, b []fwk.PodInfo) (more, decided bool) {
	now := pl.clock.Now()
	lostWork := func(victim []fwk.PodInfo) float64 {
		var total float64
		for _, pi := range victim {
			total += reclaim.LostWork(pi.GetPod(), pi.CalculateResource().Resource.GetScalarResources()[pl.gpu], now)
		}
		return total
	}
	la, lb := lostWork(a), lostWork(b)
	return la > lb, la != lb
}

// capGrace deletes a victim again with the grace period a reclaim gives it
// (reclaim.LeavesIn: its own, capped, or the time it declares its saves take
// and SavedGrace to exit) when that is shorter than its own,
// so it is gone within it: inference is waiting for its GPUs now.
func (pl *ReclaimPreemption) capGrace(ctx context.Context, victim *v1.Pod) error {
	grace := reclaim.LeavesIn(victim, pl.maxGrace)
	if reclaim.Grace(victim) <= grace {
		return nil
	}
	seconds := int64(grace / time.Second)
	// Only the victim itself: a pod recreated under its name meanwhile (a
	// Conflict on the UID) is not a victim.
	err := pl.handle.ClientSet().CoreV1().Pods(victim.Namespace).Delete(ctx, victim.Name,
		metav1.DeleteOptions{GracePeriodSeconds: &seconds, Preconditions: metav1.NewUIDPreconditions(string(victim.UID))})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("capping the grace period of %s/%s at %ds: %w", victim.Namespace, victim.Name, seconds, err)
	}
	return nil
}
