package demo

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// row is one progress line: the pool's GPUs at a moment of the demo day.
type row struct {
	hour                             float64
	serving, lent, idle, harvestable int64
	spareOpen                        int64 // harvestable GPUs of open nodes not lent
	open, nodes                      int
	jobPods, queued                  int
	done, evicted                    int
}

// progress prints a row per demo hour, and on a terminal a live line between them.
type progress struct {
	w   io.Writer
	tty bool
}

func newProgress(w io.Writer) *progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &progress{w: w, tty: tty}
}

func (p *progress) header() {
	fmt.Fprintf(p.w, "\n%-6s %8s %6s %6s %11s %10s %12s %10s %10s\n", "time", "serving", "lent", "idle", "harvestable", "open nodes", "job pods", "jobs done", "evicted")
	fmt.Fprintf(p.w, "%-6s %8s %6s %6s %11s %10s %12s %10s %10s\n", "(demo)", "GPUs", "GPUs", "GPUs", "GPUs", "", "run+queued", "", "jobs")
}

func (r row) String() string {
	h := int(r.hour)
	m := int((r.hour - float64(h)) * 60)
	return fmt.Sprintf("%02d:%02d  %8d %6d %6d %11d %10s %12s %10d %10d", h%24, m, r.serving, r.lent, r.idle, r.harvestable,
		fmt.Sprintf("%d/%d", r.open, r.nodes), fmt.Sprintf("%d+%d", r.jobPods, r.queued), r.done, r.evicted)
}

func (p *progress) row(r row) {
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintln(p.w, r.String())
}

func (p *progress) live(r row) {
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K"+r.String())
	}
}

