package simulate

import (
	"fmt"
	"math"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
	"github.com/gleaner-dev/gleaner/pkg/round"
)

type simJob struct {
	Job
	name string
	runs int           // runs started; each is a new pod
	node int           // -1: queued
	done time.Duration // work saved by checkpoints of earlier runs
	// The current run: when it was placed, when it started making progress
	// (later than placed for a resumed run: restartCost), the time it spent
	// saving notice checkpoints (no progress), the progress its last
	// completed checkpoint holds and when that checkpoint completed (start:
	// none yet).
	placed, start, paused, saved, savedAt time.Duration
	// A notice checkpoint in flight, from ckptFrom to ckptTo, saving the
	// progress made by ckptFrom.
	saving           bool
	ckptFrom, ckptTo time.Duration
	// The reclaim notice standing on the pod: for when, since when; jit: the
	// checkpoint due to complete by noticeAt was started or judged not worth
	// taking.
	noticed               bool
	noticeAt, noticeSince time.Duration
	// noticeFirm: when noticeAt was last moved earlier (or first given).
	noticeFirm  time.Duration
	jit         bool
	noticeRound int // the last round that gave the notice
	// evicted: terminating; freeAt is when its GPUs come back.
	evicted bool
	freeAt  time.Duration
	grace   time.Duration // of its eviction
	// leaves is the current run's reclaim.LeavesIn: how long its pod,
	// evicted without having saved for a notice, takes to leave. What it
	// declares does not change while it runs, so it is found at placement.
	leaves time.Duration
	// pod is the current run's pod as last built, for the checkpoint and
	// eviction it shows.
	pod        *v1.Pod
	podSavedAt time.Duration
	podEvicted bool
}

// progress is the work job j's current run has done by t.
func (j *simJob) progress(t time.Duration) time.Duration {
	p := t - j.start - j.paused
	if j.saving {
		p -= max(0, min(t, j.ckptTo)-j.ckptFrom)
	}
	return max(0, p)
}

// restartCost is what job j loses on each of its GPUs when it resumes after
// an eviction, before its first step: RestartCost x (1 + log2(GPUs)). Each
// doubling of a job's GPUs adds one more RestartCost: a larger job loads a
// larger checkpoint and starts and joins more processes.
func (s *sim) restartCost(j *simJob) time.Duration {
	return time.Duration(float64(s.cfg.RestartCost) * (1 + math.Log2(float64(max(j.GPUs, 1)))))
}

// restarted counts d of job j's GPUs' time as lost to restarting (negative:
// a restart cut short by an eviction gives back what it did not spend).
func (s *sim) restarted(j *simJob, d time.Duration) {
	h := float64(j.GPUs) * d.Hours()
	s.res.RestartGPUHours += h
	s.res.LostGPUHours += h
}

// release ends grace periods and finished jobs, after moving each running
// job's checkpoints on to t, and notes when each node's GPUs came back.
func (s *sim) release(t time.Duration) {
	for i := range s.nodes {
		s.nodes[i].freedNow = 0
	}
	kept := s.running[:0]
	for _, j := range s.running {
		if !j.evicted {
			s.checkpoint(j, t)
		}
		switch {
		case j.evicted && j.freeAt <= t:
			n := &s.nodes[j.node]
			n.lent -= j.GPUs
			n.returning -= j.GPUs
			n.freedAt = max(n.freedAt, j.freeAt)
			j.node, j.evicted = -1, false
			s.queue = append(s.queue, j) // retried as a new pod: the back of the queue
			s.queuedGPUs += j.GPUs
		case !j.evicted && j.progress(t) >= j.Work-j.done:
			s.nodes[j.node].lent -= j.GPUs
			s.nodes[j.node].freedNow += j.GPUs
			s.res.JobsCompleted++
		default:
			kept = append(kept, j)
		}
	}
	clear(s.running[len(kept):])
	s.running = kept
}

