package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/gleaner-dev/gleaner/internal/testobj"
	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/autoscale"
	"github.com/gleaner-dev/gleaner/pkg/availability"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
	"github.com/gleaner-dev/gleaner/pkg/round"
	"github.com/gleaner-dev/gleaner/pkg/vllm"
)

var t0 = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

// staticLoad is the metrics informer's snapshot, set by the test.
type staticLoad struct{ loads []vllm.PodLoad }

func (s *staticLoad) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (s *staticLoad) HasSynced() bool               { return true }
func (s *staticLoad) Snapshot() []vllm.PodLoad      { return s.loads }

// fresh is one bound replica's load as a fresh scrape reports it.
func fresh(namespace, service string, running, waiting float64, gpus int64) vllm.PodLoad {
	return vllm.PodLoad{Namespace: namespace, Service: service, NodeName: "a", GPUs: gpus, Fresh: true, ScrapedAt: t0,
		Metrics: vllm.Metrics{Running: running, Waiting: waiting}}
}

// testCluster is a controller over a fake API whose listers read indexers the
// test fills: no informer timing, no apiserver.
type testCluster struct {
	client                               *fake.Clientset
	nodes, pods, deployments, namespaces cache.Indexer
	load                                 *staticLoad
	clock                                *testingclock.FakePassiveClock
	c                                    *Controller
	recorder                             *record.FakeRecorder
	// actions are the API calls of the last sync.
	actions []k8stesting.Action
}

func newTestCluster(t testing.TB, cfg Config) *testCluster {
	t.Helper()
	RegisterMetrics() // as the binary does: series are created, and deleted, for real
	tc := &testCluster{
		client:      fake.NewClientset(),
		nodes:       cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		pods:        cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		deployments: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		namespaces:  cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		load:        &staticLoad{},
		clock:       testingclock.NewFakePassiveClock(t0),
		recorder:    record.NewFakeRecorder(1000),
	}
	cfg.Clock = tc.clock
	cfg.defaults()
	tc.c = newController(tc.client, cfg, tc.load)
	tc.c.nodes = corelisters.NewNodeLister(tc.nodes)
	tc.c.pods = corelisters.NewPodLister(tc.pods)
	tc.c.deployments = appslisters.NewDeploymentLister(tc.deployments)
	tc.c.namespaces = corelisters.NewNamespaceLister(tc.namespaces)
	// The admin opted serving and sim in as inference; research is a tenant's.
	for _, ns := range []*v1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "serving", Labels: map[string]string{api.LabelInferenceNamespace: "true"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "sim", Labels: map[string]string{api.LabelInferenceNamespace: "true"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "research"}},
	} {
		if err := tc.namespaces.Add(ns); err != nil {
			t.Fatal(err)
		}
	}
	tc.c.recorder = tc.recorder
	tc.c.evictor.Recorder = tc.recorder
	return tc
}

