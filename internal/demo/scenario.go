package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	randv2 "math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	pgclientset "sigs.k8s.io/scheduler-plugins/pkg/generated/clientset/versioned"

	"github.com/gleaner-dev/gleaner/internal/vllmsim"
	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
)

// labelJob names the demo job a best-effort pod belongs to.
const labelJob = "demo.gleaner.dev/job"

// scenario plays the users of the cluster through the demo day.
type scenario struct {
	c        *cluster
	cfg      Config
	t        timing
	services []Service
	pgs      pgclientset.Interface
	pods     corelisters.PodLister
	nodes    corelisters.NodeLister
	rng      *rand.Rand
	out      *progress

	mu sync.Mutex // guards what the informer handlers record
	// Inference pods: when each was first seen and how long it waited to be bound.
	infSeen  map[types.UID]time.Time
	infWaits []time.Duration
	// Best-effort pods being evicted (not deleted by the demo itself), and the
	// time from eviction to the pod's GPUs being free.
	evicting       map[types.UID]time.Time
	reclaimLatency []time.Duration
	driverDeleted  map[types.UID]bool

	jobs     []*job
	nextJob  int
	start    time.Time
	rep      report
	replicas map[string][2]int32 // service: lowest and highest ready replicas seen after warm-up
	// short is since when each service's load has needed more replicas
	// than serve it (absent: it has enough).
	short map[string]time.Time
}

type jobState int

const (
	jobPending jobState = iota // pods created, not all running
	jobRunning                 // every pod running, work progresses
	jobEvicted                 // a pod was evicted; waiting for all pods to go before the retry
	jobFinished
)

// job is a best-effort training or evaluation job: one pod, or a gang of pods
// in a PodGroup. Evicted jobs are retried from their last checkpoint, as an
// Argo retryStrategy on exit code 143 would.
type job struct {
	name     string
	kind     string
	pods     int
	podGPUs  int64
	work     time.Duration // demo time the job needs to run
	done     time.Duration // demo time of work checkpointed
	attempt  int
	state    jobState
	podNames []string
	running  time.Time // real time all pods ran
	ckpt     time.Time // real time of the last checkpoint (or start)
	retries  int
	// The reclaim notice on its pods (real time; zero: none), since when,
	// and whether the job checkpointed for its current time (reset when
	// the time moves).
	notice, noticeSince time.Time
	noticeSaved         bool
}

// jobTick is how often the demo's jobs act: check their notices, save
// checkpoints, finish.
const jobTick = 500 * time.Millisecond

func (j *job) gpus() int64 { return int64(j.pods) * j.podGPUs }

func newScenario(ctx context.Context, c *cluster, cfg Config, t timing) (*scenario, error) {
	pgCfg := rest.CopyConfig(c.config)
	pgCfg.ContentType = "application/json" // CRDs do not speak protobuf
	pgs, err := pgclientset.NewForConfig(pgCfg)
	if err != nil {
		return nil, err
	}
	s := &scenario{
		c: c, cfg: cfg, t: t, services: demoServices(), pgs: pgs, rng: rand.New(rand.NewSource(cfg.Seed)),
		infSeen: map[types.UID]time.Time{}, evicting: map[types.UID]time.Time{}, driverDeleted: map[types.UID]bool{}, short: map[string]time.Time{},
		replicas: map[string][2]int32{},
		out:      newProgress(cfg.Out),
	}
	factory := informers.NewSharedInformerFactory(c.client, 0)
	podInf := factory.Core().V1().Pods()
	s.pods = podInf.Lister()
	s.nodes = factory.Core().V1().Nodes().Lister()
	if _, err := podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.observePod(obj.(*v1.Pod)) },
		UpdateFunc: func(_, obj any) { s.observePod(obj.(*v1.Pod)) },
		DeleteFunc: s.podGone,
	}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("informer for %v did not sync", typ)
		}
	}
	return s, nil
}

