// Package ledger keeps each namespace's harvest and best-effort jobs between
// rounds, as gleaner-controller publishes them in HarvestReports
// (pkg/api/v1alpha1): GPU-seconds harvested, each job's pods, evictions,
// notices and checkpoints; and, in namespaces opted in as inference, how long
// each service's replicas waited to be scheduled. It talks to no API.
package ledger

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/api/v1alpha1"
)

// keptFirst is how many of a timeline's first events survive trimming; the
// rest of MaxEvents are the latest.
const keptFirst = 5

// Ledger keeps each namespace's harvest and jobs between rounds: what the
// HarvestReports publish. It reads pods (tenants' objects: their labels and
// annotations name jobs and checkpoints, nothing more) and the controller's
// own evictions and notices. Each namespace holds at most MaxJobs jobs, each
// at most MaxEvents events, so a tenant's pods cannot grow it without bound.
// It is not safe for concurrent use.
type Ledger struct {
	// Threshold and GPUResource as the controller's.
	Threshold   int32
	GPUResource v1.ResourceName
	namespaces  map[string]*namespace
	// jobRefs is each tracked pod's job, read once per informer object.
	jobRefs api.PodMemo[jobRef]
}

// jobRef is a pod's job: its kind and name (api.JobOf), and its key.
type jobRef struct{ kind, name, key string }

func readJobRef(p *v1.Pod) jobRef {
	kind, name := api.JobOf(p)
	return jobRef{kind, name, jobKey(kind, name)}
}

type namespace struct {
	status v1alpha1.HarvestReportStatus
	jobs   map[string]*job
	// services: an inference namespace's services, by name (waits.go).
	services map[string]*v1alpha1.ServiceWaits
	// changed: something other than GPU-seconds changed since Published.
	changed bool
	// restored: the status came from a published report and holds its jobs.
	present bool
}

type job struct {
	v1alpha1.Job
	// pods seen, by UID.
	pods map[types.UID]*podSeen
	// restored are the pods a restored timeline names, by name, with the
	// time of their last event: a pod of that name created by then is the
	// one named (seen again after a restart), a later one is new.
	restored map[string]restoredPod
	// submitted: the oldest pod's creation.
	submitted time.Time
}

type restoredPod struct {
	podSeen
	at time.Time
}

type podSeen struct {
	placed, finished, evicted bool
}

func jobKey(kind, name string) string { return kind + "/" + name }

// Tracked says whether a pod is a best-effort job's: best-effort and either
// for gleaner-scheduler or on a pool node.
func (l *Ledger) Tracked(p *v1.Pod, onPool bool) bool {
	return api.IsBestEffort(p, l.Threshold) && (p.Spec.SchedulerName == api.SchedulerName || onPool)
}