// set makes objs the whole cluster: in the fake API and in the listers. A
// node keeps the verdict the controller last published on it.
func (tc *testCluster) set(t testing.TB, objs ...runtime.Object) {
	t.Helper()
	tracker := tc.client.Tracker()
	gvrs := map[string]schema.GroupVersionResource{
		"nodes": v1.SchemeGroupVersion.WithResource("nodes"), "pods": v1.SchemeGroupVersion.WithResource("pods"),
		"deployments": appsv1.SchemeGroupVersion.WithResource("deployments"),
	}
	for kind, idx := range map[string]cache.Indexer{"nodes": tc.nodes, "pods": tc.pods, "deployments": tc.deployments} {
		for _, o := range idx.List() {
			m := o.(metav1.Object)
			if kind == "nodes" {
				continue // kept, below, for its published verdict
			}
			if err := tracker.Delete(gvrs[kind], m.GetNamespace(), m.GetName()); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			if err := idx.Delete(o); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, o := range objs {
		o = o.DeepCopyObject()
		switch obj := o.(type) {
		case *v1.Node:
			if cur, err := tc.client.CoreV1().Nodes().Get(context.Background(), obj.Name, metav1.GetOptions{}); err == nil {
				// Keep what the controller published on the node.
				if state, ok := cur.Labels[api.LabelHarvest]; ok {
					if obj.Labels == nil {
						obj.Labels = map[string]string{}
					}
					obj.Labels[api.LabelHarvest] = state
				}
				for _, key := range []string{api.AnnotationHarvestableGPUs, api.AnnotationAvailability} {
					if a, ok := cur.Annotations[key]; ok {
						if obj.Annotations == nil {
							obj.Annotations = map[string]string{}
						}
						obj.Annotations[key] = a
					}
				}
				if err := tracker.Update(gvrs["nodes"], obj, ""); err != nil {
					t.Fatal(err)
				}
			} else if err := tracker.Add(obj); err != nil {
				t.Fatal(err)
			}
			if err := tc.nodes.Update(obj); err != nil {
				t.Fatal(err)
			}
		case *v1.Pod:
			if err := tracker.Add(obj); err != nil {
				t.Fatal(err)
			}
			if err := tc.pods.Add(obj); err != nil {
				t.Fatal(err)
			}
		case *appsv1.Deployment:
			if err := tracker.Add(obj); err != nil {
				t.Fatal(err)
			}
			if err := tc.deployments.Add(obj); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("set: %T", o)
		}
	}
}

// sync runs one round at now and returns the API writes it made, as
// "verb resource/subresource name" strings in order, and clears them.
func (tc *testCluster) sync(t *testing.T, now time.Time) ([]string, error) {
	t.Helper()
	tc.clock.SetTime(now)
	err := tc.c.Sync(context.Background())
	// The node informer sees what the round published.
	for _, o := range tc.nodes.List() {
		if n, err := tc.client.CoreV1().Nodes().Get(context.Background(), o.(*v1.Node).Name, metav1.GetOptions{}); err == nil {
			if err := tc.nodes.Update(n); err != nil {
				t.Fatal(err)
			}
		}
	}
	var writes []string
	for _, a := range tc.client.Actions() {
		if a.GetVerb() == "get" || a.GetVerb() == "list" || a.GetVerb() == "watch" {
			continue
		}
		res := a.GetResource().Resource
		if a.GetSubresource() != "" {
			res += "/" + a.GetSubresource()
		}
		name := ""
		switch a := a.(type) {
		case k8stesting.PatchAction:
			name = a.GetName()
		case k8stesting.CreateAction:
			if m, ok := a.GetObject().(metav1.Object); ok {
				name = m.GetName()
			}
		case k8stesting.UpdateAction:
			if m, ok := a.GetObject().(metav1.Object); ok {
				name = m.GetName()
			}
		}
		writes = append(writes, fmt.Sprintf("%s %s %s", a.GetVerb(), res, name))
	}
	tc.actions = tc.client.Actions()
	tc.client.ClearActions()
	return writes, err
}

// verdict is the verdict node carries in the fake API.
func (tc *testCluster) verdict(t *testing.T, node string) harvest.Verdict {
	t.Helper()
	n, err := tc.client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v, err := harvest.ReadNode(n)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func chat(replicas int32, annotations map[string]string) *appsv1.Deployment {
	return testobj.Deployment("serving", "chat", replicas, 4, annotations)
}

// The round's order of acts (writes.go), one write at a time: a node that owes
// GPUs publishes its verdict and evicts first, then verdicts that lend less,
// the heartbeat, verdicts that lend more, and availability last. An eviction
// names why on the pod. A verdict is written only when it changes.
func TestSyncWritesWhatInferenceWaitsOnFirst(t *testing.T) {
	tc := newTestCluster(t, Config{WriteWorkers: 1, Policy: round.Config{ReclaimLead: 15 * time.Minute, Margin: -1}})
	objs := []runtime.Object{
		testobj.Node("a", 8), testobj.Node("b", 8),
		testobj.Inference("serving", "chat-0", "chat", "a", 4),
		testobj.BestEffort("research", "job-b", "b", 8, t0.Add(-time.Hour)),
		chat(1, nil),
	}
	tc.set(t, objs...)
	tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", 10, 0, 4)}
	writes, err := tc.sync(t, t0)
	if err != nil {
		t.Fatal(err)
	}
	// One replica of 16 carries 10: no headroom; a has 4 GPUs spare, b lends
	// all 8. Both verdicts lend more: after the heartbeat. After everything
	// else, both open nodes' availability: with nothing judged yet, no chances.
	if want := []string{"create leases " + api.HeartbeatLeaseName, "patch nodes a", "patch nodes b", "patch nodes a", "patch nodes b"}; !reflect.DeepEqual(only(writes, "nodes", "pods/eviction", "leases"), want) {
		t.Fatalf("writes %v, want %v", writes, want)
	}
	if n, err := tc.client.CoreV1().Nodes().Get(context.Background(), "a", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if got := n.Annotations[api.AnnotationAvailability]; got != "for>=4h0m0s" {
		t.Fatalf("a's availability %q", got)
	}
	if v := tc.verdict(t, "a"); v != (harvest.Verdict{State: api.HarvestOpen, HarvestableGPUs: 4}) {
		t.Fatalf("a: %+v", v)
	}
	tc.set(t, objs...)
	if writes, _ := tc.sync(t, t0.Add(5*time.Second)); len(only(writes, "nodes", "pods/eviction")) != 0 {
		t.Fatalf("writes %v for an unchanged plan", writes)
	}

	// 60 requests need three more replicas: a's 4 free GPUs hold one, b's 8 the other two.
	tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", 16, 44, 4)}
	writes, _ = tc.sync(t, t0.Add(10*time.Second))
	// b owes 8: its verdict and its eviction come first, then a's verdict
	// that lends less, the heartbeat, and the availability of nodes no
	// longer open removed.
	if want := []string{"patch nodes b", "create pods/eviction job-b", "patch nodes a", "update leases " + api.HeartbeatLeaseName, "patch nodes a", "patch nodes b"}; !reflect.DeepEqual(only(writes, "nodes", "pods/eviction", "leases"), want) {
		t.Fatalf("writes %v, want %v", writes, want)
	}
	if v := tc.verdict(t, "b"); v.State != api.HarvestDraining || v.HarvestableGPUs != 0 {
		t.Fatalf("b: %+v, want draining with nothing harvestable", v)
	}
	select {
	case e := <-tc.recorder.Events:
		if want := "Warning GleanerReclaimed Evicted by gleaner-controller with a grace period of 30s to return GPUs to inference: node b must return 8 GPUs"; len(e) < len(want) || e[:len(want)] != want {
			t.Fatalf("event %q", e)
		}
	default:
		t.Fatal("no Event on the evicted pod")
	}
}

// A node whose verdict could not be written evicts nothing: the scheduler
// could refill the GPUs taken back. Another node that owes GPUs is not held
// up by it, and the heartbeat waits for a round that wrote every verdict.
func TestEvictionsWaitForTheirNodesVerdict(t *testing.T) {
	tc := newTestCluster(t, Config{Policy: round.Config{ReclaimLead: 15 * time.Minute, Margin: -1}})
	objs := []runtime.Object{
		testobj.Node("a", 8), testobj.Node("b", 8),
		testobj.Inference("serving", "chat-0", "chat", "a", 4),
		testobj.BestEffort("research", "job-a", "a", 4, t0.Add(-time.Hour)),
		testobj.BestEffort("research", "job-b", "b", 8, t0.Add(-time.Hour)),
		chat(1, nil),
	}
	tc.set(t, objs...)
	tc.c.heartbeat.start()
	tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", 10, 0, 4)}
	if _, err := tc.sync(t, t0); err != nil {
		t.Fatal(err)
	}
	tc.set(t, objs...)
	tc.client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.PatchAction).GetName() == "b" {
			return true, nil, apierrors.NewServiceUnavailable("etcd is away")
		}
		return false, nil, nil
	})
	// Three more replicas: both nodes owe what they lend.
	tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", 16, 44, 4)}
	writes, err := tc.sync(t, t0.Add(5*time.Second))
	if err == nil {
		t.Fatal("a verdict that could not be written is not reported")
	}
	if got := only(writes, "pods/eviction", "leases"); !reflect.DeepEqual(got, []string{"create pods/eviction job-a"}) {
		t.Fatalf("evictions and heartbeats %v, want job-a's eviction alone: none on b, whose verdict failed, and no heartbeat", got)
	}
	if v := tc.verdict(t, "a"); v.State != api.HarvestDraining {
		t.Fatalf("a: %+v, want draining", v)
	}
}

// A refused eviction makes the choice again among the other pods, in the
// same round. One the API server did not judge (throttled, timed out) is no
// refusal: no other pod is taken in its place that round; one that timed out
// may have been carried out, and a stand-in would take two pods for one.
func TestSyncEvictsAnotherPodWhenOneIsRefused(t *testing.T) {
	refused := budgetRefusal()
	throttled := apierrors.NewTooManyRequests("the server has received too many requests", 1)
	for _, tt := range []struct {
		name    string
		errs    map[string]error // by pod
		evicted []string         // tried, in order
	}{
		{"refused by a budget", map[string]error{"shielded": refused}, []string{"shielded", "other"}},
		{"throttled", map[string]error{"shielded": throttled}, []string{"shielded"}},
		{"the call's own timeout", map[string]error{"shielded": fmt.Errorf("waiting: %w", context.DeadlineExceeded)}, []string{"shielded"}},
		{"the server's timeout", map[string]error{"shielded": apierrors.NewServerTimeout(policyv1.Resource("evictions"), "create", 1)}, []string{"shielded"}},
		{"unavailable", map[string]error{"shielded": apierrors.NewServiceUnavailable("apiserver is shutting down")}, []string{"shielded"}},
		{"refused, and the pod in its place throttled", map[string]error{"shielded": refused, "other": throttled}, []string{"shielded", "other"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc := newTestCluster(t, Config{Policy: round.Config{ReclaimLead: 15 * time.Minute, Margin: -1}})
			tc.set(t, testobj.Node("a", 16),
				testobj.Inference("serving", "chat-0", "chat", "a", 4),
				testobj.BestEffort("research", "shielded", "a", 4, t0.Add(-time.Minute)), // the cheapest to evict
				testobj.BestEffort("research", "other", "a", 4, t0.Add(-time.Hour)),
				testobj.BestEffort("research", "third", "a", 4, t0.Add(-2*time.Hour)),
				chat(1, nil))
			tc.client.PrependReactor("create", "pods/eviction", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if err := tt.errs[a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction).Name]; err != nil {
					return true, nil, err
				}
				return false, nil, nil
			})
			tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", 16, 4, 4)} // waiting: one more replica
			writes, err := tc.sync(t, t0)
			if err == nil {
				t.Fatal("an eviction that failed is not reported")
			}
			want := []string{"patch nodes a"}
			for _, p := range tt.evicted {
				want = append(want, "create pods/eviction "+p)
			}
			if got := only(writes, "nodes", "pods/eviction"); !reflect.DeepEqual(got, want) {
				t.Fatalf("writes %v, want %v", got, want)
			}
		})
	}
}

