package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/api/v1alpha1"
)

type jobsOptions struct {
	*options
	outputFormat
	pool  string
	watch bool
}

func newJobsCommand(o *options) *cobra.Command {
	j := &jobsOptions{options: o}
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "Your best-effort jobs and their state in Gleaner's words",
		Long: `jobs lists the namespace's best-effort jobs (pods, pod groups, Argo workflows,
Jobs) as gleaner-controller follows them: waiting for GPUs, and why, with an
estimate of when enough open; running on lent GPUs; checkpointing before a
reclaim it was warned of; evicted and waiting to resume; done.`,
		Example: `  kubectl gleaner jobs
  kubectl gleaner jobs -n research -o wide
  kubectl gleaner jobs --watch`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return j.run(cmd.Context()) },
	}
	j.addOutputFlag(cmd)
	poolFlag(cmd, &j.pool)
	cmd.Flags().BoolVarP(&j.watch, "watch", "w", false, "After listing, list again each time the report changes.")
	return cmd
}

func (j *jobsOptions) run(ctx context.Context) error {
	c, err := j.clients()
	if err != nil {
		return err
	}
	return j.list(ctx, c)
}

// list prints the jobs and, with --watch, prints them again on each change.
func (j *jobsOptions) list(ctx context.Context, c *clients) error {
	resourceVersion, err := j.print(ctx, c)
	if err != nil || !j.watch {
		return err
	}
	// Watch from the version printed. The API server ends a watch after a
	// while (--min-request-timeout): watch again from the last version seen,
	// or from now when that is too old, until the user stops.
	for ctx.Err() == nil {
		w, err := c.dynamic.Resource(v1alpha1.HarvestReportResource).Namespace(c.namespace).Watch(ctx, metav1.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", v1alpha1.HarvestReportName).String(),
			ResourceVersion: resourceVersion,
		})
		if err != nil {
			return c.explain(err, "read", "the HarvestReport of namespace "+c.namespace, v1alpha1.HarvestReportResource)
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				resourceVersion = "" // expired: the next watch starts now
				break
			}
			if ev.Type == watch.Bookmark {
				continue
			}
			fmt.Fprintln(j.streams.Out)
			if resourceVersion, err = j.print(ctx, c); err != nil {
				w.Stop()
				return err
			}
		}
		w.Stop()
		select { // a watch that keeps ending at once must not spin
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return nil
}

// print lists the jobs once, and returns the version of the report it
// printed ("" when there is none).
func (j *jobsOptions) print(ctx context.Context, c *clients) (string, error) {
	report, err := c.report(ctx, c.namespace)
	if err != nil {
		return "", err
	}
	var jobs []v1alpha1.Job
	resourceVersion := ""
	if report != nil {
		jobs, resourceVersion = report.Status.Jobs, report.ResourceVersion
	}
	jobs = append(slices.Clone(jobs), c.refusedJobs(ctx, jobs)...)
	if j.output == "json" || j.output == "yaml" {
		if jobs == nil {
			jobs = []v1alpha1.Job{}
		}
		return resourceVersion, printObject(j.streams.Out, j.output, jobs)
	}
	if len(jobs) == 0 {
		fmt.Fprintf(j.streams.ErrOut, "No best-effort jobs in namespace %s.\n", c.namespace)
		return resourceVersion, nil
	}
	// Why waiting jobs wait: their pods' scheduling conditions, and the pool's
	// outlook for when enough GPUs open (when the user may read the pool).
	pods, err := c.kube.CoreV1().Pods(c.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", c.explain(err, "read", "pods in namespace "+c.namespace, v1.SchemeGroupVersion.WithResource("pods"))
	}
	pool, _ := c.pool(ctx, j.pool) // optional: no estimate without it
	j.table(j.streams.Out, jobs, podsByJob(pods.Items), pool)
	return resourceVersion, nil
}

// podsByJob groups pods by the job the controller files them under.
func podsByJob(pods []v1.Pod) map[string][]*v1.Pod {
	out := map[string][]*v1.Pod{}
	for i := range pods {
		kind, name := api.JobOf(&pods[i])
		out[kind+"/"+name] = append(out[kind+"/"+name], &pods[i])
	}
	return out
}

