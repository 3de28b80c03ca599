// Package gang places multi-pod best-effort jobs all or nothing. Members name
// their scheduler-plugins PodGroup with the label scheduling.x-k8s.io/pod-group;
// each member waits at Permit, holding its reservation, until minMember members
// have one, and then all are bound together. A group that cannot fully fit
// gives its GPUs back when its timeout passes and backs off for as long, so
// other jobs can use them meanwhile.
//
// A pod that names a native PodGroup in spec.schedulingGroup (scheduling.k8s.io,
// feature gate GenericWorkload) is not Gang's: with the gate on, the in-tree
// GangScheduling plugin, which then joins every profile, places its group
// whole, and Gang skips it. Gang refuses, at PreFilter, a pod that names both
// kinds of group (it cannot be in two gangs), and, with the gate off, a pod
// that names a native group (nothing in this scheduler would place its group
// whole). So no pod is ever under two gang mechanisms, nor under none it asks for.
package gang

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/clock"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	pgclientset "sigs.k8s.io/scheduler-plugins/pkg/generated/clientset/versioned"
	pginformers "sigs.k8s.io/scheduler-plugins/pkg/generated/informers/externalversions"
	pglisters "sigs.k8s.io/scheduler-plugins/pkg/generated/listers/scheduling/v1alpha1"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/plugins/kubecompat"
	"github.com/gleaner-dev/gleaner/pkg/plugins/pluginargs"
	"github.com/gleaner-dev/gleaner/pkg/plugins/pluginmetrics"
)

// Name of the plugin in the scheduler configuration.
const Name = "Gang"

// Failure reasons.
const (
	ErrReasonNoPodGroup  = "pod group not found"
	ErrReasonTooFewPods  = "pod group has fewer pods than minMember"
	ErrReasonBackingOff  = "pod group timed out waiting for all members and is backing off"
	ErrReasonSiblingLost = "another member of the pod group was rejected"
	// ErrReasonTwoGangs: the pod names a native PodGroup and a scheduler-plugins one.
	ErrReasonTwoGangs = "pod names two pod groups, a native one in spec.schedulingGroup and a scheduler-plugins one in the label " +
		api.LabelPodGroup + "; a pod may be in one gang only: remove one of them"
	// ErrReasonNativeGangsOff: the pod names a native PodGroup, and this
	// scheduler runs without the gate that places such groups whole.
	ErrReasonNativeGangsOff = "pod names a native PodGroup in spec.schedulingGroup, but gleaner-scheduler runs without the " +
		"GenericWorkload feature gate, so nothing would place its group whole: run gleaner-scheduler with " +
		"--feature-gates=GenericWorkload=true, or name a scheduler-plugins PodGroup in the label " + api.LabelPodGroup + " instead"
)

// Args configures Gang.
type Args struct {
	// DefaultTimeoutSeconds is how long members wait at Permit for the rest of the
	// group when the PodGroup does not set scheduleTimeoutSeconds. Default 60.
	DefaultTimeoutSeconds *int32 `json:"defaultTimeoutSeconds,omitempty"`
}

// Default fills unset fields.
func (a *Args) Default() {
	if a.DefaultTimeoutSeconds == nil {
		a.DefaultTimeoutSeconds = new(int32(60))
	}
}

// Validate checks defaulted args.
func (a *Args) Validate(path *field.Path) field.ErrorList {
	if t := *a.DefaultTimeoutSeconds; t <= 0 {
		return field.ErrorList{field.Invalid(path.Child("defaultTimeoutSeconds"), t, "must be greater than 0")}
	}
	return nil
}

// Gang implements PreFilter, Permit and Reserve for pod groups.
type Gang struct {
	handle  fwk.Handle
	pods    cache.Indexer // the scheduler's pods, indexed byGroup
	groups  pglisters.PodGroupLister
	timeout time.Duration
	clock   clock.WithDelayedExecution
	// nativeGangs: the GenericWorkload gate is on, so the in-tree
	// GangScheduling plugin places native PodGroups whole.
	nativeGangs bool

	// assumedOn holds, per member this scheduler assumed and that is not yet
	// seen bound (types.UID), the node it was assumed on: where Permit looks
	// for it in the snapshot, instead of among every pod of every node.
	assumedOn sync.Map

	mu sync.Mutex
	// backoff holds, per namespace/group, when a timed-out group may try again.
	backoff map[string]time.Time
}