// budgetRefusal is the API server's answer to an eviction a
// PodDisruptionBudget does not allow.
func budgetRefusal() error {
	err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)
	err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: policyv1.DisruptionBudgetCause, Message: "The disruption budget never needs 1 healthy pods and has 1 currently"}}
	return err
}

// The second choice a refusal on one node makes does not try again, or
// replace, an eviction another node's round left undecided.
func TestARefusalDoesNotRetryAnotherNodesUndecidedEviction(t *testing.T) {
	refused := budgetRefusal()
	tc := newTestCluster(t, Config{WriteWorkers: 1, Policy: round.Config{ReclaimLead: 15 * time.Minute, Margin: -1}})
	tc.set(t, testobj.Node("a", 8), testobj.Node("b", 8), testobj.Node("c", 4),
		testobj.Inference("serving", "chat-0", "chat", "c", 4),
		testobj.BestEffort("research", "slow-a", "a", 4, t0.Add(-time.Minute)),
		testobj.BestEffort("research", "spare-a", "a", 4, t0.Add(-time.Hour)),
		testobj.BestEffort("research", "shielded-b", "b", 4, t0.Add(-time.Minute)),
		testobj.BestEffort("research", "spare-b", "b", 4, t0.Add(-time.Hour)),
		chat(1, nil))
	errs := map[string]error{"slow-a": apierrors.NewTooManyRequests("the server has received too many requests", 1), "shielded-b": refused}
	tc.client.PrependReactor("create", "pods/eviction", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if err := errs[a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction).Name]; err != nil {
			return true, nil, err
		}
		return false, nil, nil
	})
	tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", 16, 40, 4)} // three more replicas: a owes 8, b 4
	writes, err := tc.sync(t, t0)
	if err == nil {
		t.Fatal("the failed evictions are not reported")
	}
	want := []string{"patch nodes a", "create pods/eviction slow-a", "create pods/eviction spare-a", "patch nodes b", "create pods/eviction shielded-b", "create pods/eviction spare-b"}
	if got := only(writes, "nodes", "pods/eviction"); !reflect.DeepEqual(got, want) {
		t.Fatalf("writes %v, want %v: slow-a tried once, spare-b in shielded-b's place", got, want)
	}
}

