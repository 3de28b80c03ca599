package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/gleaner-dev/gleaner/pkg/api/v1alpha1"
)

type describeOptions struct {
	*options
	outputFormat
	pool string
}

func newDescribeCommand(o *options) *cobra.Command {
	d := &describeOptions{options: o}
	cmd := &cobra.Command{
		Use:   "describe [KIND/]NAME",
		Short: "A job's timeline: placed, checkpointed, warned, evicted, resumed",
		Long: `describe shows one best-effort job as gleaner-controller followed it: its
state and why, its GPU-hours and the work its evictions lost, its pods now,
and its timeline (submitted, placed on which node with how many GPUs, each
checkpoint, each reclaim notice, each eviction and which inference service
needed the GPUs, each resume, the end). The timeline lasts as long as the
job's record, not an hour as Events do.`,
		Example: `  kubectl gleaner describe train-llama
  kubectl gleaner describe job.batch/train-llama      # as submit names it
  kubectl gleaner describe Workflow/pipeline-x7k2p -n research`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return d.run(cmd.Context(), args[0]) },
	}
	d.addOutputFlag(cmd)
	poolFlag(cmd, &d.pool)
	return cmd
}

func (d *describeOptions) run(ctx context.Context, ref string) error {
	c, err := d.clients()
	if err != nil {
		return err
	}
	report, err := c.report(ctx, c.namespace)
	if err != nil {
		return err
	}
	jobs := reportJobs(report)
	jobs = append(slices.Clone(jobs), c.refusedJobs(ctx, jobs)...)
	job, err := findJob(jobs, c.namespace, ref)
	if err != nil {
		return err
	}
	if d.output == "json" || d.output == "yaml" {
		return printObject(d.streams.Out, d.output, job)
	}
	pods, err := c.kube.CoreV1().Pods(c.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return c.explain(err, "read", "pods in namespace "+c.namespace, v1.SchemeGroupVersion.WithResource("pods"))
	}
	pool, _ := c.pool(ctx, d.pool)
	d.describe(d.streams.Out, c.namespace, job, podsByJob(pods.Items)[job.Kind+"/"+job.Name], pool)
	return nil
}

// plural is "1 pod", "2 pods".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// findJob finds NAME or KIND/NAME among the jobs. KIND is spelt as kubectl
// spells it, or as submit prints it: Job, jobs, job.batch, PodGroup,
// podgroup.scheduling.x-k8s.io, Workflow, wf, pod...
func findJob(jobs []v1alpha1.Job, ns, ref string) (v1alpha1.Job, error) {
	kind, name, hasKind := strings.Cut(ref, "/")
	if !hasKind {
		kind, name = "", ref
	}
	if len(jobs) == 0 {
		return v1alpha1.Job{}, fmt.Errorf("no best-effort job %q in namespace %s: it has run none yet", ref, ns)
	}
	var found []v1alpha1.Job
	for _, j := range jobs {
		if j.Name == name && (kind == "" || sameKind(kind, j.Kind)) {
			found = append(found, j)
		}
	}
	switch len(found) {
	case 0:
		return v1alpha1.Job{}, fmt.Errorf("no best-effort job %q in namespace %s (kubectl gleaner jobs lists them)", ref, ns)
	case 1:
		return found[0], nil
	}
	var refs []string
	for _, j := range found {
		refs = append(refs, j.Kind+"/"+j.Name)
	}
	return v1alpha1.Job{}, fmt.Errorf("%q names %d jobs: say which, one of %s", ref, len(found), strings.Join(refs, ", "))
}

// reportJobs are the jobs of a report; none when there is no report.
func reportJobs(report *v1alpha1.HarvestReport) []v1alpha1.Job {
	if report == nil {
		return nil
	}
	return report.Status.Jobs
}

// kindAliases are kubectl's short names for the kinds jobs are filed under.
var kindAliases = map[string]string{"po": "pod", "pg": "podgroup", "wf": "workflow"}

// sameKind says whether ref (Kind, kind, kinds or kind.group, as kubectl
// takes them) names kind.
func sameKind(ref, kind string) bool {
	ref, _, _ = strings.Cut(strings.ToLower(ref), ".")
	kind = strings.ToLower(kind)
	if a, ok := kindAliases[ref]; ok {
		ref = a
	}
	return ref == kind || ref == kind+"s"
}

func (d *describeOptions) describe(w io.Writer, ns string, job v1alpha1.Job, pods []*v1.Pod, pool *v1alpha1.GPUPool) {
	tw := printers.GetNewTabWriter(w)
	field := func(name, format string, args ...any) {
		fmt.Fprintf(tw, "%s:\t"+format+"\n", append([]any{name}, args...)...)
	}
	field("Name", "%s", job.Name)
	field("Kind", "%s", job.Kind)
	field("Namespace", "%s", ns)
	state := string(job.State)
	if why := explainJob(job, pods, pool, d.now()); why != "" {
		state += ": " + why
	}
	field("State", "%s", state)
	field("GPUs", "%d (%s)", job.GPUs, plural(int(job.Pods), "pod"))
	field("Harvested", "%s GPU-hours", hours(job.HarvestedGPUSeconds))
	field("Evictions", "%d, losing %s GPU-hours of work", job.Evictions, hours(job.LostGPUSeconds))
	if job.LastCheckpoint != nil {
		field("Last checkpoint", "%s (%s ago)", job.LastCheckpoint.UTC().Format(time.RFC3339), d.age(job.LastCheckpoint))
	} else {
		field("Last checkpoint", "none reported (write the gleaner.dev/last-checkpoint annotation after each checkpoint)")
	}
	if job.ReclaimNotice != nil {
		field("Reclaim notice", "eviction expected at %s (%s)", job.ReclaimNotice.UTC().Format(time.RFC3339), until(job.ReclaimNotice.Time, d.now()))
	}
	tw.Flush()
	if len(pods) > 0 {
		fmt.Fprintln(w, "\nPods:")
		tw = printers.GetNewTabWriter(w)
		fmt.Fprintln(tw, "  NAME\tNODE\tPHASE\tWAITING BECAUSE")
		for _, p := range pods {
			because := "-"
			for _, c := range p.Status.Conditions {
				if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Message != "" {
					because = WaitingReason(c.Message)
				}
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", p.Name, dash(p.Spec.NodeName), p.Status.Phase, because)
		}
		tw.Flush()
	}
	fmt.Fprintln(w, "\nTimeline:")
	tw = printers.GetNewTabWriter(w)
	fmt.Fprintln(tw, "  TIME\tEVENT\tPOD\tNODE\tGPUS\tDETAILS")
	for _, e := range job.Timeline {
		gpus := "-"
		if e.GPUs > 0 {
			gpus = fmt.Sprint(e.GPUs)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", e.Time.UTC().Format(time.RFC3339), e.Type, dash(e.Pod), dash(e.Node), gpus, dash(e.Message))
	}
	tw.Flush()
	if len(job.Timeline) == v1alpha1.MaxEvents {
		fmt.Fprintf(w, "  (the first and the latest %d events are kept)\n", v1alpha1.MaxEvents)
	}
}