var (
	_ fwk.PreFilterPlugin   = &Gang{}
	_ fwk.PermitPlugin      = &Gang{}
	_ fwk.ReservePlugin     = &Gang{}
	_ fwk.EnqueueExtensions = &Gang{}
	_ fwk.SignPlugin        = &Gang{}
)

// New builds the plugin and starts a PodGroup informer.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, err := pluginargs.Load[Args](Name, obj)
	if err != nil {
		return nil, err
	}
	client, err := PodGroupClient(h)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	return newWithClient(ctx, args, h, client, clock.RealClock{})
}

// PodGroupClient is a PodGroup client over the scheduler's connection, in
// JSON: the scheduler's connection speaks protobuf, which CRDs do not.
func PodGroupClient(h fwk.Handle) (pgclientset.Interface, error) {
	cfg := rest.CopyConfig(h.KubeConfig())
	cfg.ContentType, cfg.AcceptContentTypes = "application/json", "application/json"
	client, err := pgclientset.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("PodGroup client: %w", err)
	}
	return client, nil
}

// byGroup indexes the scheduler's pods by namespace/pod group, so a member's
// cycle reads its group's pods instead of every pod of its namespace.
const byGroup = "gleaner.dev/pod-group"

func groupIndex(obj interface{}) ([]string, error) {
	if p, ok := obj.(*v1.Pod); ok {
		if name := groupOf(p); name != "" {
			return []string{groupKey(p.Namespace, name)}, nil
		}
	}
	return nil, nil
}

// newWithClient builds the plugin over a PodGroup client and a clock.
func newWithClient(ctx context.Context, args Args, h fwk.Handle, client pgclientset.Interface, clk clock.WithDelayedExecution) (*Gang, error) {
	factory := pginformers.NewSharedInformerFactory(client, 0)
	groups := factory.Scheduling().V1alpha1().PodGroups()
	pods := h.SharedInformerFactory().Core().V1().Pods().Informer()
	if _, ok := pods.GetIndexer().GetIndexers()[byGroup]; !ok {
		if err := pods.AddIndexers(cache.Indexers{byGroup: groupIndex}); err != nil {
			return nil, fmt.Errorf("%s: indexing pods by group: %w", Name, err)
		}
	}
	g := &Gang{
		pods:    pods.GetIndexer(),
		handle:  h,
		groups:  groups.Lister(),
		timeout: time.Duration(*args.DefaultTimeoutSeconds) * time.Second,
		clock:   clk,
		backoff: map[string]time.Time{},
		// The gate that adds GangScheduling to the profile, read as the
		// framework reads it.
		nativeGangs: utilfeature.DefaultFeatureGate.Enabled(features.GenericWorkload),
	}
	// A member seen bound, or gone, is no longer only assumed.
	if _, err := pods.AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: func(obj interface{}) bool {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			p, ok := obj.(*v1.Pod)
			return ok && groupOf(p) != ""
		},
		Handler: cache.ResourceEventHandlerFuncs{
			UpdateFunc: func(_, obj interface{}) {
				if p := obj.(*v1.Pod); p.Spec.NodeName != "" {
					g.assumedOn.Delete(p.UID)
				}
			},
			DeleteFunc: func(obj interface{}) {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				g.assumedOn.Delete(obj.(*v1.Pod).UID)
			},
		},
	}); err != nil {
		return nil, fmt.Errorf("%s: watching pods: %w", Name, err)
	}
	// A PodGroup appearing or changing is not an event the scheduler watches
	// (that would need its dynamic informer, which blocks start-up until the CRD
	// exists), so the plugin re-activates the group's pending members itself.
	if _, err := groups.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { g.activateMembers(obj) },
		UpdateFunc: func(_, obj interface{}) { g.activateMembers(obj) },
	}); err != nil {
		return nil, fmt.Errorf("%s: watching PodGroups: %w", Name, err)
	}
	factory.Start(ctx.Done())
	return g, nil
}