// A round whose time runs out while it evicts stops there: an eviction cut
// off by the deadline is not a refusal, so no other pod is chosen for it and
// no later eviction is tried (at 10,000 nodes a round once spent 17 s past
// its deadline trying, and failing, 36,820 more).
func TestSyncStopsEvictingWhenItsTimeIsUp(t *testing.T) {
	objs := []runtime.Object{testobj.Node("a", 16),
		testobj.Inference("serving", "chat-0", "chat", "a", 4),
		testobj.BestEffort("research", "one", "a", 4, t0.Add(-time.Minute)),
		testobj.BestEffort("research", "two", "a", 4, t0.Add(-time.Hour)),
		testobj.BestEffort("research", "three", "a", 4, t0.Add(-time.Hour)),
		chat(1, nil)}
	for _, tt := range []struct {
		name    string
		waiting float64
	}{
		{"a owes all it lends", 36}, // three more replicas
		{"a owes one pod, and others are left to choose", 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc := newTestCluster(t, Config{Policy: round.Config{ReclaimLead: 15 * time.Minute, Margin: -1}})
			tc.set(t, objs...)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var tried []string
			tc.client.PrependReactor("create", "pods/eviction", func(a k8stesting.Action) (bool, runtime.Object, error) {
				tried = append(tried, a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction).Name)
				cancel() // the round's time is up during its first eviction
				return true, nil, context.Canceled
			})
			tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", 16, tt.waiting, 4)}
			tc.clock.SetTime(t0)
			if err := tc.c.Sync(ctx); err == nil {
				t.Fatal("a round cut off while evicting reports no error")
			}
			if len(tried) != 1 {
				t.Fatalf("evictions tried %v, want one: none after the round's time was up", tried)
			}
		})
	}
}

