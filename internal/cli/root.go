// Package cli is kubectl gleaner, the researcher's view of Gleaner: the pool
// at a glance, their jobs in Gleaner's words, and each job's timeline; and
// the inference owner's: how long their replicas waited for GPUs. It
// reads what gleaner-controller publishes (pkg/api/v1alpha1) and the pods
// themselves, with the user's own kubeconfig and rights, as kubectl does.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/api/v1alpha1"
	"github.com/gleaner-dev/gleaner/pkg/version"
)

// options are what every subcommand shares.
type options struct {
	flags   *genericclioptions.ConfigFlags
	streams genericiooptions.IOStreams
	// now is the clock ages are told by.
	now func() time.Time
}

// NewCommand is kubectl gleaner with its subcommands; now is its clock.
func NewCommand(streams genericiooptions.IOStreams, now func() time.Time) *cobra.Command {
	o := &options{flags: genericclioptions.NewConfigFlags(true), streams: streams, now: now}
	root := &cobra.Command{
		Use:   "kubectl-gleaner",
		Short: "Follow best-effort jobs on the GPUs Gleaner lends",
		Long: `kubectl gleaner shows what Gleaner does with your best-effort jobs: the pool
of inference GPUs it lends from, your jobs in its words (waiting for GPUs,
running on lent GPUs, checkpointing before a reclaim, evicted and waiting to
resume, done), and each job's timeline; and, for an inference service, how
long its replicas waited for GPUs against the reclaim budget. It reads what
gleaner-controller publishes (GPUPool, HarvestReport) with your own
kubeconfig and rights.`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl gleaner"},
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.String(),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	// kubectl's -v is verbosity: --version has no shorthand.
	root.Flags().Bool("version", false, "Print the version and exit.")
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	o.flags.AddFlags(root.PersistentFlags())
	root.AddCommand(newSubmitCommand(o), newStatusCommand(o), newJobsCommand(o), newDescribeCommand(o), newConsoleCommand(o), newServiceCommand(o), newPauseCommand(o), newResumeCommand(o))
	return root
}

// Execute runs kubectl gleaner with args until ctx ends (the console runs
// until then) and returns its exit code: 0, or 1 with the error written to
// stderr.
func Execute(ctx context.Context, args []string, streams genericiooptions.IOStreams, now func() time.Time) int {
	cmd := NewCommand(streams, now)
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(streams.ErrOut, "error:", err)
		return 1
	}
	return 0
}

// clients are the API clients a subcommand uses, and the namespace it is for.
type clients struct {
	dynamic   dynamic.Interface
	kube      kubernetes.Interface
	namespace string
	host      string
}

func (o *options) clients() (*clients, error) {
	raw, err := o.flags.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		return nil, fmt.Errorf("loading your kubeconfig: %w", err)
	}
	inCluster := os.Getenv("KUBERNETES_SERVICE_HOST") != "" // a pod's own ServiceAccount, as kubectl in a pod
	if len(raw.Clusters) == 0 && !inCluster && (o.flags.APIServer == nil || *o.flags.APIServer == "") {
		return nil, errors.New("no cluster configured: set KUBECONFIG or --kubeconfig to your cluster's kubeconfig (kubectl config view shows it)")
	}
	cfg, err := o.flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("loading your kubeconfig: %w", err)
	}
	cfg.UserAgent = "kubectl-gleaner/" + version.Version
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ns, _, err := o.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, fmt.Errorf("reading your namespace: %w", err)
	}
	return &clients{dynamic: dyn, kube: kube, namespace: ns, host: cfg.Host}, nil
}

// explain turns an API error met trying to verb (read, create) what into
// what the user can do about it. The API error stays underneath (errors.As
// finds it), so a caller can still tell a refusal from a missing object.
func (c *clients) explain(err error, verb, what string, gvr schema.GroupVersionResource) error {
	if err == nil {
		return nil
	}
	var uerr *url.Error
	var nerr net.Error
	switch {
	case errors.As(err, &uerr) || errors.As(err, &nerr):
		return fmt.Errorf("cannot reach the cluster at %s (check your kubeconfig and --context): %w", c.host, err)
	case apierrors.IsForbidden(err):
		return &explained{fmt.Sprintf("you may not %s %s%s: %s", verb, what, grantHint(gvr), errMessage(err)), err}
	case v1alpha1.NotServed(err):
		return &explained{fmt.Sprintf("Gleaner is not installed on this cluster: it serves no %s.%s API (see docs/install.md)", gvr.Resource, gvr.Group), err}
	case apierrors.IsNotFound(err):
		return &explained{fmt.Sprintf("%s not found: %s", what, errMessage(err)), err}
	case apierrors.IsUnauthorized(err):
		return &explained{fmt.Sprintf("the cluster does not know you (log in again, or check your kubeconfig's user): %s", errMessage(err)), err}
	}
	return fmt.Errorf("could not %s %s: %w", verb, what, err)
}

// grantHint says who grants the rights on gvr that the cluster refused.
func grantHint(gvr schema.GroupVersionResource) string {
	switch gvr.GroupResource() {
	case v1alpha1.GPUPoolResource.GroupResource():
		return " (ask your cluster admin to grant you the ClusterRole gleaner-pool-reader)"
	case podGroupResource.GroupResource():
		return " (a gang makes a PodGroup: ask your cluster admin for the ClusterRole edit in this namespace, which Gleaner's aggregated roles extend to PodGroups, or to onboard your team: docs/install.md, \"Give a team access\")"
	}
	return ""
}

// explained is an API error said in the user's terms, the error kept beneath.
type explained struct {
	message string
	err     error
}