// Name returns the plugin name.
func (g *Gang) Name() string { return Name }

func (g *Gang) activateMembers(obj interface{}) {
	if pg, ok := obj.(*schedv1alpha1.PodGroup); ok {
		g.activateGroup(pg.Namespace, pg.Name)
	}
}

// activateGroup moves the group's pending members back to the active queue.
func (g *Gang) activateGroup(namespace, name string) {
	if pending := g.pendingMembers(namespace, name, ""); len(pending) > 0 {
		g.handle.Activate(klog.Background(), pending)
	}
}

// members lists the group's pods.
func (g *Gang) members(namespace, name string) ([]*v1.Pod, error) {
	objs, err := g.pods.ByIndex(byGroup, groupKey(namespace, name))
	if err != nil {
		return nil, err
	}
	out := make([]*v1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*v1.Pod); ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// pendingMembers are the group's members not yet bound, except the pod with UID skip.
func (g *Gang) pendingMembers(namespace, name string, skip types.UID) map[string]*v1.Pod {
	members, err := g.members(namespace, name)
	if err != nil {
		return nil
	}
	pending := map[string]*v1.Pod{}
	for _, p := range members {
		if p.Spec.NodeName == "" && p.DeletionTimestamp == nil && p.UID != skip {
			pending[p.Namespace+"/"+p.Name] = p
		}
	}
	return pending
}

// groupOf is the scheduler-plugins PodGroup whose gang pod is in, or "": a
// pod that names a native PodGroup is never a member, even if it has the label
// too (PreFilter refuses it), so it neither counts towards nor releases a
// scheduler-plugins gang.
func groupOf(pod *v1.Pod) string {
	if api.NativeGroupOf(pod) != "" {
		return ""
	}
	return pod.Labels[api.LabelPodGroup]
}

func groupKey(namespace, name string) string { return namespace + "/" + name }

// PreFilter skips pods outside a group and rejects members of a group that
// cannot be complete: missing PodGroup, fewer pods than minMember, or a group
// backing off after a timeout. A pod that names a native PodGroup is skipped
// when the in-tree GangScheduling places such groups, and refused otherwise,
// or when it names a scheduler-plugins PodGroup too.
func (g *Gang) PreFilter(ctx context.Context, _ fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if native := api.NativeGroupOf(pod); native != "" {
		switch {
		case pod.Labels[api.LabelPodGroup] != "":
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, ErrReasonTwoGangs)
		case !g.nativeGangs:
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, ErrReasonNativeGangsOff)
		}
		return nil, fwk.NewStatus(fwk.Skip)
	}
	name := groupOf(pod)
	if name == "" {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	pg, err := g.groups.PodGroups(pod.Namespace).Get(name)
	if err != nil {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("%s: %s/%s", ErrReasonNoPodGroup, pod.Namespace, name))
	}
	if until, ok := g.backingOff(groupKey(pod.Namespace, name)); ok {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("%s until %s", ErrReasonBackingOff, until.Format(time.RFC3339)))
	}
	members, err := g.members(pod.Namespace, name)
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	live := 0
	for _, m := range members {
		if m.DeletionTimestamp == nil {
			live++
		}
	}
	if int32(live) < pg.Spec.MinMember {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("%s: %d of %d", ErrReasonTooFewPods, live, pg.Spec.MinMember))
	}
	klog.FromContext(ctx).V(5).Info("Gang member may be scheduled", "pod", klog.KObj(pod), "group", name, "members", live)
	return nil, nil
}

// PreFilterExtensions is not needed.
func (g *Gang) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

func (g *Gang) backingOff(key string) (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	until, ok := g.backoff[key]
	if !ok {
		return time.Time{}, false
	}
	if !g.clock.Now().Before(until) {
		delete(g.backoff, key)
		return time.Time{}, false
	}
	return until, true
}