// observePod records inference pods' waits for GPUs and best-effort evictions.
func (s *scenario) observePod(p *v1.Pod) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if api.IsInference(p) {
		if seen, ok := s.infSeen[p.UID]; !ok && p.Spec.NodeName == "" {
			s.infSeen[p.UID] = now
		} else if ok && p.Spec.NodeName != "" && !seen.IsZero() {
			s.infWaits = append(s.infWaits, now.Sub(seen))
			s.infSeen[p.UID] = time.Time{} // bound
		}
		return
	}
	if p.Labels[labelJob] != "" && p.DeletionTimestamp != nil && p.Spec.NodeName != "" && !s.driverDeleted[p.UID] {
		if _, ok := s.evicting[p.UID]; !ok {
			s.evicting[p.UID] = now
		}
	}
}

func (s *scenario) podGone(obj any) {
	p, ok := obj.(*v1.Pod)
	if !ok {
		tomb, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			return
		}
		if p, ok = tomb.Obj.(*v1.Pod); !ok {
			return
		}
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if at, ok := s.evicting[p.UID]; ok && !at.IsZero() {
		s.reclaimLatency = append(s.reclaimLatency, now.Sub(at))
		s.evicting[p.UID] = time.Time{}
	}
	delete(s.infSeen, p.UID)
	delete(s.driverDeleted, p.UID)
}

// hour is the demo's time of day (0..24) at real time now.
func (s *scenario) hour(now time.Time) float64 {
	return s.t.demo(now.Sub(s.start)).Hours()
}

func (s *scenario) run(ctx context.Context) (*report, error) {
	if err := s.createNodes(ctx); err != nil {
		return nil, err
	}
	s.start = time.Now()
	if err := s.createServices(ctx); err != nil {
		return nil, err
	}
	s.rep = report{t: s.t, nodes: s.cfg.Nodes, gpus: int64(s.cfg.Nodes) * s.cfg.GPUsPerNode}
	s.out.header()
	tick := time.NewTicker(jobTick)
	defer tick.Stop()
	lastHour := -1
	end := s.start.Add(s.t.day)
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("interrupted: %w", ctx.Err())
		case p := <-s.c.sup.died:
			return nil, fmt.Errorf("%s exited during the demo (%v); its log %s ends:\n%s", p.name, p.err, p.log, p.tail(20))
		case now := <-tick.C:
			if now.After(end) {
				s.sample(now)
				return s.finish(ctx, now)
			}
			if err := s.pushLoads(ctx, now); err != nil {
				return nil, err
			}
			if err := s.runJobs(ctx, now); err != nil {
				return nil, err
			}
			row := s.sample(now)
			if h := int(s.hour(now)); h != lastHour {
				lastHour = h
				s.out.row(row)
			} else {
				s.out.live(row)
			}
		}
	}
}