// Restore takes back a namespace's published report (after a restart),
// adding its totals, days and jobs to what was observed since: a job seen
// again keeps its history, and the pods its timeline names count as
// already placed.
func (l *Ledger) Restore(ns string, st v1alpha1.HarvestReportStatus) {
	n := l.ns(ns)
	n.present = true
	n.status.HarvestedGPUSeconds += max(0, st.HarvestedGPUSeconds)
	for _, d := range st.Daily {
		i := slices.IndexFunc(n.status.Daily, func(o v1alpha1.DailyHarvest) bool { return o.Date == d.Date })
		if i < 0 {
			n.status.Daily = append(n.status.Daily, d)
		} else {
			n.status.Daily[i].GPUSeconds += d.GPUSeconds
		}
	}
	sort.Slice(n.status.Daily, func(a, b int) bool { return n.status.Daily[a].Date < n.status.Daily[b].Date })
	if k := len(n.status.Daily); k > v1alpha1.MaxDays {
		n.status.Daily = slices.Delete(n.status.Daily, 0, k-v1alpha1.MaxDays)
	}
	n.restoreServices(st)
	for _, stored := range st.Jobs {
		key := jobKey(stored.Kind, stored.Name)
		j := n.jobs[key]
		if j == nil {
			if len(n.jobs) >= v1alpha1.MaxJobs {
				continue
			}
			j = &job{Job: stored, pods: map[types.UID]*podSeen{}}
			j.Timeline = nil
			n.jobs[key] = j
		} else {
			j.HarvestedGPUSeconds += stored.HarvestedGPUSeconds
			j.LostGPUSeconds += stored.LostGPUSeconds
			j.Evictions += stored.Evictions
			if j.LastCheckpoint == nil || stored.LastCheckpoint != nil && stored.LastCheckpoint.After(j.LastCheckpoint.Time) {
				j.LastCheckpoint = stored.LastCheckpoint
			}
		}
		if len(stored.Timeline) > 0 { // its submission is the stored one
			j.Timeline = slices.DeleteFunc(j.Timeline, func(e v1alpha1.JobEvent) bool { return e.Type == v1alpha1.EventSubmitted })
		}
		timeline := append(slices.Clone(stored.Timeline), j.Timeline...)
		j.Timeline = nil
		for _, e := range timeline {
			if e.Pod != "" {
				if j.restored == nil {
					j.restored = map[string]restoredPod{}
				}
				rp := j.restored[e.Pod]
				switch e.Type {
				case v1alpha1.EventPlaced, v1alpha1.EventResumed:
					rp.placed = true
				case v1alpha1.EventFinished:
					rp.finished = true
				case v1alpha1.EventEvicted:
					rp.evicted = true
				}
				rp.at = e.Time.Time
				j.restored[e.Pod] = rp
			}
			if j.submitted.IsZero() || e.Type == v1alpha1.EventSubmitted && e.Time.Time.Before(j.submitted) {
				j.submitted = e.Time.Time
			}
			l.event(n, j, e)
		}
	}
}

func (l *Ledger) ns(name string) *namespace {
	if l.namespaces == nil {
		l.namespaces = map[string]*namespace{}
	}
	n := l.namespaces[name]
	if n == nil {
		n = &namespace{jobs: map[string]*job{}}
		l.namespaces[name] = n
	}
	return n
}