// candidates are the running jobs on the owing nodes as the reclaimer sees
// them at t (every job is a lone pod, so no gang reaches another node).
func (s *sim) candidates(owing map[string]bool, t time.Duration) []reclaim.Candidate {
	now := s.now(t)
	var out []reclaim.Candidate
	for _, j := range s.running {
		if owing[s.nodes[j.node].name] {
			p := s.pod(j, t)
			s.jobOf[p] = j
			out = append(out, reclaim.NewCandidate(p, api.GPUResource, now, s.cfg.GracePeriod, nil))
		}
	}
	return out
}

// evict starts job j's grace period, as the reclaimer gives it to c
// (reclaim.Candidate.EvictionGrace). It loses the progress since its last
// completed checkpoint. A notice checkpoint in flight goes on through the
// grace period and counts if it completes within it; one not yet started is
// not started (the job is told to stop before it began). Without one, a job
// whose save and SavedGrace to exit fit its grace period saves on SIGTERM
// (unless NoSIGTERMSave).
func (s *sim) evict(j *simJob, c reclaim.Candidate, t time.Duration) {
	j.grace = c.EvictionGrace(s.cfg.GracePeriod)
	if j.saving && j.ckptFrom > t {
		j.saving = false // due to start later: never started
	}
	if j.saving {
		// The job goes on saving through its grace period.
		s.checkpointed(j, t, j.ckptTo <= t+j.grace)
	} else if !s.cfg.NoSIGTERMSave && j.start <= t && s.checkpointCost(j)+reclaim.SavedGrace <= j.grace {
		j.saved, j.savedAt = j.progress(t), t
	}
	if j.start > t {
		s.restarted(j, t-j.start) // evicted while it restarted
	}
	lost := j.progress(t) - j.saved
	j.done += j.saved
	j.evicted, j.freeAt = true, t+j.grace
	s.res.Preemptions++
	s.res.ReclaimedGPUs += j.GPUs
	s.nodes[j.node].reclaimed += j.GPUs
	s.nodes[j.node].returning += j.GPUs
	s.res.LostGPUHours += float64(j.GPUs) * lost.Hours()
	if j.noticed {
		s.res.NoticedEvictions++
		s.leads = append(s.leads, t-j.noticeSince)
		s.firmLeads = append(s.firmLeads, t-j.noticeFirm)
	}
}

// checkpoint moves job j's checkpoints on to t: a notice checkpoint in flight
// that has completed, the periodic ones (every CheckpointInterval of
// progress, taken as instant), and the one due to complete by the noticed
// time.
func (s *sim) checkpoint(j *simJob, t time.Duration) {
	if j.saving && j.ckptTo <= t {
		s.checkpointed(j, j.ckptTo, true)
	}
	p := j.progress(t)
	if k := p / s.cfg.CheckpointInterval * s.cfg.CheckpointInterval; k > j.saved {
		j.saved, j.savedAt = k, t-(p-k)
	}
	s.justInTime(j, t)
}

// justInTime starts, in the step from t, the checkpoint due to complete by
// the noticed time (at t if that is already too late).
func (s *sim) justInTime(j *simJob, t time.Duration) {
	if !j.noticed || j.jit || j.saving {
		return
	}
	c := s.checkpointCost(j)
	from := j.noticeAt - c
	if from >= t+s.cfg.ScrapeInterval {
		return // not in this step
	}
	from = max(t, from)
	j.jit = true
	// Only a checkpoint that saves more work than it costs, and that can
	// complete before the job is stopped (its grace period after the noticed
	// time), is worth taking.
	if j.progress(from)-j.saved < c || from+c > j.noticeAt+s.cfg.GracePeriod {
		return
	}
	s.startCheckpoint(j, from)
}

// checkpointCost is how long job j takes to save a checkpoint.
func (s *sim) checkpointCost(j *simJob) time.Duration {
	return time.Duration(float64(s.cfg.CheckpointCost) * float64(j.GPUs) / float64(s.cfg.GPUsPerNode))
}

func (s *sim) startCheckpoint(j *simJob, t time.Duration) {
	j.saving, j.ckptFrom, j.ckptTo = true, t, t+s.checkpointCost(j)
}