func (s *scenario) createNodes(ctx context.Context) error {
	for i := range s.cfg.Nodes {
		name := fmt.Sprintf("gpu-%02d", i)
		node, err := s.c.client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"kubernetes.io/hostname": name, api.LabelPool: api.PoolInference, "type": "kwok",
		}}}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating node %s: %w", name, err)
		}
		capacity := v1.ResourceList{
			v1.ResourceCPU: resource.MustParse("96"), v1.ResourceMemory: resource.MustParse("1Ti"), v1.ResourcePods: resource.MustParse("110"),
			api.GPUResource: *resource.NewQuantity(s.cfg.GPUsPerNode, resource.DecimalSI),
		}
		// KWOK reports the node Ready at the same time: retry on conflict.
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			node.Status.Capacity, node.Status.Allocatable = capacity, capacity
			_, err := s.c.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
			if err != nil {
				if latest, getErr := s.c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); getErr == nil {
					node = latest
				}
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("reporting node %s's GPUs: %w", name, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ready := 0
		nodes, _ := s.nodes.List(labels.Everything())
		for _, n := range nodes {
			for _, c := range n.Status.Conditions {
				if c.Type == v1.NodeReady && c.Status == v1.ConditionTrue {
					ready++
				}
			}
		}
		if ready == s.cfg.Nodes {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("KWOK reported %d of %d nodes Ready within 30s; see %s", ready, s.cfg.Nodes, s.c.procs["kwok"].log)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// createServices creates the inference Deployments, autoscaled by
// gleaner-controller, sized for the load at the start of the day.
//
// Each brings the profile learned from its day a week before
// (Service.storedProfile), as a service moved from another cluster brings
// its annotation: the controller's forecast sees the day's peaks coming,
// as it would after a week of the same services, instead of the trend alone.
func (s *scenario) createServices(ctx context.Context) error {
	rng := randv2.New(randv2.NewPCG(lastWeekSeed, 0))
	zero := s.t.profileClock().At(s.start)
	// The day and the notice horizon after it, in demo hours.
	hours := 24 + s.t.demo(s.t.noticeHorizon).Hours()
	for _, svc := range s.services {
		profile, err := svc.storedProfile(rng, zero, hours)
		if err != nil {
			return fmt.Errorf("last week's profile of %s: %w", svc.Name, err)
		}
		replicas := int32(min(max(int(svc.Load(0)*1.1/svc.Target)+1, int(svc.Min)), int(svc.Max)))
		lbls := map[string]string{api.LabelRole: api.RoleInference, api.LabelService: svc.Name}
		grace := s.t.graceInference
		gpus := v1.ResourceList{api.GPUResource: *resource.NewQuantity(svc.GPUs, resource.DecimalSI)}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: servingNS, Annotations: map[string]string{
				api.AnnotationAutoscale:     "true",
				api.AnnotationMinReplicas:   strconv.Itoa(int(svc.Min)),
				api.AnnotationMaxReplicas:   strconv.Itoa(int(svc.Max)),
				api.AnnotationTargetLoad:    strconv.FormatFloat(svc.Target, 'g', -1, 64),
				api.AnnotationDemandProfile: profile,
			}},
			Spec: appsv1.DeploymentSpec{
				Replicas: &replicas,
				Selector: &metav1.LabelSelector{MatchLabels: lbls},
				Template: v1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: lbls, Annotations: map[string]string{api.AnnotationMetricsPort: strconv.Itoa(s.c.simPort)}},
					Spec: v1.PodSpec{
						// The race-free set-up of docs/install.md: one scheduler decides every pool GPU.
						SchedulerName:                 api.SchedulerName,
						PriorityClassName:             api.PriorityClassInference,
						TerminationGracePeriodSeconds: &grace,
						Containers: []v1.Container{{
							Name: "vllm", Image: "vllm/vllm-openai", Args: []string{"--model", svc.Model},
							Resources: v1.ResourceRequirements{Requests: gpus, Limits: gpus},
						}},
					},
				},
			},
		}
		if _, err := s.c.client.AppsV1().Deployments(servingNS).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating Deployment %s: %w", svc.Name, err)
		}
	}
	return nil
}

