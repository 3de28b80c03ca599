package controller

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
	"github.com/gleaner-dev/gleaner/pkg/reclaim/evict"
	"github.com/gleaner-dev/gleaner/pkg/round"
)

// A round's writes to Nodes and evictions, in the order inference needs them.
// At fleet scale a round can change thousands of verdicts; written one at a
// time, all before the first eviction, they would hold every eviction past
// the reclaim budget. So:
//
//  1. each node that owes GPUs publishes its own verdict, then evicts for it:
//     the scheduler can never refill GPUs being taken back, and no eviction
//     waits for another node's verdict. A node whose verdict could not be
//     written evicts nothing this round.
//  2. verdicts that lend less (closing, draining, fewer GPUs) follow; once
//     1 and 2 are all written, the heartbeat is renewed.
//  3. verdicts that lend more come last, within half a sync period: a node
//     that opens a round late costs some harvest, never inference, and what
//     is left is written next round.
//
// Each step writes up to Config.WriteWorkers at once.

// lendsMore reports whether verdict v would let the scheduler place more on
// node than the verdict it carries now (a malformed one reads as closed).
func lendsMore(node *v1.Node, v harvest.Verdict) bool {
	published, err := harvest.ReadNode(node)
	if err != nil {
		published = harvest.Closed
	}
	return v.State == api.HarvestOpen && (published.State != api.HarvestOpen || v.HarvestableGPUs > published.HarvestableGPUs)
}

// parallel runs fn for each of n pieces, WriteWorkers at a time, and returns
// their errors.
func (c *Controller) parallel(ctx context.Context, n int, fn func(ctx context.Context, i int) error) []error {
	var (
		mu   sync.Mutex
		errs []error
	)
	workqueue.ParallelizeUntil(ctx, c.cfg.WriteWorkers, n, func(i int) {
		if err := fn(ctx, i); err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	})
	return errs
}

// publishVerdicts writes the plan's verdict on each of nodes.
func (c *Controller) publishVerdicts(ctx context.Context, nodes []*v1.Node, d round.Decision) []error {
	return c.parallel(ctx, len(nodes), func(ctx context.Context, i int) error {
		return c.publish(ctx, nodes[i], d.Plan.Nodes[nodes[i].Name].Verdict)
	})
}

// publishOpenings writes verdicts that lend more until the deadline; the rest
// wait for the next round. It returns how many it left and the errors.
func (c *Controller) publishOpenings(ctx context.Context, nodes []*v1.Node, d round.Decision, deadline time.Duration) (int, []error) {
	return c.writeWithin(ctx, deadline, len(nodes), func(ctx context.Context, i int) error {
		return c.publish(ctx, nodes[i], d.Plan.Nodes[nodes[i].Name].Verdict)
	})
}

// writeWithin makes n writes, WriteWorkers at a time, until the deadline:
// once one is cut off (cutOff), the rest wait for the next round. It returns
// how many it left and the errors of the others.
func (c *Controller) writeWithin(ctx context.Context, deadline time.Duration, n int, write func(ctx context.Context, i int) error) (left int, errs []error) {
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	var written atomic.Int64
	errs = c.parallel(ctx, n, func(ctx context.Context, i int) error {
		if ctx.Err() != nil {
			return nil
		}
		if err := write(ctx, i); err != nil {
			if cutOff(ctx, err) {
				cancel()
				return nil
			}
			return err
		}
		written.Add(1)
		return nil
	})
	return n - int(written.Load()) - len(errs), errs
}

// cutOff reports whether a write failed for want of time rather than being
// refused: its context ended, or the client's rate limiter foresaw that its
// wait would outlast the deadline (golang.org/x/time/rate says so only in
// words). At 10,000 nodes the availability a round could not write in its
// half period failed so, a node at a time, thousands of errors a round.
func cutOff(ctx context.Context, err error) bool {
	return ctx.Err() != nil || strings.Contains(err.Error(), "would exceed context deadline")
}

// eviction is one pod evicted for a node that owes GPUs.
type eviction struct {
	pod  reclaim.Candidate
	owed reclaim.Owed
}