// Autoscaled Deployments are scaled through their scale subresource; a bad
// annotation is reported once as an Event, not every round.
func TestSyncScalesAndReportsBadAnnotationsOnce(t *testing.T) {
	tc := newTestCluster(t, Config{Policy: round.Config{Autoscale: autoscale.Config{StableWindow: time.Minute, PanicWindow: 10 * time.Second}}})
	var scaled []int32
	tc.client.PrependReactor("update", "deployments/scale", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s := a.(k8stesting.UpdateAction).GetObject().(*autoscalingv1.Scale)
		scaled = append(scaled, s.Spec.Replicas)
		return true, s, nil
	})
	tc.set(t, testobj.Node("a", 8), testobj.Inference("serving", "chat-0", "chat", "a", 4),
		chat(1, map[string]string{api.AnnotationAutoscale: "true", api.AnnotationMaxReplicas: "2", api.AnnotationTargetLoad: "many"}))
	tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", 16, 48, 4)}
	for i := range 3 {
		if _, err := tc.sync(t, t0.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if len(scaled) == 0 || scaled[0] != 2 {
		t.Fatalf("scaled to %v, want 2 (64 requests want 4, the annotation caps at 2)", scaled)
	}
	var bad int
	for len(tc.recorder.Events) > 0 {
		if e := <-tc.recorder.Events; len(e) > 0 && strings.Contains(e, ReasonInvalidAnnotation) {
			bad++
		}
	}
	if bad != 1 {
		t.Fatalf("%d invalid-annotation Events over 3 rounds, want 1", bad)
	}
}

// The learned profile is saved to the Deployment, and read back by a new controller.
func TestSyncSavesTheLearnedProfile(t *testing.T) {
	tc := newTestCluster(t, Config{Policy: round.Config{ProfileWriteInterval: time.Minute}})
	tc.set(t, testobj.Node("a", 8), testobj.Inference("serving", "chat-0", "chat", "a", 4), chat(1, nil))
	tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", 7, 0, 4)}
	if _, err := tc.sync(t, t0); err != nil {
		t.Fatal(err)
	}
	d, err := tc.client.AppsV1().Deployments("serving").Get(context.Background(), "chat", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if raw := d.Annotations[api.AnnotationDemandProfile]; !json.Valid([]byte(raw)) {
		t.Fatalf("stored profile %q is not JSON", raw)
	}
	tc2 := newTestCluster(t, Config{})
	tc2.set(t, testobj.Node("a", 8), testobj.Inference("serving", "chat-0", "chat", "a", 4), d)
	tc2.load.loads = []vllm.PodLoad{fresh("serving", "chat", 1, 0, 4)}
	tc2.clock.SetTime(t0.Add(7 * 24 * time.Hour))
	o, err := tc2.c.observe(context.Background(), t0.Add(7*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	dec := tc2.c.planner.Plan(o.Observation)
	if got := dec.Services[0].Forecast.Profile; got != 7 {
		t.Fatalf("a week later the new controller forecasts %v from the stored profile, want 7", got)
	}
}

// only keeps the writes to the given resources.
func only(writes []string, resources ...string) []string {
	out := []string{}
	for _, w := range writes {
		for _, r := range resources {
			if strings.Contains(w, " "+r+" ") {
				out = append(out, w)
			}
		}
	}
	return out
}

// The heartbeat is renewed only after a round that published every verdict:
// while Node writes fail, the scheduler must stop lending, and /readyz fails
// once the heartbeat timeout has passed without such a round.
func TestHeartbeatOnlyAfterEveryVerdictIsPublished(t *testing.T) {
	tc := newTestCluster(t, Config{Heartbeat: HeartbeatLease{Timeout: 15 * time.Second}})
	tc.set(t, testobj.Node("a", 8), testobj.Inference("serving", "chat-0", "chat", "a", 4), chat(1, nil))
	tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", 10, 0, 4)}
	tc.c.heartbeat.start()
	if writes, err := tc.sync(t, t0); err != nil || len(only(writes, "leases")) != 1 {
		t.Fatalf("writes %v, err %v: want the heartbeat Lease written once", writes, err)
	}
	renewed := func() time.Time {
		l, err := tc.client.CoordinationV1().Leases(api.SystemNamespace).Get(context.Background(), api.HeartbeatLeaseName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || *l.Spec.LeaseDurationSeconds != 15 {
			t.Fatalf("heartbeat %+v", l.Spec)
		}
		return l.Spec.RenewTime.Time
	}
	first := renewed()

	tc.client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd is away")
	})
	tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", 60, 0, 4)} // the verdict must change
	for i := 1; i <= 4; i++ {
		writes, err := tc.sync(t, t0.Add(time.Duration(i)*5*time.Second))
		if err == nil || len(only(writes, "leases")) != 0 {
			t.Fatalf("round %d with failing Node writes: writes %v, err %v; want an error and no heartbeat", i, writes, err)
		}
	}
	if got := renewed(); !got.Equal(first) {
		t.Fatalf("heartbeat renewed at %v while no verdict could be published", got)
	}
	if err := tc.c.Planning(); err == nil {
		t.Fatal("/readyz passes 20 s after the last round that published its verdicts (bound 15 s)")
	}
	if err := tc.c.heartbeat.release(context.Background()); err != nil {
		t.Fatal(err)
	}
	l, _ := tc.client.CoordinationV1().Leases(api.SystemNamespace).Get(context.Background(), api.HeartbeatLeaseName, metav1.GetOptions{})
	if *l.Spec.HolderIdentity != "" || tc.c.Planning() != nil {
		t.Fatalf("after release: holder %q, readiness %v; want an empty holder and a standby that is ready", *l.Spec.HolderIdentity, tc.c.Planning())
	}
}

// Inference pods and Deployments in a namespace the admin did not opt in make
// no demand: a tenant labelling its own pods "inference", with a demand
// profile and a huge load, moves no verdict and evicts nothing.
func TestForgedDemandFromATenantNamespaceIsIgnored(t *testing.T) {
	tc := newTestCluster(t, Config{Policy: round.Config{ReclaimLead: 15 * time.Minute}})
	forged := testobj.Deployment("research", "forged", 0, 8, map[string]string{
		api.AnnotationDemandProfile: `{"v":1,"hours":{"0":{"peak":1e300,"weeks":9}}}`, api.AnnotationGPUsPerReplica: "8"})
	tc.set(t, testobj.Node("a", 8), testobj.Node("b", 8),
		testobj.Inference("serving", "chat-0", "chat", "a", 4), chat(1, nil),
		testobj.Inference("research", "forged-0", "forged", "a", 0), forged,
		testobj.BestEffort("research", "job", "b", 8, t0.Add(-time.Hour)))
	tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", 10, 0, 4), fresh("research", "forged", 1e9, 1e9, 8)}
	writes, err := tc.sync(t, t0)
	if err != nil {
		t.Fatal(err)
	}
	if got := only(writes, "pods/eviction"); len(got) != 0 {
		t.Fatalf("evicted %v for a tenant's forged demand", got)
	}
	if v := tc.verdict(t, "b"); v != (harvest.Verdict{State: api.HarvestOpen, HarvestableGPUs: 8}) {
		t.Fatalf("b: %+v, want open for 8: the forged service is no service", v)
	}
	if d, _ := tc.client.AppsV1().Deployments("research").Get(context.Background(), "forged", metav1.GetOptions{}); d.Annotations[api.AnnotationDemandProfile] != forged.Annotations[api.AnnotationDemandProfile] {
		t.Fatal("the controller wrote to a tenant's Deployment")
	}

	// The same service, once the admin opts its namespace in, is one: it asks
	// for room, bounded by what the pool can hold.
	opted := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "research", Labels: map[string]string{api.LabelInferenceNamespace: "true"}}}
	if err := tc.namespaces.Update(opted); err != nil {
		t.Fatal(err)
	}
	writes, _ = tc.sync(t, t0.Add(5*time.Second))
	if got := only(writes, "pods/eviction"); len(got) != 1 {
		t.Fatalf("evictions %v once the namespace is opted in, want the job on b", got)
	}
}

// Which namespaces are inference's: with --inference-namespaces, those
// listed, unless labelled gleaner.dev/inference=false (opting out, as the
// admission policies read it); without, those labelled true.
func TestInferenceNamespaces(t *testing.T) {
	for _, tt := range []struct {
		name   string
		listed []string
		want   map[string]bool
	}{
		{"by label", nil, map[string]bool{"in": true, "out": false, "listed": false, "none": false, "missing": false}},
		{"by list", []string{"listed", "out", "missing"}, map[string]bool{"in": false, "out": false, "listed": true, "none": false, "missing": false}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc := newTestCluster(t, Config{Metrics: vllm.Options{Namespaces: tt.listed}})
			for name, value := range map[string]string{"in": "true", "out": "false", "listed": ""} {
				ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
				if value != "" {
					ns.Labels[api.LabelInferenceNamespace] = value
				}
				if err := tc.namespaces.Add(ns); err != nil {
					t.Fatal(err)
				}
			}
			optedIn := tc.c.inferenceNamespaces()
			for name, want := range tt.want {
				if got := optedIn(name); got != want {
					t.Errorf("%s: opted in %v, want %v", name, got, want)
				}
			}
		})
	}
}