// pushLoads gives every ready replica its share of its service's load now.
func (s *scenario) pushLoads(ctx context.Context, now time.Time) error {
	h := s.hour(now)
	loads := map[string]vllmsim.Load{}
	for _, svc := range s.services {
		pods, err := s.pods.Pods(servingNS).List(labels.SelectorFromSet(labels.Set{api.LabelService: svc.Name}))
		if err != nil {
			return err
		}
		var ready []*v1.Pod
		for _, p := range pods {
			if p.DeletionTimestamp == nil && p.Status.Phase == v1.PodRunning && p.Status.PodIP != "" {
				ready = append(ready, p)
			}
		}
		s.followShortfall(svc, svc.Load(h), len(ready), now)
		running, waiting, kv := podLoad(svc, svc.Load(h), len(ready))
		for _, p := range ready {
			loads[p.Status.PodIP] = vllmsim.Load{Model: svc.Model, Running: running, Waiting: waiting, KVCache: kv}
		}
		if h > 1 { // after the morning's warm-up, track the autoscaler's range
			r := s.replicas[svc.Name]
			n := int32(len(ready))
			if r == [2]int32{} {
				r = [2]int32{n, n}
			}
			s.replicas[svc.Name] = [2]int32{min(r[0], n), max(r[1], n)}
		}
	}
	body, _ := json.Marshal(loads)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, fmt.Sprintf("http://127.0.0.1:%d/sim/loads", s.c.simPort), bytes.NewReader(body))
	resp, err := simClient.Do(req)
	if err != nil {
		return fmt.Errorf("setting vllm-sim's loads: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("vllm-sim rejected the loads: %s", resp.Status)
	}
	return nil
}

var simClient = &http.Client{Timeout: 2 * time.Second}

// followShortfall times how long a service's load waits for the replicas it
// needs at its target (ceil(load / target)) to serve: from the load arriving
// to a replica Ready for it, the time inference sees.
func (s *scenario) followShortfall(svc Service, load float64, ready int, now time.Time) {
	needed := int(math.Ceil(load/svc.Target - 1e-9))
	since, short := s.short[svc.Name]
	switch {
	case needed > ready && !short:
		s.short[svc.Name] = now
	case needed <= ready && short:
		delete(s.short, svc.Name)
		s.rep.loadToReady = append(s.rep.loadToReady, now.Sub(since))
	}
}

// jobKinds is the research team's mix of best-effort work.
// Each kind keeps QueueDepth jobs waiting, so small jobs are there to fill
// the gaps big ones cannot use, as in a team's real backlog.
var jobKinds = []struct {
	kind           string
	pods           int
	podGPUs        int64
	minHrs, maxHrs float64
}{
	{"eval", 1, 1, 1, 2},
	{"sft", 1, 2, 2, 4},
	{"train", 1, 4, 3, 6},
	{"ddp", 2, 4, 3, 6},   // a 2 x 4-GPU gang
	{"sweep", 4, 2, 2, 4}, // a 4 x 2-GPU gang
}

func (s *scenario) newJob(kind string) *job {
	k := jobKinds[0]
	for _, kk := range jobKinds {
		if kk.kind == kind {
			k = kk
		}
	}
	s.nextJob++
	hrs := k.minHrs + s.rng.Float64()*(k.maxHrs-k.minHrs)
	return &job{name: fmt.Sprintf("%s-%03d", k.kind, s.nextJob), kind: k.kind, pods: k.pods, podGPUs: k.podGPUs,
		work: time.Duration(hrs * float64(time.Hour)).Round(time.Minute)}
}

// submit creates a job's pods (and PodGroup for gangs) for its next attempt.
func (s *scenario) submit(ctx context.Context, j *job) error {
	j.attempt++
	j.state = jobPending
	j.running, j.ckpt = time.Time{}, time.Time{}
	j.podNames = nil
	if j.pods > 1 && j.attempt == 1 {
		timeout := int32(10)
		if _, err := s.pgs.SchedulingV1alpha1().PodGroups(researchNS).Create(ctx, &schedv1alpha1.PodGroup{
			ObjectMeta: metav1.ObjectMeta{Name: j.name, Namespace: researchNS},
			Spec:       schedv1alpha1.PodGroupSpec{MinMember: int32(j.pods), ScheduleTimeoutSeconds: &timeout},
		}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating PodGroup %s: %w", j.name, err)
		}
	}
	grace := s.t.graceBestEffort
	gpus := v1.ResourceList{api.GPUResource: *resource.NewQuantity(j.podGPUs, resource.DecimalSI)}
	for i := range j.pods {
		name := fmt.Sprintf("%s-a%d-%d", j.name, j.attempt, i)
		lbls := map[string]string{labelJob: j.name}
		if j.pods > 1 {
			lbls[api.LabelPodGroup] = j.name
		}
		pod := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: researchNS, Labels: lbls},
			Spec: v1.PodSpec{
				SchedulerName:                 api.SchedulerName,
				PriorityClassName:             api.PriorityClassBestEffort,
				TerminationGracePeriodSeconds: &grace,
				RestartPolicy:                 v1.RestartPolicyNever,
				Containers: []v1.Container{{
					Name: "train", Image: "ghcr.io/gleaner-dev/gleaner-train-example",
					Resources: v1.ResourceRequirements{Requests: gpus, Limits: gpus},
				}},
			},
		}
		if _, err := s.c.client.CoreV1().Pods(researchNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating pod %s: %w", name, err)
		}
		j.podNames = append(j.podNames, name)
	}
	return nil
}

