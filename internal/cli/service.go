package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/gleaner-dev/gleaner/pkg/api/v1alpha1"
)

type serviceOptions struct {
	*options
	outputFormat
	dayWindow
}

func newServiceCommand(o *options) *cobra.Command {
	s := &serviceOptions{options: o}
	cmd := &cobra.Command{
		Use:     "service [NAME]",
		Aliases: []string{"services"},
		Short:   "An inference service's waits for GPUs against the reclaim budget",
		Long: `service is the inference owner's view: how long each replica of the
namespace's inference services waited to be scheduled on the pool's GPUs,
against the reclaim budget (the longest a replica should wait for lent GPUs
to come back: the scrape interval, the grace cap of the best-effort pods
evicted for it, and 5 s), per day and in all, and the replicas pending now.
It reads the namespace's HarvestReport, which gleaner-controller writes for
each namespace opted in as inference, with your own rights: whoever may view
the namespace may read it. Without NAME, every service of the namespace.`,
		Example: `  kubectl gleaner service chat -n serving
  kubectl gleaner service -n serving                  # every service of the namespace
  kubectl gleaner service chat -n serving --days 30 -o yaml`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			return s.run(cmd.Context(), name)
		},
	}
	s.addOutputFlag(cmd)
	s.addDaysFlag(cmd, "Window of the waits shown, in days (UTC) up to today.")
	return cmd
}

func (s *serviceOptions) run(ctx context.Context, name string) error {
	c, err := s.clients()
	if err != nil {
		return err
	}
	report, err := c.report(ctx, c.namespace)
	if err != nil {
		return err
	}
	var st v1alpha1.HarvestReportStatus
	if report != nil {
		st = report.Status
	}
	services := st.Services
	if name != "" {
		services = nil
		for _, svc := range st.Services {
			if svc.Name == name {
				services = append(services, svc)
			}
		}
		if len(services) == 0 {
			return s.notFound(c.namespace, name, st)
		}
	} else if len(services) == 0 {
		return fmt.Errorf("namespace %s has no inference service Gleaner keeps room for: it is not opted in as inference (the label gleaner.dev/inference=true), or no gleaner-controller has published its report yet", c.namespace)
	}
	if s.output == "json" || s.output == "yaml" {
		out := struct {
			Namespace                 string                  `json:"namespace"`
			ReclaimBudgetMilliseconds int64                   `json:"reclaimBudgetMilliseconds"`
			Services                  []v1alpha1.ServiceWaits `json:"services"`
		}{c.namespace, st.ReclaimBudgetMilliseconds, services}
		return printObject(s.streams.Out, s.output, out)
	}
	w := s.streams.Out
	budget := time.Duration(st.ReclaimBudgetMilliseconds) * time.Millisecond
	fmt.Fprintf(w, "Reclaim budget %s: the longest a replica should wait for lent GPUs to come back\n", waitString(budget))
	fmt.Fprintf(w, "(a planning round, the grace cap of the best-effort pods evicted for it, and 5 s).\n")
	fmt.Fprintf(w, "A wait runs from a replica's creation until it is scheduled, whatever held it up.\n\n")
	if name == "" {
		s.list(w, c.namespace, st, budget)
		return nil
	}
	s.describe(w, c.namespace, services[0], budget, &st.ObservedTime)
	return nil
}

func (s *serviceOptions) notFound(ns, name string, st v1alpha1.HarvestReportStatus) error {
	if len(st.Services) == 0 {
		return fmt.Errorf("no inference service %q in namespace %s: the namespace is not opted in as inference (the label gleaner.dev/inference=true), or no gleaner-controller has published its report yet", name, ns)
	}
	if st.ServicesTruncated {
		return fmt.Errorf("no inference service %q among the first %d of namespace %s by name: a report keeps no more", name, len(st.Services), ns)
	}
	return fmt.Errorf("no inference service %q in namespace %s (kubectl gleaner service -n %s lists them)", name, ns, ns)
}

// window sums a service's days from since (a UTC date) on.
func window(svc v1alpha1.ServiceWaits, since string) v1alpha1.WaitCounts {
	var c v1alpha1.WaitCounts
	for _, d := range svc.Daily {
		if d.Date < since {
			continue
		}
		c.Scheduled += d.Scheduled
		c.OverBudget += d.OverBudget
		if d.LongestMilliseconds > c.LongestMilliseconds || c.LongestPod == "" {
			c.LongestMilliseconds, c.LongestPod, c.LongestAt = d.LongestMilliseconds, d.LongestPod, d.LongestAt
		}
	}
	return c
}