// A replica that is pending (not yet bound) holds no GPU: its room is kept at
// once, so the node drains before the replica would wait; one bound but never
// scraped counts as starting only until the startup deadline.
func TestPendingAndNeverReadyReplicasKeepRoom(t *testing.T) {
	tc := newTestCluster(t, Config{StartupDeadline: 10 * time.Minute, Policy: round.Config{ReclaimLead: 15 * time.Minute, Margin: -1}})
	tc.set(t, testobj.Node("a", 8), testobj.Node("b", 8),
		testobj.Inference("serving", "chat-0", "chat", "a", 4), chat(2, nil),
		testobj.BestEffort("research", "job-a", "a", 4, t0.Add(-time.Hour)),
		testobj.BestEffort("research", "job-b", "b", 8, t0.Add(-time.Hour)))
	tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", 4, 0, 4),
		{Namespace: "serving", Service: "chat", Name: "chat-1", GPUs: 4, Created: t0}} // pending: no node yet
	writes, err := tc.sync(t, t0)
	if err != nil {
		t.Fatal(err)
	}
	if got := only(writes, "pods/eviction"); len(got) != 1 {
		t.Fatalf("evictions %v: the pending replica's 4 GPUs must be taken back at once", got)
	}

	// Bound now, on a, but its vLLM never answers: capacity while it may still
	// be loading, saturated after the startup deadline (room for one more).
	tc.load.loads[1].NodeName = "a"
	need := func(at time.Time) int {
		o, err := tc.c.observe(context.Background(), at)
		if err != nil {
			t.Fatal(err)
		}
		return tc.c.planner.Plan(o.Observation).Services[0].Need.HeadroomReplicas
	}
	if spare := need(t0.Add(5 * time.Minute)); spare != 0 {
		t.Fatalf("5 minutes after creation: spare %d, want 0 (still starting)", spare)
	}
	if spare := need(t0.Add(11 * time.Minute)); spare != 1 {
		t.Fatalf("past the startup deadline: spare %d, want 1 (it never became ready)", spare)
	}
}

// A replica asleep in vLLM's sleep mode holds its GPUs, which are never
// lent, and is the replica that requests waiting on an awake one move to
// once woken: no lent GPUs are taken back for a new replica. Awake and idle,
// the same replica would not count as spare (it already serves), and room
// for one more is kept.
func TestAsleepReplicaHoldsItsGPUsAndIsWokenBeforeNewOnes(t *testing.T) {
	tc := newTestCluster(t, Config{Policy: round.Config{ReclaimLead: 15 * time.Minute, Margin: -1}})
	tc.set(t, testobj.Node("a", 8), testobj.Node("b", 8),
		testobj.Inference("serving", "chat-0", "chat", "a", 4), testobj.Inference("serving", "chat-1", "chat", "a", 4), chat(2, nil),
		testobj.BestEffort("research", "job", "b", 8, t0.Add(-time.Hour)))
	asleep := fresh("serving", "chat", 0, 0, 4)
	asleep.Metrics = vllm.Metrics{Engines: 1, SleepReported: 1, Sleeping: 1, SleepLevel: 1}
	tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", 2, 1, 4), asleep}

	o, err := tc.c.observe(context.Background(), t0)
	if err != nil {
		t.Fatal(err)
	}
	need := tc.c.planner.Plan(o.Observation).Services[0].Need
	if need.Current != 2 || need.HeadroomReplicas != 0 || need.Asleep != 1 || need.Wake != 1 {
		t.Errorf("need %+v: want 2 current, 1 asleep to wake and no room kept", need)
	}
	writes, err := tc.sync(t, t0)
	if err != nil {
		t.Fatal(err)
	}
	if got := only(writes, "pods/eviction"); len(got) != 0 {
		t.Errorf("evictions %v: the asleep replica serves the waiting request once woken, on its own GPUs", got)
	}
	if v := tc.verdict(t, "a"); v.HarvestableGPUs != 0 {
		t.Errorf("node a %+v: the asleep replica's 4 GPUs were made lendable", v)
	}

	tc.load.loads[1].Metrics = vllm.Metrics{Engines: 1, SleepReported: 1} // awake, idle
	writes, err = tc.sync(t, t0.Add(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got := only(writes, "pods/eviction"); len(got) != 1 {
		t.Errorf("evictions %v: awake, the idle replica is no spare and a new replica's 4 GPUs must be taken back", got)
	}
}

// The controller forgets what belonged to deleted namespaces and nodes.
func TestSyncForgetsDeletedNamespacesAndNodes(t *testing.T) {
	tc := newTestCluster(t, Config{SyncPeriod: 5 * time.Second, Policy: round.Config{ReclaimLead: 15 * time.Minute, Margin: -1}})
	job := testobj.BestEffort("gone-tomorrow", "job", "b", 8, t0.Add(-time.Hour))
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gone-tomorrow"}}
	if err := tc.namespaces.Add(ns); err != nil {
		t.Fatal(err)
	}
	tc.set(t, testobj.Node("a", 8), testobj.Node("b", 8), testobj.Inference("serving", "chat-0", "chat", "a", 4), chat(1, nil), job)
	tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", 60, 0, 4)} // b must give its GPUs back
	for i := range 2 {
		if _, err := tc.sync(t, t0.Add(time.Duration(i)*5*time.Second)); err != nil && i == 0 {
			t.Fatal(err)
		}
	}
	if !hasSeries(t, "gleaner_harvested_gpu_seconds_total", "namespace", "gone-tomorrow") ||
		!slices.Contains(tc.c.ledger.Namespaces(), "gone-tomorrow") || tc.c.drainingSince["b"].IsZero() {
		t.Fatalf("set-up: ledger %v, draining %v", tc.c.ledger.Namespaces(), tc.c.drainingSince)
	}
	if err := tc.namespaces.Delete(ns); err != nil {
		t.Fatal(err)
	}
	if err := tc.nodes.Delete(testobj.Node("b", 8)); err != nil {
		t.Fatal(err)
	}
	tc.set(t, testobj.Node("a", 8), testobj.Inference("serving", "chat-0", "chat", "a", 4), chat(1, nil))
	if err := tc.nodes.Delete(testobj.Node("b", 8)); err != nil && !strings.Contains(err.Error(), "not found") {
		t.Fatal(err)
	}
	if _, err := tc.sync(t, t0.Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	// serving stays: its report holds chat's waits.
	if hasSeries(t, "gleaner_harvested_gpu_seconds_total", "namespace", "gone-tomorrow") ||
		!slices.Equal(tc.c.ledger.Namespaces(), []string{"serving"}) || len(tc.c.drainingSince) != 0 {
		t.Fatalf("remembered after deletion: ledger %v, draining %v", tc.c.ledger.Namespaces(), tc.c.drainingSince)
	}
}

// hasSeries says whether the metric name has a series whose label is value.
// noSeriesFor fails if any metric still has a series for the service.
func noSeriesFor(t *testing.T, service string) {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "service" && l.GetValue() == service {
					t.Errorf("%s still has a series for the deleted service %s", f.GetName(), service)
				}
			}
		}
	}
}