// deletePods deletes a job's pods on the demo's own account (the job finished,
// or a gang member was evicted), so they do not count as evictions.
func (s *scenario) deletePods(ctx context.Context, j *job, grace int64) {
	for _, name := range j.podNames {
		p, err := s.pods.Pods(researchNS).Get(name)
		if err != nil || p.DeletionTimestamp != nil {
			continue
		}
		s.mu.Lock()
		s.driverDeleted[p.UID] = true
		s.mu.Unlock()
		_ = s.c.client.CoreV1().Pods(researchNS).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &p.UID}})
	}
}

// runJobs advances every job and keeps QueueDepth jobs waiting for GPUs.
func (s *scenario) runJobs(ctx context.Context, now time.Time) error {
	waiting := map[string]int{}
	for _, j := range s.jobs {
		if j.state == jobFinished {
			continue
		}
		var pods []*v1.Pod
		evicted, running := false, 0
		for _, name := range j.podNames {
			p, err := s.pods.Pods(researchNS).Get(name)
			if err != nil {
				continue // gone
			}
			pods = append(pods, p)
			if p.DeletionTimestamp != nil {
				s.mu.Lock()
				byDemo := s.driverDeleted[p.UID]
				s.mu.Unlock()
				evicted = evicted || !byDemo
			} else if p.Spec.NodeName != "" && p.Status.Phase == v1.PodRunning {
				running++
			}
		}
		switch j.state {
		case jobPending, jobRunning:
			if evicted {
				// Work since the last checkpoint is lost; the rest of a gang goes too.
				if j.state == jobRunning {
					lost := s.t.demo(s.evictedAt(pods, now).Sub(j.ckpt)).Hours() * float64(j.gpus())
					s.rep.evicted(lost, j, now)
				}
				s.rep.evictedJobs++
				j.state = jobEvicted
				s.deletePods(ctx, j, s.t.graceBestEffort)
				continue
			}
			if j.state == jobPending && running == j.pods {
				j.state, j.running, j.ckpt = jobRunning, now, now
				j.notice, j.noticeSince = time.Time{}, time.Time{}
			}
			if j.state == jobPending {
				waiting[j.kind]++
				continue
			}
			s.followNotice(j, pods, now)
			if forNotice := s.dueForNotice(j, now); forNotice || now.Sub(j.ckpt) >= s.t.checkpoint {
				j.done += s.t.demo(now.Sub(j.ckpt))
				j.ckpt = now
				s.annotateCheckpoint(ctx, j, now)
			}
			if j.done+s.t.demo(now.Sub(j.ckpt)) >= j.work {
				s.rep.usefulWork += j.work.Hours() * float64(j.gpus())
				s.rep.finishedJobs++
				j.state = jobFinished
				s.deletePods(ctx, j, 0)
				if j.pods > 1 {
					_ = s.pgs.SchedulingV1alpha1().PodGroups(researchNS).Delete(ctx, j.name, metav1.DeleteOptions{})
				}
			}
		case jobEvicted:
			if len(pods) == 0 { // every pod gone: retry from the checkpoint
				j.retries++
				s.rep.retries++
				if err := s.submit(ctx, j); err != nil {
					return err
				}
				waiting[j.kind]++
			}
		}
	}
	for _, k := range jobKinds {
		for n := waiting[k.kind]; n < s.cfg.QueueDepth; n++ {
			j := s.newJob(k.kind)
			if err := s.submit(ctx, j); err != nil {
				return err
			}
			s.jobs = append(s.jobs, j)
			s.rep.submittedJobs++
		}
	}
	return nil
}