// reclaimOwed takes back what each node owes, its verdict first (step 1). The
// pods are chosen as reclaim.Take chooses them; when an eviction is refused
// (a PodDisruptionBudget, or any answer but throttling or a timeout: see
// evict.Undecided), Take chooses again, without that pod's unit, for what
// its node still owes. It returns the evictions made, the verdict
// errors and the eviction errors.
func (c *Controller) reclaimOwed(ctx context.Context, nodes map[string]*v1.Node, d round.Decision) (done []eviction, verdictErrs, evictErrs []error) {
	plan := map[string][]reclaim.Candidate{}
	reclaim.Take(d.Reclaims, d.Candidates, func(m reclaim.Candidate, o reclaim.Owed) error {
		plan[o.Node] = append(plan[o.Node], m)
		return nil
	})
	var (
		mu      sync.Mutex
		refused []*v1.Pod
		// undecided: evictions cut off by the round's deadline, throttled
		// or timed out (evict.Undecided). Not refused: no other pod is
		// taken in their place this round (a timed-out one may have been
		// carried out), and the next round tries them again if still owed.
		undecided []eviction
		blocked   = map[string]bool{}
	)
	verdictErrs = c.parallel(ctx, len(d.Reclaims), func(ctx context.Context, i int) error {
		o := d.Reclaims[i]
		if n := nodes[o.Node]; n != nil {
			if err := c.publish(ctx, n, d.Plan.Nodes[o.Node].Verdict); err != nil {
				mu.Lock()
				blocked[o.Node] = true
				mu.Unlock()
				return err
			}
		}
		for _, m := range plan[o.Node] {
			if ctx.Err() != nil {
				return nil // the round's time is up: the next goes on from here
			}
			err := c.evictor.Evict(ctx, m, o.Why)
			cut := err != nil && cutOff(ctx, err)
			mu.Lock()
			switch {
			case cut || evict.Undecided(err):
				undecided = append(undecided, eviction{m, o})
				evictErrs = append(evictErrs, err)
			case err != nil:
				refused = append(refused, m.Pod)
				evictErrs = append(evictErrs, err)
			default:
				done = append(done, eviction{m, o})
			}
			mu.Unlock()
			countEviction(err)
			if cut {
				return nil
			}
			if err == nil {
				logEviction(ctx, m, o)
			}
		}
		return nil
	})
	// A round whose time is up chooses no more: what it failed to evict was
	// cut off, not refused, and the next round goes on from what is left.
	if len(refused) == 0 || ctx.Err() != nil {
		return done, verdictErrs, evictErrs
	}
	// Again for what is still owed, without the pods gone, those undecided
	// and the units refused; one at a time, as refusals are rare.
	tried := append(slices.Clip(done), undecided...)
	gone := map[types.UID]bool{}
	for _, e := range tried {
		gone[e.pod.Pod.UID] = true
	}
	freed := freedOn(tried)
	var again []reclaim.Owed
	for _, o := range d.Reclaims {
		if left := o.GPUs - freed[o.Node]; left > 0 && !blocked[o.Node] {
			again = append(again, reclaim.Owed{Node: o.Node, GPUs: left, Why: o.Why})
		}
	}
	isRefused := refusedUnits(refused)
	var rest []reclaim.Candidate
	for _, m := range d.Candidates {
		if !gone[m.Pod.UID] && !isRefused(m.Pod) {
			rest = append(rest, m)
		}
	}
	_, _, errs := reclaim.Take(again, rest, func(m reclaim.Candidate, o reclaim.Owed) error {
		err := c.evictor.Evict(ctx, m, o.Why)
		countEviction(err)
		switch {
		case err == nil:
			logEviction(ctx, m, o)
			done = append(done, eviction{m, o})
		case cutOff(ctx, err) || evict.Undecided(err):
			evictErrs = append(evictErrs, err)
			return nil // not refused: Take takes no other pod in its place
		}
		return err
	})
	return done, verdictErrs, append(evictErrs, errs...)
}