func hasSeries(t *testing.T, name, label, value string) bool {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return true
				}
			}
		}
	}
	return false
}

// Each service's load, replicas and headroom are exported per round, and a
// service that is gone takes its series with it.
func TestSyncExportsPerServiceDemand(t *testing.T) {
	tc := newTestCluster(t, Config{SyncPeriod: 5 * time.Second, Policy: round.Config{Margin: -1}})
	tc.set(t, testobj.Node("a", 8), testobj.Node("b", 8), testobj.Inference("serving", "chat-0", "chat", "a", 4), chat(1, nil))
	tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", 60, 0, 4)}
	if _, err := tc.sync(t, t0); err != nil {
		t.Fatal(err)
	}
	value := func(vec *metrics.GaugeVec, labels ...string) float64 {
		v, err := testutil.GetGaugeMetricValue(vec.WithLabelValues(labels...))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	load, current, needed := value(serviceLoad, "serving", "chat"), value(serviceReplicas, "serving", "chat", "current"), value(serviceReplicas, "serving", "chat", "needed")
	if load != 60 || current != 1 || needed < 4 {
		t.Fatalf("load %g, replicas current %g needed %g; want 60, 1, at least 4 (60 requests at 16 each)", load, current, needed)
	}
	if h := value(serviceHeadroom, "serving", "chat"); h != (needed-current)*4 {
		t.Fatalf("headroom %g GPUs, want (needed - current) x 4 = %g", h, (needed-current)*4)
	}

	// The service goes: its Deployment and pods are deleted.
	tc.set(t, testobj.Node("a", 8), testobj.Node("b", 8))
	tc.load.loads = nil
	if _, err := tc.sync(t, t0.Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	noSeriesFor(t, "chat")
}

// A pod's termination counts on the controller's clock. The controller
// evicts a pod with 30 s; the API server, its clock 130 s behind, writes a
// DeletionTimestamp by which the pod is already past its grace. It is still
// returning its GPUs, and nothing else is evicted for them; once past its
// grace and the slack by the controller's clock, it is stuck, and another
// pod goes.
func TestSyncCountsTerminationsOnItsOwnClock(t *testing.T) {
	tc := newTestCluster(t, Config{Policy: round.Config{ReclaimLead: 15 * time.Minute, Margin: -1}})
	leaving := testobj.BestEffort("research", "leaving", "a", 4, t0.Add(-time.Hour))
	objs := []runtime.Object{
		testobj.Node("a", 12),
		testobj.Inference("serving", "chat-0", "chat", "a", 4),
		leaving,
		testobj.BestEffort("research", "other", "a", 4, t0.Add(-time.Hour)),
		chat(1, nil),
	}
	tc.set(t, objs...)
	tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", 16, 4, 4)} // waiting: one more replica
	writes, _ := tc.sync(t, t0)
	if want := []string{"create pods/eviction leaving"}; !reflect.DeepEqual(only(writes, "pods/eviction"), want) {
		t.Fatalf("evictions %v, want %v", only(writes, "pods/eviction"), want)
	}
	deleted := leaving.DeepCopy()
	deleted.DeletionTimestamp = &metav1.Time{Time: t0.Add(-130*time.Second + 30*time.Second)}
	deleted.DeletionGracePeriodSeconds = new(int64(30))
	objs[2] = deleted
	for _, at := range []time.Duration{5 * time.Second, 20 * time.Second, 30 * time.Second} {
		tc.set(t, objs...)
		writes, _ := tc.sync(t, t0.Add(at))
		if got := only(writes, "pods/eviction"); len(got) != 0 {
			t.Fatalf("%v after its eviction: evicted %v, while leaving is returning its GPUs", at, got)
		}
	}
	tc.set(t, objs...)
	writes, _ = tc.sync(t, t0.Add(45*time.Second))
	if want := []string{"create pods/eviction other"}; !reflect.DeepEqual(only(writes, "pods/eviction"), want) {
		t.Fatalf("45 s on, leaving is past its grace and the slack: evictions %v, want %v", only(writes, "pods/eviction"), want)
	}
}

// A tenant's best-effort pod labelled as inference does not make its node one
// that hosts inference: were it to, the room for a new replica would go to
// that node, and another tenant's job there would be evicted while the
// labeller's own job kept its GPUs.
func TestRoleLabelOnATenantsPodDrawsNoReclaim(t *testing.T) {
	marker := testobj.BestEffort("research", "marker", "b", 1, t0.Add(-time.Minute))
	marker.Labels = map[string]string{api.LabelRole: api.RoleInference, api.LabelService: "chat"}
	for name, pod := range map[string]*v1.Pod{
		"a best-effort pod labelled inference":                     marker,
		"an inference pod in a namespace the admin did not opt in": testobj.Inference("research", "forged", "chat", "b", 0),
	} {
		t.Run(name, func(t *testing.T) {
			tc := newTestCluster(t, Config{Policy: round.Config{ReclaimLead: 15 * time.Minute, Margin: -1}})
			tc.set(t, testobj.Node("a", 8), testobj.Node("b", 8), testobj.Node("c", 4),
				testobj.Inference("serving", "chat-0", "chat", "c", 4), chat(1, nil),
				testobj.BestEffort("research", "labeller", "a", 8, t0.Add(-time.Hour)),
				testobj.BestEffort("research", "other", "b", 7, t0.Add(-time.Hour)),
				pod)
			tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", 16, 4, 4)} // waiting: one more replica
			writes, err := tc.sync(t, t0)
			if err != nil {
				t.Fatal(err)
			}
			// Both nodes would have to evict; neither hosts inference, so the
			// room goes where the order of nodes puts it, whatever the labels say.
			if got, want := only(writes, "pods/eviction"), []string{"create pods/eviction labeller"}; !reflect.DeepEqual(got, want) {
				t.Fatalf("evictions %v, want %v: a tenant's role label drew the reclaim to another tenant's node", got, want)
			}
		})
	}
}

// A gang member waiting at Permit holds GPUs in gleaner-scheduler, which says
// where in its nominatedNodeName: its GPUs count as lent there, and it is
// reclaimed like any lent pod (it has lost no work), instead of room being
// planned on GPUs the scheduler keeps from inference.
func TestGangMemberWaitingAtPermitIsSeenAndReclaimed(t *testing.T) {
	tc := newTestCluster(t, Config{Policy: round.Config{ReclaimLead: 15 * time.Minute, Margin: -1}})
	waiting := testobj.BestEffort("research", "waiting", "", 4, time.Time{})
	waiting.Labels = map[string]string{api.LabelPodGroup: "train"}
	waiting.Status = v1.PodStatus{Phase: v1.PodPending, NominatedNodeName: "a"}
	forged := testobj.BestEffort("research", "elsewhere", "", 4, time.Time{})
	forged.Spec.SchedulerName = v1.DefaultSchedulerName // not gleaner-scheduler's: no reservation of its
	forged.Status = v1.PodStatus{Phase: v1.PodPending, NominatedNodeName: "b"}
	tc.set(t, testobj.Node("a", 8), testobj.Node("b", 8),
		testobj.Inference("serving", "chat-0", "chat", "a", 4), chat(1, nil),
		testobj.BestEffort("research", "job-b", "b", 8, t0.Add(-time.Hour)),
		waiting, forged)
	tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", 10, 0, 4)}
	if _, err := tc.sync(t, t0); err != nil {
		t.Fatal(err)
	}
	// Nothing is free: a's spare 4 GPUs are held at Permit, b's lent.
	tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", 16, 4, 4)} // waiting requests: one more replica
	writes, err := tc.sync(t, t0.Add(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := only(writes, "pods/eviction"), []string{"create pods/eviction waiting"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("evictions %v, want %v: the GPUs held at Permit are the ones to take back", got, want)
	}
}

// TestNextRoundStartsOnThePeriodsGrid: rounds start on multiples of the
// period; a round long in its writes is followed at once (a fifth of a period
// later), not at the next multiple.
func TestNextRoundStartsOnThePeriodsGrid(t *testing.T) {
	grid := time.Date(2026, 12, 7, 18, 8, 15, 0, time.UTC) // a multiple of 5 s
	for _, tc := range []struct{ after, want time.Duration }{
		{after: 300 * time.Millisecond, want: 4700 * time.Millisecond},
		{after: 4500 * time.Millisecond, want: time.Second}, // a breath: off the grid once
		{after: 17 * time.Second, want: 3 * time.Second},
	} {
		if got := nextRound(5*time.Second, grid.Add(tc.after)); got != tc.want {
			t.Errorf("nextRound(5s, %v after a multiple) = %v, want %v", tc.after, got, tc.want)
		}
	}
}

// TestLongRoundsStillCountTheHarvest: rounds spaced by a round that evicted
// for seconds (up to the heartbeat timeout) still count the GPU-seconds lent
// between them; a longer pause does not.
func TestLongRoundsStillCountTheHarvest(t *testing.T) {
	tc := newTestCluster(t, Config{SyncPeriod: 5 * time.Second, Heartbeat: HeartbeatLease{Timeout: 15 * time.Second}})
	tc.set(t, testobj.Node("a", 8), testobj.Inference("serving", "chat-0", "chat", "a", 4), chat(1, nil),
		testobj.BestEffort("research", "train-0", "a", 2, t0))
	tc.load.loads = []vllm.PodLoad{fresh("serving", "chat", 1, 0, 4)}
	// Gaps of 17 s and 20 s (the timeout and a period) count; 21 s does not.
	for _, at := range []time.Duration{0, 17 * time.Second, 37 * time.Second, 58 * time.Second} {
		if _, err := tc.sync(t, t0.Add(at)); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := tc.c.ledger.HarvestedGPUSeconds(), int64(2*(17+20)); got != want {
		t.Fatalf("harvested %d GPU-seconds, want %d: 17 and 20 s between rounds counted, 21 s not", got, want)
	}
}

// TestAvailabilityCutOffIsNoError: availability a round has no time left to
// write waits for the next round, also when the client's rate limiter
// foresees the deadline (as it does at 10,000 nodes, before the context
// ends); the round stops trying, and reports no error.
func TestAvailabilityCutOffIsNoError(t *testing.T) {
	tc := newTestCluster(t, Config{WriteWorkers: 1})
	nodes := []*v1.Node{testobj.Node("a", 8), testobj.Node("b", 8), testobj.Node("c", 8)}
	var avail []availability.Availability
	for _, n := range nodes {
		avail = append(avail, availability.Availability{Node: n.Name, GPUs: 4, For: time.Hour})
	}
	var tried []string
	tc.client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tried = append(tried, a.(k8stesting.PatchAction).GetName())
		if len(tried) == 1 {
			return true, nil, apierrors.NewServiceUnavailable("etcd is away")
		}
		return true, nil, fmt.Errorf("client rate limiter Wait returned an error: %w", errors.New("rate: Wait(n=1) would exceed context deadline"))
	})
	err := tc.c.publishAvailability(context.Background(), nodes, avail)
	if err == nil || !strings.Contains(err.Error(), "etcd is away") || strings.Contains(err.Error(), "would exceed") {
		t.Fatalf("error %v, want only the refused write's", err)
	}
	if len(tried) != 2 {
		t.Fatalf("writes tried %v, want two: none after the first cut off", tried)
	}
}