// evictedAt is when the first of a job's evicted pods was seen asked to
// stop (its SIGTERM, to the informer's delay): the work since its last
// checkpoint is lost from then, not from the tick that noticed it. It comes
// after that checkpoint: the informer's handler runs after its store shows
// the deletion, and the tick that checkpointed did not see it there.
func (s *scenario) evictedAt(pods []*v1.Pod, now time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	at := now
	for _, p := range pods {
		if t, ok := s.evicting[p.UID]; ok && !t.IsZero() && t.Before(at) {
			at = t
		}
	}
	return at
}

// followNotice reads the reclaim notice on a running job's pods, as its
// steps would read their own annotations through the downward API.
func (s *scenario) followNotice(j *job, pods []*v1.Pod, now time.Time) {
	var at time.Time
	for _, p := range pods {
		if t, ok := api.ReclaimNotice(p); ok && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	switch {
	case at.IsZero():
		j.notice, j.noticeSince = time.Time{}, time.Time{} // withdrawn, or none
	case j.noticeSince.IsZero():
		j.notice, j.noticeSince, j.noticeSaved = at, now, false
		s.rep.notices++
	case !at.Equal(j.notice):
		j.notice, j.noticeSaved = at, false // moved: save again before the new time
	}
}

// dueForNotice reports whether the job should checkpoint now for its notice,
// as the checkpoint contract asks: timed to complete by the noticed time
// (its saves take a demo minute here, the annotation is to the second).
func (s *scenario) dueForNotice(j *job, now time.Time) bool {
	// The last tick from which the save completes in time: the next would be too late.
	if j.noticeSince.IsZero() || j.noticeSaved || now.Add(jobTick+s.t.real(time.Minute, 0)).Before(j.notice) {
		return false
	}
	j.noticeSaved = true
	return true
}

// annotateCheckpoint records the checkpoint on the pods, where the reclaimer
// reads it to evict the job that loses least work.
func (s *scenario) annotateCheckpoint(ctx context.Context, j *job, now time.Time) {
	patch := api.LastCheckpointPatch(now)
	for _, name := range j.podNames {
		_, _ = s.c.client.CoreV1().Pods(researchNS).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	}
}

// sample accounts the GPUs of the pool now and returns the progress row.
func (s *scenario) sample(now time.Time) row {
	r := row{hour: s.hour(now)}
	lentOn := map[string]int64{}
	pods, _ := s.pods.List(labels.Everything())
	for _, p := range pods {
		if !api.HoldsResources(p) {
			if p.Labels[labelJob] != "" && p.DeletionTimestamp == nil && p.Spec.NodeName == "" {
				r.queued++
			}
			continue
		}
		g := api.PodGPUs(p, api.GPUResource)
		switch {
		case api.IsInference(p):
			r.serving += g
		case p.Labels[labelJob] != "":
			r.lent += g
			lentOn[p.Spec.NodeName] += g
			if p.Status.Phase == v1.PodRunning && p.DeletionTimestamp == nil {
				r.jobPods++
			}
		}
	}
	nodes, _ := s.nodes.List(labels.Everything())
	for _, n := range nodes {
		v, err := harvest.ReadNode(n)
		if err != nil {
			continue // read as closed, as the scheduler does
		}
		r.harvestable += v.HarvestableGPUs
		if v.State == api.HarvestOpen {
			r.open++
			r.spareOpen += max(0, v.HarvestableGPUs-lentOn[n.Name])
		}
	}
	r.idle = s.rep.gpus - r.serving - r.lent
	r.nodes = len(nodes)
	r.done = s.rep.finishedJobs
	r.evicted = s.rep.evictedJobs
	s.rep.servingGPU.sample(now, float64(r.serving))
	s.rep.lentGPU.sample(now, float64(r.lent))
	s.rep.idleGPU.sample(now, float64(r.idle))
	s.rep.spareOpenGPU.sample(now, float64(min(r.spareOpen, r.idle)))
	s.rep.peakLent = max(s.rep.peakLent, r.lent)
	return r
}

// finish gathers the day's figures once the day is over.
func (s *scenario) finish(ctx context.Context, now time.Time) (*report, error) {
	s.out.end()
	s.mu.Lock()
	s.rep.infWaits = append([]time.Duration(nil), s.infWaits...)
	for _, seen := range s.infSeen {
		if !seen.IsZero() { // still pending: it has waited this long so far
			s.rep.infWaits = append(s.rep.infWaits, now.Sub(seen))
			s.rep.infPendingAtEnd++
		}
	}
	s.rep.reclaimLatency = append([]time.Duration(nil), s.reclaimLatency...)
	s.mu.Unlock()
	for _, since := range s.short { // still short: it has waited this long so far
		s.rep.loadToReady = append(s.rep.loadToReady, now.Sub(since))
	}
	// Who evicted: gleaner-controller's reclaimer (ahead of demand) or the
	// scheduler's preemption (an inference pod that did not fit).
	s.dumpEvents(ctx)
	events, err := s.c.client.CoreV1().Events(researchNS).List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, e := range events.Items {
			switch e.Reason {
			case reclaim.ReasonReclaimed:
				s.rep.byReclaimer += max(int(e.Count), 1)
			case "Preempted":
				// A gang member waiting at Permit holds GPUs in the scheduler's
				// memory only; preempting it stops no running work.
				if strings.Contains(e.Message, "in kube-scheduler memory") {
					s.rep.reservationsPreempted += max(int(e.Count), 1)
				} else {
					s.rep.byPreemption += max(int(e.Count), 1)
				}
			}
		}
	}
	for _, p := range s.c.procs {
		if p.exited() {
			s.rep.deadProcs = append(s.rep.deadProcs, p.name)
		}
	}
	sort.Strings(s.rep.deadProcs)
	names := make([]string, 0, len(s.replicas))
	for n := range s.replicas {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s.rep.replicaRanges = append(s.rep.replicaRanges, replicaRange{service: n, min: s.replicas[n][0], max: s.replicas[n][1]})
	}
	return &s.rep, nil
}

// dumpEvents writes the day's Events of the workload namespaces to events.log
// in the log folder: who evicted what, and why.
func (s *scenario) dumpEvents(ctx context.Context) {
	var b bytes.Buffer
	for _, ns := range []string{servingNS, researchNS} {
		events, err := s.c.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			fmt.Fprintf(&b, "listing events of %s: %v\n", ns, err)
			continue
		}
		items := events.Items
		sort.SliceStable(items, func(i, j int) bool { return eventTime(items[i]).Before(eventTime(items[j])) })
		for _, e := range items {
			from := e.Source.Component
			if from == "" {
				from = e.ReportingController
			}
			fmt.Fprintf(&b, "%s %-7s %s/%s/%s %s (%s): %s\n", eventTime(e).Format("15:04:05.000"), e.Type, e.InvolvedObject.Kind, ns, e.InvolvedObject.Name,
				e.Reason, from, e.Message)
		}
	}
	_ = os.WriteFile(filepath.Join(s.c.sup.logDir, "events.log"), b.Bytes(), 0o644)
}

func eventTime(e v1.Event) time.Time {
	switch {
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	}
	return e.CreationTimestamp.Time
}