func (e *explained) Error() string { return e.message }
func (e *explained) Unwrap() error { return e.err }

func errMessage(err error) string {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		return st.Status().Message
	}
	return err.Error()
}

// pool reads the GPUPool name.
func (c *clients) pool(ctx context.Context, name string) (*v1alpha1.GPUPool, error) {
	u, err := c.dynamic.Resource(v1alpha1.GPUPoolResource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, c.explain(err, "read", "GPUPool "+name, v1alpha1.GPUPoolResource)
	}
	var p v1alpha1.GPUPool
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
		return nil, fmt.Errorf("GPUPool %s is unreadable: %w", name, err)
	}
	return &p, nil
}

// report reads namespace ns's HarvestReport; nil when there is none yet
// (no best-effort job ran there).
func (c *clients) report(ctx context.Context, ns string) (*v1alpha1.HarvestReport, error) {
	u, err := c.dynamic.Resource(v1alpha1.HarvestReportResource).Namespace(ns).Get(ctx, v1alpha1.HarvestReportName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && !v1alpha1.NotServed(err) {
		return nil, nil
	}
	if err != nil {
		return nil, c.explain(err, "read", "the HarvestReport of namespace "+ns, v1alpha1.HarvestReportResource)
	}
	var r v1alpha1.HarvestReport
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &r); err != nil {
		return nil, fmt.Errorf("the HarvestReport of namespace %s is unreadable: %w", ns, err)
	}
	return &r, nil
}

// reports reads every namespace's HarvestReport the user may list.
func (c *clients) reports(ctx context.Context) ([]v1alpha1.HarvestReport, error) {
	list, err := c.dynamic.Resource(v1alpha1.HarvestReportResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, c.explain(err, "read", "HarvestReports in every namespace", v1alpha1.HarvestReportResource)
	}
	var out []v1alpha1.HarvestReport
	for _, u := range list.Items {
		if u.GetName() != v1alpha1.HarvestReportName {
			continue
		}
		var r v1alpha1.HarvestReport
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &r); err != nil {
			return nil, fmt.Errorf("the HarvestReport of namespace %s is unreadable: %w", u.GetNamespace(), err)
		}
		out = append(out, r)
	}
	return out, nil
}

// outputFormat is -o, the format a subcommand prints what it reads in.
type outputFormat struct{ output string }

// addOutputFlag adds -o to cmd, which refuses any format but json, yaml and
// wide before it reads anything.
func (f *outputFormat) addOutputFlag(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&f.output, "output", "o", "", "Output format: json, yaml or wide (more columns). Default: text for people.")
	checkFirst(cmd, func() error {
		switch f.output {
		case "", "json", "yaml", "wide":
			return nil
		}
		return fmt.Errorf("--output %q: want json, yaml or wide", f.output)
	})
}

// dayWindow is --days: the last so many days (UTC), today's included, over
// which a subcommand sums a report's daily figures.
type dayWindow struct{ days int }

// addDaysFlag adds --days to cmd with usage, the window of what, which refuses
// a window a report does not keep before it reads anything.
func (w *dayWindow) addDaysFlag(cmd *cobra.Command, usage string) {
	cmd.Flags().IntVar(&w.days, "days", 7, usage)
	checkFirst(cmd, func() error {
		if w.days < 1 || w.days > v1alpha1.MaxDays {
			return fmt.Errorf("--days %d: want 1 to %d", w.days, v1alpha1.MaxDays)
		}
		return nil
	})
}

// since is the window's first day, a UTC date as reports write it.
func (w *dayWindow) since(now time.Time) string {
	return now.UTC().AddDate(0, 0, -(w.days - 1)).Format(time.DateOnly)
}

// checkFirst has cmd run check once its arguments are checked and before it
// runs, after the checks added to it before.
func checkFirst(cmd *cobra.Command, check func() error) {
	earlier := cmd.PreRunE
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		if earlier != nil {
			if err := earlier(cmd, args); err != nil {
				return err
			}
		}
		return check()
	}
}

// printObject prints v as JSON or YAML.
func printObject(w io.Writer, format string, v any) error {
	raw, err := json.MarshalIndent(v, "", "    ")
	if err != nil {
		return err
	}
	if format == "yaml" {
		if raw, err = yaml.JSONToYAML(raw); err != nil {
			return err
		}
		_, err = w.Write(raw)
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", raw)
	return err
}

// hours formats GPU-seconds as GPU-hours.
func hours(gpuSeconds int64) string { return fmt.Sprintf("%.2f", float64(gpuSeconds)/3600) }

// age is how long ago t was, as kubectl says it ("5m", "3h", "2d"); "-" for none.
func (o *options) age(t *metav1.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return shortDuration(o.now().Sub(t.Time))
}

// shortDuration is d as kubectl says ages; a negative d (a time to come)
// reads "in ...".
func shortDuration(d time.Duration) string {
	neg := d < 0
	if neg {
		d = -d
	}
	var s string
	switch {
	case d < time.Minute:
		s = fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		s = fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh", int(d.Hours()))
	default:
		s = fmt.Sprintf("%dd", int(d.Hours()/24))
	}
	if neg {
		return "in " + s
	}
	return s
}

// poolFlag adds --pool, the GPUPool to read.
func poolFlag(cmd *cobra.Command, pool *string) {
	cmd.Flags().StringVar(pool, "pool", api.PoolInference, "Name of the GPUPool (one per gleaner-controller; kubectl get gpupools lists them).")
}

// oneLine makes s one line, at most n bytes, for a table cell.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n-3] + "..."
	}
	return s
}