// checkpointed ends job j's notice checkpoint: completed, or stopped at t by
// an eviction (completed if it completes within the grace period). The time
// it took until then counts as lost work, the job made no progress; the time
// it goes on taking in the grace period does not (no job makes progress
// there).
func (s *sim) checkpointed(j *simJob, t time.Duration, completed bool) {
	held := j.progress(j.ckptFrom)
	spent := min(t, j.ckptTo) - j.ckptFrom
	j.saving = false
	j.paused += spent
	gpuHours := float64(j.GPUs) * spent.Hours()
	s.res.LostGPUHours += gpuHours
	s.res.NoticeCheckpointGPUHours += gpuHours
	if completed && held > j.saved {
		j.saved, j.savedAt = held, j.ckptTo
	}
}

// notify hands the round's reclaim notices to the jobs. A noticed job works
// on and checkpoints so as to complete by the noticed time (again if the time
// moves: the round keeps a time that moved by less than its step), when that
// saves more work than the checkpoint costs. Notices not given again are
// withdrawn.
func (s *sim) notify(notices []round.Notice, t time.Duration) {
	s.round++
	for _, n := range notices {
		j := s.jobOf[n.Pod]
		at := n.At.Sub(s.t0)
		if !j.noticed {
			j.noticed, j.noticeSince, j.noticeFirm, j.noticeAt, j.jit = true, t, t, at, false
			s.res.Notices++
		} else if at != j.noticeAt {
			if at < j.noticeAt {
				j.noticeFirm = t
			}
			j.noticeAt, j.jit = at, false
		}
		s.justInTime(j, t)
		j.noticeRound = s.round
	}
	for _, j := range s.running {
		if j.noticed && !j.evicted && j.noticeRound != s.round {
			j.noticed = false
			s.res.NoticesWithdrawn++
		}
	}
}

// pod is job j as the reclaimer sees it at t.
func (s *sim) pod(j *simJob, t time.Duration) *v1.Pod {
	if j.pod != nil && j.podSavedAt == j.savedAt && j.podEvicted == j.evicted {
		return j.pod // nothing the reclaimer reads has changed
	}
	j.podSavedAt, j.podEvicted = j.savedAt, j.evicted
	start := metav1.NewTime(s.now(j.placed))
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "research", Name: j.name, UID: types.UID(fmt.Sprintf("%s/%d", j.name, j.runs))},
		Spec: v1.PodSpec{NodeName: s.nodes[j.node].name, Containers: []v1.Container{{Name: "job",
			Resources: v1.ResourceRequirements{Requests: v1.ResourceList{api.GPUResource: *resource.NewQuantity(j.GPUs, resource.DecimalSI)}}}}},
		Status: v1.PodStatus{Phase: v1.PodRunning, StartTime: &start},
	}
	p.Spec.TerminationGracePeriodSeconds = &s.graceSeconds
	if !s.cfg.NoSIGTERMSave {
		p.Annotations = map[string]string{api.AnnotationSaveDuration: s.checkpointCost(j).String()}
	}
	if j.savedAt > j.start {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[api.AnnotationLastCheckpoint] = api.FormatTime(s.now(j.savedAt))
	}
	if j.evicted {
		// As the API server marks a pod asked to stop: the end of its grace period.
		del := metav1.NewTime(s.now(j.freeAt))
		grace := int64(j.grace / time.Second)
		p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &del, &grace
	}
	j.pod = p
	return p
}

// refill submits jobs until the queue asks for at least the backlog's GPUs.
func (s *sim) refill() {
	target := s.cfg.BacklogGPUs
	if target <= 0 {
		target = s.fleetGPUs
	}
	for s.queuedGPUs < target && len(s.jobs) > 0 {
		if s.nextJob == len(s.jobs) && s.cfg.NoReplay {
			return
		}
		s.submit()
	}
}

// submit queues the trace's next job (replaying the trace from its start when
// it runs out, unless NoReplay) and returns it; nil when nothing was queued.
func (s *sim) submit() *simJob {
	if s.nextJob == len(s.jobs) {
		if s.cfg.NoReplay {
			return nil
		}
		s.nextJob = 0
	}
	job := s.jobs[s.nextJob]
	name := job.Name
	if replay := s.submissions / len(s.jobs); replay > 0 {
		name = fmt.Sprintf("%s-r%d", job.Name, replay)
	}
	s.nextJob++
	s.submissions++
	if job.GPUs > s.cfg.GPUsPerNode {
		return nil // fits on no node
	}
	j := &simJob{Job: job, name: name, node: -1}
	s.queue = append(s.queue, j)
	s.queuedGPUs += job.GPUs
	return j
}