func (p *progress) end() {
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

type replicaRange struct {
	service  string
	min, max int32
}

// report is the day's outcome. GPU-hours are in demo time.
type report struct {
	t          timing
	nodes      int
	gpus       int64
	servingGPU integral
	lentGPU    integral
	idleGPU    integral
	// spareOpenGPU: idle GPUs that were open for harvest but that no queued job
	// could use (too few on one node for the jobs waiting, or not yet bound).
	spareOpenGPU integral
	peakLent     int64

	submittedJobs, finishedJobs, evictedJobs, retries int
	usefulWork, lostWork                              float64 // GPU-hours
	// Reclaim notices the jobs saw, the evictions of noticed jobs with their
	// lead (first notice to eviction, real time), and the work lost by
	// evictions with and without a notice (GPU-hours). Of the noticed,
	// overtaken are those taken before they saved for the notice's
	// current time: mostly taken before that time, the load having come
	// sooner than forecast; or saved, and taken after the time moved on.
	notices, noticedEvictions, overtaken             int
	noticeLeads                                      []time.Duration
	lostNoticed, lostOvertaken, lostUnnoticed        float64
	byReclaimer, byPreemption, reservationsPreempted int

	reclaimLatency []time.Duration // eviction to GPUs free, real time
	infWaits       []time.Duration // inference pod created to bound, real time
	// loadToReady: each spell a service's load needed more replicas than
	// were Ready, from its start to the replica that ended it, real time.
	loadToReady     []time.Duration
	infPendingAtEnd int
	replicaRanges   []replicaRange
	deadProcs       []string // processes no longer running at the end of the day
	published       published
}

// evicted accounts a running job's eviction at now, losing lost GPU-hours:
// with or without a notice, and if noticed, whether it had saved for the
// notice's current time or was taken before it did (overtaken).
func (r *report) evicted(lost float64, j *job, now time.Time) {
	r.lostWork += lost
	if j.noticeSince.IsZero() {
		r.lostUnnoticed += lost
		return
	}
	r.noticedEvictions++
	r.lostNoticed += lost
	r.noticeLeads = append(r.noticeLeads, now.Sub(j.noticeSince))
	if !j.noticeSaved {
		r.overtaken++
		r.lostOvertaken += lost
	}
}

func (r *report) print(w io.Writer) {
	s := r.t.scale
	demo := func(d time.Duration) string {
		return fmt.Sprintf("%.2fs real = %s demo", d.Seconds(), clockDuration(r.t.demo(d)))
	}
	total := float64(r.gpus) * 24
	pct := func(v float64) float64 { return 100 * v / total }
	fmt.Fprintf(w, "\nGleaner demo report: one day of a %d-node, %d-GPU inference pool, compressed %.0fx (24 h in %v).\n",
		r.nodes, r.gpus, s, r.t.day)
	fmt.Fprintf(w, "GPU-hours are demo time (real GPU-seconds x %.0f / 3600).\n\n", s)
	fmt.Fprintf(w, "  GPU-hours serving inference          %7.1f  (%4.1f%% of %.0f)\n", r.servingGPU.hours(s), pct(r.servingGPU.hours(s)), total)
	fmt.Fprintf(w, "  GPU-hours harvested (lent to jobs)   %7.1f  (%4.1f%%), at most %d GPUs lent at once\n", r.lentGPU.hours(s), pct(r.lentGPU.hours(s)), r.peakLent)
	idle, spare := r.idleGPU.hours(s), r.spareOpenGPU.hours(s)
	fmt.Fprintf(w, "  GPU-hours idle, left unharvested     %7.1f  (%4.1f%%): %.1f kept as headroom or not yet open, %.1f open but unused\n",
		idle, pct(idle), idle-spare, spare)
	fmt.Fprintf(w, "  Best-effort work completed           %7.1f  GPU-hours in %d finished jobs (%d submitted)\n", r.usefulWork, r.finishedJobs, r.submittedJobs)
	fmt.Fprintf(w, "  Work lost to evictions               %7.1f  GPU-hours (since each job's last checkpoint, every %s demo)\n", r.lostWork, clockDuration(r.t.demo(r.t.checkpoint)))
	unnoticed := r.evictedJobs - r.noticedEvictions
	fmt.Fprintf(w, "  Reclaim notices seen by jobs         %7d  (%d of the evicted jobs had one, lead p50 %s)\n", r.notices, r.noticedEvictions,
		clockDuration(r.t.demo(percentile(r.noticeLeads, 50))))
	fmt.Fprintf(w, "  Work lost, evicted with a notice     %7.1f  GPU-hours over %d evictions: %.1f over %d saved for its time, %.1f over %d taken before they saved\n",
		r.lostNoticed, r.noticedEvictions, r.lostNoticed-r.lostOvertaken, r.noticedEvictions-r.overtaken, r.lostOvertaken, r.overtaken)
	fmt.Fprintf(w, "  Work lost, evicted without notice    %7.1f  GPU-hours over %d evictions\n", r.lostUnnoticed, unnoticed)
	fmt.Fprintf(w, "  Jobs evicted                         %7d  (pod evictions by gleaner-controller's reclaimer: %d, by scheduler preemption: %d); %d retried\n",
		r.evictedJobs, r.byReclaimer, r.byPreemption, r.retries)
	if r.reservationsPreempted > 0 {
		fmt.Fprintf(w, "  Gang reservations preempted          %7d  (members waiting at Permit for the rest of their gang; no work lost)\n", r.reservationsPreempted)
	}
	fmt.Fprintf(w, "  Reclaim latency (eviction to GPUs free), %d pods: p50 %s, p99 %s\n", len(r.reclaimLatency),
		demo(percentile(r.reclaimLatency, 50)), demo(percentile(r.reclaimLatency, 99)))
	fmt.Fprintf(w, "  Inference pods' wait for GPUs, %d pods: p50 %s, p99 %s, max %s\n", len(r.infWaits),
		demo(percentile(r.infWaits, 50)), demo(percentile(r.infWaits, 99)), demo(percentile(r.infWaits, 100)))
	var short time.Duration
	for _, d := range r.loadToReady {
		short += d
	}
	fmt.Fprintf(w, "  Load waiting for a Ready replica, %d times: p50 %s, max %s, %s in all\n", len(r.loadToReady),
		demo(percentile(r.loadToReady, 50)), demo(percentile(r.loadToReady, 100)), demo(short))
	var ranges []string
	for _, rr := range r.replicaRanges {
		ranges = append(ranges, fmt.Sprintf("%s %d..%d", rr.service, rr.min, rr.max))
	}
	fmt.Fprintf(w, "  Autoscaled replicas over the day     %s\n", strings.Join(ranges, ", "))
	r.published.print(w, s)
}

// check lists what shows that Gleaner did not work; empty when it did.
func (r *report) check() []string {
	var f []string
	if r.lentGPU.hours(r.t.scale) <= 0 || r.peakLent == 0 {
		f = append(f, "no GPU was ever lent to a best-effort job")
	}
	if r.finishedJobs == 0 {
		f = append(f, "no best-effort job finished")
	}
	if r.byReclaimer == 0 {
		f = append(f, "gleaner-controller never reclaimed a GPU, although inference demand rose through the morning")
	}
	budget := r.t.reclaimBudget()
	if worst := percentile(r.infWaits, 100); worst > budget {
		f = append(f, fmt.Sprintf("an inference pod waited %v for GPUs, over the reclaim budget of %v (scrape interval + grace period + 5s)", worst.Round(100*time.Millisecond), budget))
	}
	if r.infPendingAtEnd > 0 {
		f = append(f, fmt.Sprintf("%d inference pods were still pending at the end of the day", r.infPendingAtEnd))
	}
	scaled := false
	for _, rr := range r.replicaRanges {
		scaled = scaled || rr.max > rr.min
	}
	if !scaled {
		f = append(f, "the autoscaler never changed any service's replicas over the day")
	}
	f = append(f, r.published.check()...)
	if len(r.deadProcs) > 0 {
		f = append(f, fmt.Sprintf("these processes were no longer running at the end of the day: %v (see their logs)", r.deadProcs))
	}
	return f
}

func (r *report) passed() string {
	return fmt.Sprintf("GPUs were lent and jobs finished, gleaner-controller reclaimed GPUs for inference, "+
		"every inference pod got its GPUs within the %v budget, the autoscaler followed the load, the harvest was published, and no process died.", r.t.reclaimBudget())
}
