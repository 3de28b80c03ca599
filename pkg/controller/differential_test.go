package controller

import (
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gleaner-dev/gleaner/internal/testobj"
	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/demand"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
	"github.com/gleaner-dev/gleaner/pkg/round"
	"github.com/gleaner-dev/gleaner/pkg/simulate"
	"github.com/gleaner-dev/gleaner/pkg/vllm"
)

// step is one planning round of the simulator, as recorded: what it saw and
// what it decided.
type step struct {
	now        time.Time
	nodes      []harvest.Node
	services   []round.Service
	bestEffort []*v1.Pod
	verdicts   map[string]harvest.Verdict
	victims    []string
}

// TestControllerAndSimulatorDecideAlike drives a day of the simulator's
// virtual cluster through the simulator, recording every round, then replays
// each recorded round through the controller: the cluster as objects in a
// fake API, the services' load as the metrics informer would report it. At
// every step the verdicts the controller publishes and the pods it evicts
// must be the simulator's.
func TestControllerAndSimulatorDecideAlike(t *testing.T) {
	cfg := simulate.DefaultConfig()
	cfg.Duration = 24 * time.Hour
	cfg.ScrapeInterval = time.Minute
	cfg.SampleEvery = 0
	fleet := simulate.SyntheticFleet(4, 1, 7)
	jobs := simulate.SyntheticJobs(300, 7)
	policy, err := cfg.RoundConfig(simulate.Forecast)
	if err != nil {
		t.Fatal(err)
	}
	var steps []step
	cfg.OnRound = func(obs round.Observation, d round.Decision) {
		s := step{now: obs.Now, nodes: append([]harvest.Node(nil), obs.Nodes...), verdicts: map[string]harvest.Verdict{}, victims: []string{}}
		all := map[string]bool{}
		for _, n := range obs.Nodes {
			all[n.Name] = true
			s.verdicts[n.Name] = d.Plan.Nodes[n.Name].Verdict
		}
		for _, svc := range obs.Services {
			svc.Replicas = append([]demand.Replica(nil), svc.Replicas...)
			s.services = append(s.services, svc)
		}
		for _, c := range obs.BestEffort(all) {
			s.bestEffort = append(s.bestEffort, c.Pod)
		}
		for _, v := range d.Victims {
			s.victims = append(s.victims, "research/"+v.Pod.Name)
		}
		steps = append(steps, s)
	}
	if _, err := simulate.Run(cfg, simulate.Forecast, fleet, jobs); err != nil {
		t.Fatal(err)
	}

	tc := newTestCluster(t, Config{Policy: policy, Metrics: vllm.Options{Interval: cfg.ScrapeInterval}})
	var evictingSteps, drainingSteps, openSteps int
	for i, s := range steps {
		objs, loads := clusterOf(s, cfg)
		tc.set(t, objs...)
		tc.load.loads = loads
		writes, err := tc.sync(t, s.now)
		if err != nil {
			t.Fatalf("step %d (%v): %v", i, s.now, err)
		}
		for len(tc.recorder.Events) > 0 { // notices' Events, not judged here: keep the recorder from filling up
			<-tc.recorder.Events
		}
		evicted := []string{}
		for _, w := range only(writes, "pods/eviction") {
			evicted = append(evicted, "research/"+w[len("create pods/eviction "):])
		}
		if !reflect.DeepEqual(evicted, s.victims) {
			t.Fatalf("step %d (%v): the controller evicted %v, the simulator %v", i, s.now, evicted, s.victims)
		}
		for _, n := range s.nodes {
			if got, want := tc.verdict(t, n.Name), s.verdicts[n.Name]; got != want {
				t.Fatalf("step %d (%v): node %s: the controller published %+v, the simulator decided %+v", i, s.now, n.Name, got, want)
			}
			switch s.verdicts[n.Name].State {
			case api.HarvestDraining:
				drainingSteps++
			case api.HarvestOpen:
				openSteps++
			}
		}
		if len(s.victims) > 0 {
			evictingSteps++
		}
	}
	t.Logf("%d rounds compared: %d node-rounds open, %d draining, %d rounds with evictions", len(steps), openSteps, drainingSteps, evictingSteps)
	if evictingSteps == 0 || drainingSteps == 0 || openSteps == 0 {
		t.Fatal("the day never opened, drained and evicted: the comparison proves little")
	}
}

// clusterOf is a recorded round as cluster objects and metrics: the nodes,
// inference pods holding each node's reserved GPUs, the best-effort pods, one
// Deployment per service carrying the simulator's target and replica size,
// and a fresh scrape per bound replica.
func clusterOf(s step, cfg simulate.Config) ([]runtime.Object, []vllm.PodLoad) {
	var objs []runtime.Object
	for _, n := range s.nodes {
		objs = append(objs, testobj.Node(n.Name, n.AllocatableGPUs))
		for k := int64(0); k < n.ServingGPUs/cfg.GPUsPerReplica; k++ {
			objs = append(objs, testobj.Inference("sim", fmt.Sprintf("%s-replica-%d", n.Name, k), "any", n.Name, cfg.GPUsPerReplica))
		}
	}
	for _, p := range s.bestEffort {
		gpus := api.PodGPUs(p, api.GPUResource)
		be := testobj.BestEffort(p.Namespace, p.Name, p.Spec.NodeName, gpus, p.Status.StartTime.Time)
		be.Annotations = p.Annotations
		be.DeletionTimestamp, be.DeletionGracePeriodSeconds = p.DeletionTimestamp, p.DeletionGracePeriodSeconds
		objs = append(objs, be)
	}
	var loads []vllm.PodLoad
	for _, svc := range s.services {
		objs = append(objs, testobj.Deployment("sim", svc.Key, int32(len(svc.Replicas)), cfg.GPUsPerReplica, map[string]string{
			api.AnnotationTargetLoad:     strconv.FormatFloat(cfg.ReplicaCapacity, 'g', -1, 64),
			api.AnnotationGPUsPerReplica: strconv.FormatInt(cfg.GPUsPerReplica, 10),
		}))
		for _, r := range svc.Replicas {
			loads = append(loads, vllm.PodLoad{Namespace: "sim", Service: svc.Key, NodeName: "bound", GPUs: r.GPUs, Fresh: r.Known,
				ScrapedAt: s.now, Metrics: vllm.Metrics{Running: r.Running, Waiting: r.Waiting}})
		}
	}
	return objs, loads
}