// refusedUnits says whether a pod is one of the refused pods or in one's
// gang.
func refusedUnits(refused []*v1.Pod) func(p *v1.Pod) bool {
	pods, gangs := map[types.UID]bool{}, map[string]bool{}
	for _, r := range refused {
		pods[r.UID] = true
		if g := api.GangKey(r); g != "" {
			gangs[g] = true
		}
	}
	return func(p *v1.Pod) bool {
		if pods[p.UID] {
			return true
		}
		g := api.GangKey(p)
		return g != "" && gangs[g]
	}
}

func countEviction(err error) {
	switch {
	case err == nil:
		evictionsTotal.WithLabelValues("evicted").Inc()
	case evict.RefusedByBudget(err):
		evictionsTotal.WithLabelValues("blocked").Inc()
	default:
		evictionsTotal.WithLabelValues("error").Inc()
	}
}

// logEviction logs an eviction as it is made.
func logEviction(ctx context.Context, m reclaim.Candidate, o reclaim.Owed) {
	klog.FromContext(ctx).Info("Reclaimed GPUs", "pod", klog.KObj(m.Pod), "node", o.Node, "why", o.Why)
}

// recordEvictions counts and books the evictions made.
func (c *Controller) recordEvictions(now time.Time, d round.Decision, done []eviction) {
	for _, e := range done {
		m, o := e.pod, e.owed
		switch w, warned := d.Warned[m.Pod.UID]; {
		case !warned:
			unwarnedEvictions.WithLabelValues("unforeseen").Inc()
		case w.At.After(now):
			unwarnedEvictions.WithLabelValues("inference_waiting").Inc()
			noticeLead.Observe(now.Sub(w.Since).Seconds())
		default:
			noticeLead.Observe(now.Sub(w.Since).Seconds())
		}
		lostWorkGPUSeconds.Add(m.LostWork)
		c.ledger.Evicted(now, m.Pod, evictedWhy(o.Node, d.Plan.HeadroomFor[o.Node]), m.LostWork)
	}
}

// freedOn is the GPUs the evictions made free on each node they were owed by.
func freedOn(done []eviction) map[string]int64 {
	freed := map[string]int64{}
	for _, e := range done {
		if e.pod.Pod.Spec.NodeName == e.owed.Node {
			freed[e.owed.Node] += e.pod.GPUs
		}
	}
	return freed
}

// stillOwed logs what the evictions made did not cover: one line a round,
// naming the first few nodes. A fleet-wide load step leaves thousands: at
// 10,000 nodes, walking every candidate for each and logging a line each
// took 20 s of a round.
func stillOwed(ctx context.Context, d round.Decision, done []eviction) {
	freed := freedOn(done)
	terminating := map[string]int64{}
	for _, m := range d.Candidates {
		if m.Pod.DeletionTimestamp != nil && !m.Overdue {
			terminating[m.Pod.Spec.NodeName] += m.GPUs
		}
	}
	var nodes []string
	var gpus int64
	for _, o := range d.Reclaims {
		if left := o.GPUs - freed[o.Node] - terminating[o.Node]; left > 0 {
			gpus += left
			nodes = append(nodes, o.Node)
		}
	}
	if len(nodes) > 0 {
		klog.FromContext(ctx).Info("Could not reclaim all GPUs owed", "nodes", len(nodes), "owedGPUs", gpus, "first", nodes[:min(len(nodes), 10)])
	}
}

// splitVerdicts sorts the nodes whose verdict changes, apart from those that
// owe GPUs, into those that lend less and those that lend more.
func splitVerdicts(nodes []*v1.Node, d round.Decision) (less, more []*v1.Node) {
	owes := make(map[string]bool, len(d.Reclaims))
	for _, o := range d.Reclaims {
		owes[o.Node] = true
	}
	for _, n := range nodes {
		v := d.Plan.Nodes[n.Name].Verdict
		switch {
		case owes[n.Name] || v.PublishedOn(n):
		case lendsMore(n, v):
			more = append(more, n)
		default:
			less = append(less, n)
		}
	}
	return less, more
}