func (s *serviceOptions) list(w io.Writer, ns string, st v1alpha1.HarvestReportStatus, budget time.Duration) {
	since := s.since(s.now())
	fmt.Fprintf(w, "Waits to be scheduled on the pool, namespace %s, last %d days (since %s UTC):\n", ns, s.days, since)
	tw := printers.GetNewTabWriter(w)
	head := "SERVICE\tREPLICAS\tPENDING\tSCHEDULED\tOVER BUDGET\tLONGEST WAIT"
	if s.output == "wide" {
		head += "\tLONGEST POD\tALL-TIME SCHEDULED\tALL-TIME OVER BUDGET\tALL-TIME LONGEST\tCOUNTED SINCE"
	}
	fmt.Fprintln(tw, head)
	for _, svc := range st.Services {
		c := window(svc, since)
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%s", svc.Name, svc.Replicas, s.pending(svc, budget), c.Scheduled, c.OverBudget, longest(c))
		if s.output == "wide" {
			fmt.Fprintf(tw, "\t%s\t%d\t%d\t%s\t%s", dash(c.LongestPod), svc.Waits.Scheduled, svc.Waits.OverBudget, longest(svc.Waits), svc.Since.UTC().Format(time.DateOnly))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	if st.ServicesTruncated {
		fmt.Fprintf(w, "(only the first %d services by name are reported)\n", len(st.Services))
	}
}

func (s *serviceOptions) describe(w io.Writer, ns string, svc v1alpha1.ServiceWaits, budget time.Duration, observed *metav1.Time) {
	fmt.Fprintf(w, "Service:        %s/%s (reported %s ago)\n", ns, svc.Name, s.age(observed))
	fmt.Fprintf(w, "Replicas:       %d now\n", svc.Replicas)
	fmt.Fprintf(w, "Pending:        %s\n", s.pendingSentence(svc, budget))
	fmt.Fprintf(w, "Counted since:  %s UTC (%s ago)\n", svc.Since.UTC().Format("2006-01-02 15:04"), s.age(&svc.Since))
	since := s.since(s.now())
	c := window(svc, since)
	fmt.Fprintf(w, "\nLast %d days (since %s UTC): %s\n", s.days, since, counts(c, budget))
	fmt.Fprintf(w, "In all:         %s\n", counts(svc.Waits, budget))
	if c.Scheduled == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := printers.GetNewTabWriter(w)
	fmt.Fprintln(tw, "DATE\tSCHEDULED\tOVER BUDGET\tLONGEST WAIT\tLONGEST POD")
	for _, d := range svc.Daily {
		if d.Date >= since {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", d.Date, d.Scheduled, d.OverBudget, longest(d.WaitCounts), dash(d.LongestPod))
		}
	}
	tw.Flush()
}

// counts says what a span's waits were, against the budget.
func counts(c v1alpha1.WaitCounts, budget time.Duration) string {
	if c.Scheduled == 0 {
		return "no replica scheduled on the pool"
	}
	verdict := "none over the reclaim budget"
	if c.OverBudget > 0 {
		verdict = fmt.Sprintf("%d over the reclaim budget (docs/troubleshooting.md: Inference waited for GPUs)", c.OverBudget)
	}
	of := ""
	if c.LongestPod != "" {
		of = ", " + c.LongestPod
		if c.LongestAt != nil {
			of += " scheduled at " + c.LongestAt.UTC().Format("2006-01-02 15:04") + " UTC"
		}
	}
	return fmt.Sprintf("%s scheduled, %s; longest wait %s%s", plural(int(c.Scheduled), "replica"), verdict, longest(c), of)
}

// pending says how many replicas wait now and, for the oldest, for how long
// and whether past the budget.
func (s *serviceOptions) pending(svc v1alpha1.ServiceWaits, budget time.Duration) string {
	waited, over, ok := s.oldestPending(svc, budget)
	if !ok {
		return fmt.Sprint(svc.Pending)
	}
	against := ""
	if over {
		against = ", over budget"
	}
	return fmt.Sprintf("%d (oldest %s%s)", svc.Pending, shortDuration(waited), against)
}

// pendingSentence says the same for people: how many, since when, against the budget.
func (s *serviceOptions) pendingSentence(svc v1alpha1.ServiceWaits, budget time.Duration) string {
	if svc.Pending == 0 {
		return "none"
	}
	waited, over, ok := s.oldestPending(svc, budget)
	if !ok {
		return fmt.Sprint(svc.Pending)
	}
	against := "within the reclaim budget so far"
	if over {
		against = "over the reclaim budget"
	}
	return fmt.Sprintf("%d, the oldest for %s (%s)", svc.Pending, shortDuration(waited), against)
}

// oldestPending is how long the service's oldest pending replica has waited
// and whether that is past the budget; ok is false when none is pending or
// the report does not say since when.
func (s *serviceOptions) oldestPending(svc v1alpha1.ServiceWaits, budget time.Duration) (waited time.Duration, over, ok bool) {
	if svc.Pending == 0 || svc.PendingSince == nil {
		return 0, false, false
	}
	waited = s.now().Sub(svc.PendingSince.Time)
	return waited, waited > budget, true
}

func longest(c v1alpha1.WaitCounts) string {
	if c.Scheduled == 0 {
		return "-"
	}
	return waitString(time.Duration(c.LongestMilliseconds) * time.Millisecond)
}

// waitString is a wait as people read it: 0.8s, 12.3s, 2m10s.
func waitString(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return d.Round(time.Second).String()
}