// Observe records one round: pods are every pod the controller sees, onPool
// says which of them are on the pool's nodes (by index in pods, asked only of
// bound pods), and elapsed is the time since the last
// round to count (0: none, e.g. the first round). gpus[i] is pods[i]'s GPUs
// as api.PodGPUs counts them, where the caller has counted them already this
// round (nil: counted here). It returns the GPU-seconds harvested since the
// last round, per namespace. Pods are read as informer objects are: a pod
// that changes is a new object, never the same one edited (api.PodMemo).
func (l *Ledger) Observe(now time.Time, pods []*v1.Pod, gpus []int64, onPool func(i int) bool, elapsed time.Duration) map[string]float64 {
	harvested := map[string]float64{}
	byJob := map[*job][]podGPUs{}
	// Jobs the ledger does not hold yet are gathered first and made only if
	// the trim to MaxJobs would keep them (admit).
	newcomers := map[*namespace]map[string]*newcomer{}
	// A namespace already holding MaxJobs jobs that have not ended keeps no
	// job submitted at or before the oldest of them (its pods are at least as
	// old as it): such a pod is passed over before anything is made for it.
	// Should one of the held jobs end this round, the slot is filled the next.
	full := map[*namespace]time.Time{}
	defer l.jobRefs.Next()
	for _, n := range l.namespaces {
		if oldest, ok := n.oldestOfFull(); ok {
			full[n] = oldest
		}
	}
	for i, p := range pods {
		pooled := p.Spec.NodeName != "" && onPool(i)
		if !l.Tracked(p, pooled) {
			continue
		}
		n := l.ns(p.Namespace)
		var g int64
		if gpus != nil {
			g = gpus[i]
		} else {
			g = api.PodGPUs(p, l.GPUResource)
		}
		var held int64
		if api.HoldsResources(p) && pooled && elapsed > 0 {
			s := float64(g) * elapsed.Seconds()
			harvested[p.Namespace] += s
			held = int64(s + 0.5)
		}
		ref := l.jobRefs.Get(p, readJobRef)
		kind, name, key := ref.kind, ref.name, ref.key
		if j := n.jobs[key]; j != nil {
			byJob[j] = append(byJob[j], podGPUs{p, g})
			j.HarvestedGPUSeconds += held
			if created := p.CreationTimestamp.Time; created.Before(j.submitted) {
				j.submitted = created
			}
			continue
		}
		if oldest, ok := full[n]; ok && !p.CreationTimestamp.Time.After(oldest) {
			continue
		}
		if newcomers[n] == nil {
			newcomers[n] = map[string]*newcomer{}
		}
		c := newcomers[n][key]
		if c == nil {
			c = &newcomer{kind: kind, name: name, submitted: p.CreationTimestamp.Time, ended: true}
			newcomers[n][key] = c
		}
		c.pods = append(c.pods, podGPUs{p, g})
		c.held += held
		c.submitted = minTime(c.submitted, p.CreationTimestamp.Time)
		c.ended = c.ended && (p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed)
	}
	for nsName, n := range l.namespaces {
		for _, j := range n.jobs {
			if pods, ok := byJob[j]; ok {
				l.update(now, n, j, pods)
				continue
			}
			// Its pods are gone: evicted last (their owner may make them
			// again), or deleted by their owner or by a person.
			if !done(j.State) && j.State != v1alpha1.JobEvicted {
				j.State = v1alpha1.JobGone
				if k := len(j.Timeline); k > 0 && j.Timeline[k-1].Type == v1alpha1.EventEvicted {
					j.State = v1alpha1.JobEvicted
				}
				n.changed = true
			}
			if j.GPUs != 0 || j.Pods != 0 || j.ReclaimNotice != nil {
				j.GPUs, j.Pods, j.ReclaimNotice = 0, 0, nil
				n.changed = true
			}
		}
		for _, c := range admit(n, newcomers[n]) {
			j := &job{Job: v1alpha1.Job{Kind: c.kind, Name: c.name, State: v1alpha1.JobWaiting, HarvestedGPUSeconds: c.held},
				pods: map[types.UID]*podSeen{}, submitted: c.submitted}
			n.jobs[jobKey(c.kind, c.name)] = j
			n.changed = true
			first := c.pods[0]
			l.event(n, j, v1alpha1.JobEvent{Time: metav1.NewTime(first.pod.CreationTimestamp.Time), Type: v1alpha1.EventSubmitted, Pod: first.pod.Name,
				GPUs: first.gpus, Message: "submitted"})
			l.update(now, n, j, c.pods)
		}
		if s := harvested[nsName]; s > 0 {
			n.status.HarvestedGPUSeconds += int64(s + 0.5)
			addDaily(&n.status, now, int64(s+0.5))
		}
		l.trimJobs(n)
	}
	return harvested
}

// oldestOfFull is, when n holds MaxJobs jobs or more that have not ended,
// the oldest submission among them.
func (n *namespace) oldestOfFull() (time.Time, bool) {
	if len(n.jobs) < v1alpha1.MaxJobs {
		return time.Time{}, false
	}
	var oldest time.Time
	live := 0
	for _, j := range n.jobs {
		if done(j.State) {
			continue
		}
		if live == 0 || j.submitted.Before(oldest) {
			oldest = j.submitted
		}
		live++
	}
	return oldest, live >= v1alpha1.MaxJobs
}

// newcomer is a job seen in a round that the ledger does not hold yet.
type newcomer struct {
	kind, name string
	pods       []podGPUs
	// submitted: its oldest pod's creation; held: the GPU-seconds its pods
	// held this round; ended: every pod of it has finished.
	submitted time.Time
	held      int64
	ended     bool
}

