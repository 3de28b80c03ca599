package gpuharvest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	fwk "k8s.io/kube-scheduler/framework"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/noderesources"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	tf "k8s.io/kubernetes/pkg/scheduler/testing/framework"

	"github.com/gleaner-dev/gleaner/internal/plugintest"
	"k8s.io/utils/ptr"

	"github.com/gleaner-dev/gleaner/internal/testobj"
	"github.com/gleaner-dev/gleaner/pkg/api"
)

// The tests in this file run GPUHarvest inside the scheduler framework, built by
// its factory from raw pluginConfig args, beside the upstream NodeResourcesFit,
// over fake clients and a scheduler snapshot: the same path a profile takes.

func TestMain(m *testing.M) {
	// The framework records into the scheduler's metrics, as a running scheduler does.
	metrics.Register()
	os.Exit(m.Run())
}

// frameworkNode is an open-or-not pool node with 8 GPUs, as the controller
// publishes it. state "" leaves the verdict off.
func frameworkNode(name, state, harvestable string) *v1.Node {
	n := node(name, state, harvestable)
	n.Status.Allocatable = v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse("64"),
		v1.ResourceMemory: resource.MustParse("512Gi"),
		v1.ResourcePods:   resource.MustParse("110"),
		api.GPUResource:   resource.MustParse("8"),
	}
	n.Status.Capacity = n.Status.Allocatable
	return n
}

// onNode binds copies of pods to node for the snapshot.
func onNode(node string, pods ...*v1.Pod) []*v1.Pod {
	var out []*v1.Pod
	for _, p := range pods {
		c := p.DeepCopy()
		c.Name = node + "-" + c.Name
		c.UID = "uid-" + c.UID
		c.Spec.NodeName = node
		out = append(out, c)
	}
	return out
}

