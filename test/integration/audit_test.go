package integration

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
)

// auditor watches the whole cluster through a run of fault scenarios and
// checks, after every scenario, the invariants no fault may break, whatever
// the scenario itself measures:
//
//   - no pod but inference's is bound to GPUs its node's verdict did not lend;
//   - no inference replica waits for lent GPUs longer than the budget;
//   - the process's heap (the controller, the scheduler and the test's own
//     parts) stays bounded.
//
// It reads only what the API server says, through its own informers, so it
// holds whatever component a scenario stops, restarts or breaks.
type auditor struct {
	mu sync.Mutex
	// nodes and pods are the informers' latest word; verdicts, each node's
	// verdicts over the last slack, so that a binding the scheduler decided
	// just before a verdict changed is judged by what it could have seen.
	nodes    map[string]*v1.Node
	pods     map[types.UID]*v1.Pod
	verdicts map[string][]seenVerdict
	// gone is the GPUs of non-inference pods deleted over the last slack, by
	// node: the scheduler may still have counted them when it bound a pod.
	gone []goneGPUs
	// bound is the pods already judged at binding.
	bound map[types.UID]bool
	// blocked is when each pending inference replica was first seen waiting
	// for GPUs only lent pods hold; longest, the longest such wait, by pod.
	blocked map[types.UID]time.Time
	longest map[string]time.Duration

	// suspects are bindings no verdict seen yet lent enough for: the node
	// and pod watches deliver apart, so a verdict the scheduler saw before it
	// bound may reach the auditor after the binding. One written before the
	// binding (a lower resource version: etcd's revision, one sequence for
	// all objects of this test's API server) clears it; the rest are breaches.
	suspects []suspect
	budget   time.Duration
	breaches []string
	binds    int
	baseHeap uint64
}

type seenVerdict struct {
	at time.Time
	v  harvest.Verdict
}

type suspect struct {
	pod    types.UID
	node   string
	held   int64
	rv     uint64
	breach string
}

// convict turns the suspects not cleared into breaches.
func (a *auditor) convict() {
	for _, s := range a.suspects {
		a.breaches = append(a.breaches, s.breach)
	}
	a.suspects = nil
}

type goneGPUs struct {
	at   time.Time
	node string
	gpus int64
}

// slack is how far behind the API server a scheduler's cache may be when
// it binds: a verdict that lent the GPUs this long ago, or a pod deleted this
// long ago, may still have been its view.
const slack = 2 * time.Second

// startAudit starts auditing the cluster behind client until the test ends,
// with budget as the default bound on inference's waits.
func startAudit(t *testing.T, ctx context.Context, client kubernetes.Interface, budget time.Duration) *auditor {
	a := &auditor{
		nodes: map[string]*v1.Node{}, pods: map[types.UID]*v1.Pod{}, verdicts: map[string][]seenVerdict{},
		bound: map[types.UID]bool{}, blocked: map[types.UID]time.Time{}, longest: map[string]time.Duration{},
		budget: budget,
	}
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	factory := informers.NewSharedInformerFactory(client, 0)
	nodes, pods := factory.Core().V1().Nodes().Informer(), factory.Core().V1().Pods().Informer()
	_, _ = nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { a.node(obj.(*v1.Node)) },
		UpdateFunc: func(_, obj any) { a.node(obj.(*v1.Node)) },
		DeleteFunc: func(obj any) {
			if n, ok := obj.(*v1.Node); ok {
				a.mu.Lock()
				delete(a.nodes, n.Name)
				delete(a.verdicts, n.Name)
				a.mu.Unlock()
			}
		},
	})
	_, _ = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { a.pod(obj.(*v1.Pod)) },
		UpdateFunc: func(_, obj any) { a.pod(obj.(*v1.Pod)) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*v1.Pod); ok {
				a.podGone(p)
			}
		},
	})
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced, pods.HasSynced) {
		t.Fatal("the auditor's informers never synced")
	}
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				a.waits(now)
			}
		}
	}()
	a.baseHeap = ownHeapInUse()
	return a
}

// begin starts auditing one scenario: the budget returns to budget, and
// waits and breaches start afresh.
func (a *auditor) begin(budget time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.budget, a.breaches, a.binds, a.suspects = budget, nil, 0, nil
	a.longest = map[string]time.Duration{}
	for uid := range a.blocked {
		a.blocked[uid] = time.Now()
	}
}

// allow raises the bound on inference's waits for the current scenario, whose
// fault adds to the budget (a disruption budget's wait, a takeover).
func (a *auditor) allow(budget time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.budget = max(a.budget, budget)
}