// schedule places queued jobs as gleaner-scheduler would. When lendable GPUs
// stay free because every queued job is too big for them, more jobs are
// submitted until one fits: the backlog holds work of every size, so a queue
// of whole-node jobs does not keep smaller work off the GPUs.
func (s *sim) schedule(t time.Duration) {
	s.refill()
	for s.place(t) && s.submitFitting(s.largestHole()) {
	}
}

// largestHole is the most GPUs one more job could take on a single open node.
func (s *sim) largestHole() int64 {
	var hole int64
	for i := range s.nodes {
		n, v := &s.nodes[i], s.verdicts[i]
		if v.State == api.HarvestOpen {
			hole = max(hole, min(v.HarvestableGPUs-n.lent, n.alloc-n.serving-n.lent))
		}
	}
	return hole
}

// submitFitting submits jobs in trace order until one of at most gpus GPUs is
// queued, and reports whether one was (trying the trace once round at most).
func (s *sim) submitFitting(gpus int64) bool {
	for tries := 0; gpus > 0 && tries < len(s.jobs); tries++ {
		if j := s.submit(); j != nil && j.GPUs <= gpus {
			return true
		}
	}
	return false
}

// place runs one pass over the queue and reports whether a queued job found
// no node.
func (s *sim) place(t time.Duration) bool {
	minFail := int64(math.MaxInt64)
	placed := false
	for qi, j := range s.queue {
		if j.GPUs >= minFail {
			continue
		}
		best, bestScore := -1, int64(-1)
		for i := range s.nodes {
			n, v := &s.nodes[i], s.verdicts[i]
			// GPUHarvest's Filter, then NodeResourcesFit's GPU check.
			if v.Fit(n.lent, j.GPUs) != harvest.Fits || n.alloc-n.serving-n.lent < j.GPUs {
				continue
			}
			score := harvest.PlacementScore(harvest.PlacementNode{HarvestableGPUs: v.HarvestableGPUs, LentGPUs: n.lent,
				AllocatableGPUs: n.alloc, ServingGPUs: n.serving}, j.GPUs, s.cfg.PackingWeight, s.cfg.IdleWeight, 100)
			if s.cfg.DeclareInterval {
				var avail int64 // unknown: no credit, as the plugin gives
				if a, ok := s.avail[n.name]; ok {
					avail = harvest.AvailabilityScore(a, s.cfg.CheckpointInterval, 100)
				}
				score = harvest.WithAvailability(score, s.cfg.PackingWeight+s.cfg.IdleWeight, avail, 1)
			}
			if score > bestScore {
				best, bestScore = i, score
			}
		}
		if best < 0 {
			minFail = j.GPUs
			if minFail <= 1 {
				break
			}
			continue
		}
		resumed := j.runs > 0
		j.node, j.runs = best, j.runs+1
		j.placed, j.start, j.paused, j.saved, j.savedAt, j.noticed, j.pod = t, t, 0, 0, t, false, nil
		if resumed {
			j.start = t + s.restartCost(j)
			j.savedAt = j.start
			s.restarted(j, j.start-t)
		}
		j.leaves = reclaim.LeavesIn(s.pod(j, t), s.cfg.GracePeriod)
		n := &s.nodes[best]
		n.lent += j.GPUs
		unused := min(n.reclaimed, j.GPUs)
		n.reclaimed -= unused
		s.res.ReclaimedUnusedGPUs += unused
		s.queuedGPUs -= j.GPUs
		s.running = append(s.running, j)
		s.queue[qi] = nil
		s.res.JobsStarted++
		placed = true
	}
	if placed {
		kept := s.queue[:0]
		for _, j := range s.queue {
			if j != nil {
				kept = append(kept, j)
			}
		}
		clear(s.queue[len(kept):])
		s.queue = kept
	}
	return minFail != math.MaxInt64
}
