package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/utils/ptr"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/api/v1alpha1"
)

type statusOptions struct {
	*options
	outputFormat
	dayWindow
	pool          string
	allNamespaces bool
	check         bool
}

func newStatusCommand(o *options) *cobra.Command {
	s := &statusOptions{options: o}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "The pool at a glance, harvest per namespace and the next 24 hours",
		Long: `status shows the pool Gleaner lends from: its nodes by verdict and its GPUs
by state (serving inference, lent to best-effort jobs, kept as headroom for
inference, idle), what your namespace harvested and its value, and the
forecast of lendable GPUs over the next 24 hours.`,
		Example: `  kubectl gleaner status
  kubectl gleaner status -o wide          # every node's GPUs too
  kubectl gleaner status -A --days 30     # every namespace you may read, over 30 days
  kubectl gleaner status --check          # exit 1 unless Gleaner is lending (helm test runs it)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return s.run(cmd.Context()) },
	}
	s.addOutputFlag(cmd)
	poolFlag(cmd, &s.pool)
	cmd.Flags().BoolVarP(&s.allNamespaces, "all-namespaces", "A", false, "Harvest of every namespace you may read, not only yours.")
	s.addDaysFlag(cmd, "Window of the harvest shown, in days (UTC) up to today.")
	cmd.Flags().BoolVar(&s.check, "check", false, "Then check that Gleaner can lend, and exit 1 saying what is wrong if not: the pool is published, planned and has GPUs, and gleaner-controller renews its heartbeat Lease (waiting up to the Lease's duration; needs get on that Lease in "+api.SystemNamespace+").")
	return cmd
}

func (s *statusOptions) run(ctx context.Context) error {
	c, err := s.clients()
	if err != nil {
		return err
	}
	// Without the pool (not granted gleaner-pool-reader, or no such pool)
	// the namespace's own harvest is still worth showing, as the console does.
	pool, poolErr := c.pool(ctx, s.pool)
	if poolErr != nil && !apierrors.IsForbidden(poolErr) && (!apierrors.IsNotFound(poolErr) || v1alpha1.NotServed(poolErr)) {
		return poolErr
	}
	var reports []v1alpha1.HarvestReport
	if s.allNamespaces {
		if reports, err = c.reports(ctx); err != nil {
			return err
		}
	} else {
		r, err := c.report(ctx, c.namespace)
		if err != nil {
			return err
		}
		if r != nil {
			reports = append(reports, *r)
		}
	}
	if s.output == "json" || s.output == "yaml" {
		out := struct {
			Pool      *v1alpha1.GPUPool        `json:"pool"`
			PoolError string                   `json:"poolError,omitempty"`
			Reports   []v1alpha1.HarvestReport `json:"harvestReports"`
		}{Pool: pool, Reports: reports}
		if poolErr != nil {
			out.PoolError = poolErr.Error()
		}
		if err := printObject(s.streams.Out, s.output, out); err != nil || !s.check {
			return err
		}
		return s.checkLending(ctx, c, pool, poolErr)
	}
	w := s.streams.Out
	if poolErr != nil {
		fmt.Fprintf(w, "Pool %s: not shown: %s\n", s.pool, poolErr)
	} else {
		s.printPool(w, pool)
	}
	fmt.Fprintln(w)
	s.printHarvest(w, c.namespace, reports)
	if pool != nil {
		fmt.Fprintln(w)
		printOutlook(w, pool.Status, s.output == "wide")
	}
	if s.check {
		return s.checkLending(ctx, c, pool, poolErr)
	}
	return nil
}

// checkLending is status --check: gleaner-scheduler lends only while the
// controller plans and renews its heartbeat and no admin stopped lending, so
// all three are checked. The
// heartbeat is judged as the scheduler judges it, on this machine's clock: a
// renewal must be seen within the Lease's duration, whatever its renewTime
// says.
func (s *statusOptions) checkLending(ctx context.Context, c *clients, pool *v1alpha1.GPUPool, poolErr error) error {
	switch {
	case poolErr != nil:
		return fmt.Errorf("check failed: %w", poolErr)
	case !pool.Status.Planning:
		return fmt.Errorf("check failed: GPUPool %s says gleaner-controller is not planning, so nothing new is lent: its logs say why", pool.Name)
	case pool.Status.GPUs.Total == 0:
		return fmt.Errorf("check failed: GPUPool %s has no GPUs: label the nodes Gleaner may lend %s=%s", pool.Name, api.LabelPool, api.PoolInference)
	}
	lease := api.SystemNamespace + "/" + api.HeartbeatLeaseName
	leases := c.kube.CoordinationV1().Leases(api.SystemNamespace)
	first, err := leases.Get(ctx, api.HeartbeatLeaseName, metav1.GetOptions{})
	if err != nil {
		return c.explain(err, "read", "gleaner-controller's heartbeat Lease "+lease, coordinationv1.SchemeGroupVersion.WithResource("leases"))
	}
	if stop := api.ReadStop(first.Annotations); stop.Stopped() {
		return fmt.Errorf("check failed: %s, so gleaner-scheduler lends nothing (kubectl gleaner resume lifts it)", stop)
	}
	if ptr.Deref(first.Spec.HolderIdentity, "") == "" {
		return fmt.Errorf("check failed: gleaner-controller released its heartbeat Lease %s: no replica plans, so nothing is lent", lease)
	}
	timeout := time.Duration(ptr.Deref(first.Spec.LeaseDurationSeconds, 15)) * time.Second
	start := time.Now()
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, false, func(ctx context.Context) (bool, error) {
		cur, err := leases.Get(ctx, api.HeartbeatLeaseName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return !renewTime(cur).Equal(renewTime(first)) || ptr.Deref(cur.Spec.HolderIdentity, "") != ptr.Deref(first.Spec.HolderIdentity, ""), nil
	})
	if err != nil {
		return fmt.Errorf("check failed: gleaner-controller did not renew its heartbeat Lease %s within its duration (%v), so gleaner-scheduler lends nothing: its logs say why (%w)", lease, timeout, err)
	}
	fmt.Fprintf(s.streams.ErrOut, "Check passed: the pool is planned, and gleaner-controller renewed its heartbeat %v after it was first read.\n", time.Since(start).Round(100*time.Millisecond))
	return nil
}

func (s *statusOptions) printPool(w io.Writer, pool *v1alpha1.GPUPool) {
	st := pool.Status
	planning := "planning"
	if !st.Planning {
		planning = "NOT planning: nothing new is lent"
	}
	fmt.Fprintf(w, "Pool %s: %s, observed %s ago\n", pool.Name, planning, s.age(&st.ObservedTime))
	if st.LendingStopped != "" {
		line := "Lending stopped by the cluster admin (" + st.LendingStopped + ")"
		if st.LendingStoppedReason != "" {
			line += ": " + st.LendingStoppedReason
		}
		line += ". Nothing new is lent"
		if st.LendingStopped == string(api.StopHoldAndDrain) {
			line += ", and every lent GPU is being taken back"
		}
		fmt.Fprintln(w, line+".")
	}
	fmt.Fprintf(w, "  Nodes  %d open, %d draining, %d closed\n", st.Nodes.Open, st.Nodes.Draining, st.Nodes.Closed)
	g := st.GPUs
	fmt.Fprintf(w, "  GPUs   %d in all: %d serving, %d lent, %d headroom, %d idle; %d lendable\n", g.Total, g.Serving, g.Lent, g.Headroom, g.Idle, g.Lendable)
	fmt.Fprintf(w, "  %s\n", gpuBar(g, 60))
	if s.output != "wide" {
		return
	}
	fmt.Fprintln(w)
	tw := printers.GetNewTabWriter(w)
	fmt.Fprintln(tw, "NODE\tVERDICT\tGPUS\tSERVING\tLENT\tHEADROOM\tIDLE\tLENDABLE\tGPU MAP")
	for _, n := range st.NodeStates {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", n.Name, n.Verdict, n.Total, n.Serving, n.Lent, n.Headroom, n.Idle, n.Lendable, gpuBar(n.GPUCounts, int(n.Total)))
	}
	tw.Flush()
	if st.NodeStatesTruncated {
		fmt.Fprintf(w, "(only the first %d nodes are published)\n", len(st.NodeStates))
	}
}

// gpuBar draws GPUs by state, one character per GPU (scaled to width when
// there are more): S serving, L lent, H headroom, . idle.
func gpuBar(g v1alpha1.GPUCounts, width int) string {
	if g.Total <= 0 || width <= 0 {
		return ""
	}
	scale := func(n int64) int {
		if g.Total <= int64(width) {
			return int(n)
		}
		return int((n*int64(width) + g.Total/2) / g.Total)
	}
	var b strings.Builder
	for _, part := range []struct {
		n int64
		c string
	}{{g.Serving, "S"}, {g.Lent, "L"}, {g.Headroom, "H"}, {g.Idle, "."}} {
		b.WriteString(strings.Repeat(part.c, scale(part.n)))
	}
	return "[" + b.String() + "]"
}

func (s *statusOptions) printHarvest(w io.Writer, ns string, reports []v1alpha1.HarvestReport) {
	if len(reports) == 0 {
		fmt.Fprintf(w, "Harvest: namespace %s has run no best-effort job yet.\n", ns)
		return
	}
	sort.Slice(reports, func(i, j int) bool { return reports[i].Namespace < reports[j].Namespace })
	since := s.since(s.now())
	fmt.Fprintf(w, "Harvest, last %d days (since %s UTC):\n", s.days, since)
	tw := printers.GetNewTabWriter(w)
	fmt.Fprintln(tw, "NAMESPACE\tGPU-HOURS\tVALUE\tALL-TIME GPU-HOURS\tALL-TIME VALUE\tJOBS")
	for _, r := range reports {
		var window int64
		for _, d := range r.Status.Daily {
			if d.Date >= since {
				window += d.GPUSeconds
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", r.Namespace, hours(window), dash(r.Status.Price.Value(window)), hours(r.Status.HarvestedGPUSeconds), dash(r.Status.Value), len(r.Status.Jobs))
	}
	tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printOutlook draws the next hours' lendable GPUs: one column per step,
// the expected band's top (if load follows the learned profile) above the
// cautious forecast's; with -o wide, one line per step with its figures.
func printOutlook(w io.Writer, st v1alpha1.GPUPoolStatus, wide bool) {
	if len(st.Outlook) == 0 {
		fmt.Fprintln(w, "Outlook: none published yet.")
		return
	}
	first := st.Outlook[0].Time.UTC()
	if wide {
		fmt.Fprintln(w, "Lendable GPUs, next 24 hours (# cautious forecast, + if load follows the learned profile):")
		const width = 40
		total := max(st.GPUs.Total, 1)
		bar := func(n int64) int { return int((n*width + total/2) / total) }
		for _, p := range st.Outlook {
			low, high := bar(p.LendableLow), bar(p.LendableHigh)
			fmt.Fprintf(w, "  %s  %-*s  %s\n", p.Time.UTC().Format("Mon 15:04"), width, strings.Repeat("#", low)+strings.Repeat("+", max(0, high-low)), span(p.LendableLow, p.LendableHigh))
		}
		return
	}
	var lowest, highest int64 = st.Outlook[0].LendableLow, 0
	var expected, cautious strings.Builder
	for _, p := range st.Outlook {
		expected.WriteRune(spark(p.LendableHigh, st.GPUs.Total))
		cautious.WriteRune(spark(p.LendableLow, st.GPUs.Total))
		lowest, highest = min(lowest, p.LendableLow), max(highest, p.LendableHigh)
	}
	fmt.Fprintf(w, "Lendable GPUs of %d, next 24 hours from %s UTC (one column an hour; -o wide for figures):\n", st.GPUs.Total, first.Format("Mon 15:04"))
	fmt.Fprintf(w, "  expected  %s\n", expected.String())
	fmt.Fprintf(w, "  cautious  %s   %s\n", cautious.String(), span(lowest, highest))
	var axis strings.Builder
	for i := 0; i < len(st.Outlook); i += 6 {
		axis.WriteString(fmt.Sprintf("%-6s", st.Outlook[i].Time.UTC().Format("15h")))
	}
	fmt.Fprintf(w, "            %s\n", strings.TrimRight(axis.String(), " "))
}

// spark is one column of a sparkline: n of total as one of eight heights
// (a space for none).
func spark(n, total int64) rune {
	const levels = "▁▂▃▄▅▆▇█"
	if n <= 0 || total <= 0 {
		return ' '
	}
	i := min(int((n*8-1)/total), 7)
	return []rune(levels)[i]
}

func span(low, high int64) string {
	if low == high {
		return fmt.Sprint(low)
	}
	return fmt.Sprintf("%d-%d", low, high)
}

func renewTime(l *coordinationv1.Lease) time.Time {
	if l.Spec.RenewTime == nil {
		return time.Time{}
	}
	return l.Spec.RenewTime.Time
}