// Permit lets the member that completes the group release every waiting member;
// the others wait, holding their reservations, for at most the group's timeout.
func (g *Gang) Permit(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) (*fwk.Status, time.Duration) {
	name := groupOf(pod)
	if name == "" {
		return nil, 0
	}
	// The pod is assumed on nodeName from here until it is seen bound, or
	// Unreserve forgets it.
	g.assumedOn.Store(pod.UID, nodeName)
	pg, err := g.groups.PodGroups(pod.Namespace).Get(name)
	if err != nil {
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("%s: %s/%s", ErrReasonNoPodGroup, pod.Namespace, name)), 0
	}
	placed, err := g.placedMembers(pod)
	if err != nil {
		return fwk.AsStatus(err), 0
	}
	if int32(placed+1) >= pg.Spec.MinMember {
		klog.FromContext(ctx).V(2).Info("Pod group complete, binding all members", "group", klog.KObj(pg), "placed", placed+1)
		pluginmetrics.GangDecisions.WithLabelValues("completed").Inc()
		g.handle.IterateOverWaitingPods(func(wp fwk.WaitingPod) {
			if p := wp.GetPod(); p.Namespace == pod.Namespace && groupOf(p) == name {
				wp.Allow(Name)
			}
		})
		return nil, 0
	}
	timeout := g.timeoutOf(pg)
	pluginmetrics.GangDecisions.WithLabelValues("waiting").Inc()
	// Siblings rejected earlier (say, before the PodGroup was seen) get another
	// try now that this member holds its place; the scheduler activates them
	// after this cycle.
	if data, err := state.Read(framework.PodsToActivateKey); err == nil {
		if toActivate, ok := data.(*framework.PodsToActivate); ok {
			toActivate.Lock()
			for key, p := range g.pendingMembers(pod.Namespace, name, pod.UID) {
				toActivate.Map[key] = p
			}
			toActivate.Unlock()
		}
	}
	return fwk.NewStatus(fwk.Wait, fmt.Sprintf("waiting for %d more members of pod group %s", int(pg.Spec.MinMember)-placed-1, name)), timeout
}

// placedMembers counts the other members already bound or assumed (waiting
// at Permit, or allowed and binding), as the scheduler's snapshot holds them.
// It looks at the group's members only: bound ones from the informer, assumed
// ones on the node Permit saw them assumed on. Every member assumed by this
// scheduler passed Permit first, since scheduling cycles run one at a time.
func (g *Gang) placedMembers(pod *v1.Pod) (int, error) {
	members, err := g.members(pod.Namespace, groupOf(pod))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, m := range members {
		if m.UID == pod.UID || m.DeletionTimestamp != nil {
			continue
		}
		if m.Spec.NodeName != "" {
			n++
			continue
		}
		if node, ok := g.assumedOn.Load(m.UID); ok && g.inSnapshot(node.(string), m.UID) {
			n++
		}
	}
	return n, nil
}

// inSnapshot reports whether the pod with uid is on node in the cycle's snapshot.
func (g *Gang) inSnapshot(node string, uid types.UID) bool {
	ni, err := g.handle.SnapshotSharedLister().NodeInfos().Get(node)
	if err != nil {
		return false // the node is gone, and the pod with it
	}
	for _, pi := range ni.GetPods() {
		if pi.GetPod().UID == uid {
			return true
		}
	}
	return false
}

// maxTimeout bounds a PodGroup's scheduleTimeoutSeconds, as the framework
// bounds a wait at Permit: the group's tenant sets it, and each backoff holds
// a timer and an entry in memory until it ends, even after the group is gone.
const maxTimeout = 15 * time.Minute

// timeoutOf is how long pg's members wait at Permit, and the group backs off
// after a failed try: its scheduleTimeoutSeconds up to maxTimeout, or the
// default.
func (g *Gang) timeoutOf(pg *schedv1alpha1.PodGroup) time.Duration {
	if t := pg.Spec.ScheduleTimeoutSeconds; t != nil && *t > 0 {
		return min(time.Duration(*t)*time.Second, maxTimeout)
	}
	return g.timeout
}