// newFramework builds a profile of PrioritySort, NodeResourcesFit, GPUHarvest
// and DefaultBinder over a fake clientset holding lease, and waits until the
// plugin has seen the lease (or its absence). It returns the framework and the
// GPUHarvest instance its factory built.
func newFramework(t *testing.T, lease *coordinationv1.Lease, args string, pods []*v1.Pod, nodes []*v1.Node) (framework.Framework, *GPUHarvest, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var objs []runtime.Object
	if lease != nil {
		objs = append(objs, lease)
	}
	// The nodes are in the API too, so the plugin sees them arrive before the
	// heartbeat's renewals below.
	for _, n := range nodes {
		objs = append(objs, n)
	}
	client := fake.NewClientset(objs...)
	informerFactory := informers.NewSharedInformerFactory(client, 0)
	var pl *GPUHarvest
	factory := func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		p, err := New(ctx, obj, h)
		if err == nil {
			pl = p.(*GPUHarvest)
		}
		return p, err
	}
	fw, err := tf.NewFramework(ctx, append(plugintest.Upstream(),
		tf.RegisterPluginAsExtensions(Name, factory, "PreFilter", "Filter", "PreScore", "Score"),
		plugintest.WithArgs(Name, plugintest.RawArgs(args)),
	), "gleaner-scheduler",
		frameworkruntime.WithClientSet(client),
		frameworkruntime.WithInformerFactory(informerFactory),
		frameworkruntime.WithSnapshotSharedLister(internalcache.NewSnapshot(pods, nodes)),
	)
	if err != nil {
		return nil, nil, err
	}
	informerFactory.Start(ctx.Done())
	informerFactory.WaitForCacheSync(ctx.Done())
	deadline := time.Now().Add(10 * time.Second)
	for !pl.heartbeat.synced() {
		if time.Now().After(deadline) {
			t.Fatal("the plugin's lease informer never synced")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The plugin's node handler runs after the informer's store has synced:
	// wait until it has seen every node arrive, before any renewal.
	for _, n := range nodes {
		for {
			if pl.nodes.holds(n.Name) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the plugin never saw node %s arrive", n.Name)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// A live controller renews its heartbeat every round: renew a recent one
	// as the scheduler would see it do, often enough for the nodes' verdicts to
	// be trusted, and wait for the plugin to see each renewal.
	if lease != nil && time.Since(lease.Spec.RenewTime.Time) < time.Minute {
		cur := lease
		for i := uint64(1); i <= trustAfterRenewals; i++ {
			renewed := cur.DeepCopy()
			renewed.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now().Add(time.Duration(i) * time.Millisecond)))
			var err error
			if cur, err = client.CoordinationV1().Leases(lease.Namespace).Update(ctx, renewed, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			for pl.heartbeat.renewalCount() < i || pl.heartbeat.check(time.Now()) != nil {
				if time.Now().After(deadline) {
					t.Fatalf("the plugin never saw the heartbeat renewed: %v", pl.heartbeat.check(time.Now()))
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	return fw, pl, nil
}

// pluginOf is the plugin that set st ("" for success, which is a nil status).
func pluginOf(st *fwk.Status) string {
	if st == nil {
		return ""
	}
	return st.Plugin()
}

func freshLease() *coordinationv1.Lease {
	l := testobj.Lease("controller-1", time.Now(), 15)
	l.Name = api.HeartbeatLeaseName
	return l
}

func staleLease() *coordinationv1.Lease {
	l := freshLease()
	renew := metav1.NewMicroTime(time.Now().Add(-time.Hour))
	l.Spec.RenewTime = &renew
	return l
}

func TestFrameworkPreFilterAndFilter(t *testing.T) {
	nodes := []*v1.Node{
		frameworkNode("open-4", "open", "4"),
		frameworkNode("open-6-lent-4", "open", "6"),
		frameworkNode("stale-verdict", "open", "8"), // inference took 6 GPUs since the last verdict
		frameworkNode("closed", "closed", "0"),
		frameworkNode("draining", "draining", "0"),
		frameworkNode("torn", "open", ""),
	}
	var pods []*v1.Pod
	pods = append(pods, onNode("open-6-lent-4", bestEffort("lent", 4))...)
	pods = append(pods, onNode("stale-verdict", inference("vllm", 6))...)

	type want struct {
		code   fwk.Code
		plugin string
		reason string
	}
	ok := want{code: fwk.Success}
	tests := []struct {
		name      string
		lease     *coordinationv1.Lease
		pod       *v1.Pod
		preFilter want
		perNode   map[string]want
	}{{
		name:      "best-effort pod: GPUHarvest admits only open nodes with room",
		lease:     freshLease(),
		pod:       bestEffort("train", 4),
		preFilter: ok,
		perNode: map[string]want{
			"open-4":        ok,
			"open-6-lent-4": {fwk.Unschedulable, Name, ErrReasonNotEnoughGPUs},
			"stale-verdict": {fwk.Unschedulable, noderesources.Name, "Insufficient " + string(api.GPUResource)},
			"closed":        {fwk.UnschedulableAndUnresolvable, Name, ErrReasonNotOpen},
			"draining":      {fwk.UnschedulableAndUnresolvable, Name, ErrReasonNotOpen},
			"torn":          {fwk.UnschedulableAndUnresolvable, Name, ErrReasonBadVerdict},
		},
	}, {
		name:      "inference pod: GPUHarvest stays out of the way",
		lease:     freshLease(),
		pod:       inference("vllm-new", 2),
		preFilter: ok,
		perNode: map[string]want{
			"open-4":        ok,
			"open-6-lent-4": ok, // harvestable does not bind inference; reclaiming is the controller's job
			"stale-verdict": ok,
			"closed":        ok,
			"draining":      ok,
			"torn":          ok,
		},
	}, {
		name:      "stale heartbeat: every best-effort pod is rejected before any node is tried",
		lease:     staleLease(),
		pod:       bestEffort("train", 1),
		preFilter: want{fwk.UnschedulableAndUnresolvable, Name, ErrReasonHeartbeatStale},
	}, {
		name:      "no controller lease at all: unknown counts as stale",
		lease:     nil,
		pod:       bestEffort("train", 1),
		preFilter: want{fwk.UnschedulableAndUnresolvable, Name, ErrReasonHeartbeatStale},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fw, _, err := newFramework(t, tt.lease, `{}`, pods, nodes)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			state := framework.NewCycleState()
			_, st, _ := fw.RunPreFilterPlugins(ctx, state, tt.pod)
			if got := (want{st.Code(), pluginOf(st), st.Message()}); got.code != tt.preFilter.code || got.plugin != tt.preFilter.plugin || !strings.Contains(got.reason, tt.preFilter.reason) {
				t.Fatalf("PreFilter = %+v, want %+v", got, tt.preFilter)
			}
			if !st.IsSuccess() {
				return
			}
			infos, err := fw.SnapshotSharedLister().NodeInfos().List()
			if err != nil {
				t.Fatal(err)
			}
			for _, ni := range infos {
				w := tt.perNode[ni.Node().Name]
				st := fw.RunFilterPlugins(ctx, state, tt.pod, ni)
				if got := (want{st.Code(), pluginOf(st), st.Message()}); got.code != w.code || got.plugin != w.plugin || !strings.Contains(got.reason, w.reason) {
					t.Errorf("Filter on %s = %+v, want %+v", ni.Node().Name, got, w)
				}
			}
		})
	}
}

func TestFrameworkScore(t *testing.T) {
	nodes := []*v1.Node{
		frameworkNode("empty", "open", "8"),
		frameworkNode("half-lent", "open", "8"),
		frameworkNode("serving", "open", "4"),
	}
	var pods []*v1.Pod
	pods = append(pods, onNode("half-lent", bestEffort("lent", 4))...)
	pods = append(pods, onNode("serving", inference("vllm", 4))...)

	tests := []struct {
		name string
		args string
		pod  *v1.Pod
		// want is GPUHarvest's score per node; nil: the plugin does not score.
		want map[string]int64
	}{{
		name: "default weights: packing and idle window averaged",
		args: `{}`,
		pod:  bestEffort("train", 2),
		// packing = 100*(lent+2)/harvestable; idle = 100*(8-serving)/8
		want: map[string]int64{"empty": (25 + 100) / 2, "half-lent": (75 + 100) / 2, "serving": (50 + 50) / 2},
	}, {
		name: "packing only",
		args: `{"scoreWeights":{"packing":1,"idleWindow":0}}`,
		pod:  bestEffort("train", 2),
		want: map[string]int64{"empty": 25, "half-lent": 75, "serving": 50},
	}, {
		name: "idle window only",
		args: `{"scoreWeights":{"packing":0,"idleWindow":1}}`,
		pod:  bestEffort("train", 2),
		want: map[string]int64{"empty": 100, "half-lent": 100, "serving": 50},
	}, {
		name: "inference pods are not scored",
		args: `{}`,
		pod:  inference("vllm-new", 2),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fw, _, err := newFramework(t, freshLease(), tt.args, pods, nodes)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			state := framework.NewCycleState()
			if _, st, _ := fw.RunPreFilterPlugins(ctx, state, tt.pod); !st.IsSuccess() {
				t.Fatalf("PreFilter: %v", st)
			}
			infos, err := fw.SnapshotSharedLister().NodeInfos().List()
			if err != nil {
				t.Fatal(err)
			}
			if st := fw.RunPreScorePlugins(ctx, state, tt.pod, infos); !st.IsSuccess() {
				t.Fatalf("PreScore: %v", st)
			}
			scores, st := fw.RunScorePlugins(ctx, state, tt.pod, infos)
			if !st.IsSuccess() {
				t.Fatalf("Score: %v", st)
			}
			got := map[string]int64{}
			for _, ns := range scores {
				for _, ps := range ns.Scores {
					if ps.Name == Name {
						got[ns.Name] = ps.Score
					}
				}
			}
			if len(got) != len(tt.want) {
				t.Fatalf("GPUHarvest scored %v, want %v", got, tt.want)
			}
			for n, w := range tt.want {
				if got[n] != w {
					t.Errorf("score of %s = %d, want %d (all: %v)", n, got[n], w, got)
				}
			}
		})
	}
}

func TestFrameworkRejectsBadArgs(t *testing.T) {
	tests := []struct {
		args, wantField string
	}{
		{`{"gpuResourceName":"cpu"}`, "pluginConfig[GPUHarvest].args.gpuResourceName"},
		{`{"scoreWeights":{"packing":0,"idleWindow":0}}`, "pluginConfig[GPUHarvest].args.scoreWeights"},
		{`{"scoreWeights":{"packing":-1}}`, "pluginConfig[GPUHarvest].args.scoreWeights.packing"},
		{`{"heartbeatTimeoutSeconds":0}`, "pluginConfig[GPUHarvest].args.heartbeatTimeoutSeconds"},
		{`{"controllerLease":{"name":"Not A Name"}}`, "pluginConfig[GPUHarvest].args.controllerLease.name"},
		{`{"scoreWeights":"heavy"}`, "decoding GPUHarvest args"},
	}
	for _, tt := range tests {
		t.Run(tt.args, func(t *testing.T) {
			_, _, err := newFramework(t, freshLease(), tt.args, nil, nil)
			if err == nil || !strings.Contains(err.Error(), tt.wantField) {
				t.Fatalf("NewFramework error = %v, want one naming %q", err, tt.wantField)
			}
		})
	}
}