// admit is the newcomers to make in n, in the order they were seen: those
// that trimJobs, which keeps the MaxJobs newest jobs that have not ended,
// would keep beside the jobs n holds. A namespace running thousands of jobs
// would otherwise make thousands of jobs a round, with their events, only to
// drop them again.
func admit(n *namespace, newcomers map[string]*newcomer) []*newcomer {
	out := make([]*newcomer, 0, len(newcomers))
	for _, c := range newcomers {
		out = append(out, c)
	}
	byPod := func(a, b *newcomer) int { return cmpPods(a.pods[0].pod, b.pods[0].pod) }
	if len(n.jobs)+len(out) <= v1alpha1.MaxJobs {
		slices.SortFunc(out, byPod)
		return out
	}
	// Rank as trimJobs does, newest first: jobs that have not ended, then
	// the newest submitted; on a tie the job already held stays.
	type ranked struct {
		ended     bool
		submitted time.Time
		c         *newcomer
	}
	all := make([]ranked, 0, len(n.jobs)+len(out))
	for _, j := range n.jobs {
		all = append(all, ranked{ended: done(j.State), submitted: j.submitted})
	}
	for _, c := range out {
		all = append(all, ranked{ended: c.ended, submitted: c.submitted, c: c})
	}
	slices.SortStableFunc(all, func(a, b ranked) int {
		if c := droppedFirst(b.ended, b.submitted, a.ended, a.submitted); c != 0 {
			return c
		}
		switch {
		case (a.c == nil) == (b.c == nil):
			return 0
		case a.c == nil:
			return -1
		}
		return 1
	})
	out = out[:0]
	for _, r := range all[:v1alpha1.MaxJobs] {
		if r.c != nil {
			out = append(out, r.c)
		}
	}
	slices.SortFunc(out, byPod)
	return out
}

