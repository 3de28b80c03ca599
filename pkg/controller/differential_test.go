package controller

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

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
	victims    []string // each with the grace period it is given
	// scale is each service's replicas the autoscaler set; notices, each
	// noticed pod's time.
	scale   map[string]int
	notices map[string]string
}

// TestControllerAndSimulatorDecideAlike drives a day of the simulator's
// virtual cluster through the simulator, recording every round, then replays
// each recorded round through the controller: the cluster as objects in a
// fake API, the services' load as the metrics informer would report it. At
// every step the verdicts the controller publishes and the pods it evicts
// must be the simulator's, and so must the replicas it scales each service
// to (with Gleaner's autoscaler, as the simulator runs it by default) and
// the reclaim notices it writes on the pods.
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
		s := step{now: obs.Now, nodes: append([]harvest.Node(nil), obs.Nodes...), verdicts: map[string]harvest.Verdict{}, victims: []string{},
			scale: map[string]int{}, notices: map[string]string{}}
		for _, sc := range d.Scale {
			s.scale[sc.Key] = sc.Decision.Replicas
		}
		for _, n := range d.Notices {
			s.notices["research/"+n.Pod.Name] = api.FormatTime(n.At)
		}
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
			s.victims = append(s.victims, fmt.Sprintf("research/%s within %v", v.Pod.Name, v.EvictionGrace(cfg.GracePeriod)))
		}
		steps = append(steps, s)
	}
	if _, err := simulate.Run(cfg, simulate.Forecast, fleet, jobs); err != nil {
		t.Fatal(err)
	}

	tc := newTestCluster(t, Config{Policy: policy, Metrics: vllm.Options{Interval: cfg.ScrapeInterval}})
	// The fake API has no scale subresource: take the update as done (the
	// next step's Deployment carries the simulator's replicas anyway).
	tc.client.PrependReactor("update", "deployments/scale", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, a.(k8stesting.UpdateAction).GetObject(), nil
	})
	var evictingSteps, drainingSteps, openSteps, scalingSteps, noticeSteps int
	for i, s := range steps {
		objs, loads := clusterOf(s, cfg)
		tc.set(t, objs...)
		tc.load.loads = loads
		_, err := tc.sync(t, s.now)
		if err != nil {
			t.Fatalf("step %d (%v): %v", i, s.now, err)
		}
		for len(tc.recorder.Events) > 0 { // notices' Events, not judged here: keep the recorder from filling up
			<-tc.recorder.Events
		}
		evicted := []string{}
		for _, a := range tc.actions {
			if a.GetVerb() == "create" && a.GetSubresource() == "eviction" {
				ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
				evicted = append(evicted, fmt.Sprintf("research/%s within %v", ev.Name, time.Duration(*ev.DeleteOptions.GracePeriodSeconds)*time.Second))
			}
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
		if scaled := tc.scaled(); !reflect.DeepEqual(scaled, s.scale) {
			t.Fatalf("step %d (%v): the controller scaled %v, the simulator %v", i, s.now, scaled, s.scale)
		} else if len(scaled) > 0 {
			scalingSteps++
		}
		if noticed := tc.noticed(t); !reflect.DeepEqual(noticed, s.notices) {
			t.Fatalf("step %d (%v): the controller noticed %v, the simulator %v", i, s.now, noticed, s.notices)
		} else if len(noticed) > 0 {
			noticeSteps++
		}
	}
	t.Logf("%d rounds compared: %d node-rounds open, %d draining, %d rounds with evictions, %d with scale changes, %d with notices",
		len(steps), openSteps, drainingSteps, evictingSteps, scalingSteps, noticeSteps)
	if evictingSteps == 0 || drainingSteps == 0 || openSteps == 0 || scalingSteps == 0 || noticeSteps == 0 {
		t.Fatal("the day never opened, drained, evicted, scaled and gave notices: the comparison proves little")
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
		be.Annotations, be.Spec.TerminationGracePeriodSeconds = p.Annotations, p.Spec.TerminationGracePeriodSeconds
		be.DeletionTimestamp, be.DeletionGracePeriodSeconds = p.DeletionTimestamp, p.DeletionGracePeriodSeconds
		objs = append(objs, be)
	}
	var loads []vllm.PodLoad
	for _, svc := range s.services {
		annotations := map[string]string{
			api.AnnotationTargetLoad:     strconv.FormatFloat(cfg.ReplicaCapacity, 'g', -1, 64),
			api.AnnotationGPUsPerReplica: strconv.FormatInt(cfg.GPUsPerReplica, 10),
		}
		replicas := len(svc.Replicas)
		if a := svc.Autoscale; a != nil {
			annotations[api.AnnotationAutoscale] = "true"
			annotations[api.AnnotationMinReplicas] = strconv.Itoa(a.Limits.Min)
			annotations[api.AnnotationMaxReplicas] = strconv.Itoa(a.Limits.Max)
			replicas = a.Replicas
		}
		objs = append(objs, testobj.Deployment("sim", svc.Key, int32(replicas), cfg.GPUsPerReplica, annotations))
		for _, r := range svc.Replicas {
			pl := vllm.PodLoad{Namespace: "sim", Service: svc.Key, NodeName: "bound", GPUs: r.GPUs, Created: s.now}
			switch {
			case r.Pending:
				pl.NodeName = ""
			case r.Known:
				pl.Fresh, pl.ScrapedAt, pl.Metrics = true, s.now, vllm.Metrics{Running: r.Running, Waiting: r.Waiting}
			}
			loads = append(loads, pl)
		}
	}
	return objs, loads
}

// scaled is the replicas the last round scaled each Deployment to.
func (tc *testCluster) scaled() map[string]int {
	out := map[string]int{}
	for _, a := range tc.actions {
		if u, ok := a.(k8stesting.UpdateAction); ok && a.GetSubresource() == "scale" {
			sc := u.GetObject().(*autoscalingv1.Scale)
			out[sc.Name] = int(sc.Spec.Replicas)
		}
	}
	return out
}

// noticed is the reclaim notice each best-effort pod carries in the fake API.
func (tc *testCluster) noticed(t *testing.T) map[string]string {
	t.Helper()
	pods, err := tc.client.CoreV1().Pods("research").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range pods.Items {
		if at, ok := p.Annotations[api.AnnotationReclaimNotice]; ok {
			out[p.Namespace+"/"+p.Name] = at
		}
	}
	return out
}