// take returns the breaches seen so far in the scenario and forgets them
// (waits included): for a scenario that breaks an invariant on purpose, to
// show the audit sees it.
func (a *auditor) take(now time.Time) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.convict()
	for uid, since := range a.blocked {
		if p := a.pods[uid]; p != nil && now.Sub(since) > a.budget {
			a.breaches = append(a.breaches, fmt.Sprintf("inference replica %s/%s waited %v for lent GPUs, budget %v", p.Namespace, p.Name, now.Sub(since).Round(time.Millisecond), a.budget))
		}
		a.blocked[uid] = now
	}
	b := a.breaches
	a.breaches, a.binds, a.longest = nil, 0, map[string]time.Duration{}
	return b
}

// check fails t with every breach seen during the scenario, and logs what
// was audited.
func (a *auditor) check(t *testing.T) {
	t.Helper()
	heap := ownHeapInUse()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.convict()
	now := time.Now()
	for uid, since := range a.blocked {
		if p := a.pods[uid]; p != nil {
			a.waited(p, now.Sub(since))
		}
	}
	var worst time.Duration
	var who string
	for pod, d := range a.longest {
		if d > worst {
			worst, who = d, pod
		}
		if d > a.budget {
			a.breaches = append(a.breaches, fmt.Sprintf("inference replica %s waited %v for lent GPUs, budget %v", pod, d.Round(time.Millisecond), a.budget))
		}
	}
	// Loose on purpose: a scenario's own servers and clients come and go;
	// what must not happen is memory that grows with what a tenant sends.
	if bound := 2*a.baseHeap + 64<<20; heap > bound {
		a.breaches = append(a.breaches, fmt.Sprintf("heap in use %.1f MiB, over the bound %.1f MiB (twice the %.1f MiB at the start, and 64 MiB)", mib(heap), mib(bound), mib(a.baseHeap)))
	}
	t.Logf("audit: bindings of lent GPUs within their verdicts: %d; inference replicas that waited for lent GPUs: %d, longest %v %s (budget %v); heap in use %.1f MiB (%.1f at the start)",
		a.binds-countPrefix(a.breaches, "pod "), len(a.longest), worst.Round(time.Millisecond), who, a.budget, mib(heap), mib(a.baseHeap))
	sort.Strings(a.breaches)
	for _, b := range a.breaches {
		t.Errorf("invariant broken: %s", b)
	}
}