// cmpPods orders one namespace's pods by creation, then name: the order
// newcomers are made in does not follow the map they were gathered in.
func cmpPods(a, b *v1.Pod) int {
	if c := a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// podGPUs is a pod and its GPUs, counted once a round.
type podGPUs struct {
	pod  *v1.Pod
	gpus int64
}

// update folds a job's pods of this round into it.
func (l *Ledger) update(now time.Time, n *namespace, j *job, pods []podGPUs) {
	var gpus int64
	var alive, running, succeeded, failed int32
	// Only the pods there are now are remembered: a job that runs as many
	// pods over its life (a workflow's steps) does not grow the ledger.
	j.forgetGone(pods)
	for _, pg := range pods {
		p, g := pg.pod, pg.gpus
		ps := j.seen(p)
		switch p.Status.Phase {
		case v1.PodSucceeded, v1.PodFailed:
			if p.Status.Phase == v1.PodFailed && !ps.evicted {
				// Ended by a disruption the controller did not make (the
				// scheduler's preemption, a drain): an eviction as well.
				if c := disruption(p); c != nil {
					ps.evicted = true
					j.Evictions++
					l.event(n, j, v1alpha1.JobEvent{Time: metav1.NewTime(now), Type: v1alpha1.EventEvicted, Pod: p.Name, Node: p.Spec.NodeName,
						GPUs: g, Message: "evicted: " + c.Reason + ": " + c.Message})
				}
			}
			if ps.evicted {
				continue // its end is its eviction, recorded
			}
			if p.Status.Phase == v1.PodSucceeded {
				succeeded++
			} else {
				failed++
			}
			if !ps.finished {
				ps.finished = true
				msg := "succeeded"
				if p.Status.Phase == v1.PodFailed {
					msg = "failed"
					if p.Status.Reason != "" {
						msg += ": " + p.Status.Reason
					}
				}
				l.event(n, j, v1alpha1.JobEvent{Time: metav1.NewTime(now), Type: v1alpha1.EventFinished, Pod: p.Name, Node: p.Spec.NodeName, Message: msg})
			}
			continue
		}
		if p.DeletionTimestamp != nil && ps.evicted {
			continue // on its way out: its eviction is recorded
		}
		alive++
		gpus += g
		if p.Spec.NodeName != "" {
			running++
			if !ps.placed {
				ps.placed = true
				typ, msg := v1alpha1.EventPlaced, fmt.Sprintf("placed on %s with %d GPUs", p.Spec.NodeName, g)
				if j.Evictions > 0 {
					typ, msg = v1alpha1.EventResumed, fmt.Sprintf("resumed on %s with %d GPUs after %d eviction(s)", p.Spec.NodeName, g, j.Evictions)
				}
				l.event(n, j, v1alpha1.JobEvent{Time: metav1.NewTime(boundAt(p, now)), Type: typ, Pod: p.Name, Node: p.Spec.NodeName, GPUs: g, Message: msg})
			}
		}
		if t, ok := api.LastCheckpoint(p); ok && !t.After(now.Add(time.Minute)) && (j.LastCheckpoint == nil || t.After(j.LastCheckpoint.Time)) {
			mt := metav1.NewTime(t)
			j.LastCheckpoint = &mt
			l.event(n, j, v1alpha1.JobEvent{Time: mt, Type: v1alpha1.EventCheckpointed, Pod: p.Name, Node: p.Spec.NodeName, Message: "checkpoint reported"})
		}
	}
	state := v1alpha1.JobWaiting
	switch {
	case running > 0 && j.ReclaimNotice != nil:
		state = v1alpha1.JobCheckpointing
	case running > 0:
		state = v1alpha1.JobRunning
	case alive > 0 && j.Evictions > 0:
		state = v1alpha1.JobEvicted
	case alive > 0:
		state = v1alpha1.JobWaiting
	case failed > 0:
		state = v1alpha1.JobFailed
	case succeeded > 0:
		state = v1alpha1.JobSucceeded
	case j.Evictions > 0:
		state = v1alpha1.JobEvicted
	}
	if state != j.State || gpus != j.GPUs || alive != j.Pods {
		n.changed = true
	}
	j.State, j.GPUs, j.Pods = state, gpus, alive
	if running == 0 && j.ReclaimNotice != nil {
		j.ReclaimNotice = nil
		n.changed = true
	}
}

// forgetGone drops the pods the job has seen that are not among pods. Most
// jobs have a pod or a few, and a round asks this of every job: a map of
// the pods present is built only for the few jobs with many.
func (j *job) forgetGone(pods []podGPUs) {
	if len(pods) <= 8 {
		for uid := range j.pods {
			if !slices.ContainsFunc(pods, func(p podGPUs) bool { return p.pod.UID == uid }) {
				delete(j.pods, uid)
			}
		}
		return
	}
	present := make(map[types.UID]bool, len(pods))
	for _, p := range pods {
		present[p.pod.UID] = true
	}
	for uid := range j.pods {
		if !present[uid] {
			delete(j.pods, uid)
		}
	}
}

// seen is what the job has seen of a pod: by its UID, or by its name in a
// restored timeline if it was created by that timeline's last word of it.
func (j *job) seen(p *v1.Pod) *podSeen {
	if ps := j.pods[p.UID]; ps != nil {
		return ps
	}
	ps := &podSeen{}
	if rp, ok := j.restored[p.Name]; ok && !p.CreationTimestamp.After(rp.at) {
		*ps = rp.podSeen
		delete(j.restored, p.Name)
	}
	j.pods[p.UID] = ps
	return ps
}

// disruption is a pod's DisruptionTarget condition, if it is true.
func disruption(p *v1.Pod) *v1.PodCondition {
	for i, c := range p.Status.Conditions {
		if c.Type == v1.DisruptionTarget && c.Status == v1.ConditionTrue {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// boundAt is when a pod was scheduled, or now when it does not say.
func boundAt(p *v1.Pod, now time.Time) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionTrue && !c.LastTransitionTime.IsZero() && !c.LastTransitionTime.After(now) {
			return c.LastTransitionTime.Time
		}
	}
	return now
}

// Evicted records that the controller evicted a pod: why, and the work lost
// (GPU-seconds since its last checkpoint).
func (l *Ledger) Evicted(now time.Time, p *v1.Pod, why string, lostGPUSeconds float64) {
	n, j := l.jobOf(p)
	if j == nil {
		return
	}
	j.seen(p).evicted = true
	j.Evictions++
	j.LostGPUSeconds += int64(lostGPUSeconds + 0.5)
	j.ReclaimNotice = nil
	l.event(n, j, v1alpha1.JobEvent{Time: metav1.NewTime(now), Type: v1alpha1.EventEvicted, Pod: p.Name, Node: p.Spec.NodeName,
		GPUs: api.PodGPUs(p, l.GPUResource), Message: why})
}

// Noticed records the reclaim notices of a round: each noticed pod's job
// expects eviction at the earliest of its pods' times. Jobs no longer
// noticed lose their notice.
func (l *Ledger) Noticed(now time.Time, notices map[*v1.Pod]NoticeInfo) {
	earliest := map[*job]NoticeInfo{}
	owner := map[*job]*namespace{}
	pods := map[*job]*v1.Pod{}
	for p, info := range notices {
		n, j := l.jobOf(p)
		if j == nil {
			continue
		}
		if e, ok := earliest[j]; !ok || info.At.Before(e.At) {
			earliest[j], owner[j], pods[j] = info, n, p
		}
	}
	for _, n := range l.namespaces {
		for _, j := range n.jobs {
			info, ok := earliest[j]
			switch {
			case !ok && j.ReclaimNotice != nil:
				j.ReclaimNotice = nil
				if j.State == v1alpha1.JobCheckpointing {
					j.State = v1alpha1.JobRunning
				}
				n.changed = true
			case ok && j.ReclaimNotice == nil:
				at := metav1.NewTime(info.At)
				j.ReclaimNotice = &at
				if j.State == v1alpha1.JobRunning {
					j.State = v1alpha1.JobCheckpointing
				}
				l.event(n, j, v1alpha1.JobEvent{Time: metav1.NewTime(now), Type: v1alpha1.EventNoticed, Pod: pods[j].Name, Node: info.Node,
					Message: info.Why})
			case ok && !j.ReclaimNotice.Time.Equal(info.At):
				at := metav1.NewTime(info.At)
				j.ReclaimNotice = &at
				n.changed = true
			}
		}
	}
}

// NoticeInfo is a notice as the ledger records it: when, where, and the
// sentence that says so.
type NoticeInfo struct {
	At   time.Time
	Node string
	Why  string
}

func (l *Ledger) jobOf(p *v1.Pod) (*namespace, *job) {
	n := l.namespaces[p.Namespace]
	if n == nil {
		return nil, nil
	}
	return n, n.jobs[readJobRef(p).key]
}

// event appends to a job's timeline, keeping the first keptFirst events and
// the latest, MaxEvents in all.
func (l *Ledger) event(n *namespace, j *job, e v1alpha1.JobEvent) {
	e.Message = api.Truncate(e.Message, v1alpha1.MaxMessage)
	j.Timeline = append(j.Timeline, e)
	if len(j.Timeline) > v1alpha1.MaxEvents {
		j.Timeline = slices.Delete(j.Timeline, keptFirst, keptFirst+len(j.Timeline)-v1alpha1.MaxEvents)
	}
	n.changed = true
}

// trimJobs keeps a namespace's MaxJobs newest jobs, dropping finished ones
// first.
func (l *Ledger) trimJobs(n *namespace) {
	if len(n.jobs) <= v1alpha1.MaxJobs {
		return
	}
	keys := make([]string, 0, len(n.jobs))
	for k := range n.jobs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool {
		ja, jb := n.jobs[keys[a]], n.jobs[keys[b]]
		return droppedFirst(done(ja.State), ja.submitted, done(jb.State), jb.submitted) < 0
	})
	for _, k := range keys[:len(keys)-v1alpha1.MaxJobs] {
		delete(n.jobs, k)
	}
	n.changed = true
}

// droppedFirst orders jobs as a full namespace gives them up: those that
// have ended, then the oldest submitted. trimJobs drops by it, and admit
// makes no newcomer that it would drop.
func droppedFirst(aEnded bool, aSubmitted time.Time, bEnded bool, bSubmitted time.Time) int {
	if aEnded != bEnded {
		if aEnded {
			return -1
		}
		return 1
	}
	return aSubmitted.Compare(bSubmitted)
}

func done(s v1alpha1.JobState) bool {
	return s == v1alpha1.JobSucceeded || s == v1alpha1.JobFailed || s == v1alpha1.JobGone
}

func addDaily(st *v1alpha1.HarvestReportStatus, now time.Time, s int64) {
	date := now.UTC().Format(time.DateOnly)
	if k := len(st.Daily); k > 0 && st.Daily[k-1].Date == date {
		st.Daily[k-1].GPUSeconds += s
		return
	}
	st.Daily = append(st.Daily, v1alpha1.DailyHarvest{Date: date, GPUSeconds: s})
	if len(st.Daily) > v1alpha1.MaxDays {
		st.Daily = slices.Delete(st.Daily, 0, len(st.Daily)-v1alpha1.MaxDays)
	}
}

// Namespaces lists the namespaces the ledger holds, in order.
func (l *Ledger) Namespaces() []string {
	out := make([]string, 0, len(l.namespaces))
	for ns := range l.namespaces {
		out = append(out, ns)
	}
	sort.Strings(out)
	return out
}

// Report is a namespace's report as of now, valued at price (nil: none), and
// whether more than its GPU-seconds changed since the last Published.
func (l *Ledger) Report(ns string, now time.Time, price *v1alpha1.Price) (st v1alpha1.HarvestReportStatus, changed bool) {
	n := l.namespaces[ns]
	if n == nil {
		return v1alpha1.HarvestReportStatus{}, false
	}
	st = n.status
	st.ObservedTime = metav1.NewTime(now)
	st.Daily = slices.Clone(n.status.Daily)
	st.HarvestedGPUHours = fmt.Sprintf("%.2f", float64(st.HarvestedGPUSeconds)/3600)
	st.Value, st.Price = price.Value(st.HarvestedGPUSeconds), price
	st.Jobs = make([]v1alpha1.Job, 0, len(n.jobs))
	keys := make([]string, 0, len(n.jobs))
	for k := range n.jobs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool {
		ja, jb := n.jobs[keys[a]], n.jobs[keys[b]]
		if !ja.submitted.Equal(jb.submitted) {
			return ja.submitted.After(jb.submitted)
		}
		return keys[a] < keys[b]
	})
	for _, k := range keys {
		j := n.jobs[k].Job
		j.Timeline = slices.Clone(j.Timeline)
		st.Jobs = append(st.Jobs, j)
	}
	st.Services = n.reportServices()
	return st, n.changed || !n.present
}

// Published records that ns's report was written.
func (l *Ledger) Published(ns string) {
	if n := l.namespaces[ns]; n != nil {
		n.changed, n.present = false, true
	}
}

// Forget drops a namespace (deleted: its report went with it).
func (l *Ledger) Forget(ns string) { delete(l.namespaces, ns) }

// HarvestedGPUSeconds sums every namespace's harvest.
func (l *Ledger) HarvestedGPUSeconds() int64 {
	var s int64
	for _, n := range l.namespaces {
		s += n.status.HarvestedGPUSeconds
	}
	return s
}