// Reserve has nothing to do; Unreserve is where a failed member takes the rest down.
func (g *Gang) Reserve(context.Context, fwk.CycleState, *v1.Pod, string) *fwk.Status { return nil }

// Unreserve runs when a member's placement fails, including a Permit timeout.
// Its waiting siblings are rejected at once, so the group's reservations are
// all released, and the group backs off for its timeout before trying again.
func (g *Gang) Unreserve(ctx context.Context, _ fwk.CycleState, pod *v1.Pod, _ string) {
	name := groupOf(pod)
	if name == "" {
		return
	}
	g.assumedOn.Delete(pod.UID)
	backoff := g.timeout
	if pg, err := g.groups.PodGroups(pod.Namespace).Get(name); err == nil {
		backoff = g.timeoutOf(pg)
	}
	pluginmetrics.GangDecisions.WithLabelValues("released").Inc()
	key, until := groupKey(pod.Namespace, name), g.clock.Now().Add(backoff)
	g.mu.Lock()
	g.backoff[key] = until
	g.mu.Unlock()
	// Nothing in the cluster changes when the backoff ends: forget it (a group
	// deleted meanwhile must not stay in memory) and wake the group then.
	g.clock.AfterFunc(backoff, func() {
		g.mu.Lock()
		if g.backoff[key].Equal(until) {
			delete(g.backoff, key)
		}
		g.mu.Unlock()
		g.activateGroup(pod.Namespace, name)
	})
	rejected := 0
	g.handle.IterateOverWaitingPods(func(wp fwk.WaitingPod) {
		if p := wp.GetPod(); p.Namespace == pod.Namespace && groupOf(p) == name && p.UID != pod.UID {
			wp.Reject(Name, ErrReasonSiblingLost)
			rejected++
		}
	})
	klog.FromContext(ctx).V(2).Info("Pod group member failed; released the group", "pod", klog.KObj(pod), "group", name, "rejectedWaiting", rejected, "backoff", backoff)
}

// SignPod adds nothing to a pod's signature: Gang has no Filter or Score, and
// its PreFilter and Permit run for every pod, batched or not, so members of a
// group may reuse the node ranking of the pod before them like any other pod.
func (g *Gang) SignPod(context.Context, *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return nil, nil
}

// EventsToRegister: a rejected member may fit when another member appears,
// and a pod refused for naming two groups when its label is taken off. A
// PodGroup appearing and a backoff ending are handled by activateGroup.
func (g *Gang) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Add}, QueueingHintFn: isSchedulableAfterMemberAdded},
		// The refused pod's own label change: TargetPod, not UnscheduledPod,
		// which is every other pending pod's.
		{Event: fwk.ClusterEvent{Resource: kubecompat.TargetPod, ActionType: fwk.UpdatePodLabel}, QueueingHintFn: isSchedulableAfterLabelRemoved},
	}, nil
}

// isSchedulableAfterLabelRemoved queues a pod refused for naming both a native
// and a scheduler-plugins PodGroup once it names only one.
func isSchedulableAfterLabelRemoved(_ klog.Logger, pod *v1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	old, oldOK := oldObj.(*v1.Pod)
	updated, ok := newObj.(*v1.Pod)
	if !ok || !oldOK {
		return fwk.Queue, fmt.Errorf("expected *v1.Pod, got %T and %T", oldObj, newObj)
	}
	if updated.UID != pod.UID || api.NativeGroupOf(updated) == "" {
		return fwk.QueueSkip, nil
	}
	if old.Labels[api.LabelPodGroup] != "" && updated.Labels[api.LabelPodGroup] == "" {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

func isSchedulableAfterMemberAdded(_ klog.Logger, pod *v1.Pod, _, newObj interface{}) (fwk.QueueingHint, error) {
	added, ok := newObj.(*v1.Pod)
	if !ok {
		return fwk.Queue, fmt.Errorf("expected *v1.Pod, got %T", newObj)
	}
	if name := groupOf(pod); name != "" && added.Namespace == pod.Namespace && groupOf(added) == name {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}