func (j *jobsOptions) table(w io.Writer, jobs []v1alpha1.Job, pods map[string][]*v1.Pod, pool *v1alpha1.GPUPool) {
	tw := printers.GetNewTabWriter(w)
	header := "NAME\tKIND\tSTATE\tGPUS\tGPU-HOURS\tEVICTIONS\tLOST GPU-H\tLAST CHECKPOINT\tAGE"
	if j.output == "wide" {
		header += "\tPODS\tRECLAIM NOTICE\tWHY"
	}
	fmt.Fprintln(tw, header)
	for _, job := range jobs {
		state := string(job.State)
		why := explainJob(job, pods[job.Kind+"/"+job.Name], pool, j.now())
		if why != "" && j.output != "wide" {
			width := 60
			if job.State == jobRefused {
				width = 120 // what to change is the whole point
			}
			state += " (" + oneLine(why, width) + ")"
		}
		var submitted *metav1.Time
		if len(job.Timeline) > 0 {
			submitted = &job.Timeline[0].Time
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s", job.Name, job.Kind, state, job.GPUs, hours(job.HarvestedGPUSeconds),
			job.Evictions, hours(job.LostGPUSeconds), agoOrDash(j.age(job.LastCheckpoint)), j.age(submitted))
		if j.output == "wide" {
			notice := "-"
			if job.ReclaimNotice != nil {
				notice = job.ReclaimNotice.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "\t%d\t%s\t%s", job.Pods, notice, dash(oneLine(why, 120)))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// until says when t comes: "in 6m", or "6m ago" when it is past.
func until(t, now time.Time) string {
	if d := t.Sub(now); d > 0 {
		return "in " + shortDuration(d)
	}
	return shortDuration(now.Sub(t)) + " ago"
}

func agoOrDash(age string) string {
	if age == "-" {
		return age
	}
	return age + " ago"
}

// explainJob says, in a phrase, why a job is in its state: why its pods
// wait (and when enough GPUs may open), when a noticed job will be evicted.
func explainJob(job v1alpha1.Job, pods []*v1.Pod, pool *v1alpha1.GPUPool, now time.Time) string {
	switch job.State {
	case jobRefused:
		if n := len(job.Timeline); n > 0 {
			return job.Timeline[n-1].Message
		}
	case v1alpha1.JobCheckpointing:
		if job.ReclaimNotice != nil {
			return "reclaim expected " + until(job.ReclaimNotice.Time, now) + ": checkpoint now"
		}
	case v1alpha1.JobEvicted:
		why := "evicted " + plural(int(job.Evictions), "time")
		if w := waiting(pods, job.GPUs, pool, now); w != "" {
			why += "; " + w
		}
		return why
	case v1alpha1.JobWaiting:
		return waiting(pods, job.GPUs, pool, now)
	}
	return ""
}

// waiting says why a job's pending pods wait, from the scheduler's own
// reasons, and when the pool's outlook expects enough GPUs to open.
func waiting(pods []*v1.Pod, gpus int64, pool *v1alpha1.GPUPool, now time.Time) string {
	var why string
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Message != "" {
				why = WaitingReason(c.Message)
			}
		}
		if why != "" {
			break
		}
	}
	if pool != nil && !pool.Status.Planning {
		why = "the controller is not planning: nothing is lent"
	}
	if why == "" {
		return ""
	}
	if pool != nil && gpus > 0 {
		why += "; " + whenEnough(pool.Status, gpus, now)
	}
	return why
}

// Reasons the scheduler gives, in Gleaner's words. The strings are the
// plugins' (TestWaitingReasonsAreThePlugins keeps them so).
var waitingReasons = []struct{ says, means string }{
	{"gleaner-controller heartbeat is stale", "the controller is not planning: nothing is lent"},
	{"had an unreadable harvest verdict", "a node's verdict is unreadable"},
	{"didn't have enough harvestable GPUs", "not enough GPUs open"},
	{"were not open for harvest", "no GPUs open"},
	{"joined after gleaner-controller's last planning round", "new nodes are not planned yet"},
	{"pod group not found", "its PodGroup is missing"},
	{"pod group has fewer pods than minMember", "its pod group has fewer pods than minMember"},
	{"pod group timed out waiting for all members", "its pod group timed out and backs off"},
	{"another member of the pod group was rejected", "another member of its pod group does not fit"},
}

// WaitingReason turns a scheduler's FailedScheduling message into why a
// best-effort pod waits, in Gleaner's words; the message itself when it is
// none of Gleaner's.
func WaitingReason(message string) string {
	for _, r := range waitingReasons {
		if strings.Contains(message, r.says) {
			return r.means
		}
	}
	return oneLine(message, 120)
}

// whenEnough estimates from the outlook when gpus more GPUs are lendable
// than are lent now.
func whenEnough(st v1alpha1.GPUPoolStatus, gpus int64, now time.Time) string {
	for _, p := range st.Outlook {
		if p.LendableHigh-st.GPUs.Lent >= gpus {
			if !p.Time.After(now) {
				return "enough may open at any time"
			}
			return "enough expected open from " + p.Time.UTC().Format("Mon 15:04 UTC")
		}
	}
	if len(st.Outlook) == 0 {
		return "no forecast published"
	}
	return "not expected to open within 24h"
}

// A Job whose pods the cluster refuses to create (an admission policy such
// as the grace cap, a quota) never has a pod, so gleaner-controller, which
// follows pods, never reports it: kubectl gleaner finds it from the Job and
// the Job controller's FailedCreate Events, and calls it Refused.
const (
	jobRefused   v1alpha1.JobState  = "Refused"
	eventRefused v1alpha1.EventType = "Refused"
)

// refusedJobs returns the namespace's best-effort Jobs that have no pod
// because the cluster refused to create them, and that the report does not
// name. It is best effort: without the right to list Jobs or Events it
// finds none.
func (c *clients) refusedJobs(ctx context.Context, reported []v1alpha1.Job) []v1alpha1.Job {
	list, err := c.kube.BatchV1().Jobs(c.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	known := map[string]bool{}
	for _, j := range reported {
		known[j.Kind+"/"+j.Name] = true
	}
	candidates := map[types.UID]v1alpha1.Job{}
	for i := range list.Items {
		j := &list.Items[i]
		if j.Spec.Template.Spec.SchedulerName != api.SchedulerName || j.Status.Active+j.Status.Succeeded+j.Status.Failed > 0 {
			continue
		}
		kind, name := "Job", j.Name
		if g := j.Spec.Template.Labels[api.LabelPodGroup]; g != "" {
			kind, name = "PodGroup", g
		}
		if known[kind+"/"+name] {
			continue
		}
		pods := int64(1)
		if j.Spec.Parallelism != nil {
			pods = int64(*j.Spec.Parallelism)
		}
		candidates[j.UID] = v1alpha1.Job{Kind: kind, Name: name, State: jobRefused,
			GPUs:     pods * templateGPUs(j.Spec.Template.Spec),
			Timeline: []v1alpha1.JobEvent{{Time: j.CreationTimestamp, Type: v1alpha1.EventSubmitted}}}
	}
	if len(candidates) == 0 {
		return nil
	}
	events, err := c.kube.CoreV1().Events(c.namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.kind": "Job", "reason": "FailedCreate"}.AsSelector().String(),
	})
	if err != nil {
		return nil
	}
	latest := map[types.UID]v1alpha1.JobEvent{}
	for _, e := range events.Items {
		if _, ok := candidates[e.InvolvedObject.UID]; !ok {
			continue
		}
		at := e.LastTimestamp
		if at.IsZero() {
			at = metav1.Time{Time: e.EventTime.Time}
		}
		if at.IsZero() {
			at = e.CreationTimestamp
		}
		if prev, ok := latest[e.InvolvedObject.UID]; !ok || at.After(prev.Time.Time) {
			latest[e.InvolvedObject.UID] = v1alpha1.JobEvent{Time: at, Type: eventRefused, Message: refusal(e.Message)}
		}
	}
	var out []v1alpha1.Job
	for uid, job := range candidates {
		if e, ok := latest[uid]; ok {
			job.Timeline = append(job.Timeline, e)
			out = append(out, job)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind+"/"+out[i].Name < out[j].Kind+"/"+out[j].Name })
	return out
}

// templateGPUs are the GPUs one pod of a template asks for. A template's
// limits are not copied into its requests (a pod's are, when it is made), so
// either counts.
func templateGPUs(spec v1.PodSpec) int64 {
	var n int64
	for _, c := range spec.Containers {
		q, ok := c.Resources.Requests[api.GPUResource]
		if !ok {
			q = c.Resources.Limits[api.GPUResource]
		}
		n += q.Value()
	}
	return n
}

// refusal shortens the Job controller's "Error creating: pods "x-" is
// forbidden: ValidatingAdmissionPolicy '...' with binding '...' denied
// request: WHY" to what the user must change.
func refusal(message string) string {
	why := strings.TrimPrefix(message, "Error creating: ")
	if _, after, ok := strings.Cut(why, "denied request: "); ok {
		why = after
	}
	return "the cluster refuses its pods: " + why
}