func (a *auditor) node(n *v1.Node) {
	v, err := harvest.ReadNode(n)
	if err != nil || n.Labels[api.LabelPool] != api.PoolInference {
		v = harvest.Closed // unreadable, or not the pool's: lends nothing
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.nodes[n.Name] = n
	now := time.Now()
	seen := a.verdicts[n.Name]
	// Keep the verdict in force slack ago, and every later one.
	for len(seen) > 1 && now.Sub(seen[1].at) > slack {
		seen = seen[1:]
	}
	if len(seen) == 0 || seen[len(seen)-1].v != v {
		seen = append(seen, seenVerdict{at: now, v: v})
	}
	a.verdicts[n.Name] = seen
	rv, _ := strconv.ParseUint(n.ResourceVersion, 10, 64)
	kept := a.suspects[:0]
	for _, s := range a.suspects {
		if s.node == n.Name && v.State == api.HarvestOpen && v.HarvestableGPUs >= s.held && rv < s.rv {
			continue // the verdict was written before the binding, seen after it
		}
		kept = append(kept, s)
	}
	a.suspects = kept
}

// lends is the most GPUs any verdict node carried over the last slack lent.
func (a *auditor) lends(node string, now time.Time) int64 {
	var most int64
	seen := a.verdicts[node]
	for i, s := range seen {
		if i+1 < len(seen) && now.Sub(seen[i+1].at) > slack {
			continue // replaced before the window
		}
		if s.v.State == api.HarvestOpen {
			most = max(most, s.v.HarvestableGPUs)
		}
	}
	return most
}

func (a *auditor) pod(p *v1.Pod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pods[p.UID] = p
	if refusedForGPUs(p) {
		// The kubelet's admission refused it: it never held the GPUs its
		// binding named. Two schedulers binding from caches that have not
		// seen each other's bindings (leader election off) can bind past a
		// verdict; the kubelet is the backstop, and the scenario counts them.
		a.suspects = slices.DeleteFunc(a.suspects, func(s suspect) bool { return s.pod == p.UID })
	}
	if p.Spec.NodeName == "" || a.bound[p.UID] {
		return
	}
	a.bound[p.UID] = true
	if isInferenceClass(p) || api.PodGPUs(p, api.GPUResource) == 0 {
		return
	}
	// A pod that is not inference's has just been bound to GPUs: all such
	// pods on its node must fit what a recent verdict lent.
	now := time.Now()
	a.binds++
	held := a.lentOn(p.Spec.NodeName)
	for _, g := range a.gone {
		if g.node == p.Spec.NodeName && now.Sub(g.at) <= slack {
			held -= g.gpus
		}
	}
	if lends := a.lends(p.Spec.NodeName, now); held > lends {
		rv, _ := strconv.ParseUint(p.ResourceVersion, 10, 64)
		a.suspects = append(a.suspects, suspect{pod: p.UID, node: p.Spec.NodeName, held: held, rv: rv, breach: fmt.Sprintf("pod %s/%s bound to %s, where pods not inference's hold %d GPUs and no verdict over the last %v lent more than %d",
			p.Namespace, p.Name, p.Spec.NodeName, held, slack, lends)})
	}
}

func (a *auditor) podGone(p *v1.Pod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if since, ok := a.blocked[p.UID]; ok {
		a.waited(p, time.Since(since))
		delete(a.blocked, p.UID)
	}
	delete(a.pods, p.UID)
	delete(a.bound, p.UID)
	now := time.Now()
	if p.Spec.NodeName != "" && !isInferenceClass(p) {
		a.gone = append(a.gone, goneGPUs{at: now, node: p.Spec.NodeName, gpus: api.PodGPUs(p, api.GPUResource)})
	}
	for len(a.gone) > 0 && now.Sub(a.gone[0].at) > slack {
		a.gone = a.gone[1:]
	}
}

// refusedForGPUs: a kubelet's admission failed p for want of GPUs (as the
// stand-in kubelet and a real one mark it).
func refusedForGPUs(p *v1.Pod) bool {
	return p.Status.Phase == v1.PodFailed && p.Status.Reason == "OutOf"+string(api.GPUResource)
}

// lentOn is the GPUs that pods not inference's hold on node, those
// terminating included: their GPUs are not back until they are gone.
func (a *auditor) lentOn(node string) int64 {
	var n int64
	for _, p := range a.pods {
		if p.Spec.NodeName == node && !isInferenceClass(p) && !finished(p) {
			n += api.PodGPUs(p, api.GPUResource)
		}
	}
	return n
}

// waits updates, for each pending inference replica, whether it waits for
// lent GPUs: no node it may run on has the GPUs free, and one would if the
// pods not inference's gave theirs back. A replica no node could take either
// way waits for something Gleaner does not hold.
func (a *auditor) waits(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	used, lent := map[string]int64{}, map[string]int64{}
	for _, p := range a.pods {
		if p.Spec.NodeName == "" || finished(p) {
			continue
		}
		g := api.PodGPUs(p, api.GPUResource)
		used[p.Spec.NodeName] += g
		if !isInferenceClass(p) {
			lent[p.Spec.NodeName] += g
		}
	}
	for uid, p := range a.pods {
		if !isInferenceClass(p) || p.Spec.NodeName != "" || p.DeletionTimestamp != nil {
			continue
		}
		want := api.PodGPUs(p, api.GPUResource)
		free, freeable := false, false
		for name, n := range a.nodes {
			if !mayRun(p, n) {
				continue
			}
			alloc := n.Status.Allocatable[api.GPUResource]
			room := alloc.Value() - used[name]
			free = free || room >= want
			freeable = freeable || room+lent[name] >= want
		}
		since, waiting := a.blocked[uid]
		switch {
		case !free && freeable && !waiting:
			a.blocked[uid] = now
		case (free || !freeable) && waiting:
			a.waited(p, now.Sub(since))
			delete(a.blocked, uid)
		}
	}
	for uid, since := range a.blocked {
		p := a.pods[uid]
		if p == nil || p.Spec.NodeName != "" {
			if p != nil {
				a.waited(p, now.Sub(since))
			}
			delete(a.blocked, uid)
		}
	}
}

// waited records that inference replica p waited d for lent GPUs.
func (a *auditor) waited(p *v1.Pod, d time.Duration) {
	key := p.Namespace + "/" + p.Name
	a.longest[key] = max(a.longest[key], d)
}

// mayRun says whether the scheduler could place p on n, as far as the
// scenarios' pods ask: a Ready, schedulable node its node selector matches.
func mayRun(p *v1.Pod, n *v1.Node) bool {
	if n.Spec.Unschedulable {
		return false
	}
	ready := false
	for _, c := range n.Status.Conditions {
		ready = ready || c.Type == v1.NodeReady && c.Status == v1.ConditionTrue
	}
	if !ready {
		return false
	}
	for k, v := range p.Spec.NodeSelector {
		if n.Labels[k] != v {
			return false
		}
	}
	return true
}

func isInferenceClass(p *v1.Pod) bool { return p.Spec.PriorityClassName == api.PriorityClassInference }

func finished(p *v1.Pod) bool {
	return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
}

func ownHeapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func countPrefix(ss []string, prefix string) int {
	n := 0
	for _, s := range ss {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}
