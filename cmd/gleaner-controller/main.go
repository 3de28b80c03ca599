// Command gleaner-controller reads vLLM load, publishes which pool GPUs may be
// lent and reclaims them when inference needs them. Run it with leader election
// (the default): its Lease is also its heartbeat for gleaner-scheduler.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2"
	pgclientset "sigs.k8s.io/scheduler-plugins/pkg/generated/clientset/versioned"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/controller"
	"github.com/gleaner-dev/gleaner/pkg/demand"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
	"github.com/gleaner-dev/gleaner/pkg/round"
	"github.com/gleaner-dev/gleaner/pkg/version"
	"github.com/gleaner-dev/gleaner/pkg/vllm"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gleaner-controller:", err)
		os.Exit(1)
	}
}

// flags are gleaner-controller's command-line settings, bound by newFlags.
type flags struct {
	kubeconfig                 string
	poolSelector               string
	inferenceNamespaceSelector string
	threshold                  int32
	gpuResource                string
	leaderElect                bool
	showVersion                bool
	windows                    string
	windowZone                 string
	cfg                        controller.Config
	le                         controller.LeaderElection
	serving                    *controller.ServingOptions
}

// newFlags binds every flag of gleaner-controller (but klog's) to a new
// FlagSet. docs/reference.md is generated from it.
func newFlags() (*pflag.FlagSet, *flags) {
	f := &flags{
		cfg:     controller.Config{Policy: round.DefaultConfig()},
		le:      controller.DefaultLeaderElection(),
		serving: controller.NewServingOptions(),
	}
	fs := pflag.NewFlagSet("gleaner-controller", pflag.ContinueOnError)
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "Path to a kubeconfig; empty for in-cluster configuration.")
	fs.StringVar(&f.poolSelector, "pool-selector", api.LabelPool+"="+api.PoolInference, "Label selector of the GPU nodes Gleaner may lend.")
	fs.Int32Var(&f.threshold, "best-effort-priority-threshold", api.DefaultBestEffortPriorityThreshold, "Pods with a lower priority are best-effort.")
	fs.StringVar(&f.gpuResource, "gpu-resource", string(api.GPUResource), "Extended resource name of the GPUs lent.")
	fs.Float64Var(&f.cfg.TargetLoad, "target-load", demand.DefaultTargetLoad, "Running plus waiting requests one inference replica should carry.")
	fs.Float64Var(&f.cfg.TargetKVCache, "target-kv-cache", demand.DefaultTargetKVCache, "KV-cache usage (0..1) one replica should carry, for services with gleaner.dev/load-metric: kv-cache.")
	fs.DurationVar(&f.cfg.Policy.Horizon, "forecast-horizon", f.cfg.Policy.Horizon, "How far ahead demand is forecast: GPUs are freed this long before the forecast says inference needs them.")
	fs.DurationVar(&f.cfg.Policy.TrendWindow, "trend-window", f.cfg.Policy.TrendWindow, "Recent history the demand trend is fitted to.")
	fs.Float64Var(&f.cfg.Policy.Margin, "headroom-margin", f.cfg.Policy.Margin, "Safety margin on forecast load, as a fraction (0.1 keeps room for 10% more); negative for none.")
	fs.DurationVar(&f.cfg.Policy.OpenAfter, "open-after", f.cfg.Policy.OpenAfter, "How long a node's GPUs must stay spare before they are lent; draining is never delayed. 0 lends at once.")
	fs.IntVar(&f.cfg.Policy.OpenAfterBackoff, "open-after-backoff", f.cfg.Policy.OpenAfterBackoff, "Flap damping: each time a node must take lent GPUs back, its open-after doubles, up to this multiple of --open-after; it relaxes once the node stays undrained. 1 for none.")
	fs.DurationVar(&f.cfg.Policy.ReclaimLead, "reclaim-lead", f.cfg.Policy.ReclaimLead, "Evict lent GPUs only when the forecast over this lead needs them (at least the best-effort grace period plus a sync period); nodes stop lending at --forecast-horizon already. Set it to --forecast-horizon to evict as early as nodes close.")
	fs.StringVar(&f.windows, "harvest-windows", "", "Comma-separated times of day when GPUs may be lent, e.g. 20:00-08:00 (may cross midnight); empty for continuous.")
	fs.StringVar(&f.windowZone, "harvest-time-zone", "UTC", "IANA time zone of --harvest-windows, e.g. Europe/Berlin.")
	fs.DurationVar(&f.cfg.StartupDeadline, "inference-startup-deadline", controller.DefaultStartupDeadline, "How long a bound inference pod may go unscraped after its creation (image pull, model load) and count as capacity still starting; past it, it counts as saturated and its service keeps room for one more replica.")
	fs.DurationVar(&f.cfg.MaxReclaimGrace, "max-reclaim-grace", reclaim.DefaultMaxGrace, "Longest grace period a reclaimed best-effort pod gets to checkpoint, whatever its own terminationGracePeriodSeconds; a pod still terminating past it counts as owing its GPUs, so others are evicted.")
	fs.DurationVar(&f.cfg.PDBWait, "pdb-wait", 0, "How long evictions of a best-effort pod may be refused (by a PodDisruptionBudget) before it is deleted, with its capped grace, without the budget's check; 0 for --max-reclaim-grace. A tenant's budget cannot shield its pods from reclaim for longer.")
	fs.BoolVar(&f.cfg.DisableAutoscale, "disable-autoscale", false, "Do not scale Deployments annotated gleaner.dev/autoscale=true.")
	fs.DurationVar(&f.cfg.Policy.Autoscale.StableWindow, "autoscale-stable-window", time.Minute, "Window the autoscaler averages load over; also how long load must be low before it scales in.")
	fs.DurationVar(&f.cfg.Policy.Autoscale.PanicWindow, "autoscale-panic-window", 6*time.Second, "Short window the autoscaler watches for bursts.")
	fs.Float64Var(&f.cfg.Policy.Autoscale.PanicThreshold, "autoscale-panic-threshold", 2, "Scale out at once when the panic window asks for this many times the current replicas.")
	fs.IntVar(&f.cfg.Policy.Autoscale.MaxScaleUp, "autoscale-max-scale-up", 4, "Most replicas added in one decision.")
	fs.IntVar(&f.cfg.Policy.Autoscale.MaxScaleDown, "autoscale-max-scale-down", 1, "Most replicas removed in one decision.")
	fs.IntVar(&f.cfg.Policy.Autoscale.MaxReplicas, "autoscale-max-replicas", 64, "Replica ceiling for Deployments without gleaner.dev/max-replicas.")
	fs.DurationVar(&f.cfg.SyncPeriod, "sync-period", 0, "How often to re-plan; default: the scrape interval.")
	fs.StringSliceVar(&f.cfg.Metrics.Namespaces, "inference-namespaces", nil, "Namespaces of inference pods, comma-separated: the only ones whose inference pods and Deployments count. Empty: every namespace labelled by --inference-namespace-selector.")
	fs.StringVar(&f.inferenceNamespaceSelector, "inference-namespace-selector", api.LabelInferenceNamespace+"=true", "Label selector of the namespaces opted in as inference when --inference-namespaces is empty. Inference pods elsewhere make no demand, so tenants cannot forge it; only the admin should be able to label namespaces.")
	fs.StringVar(&f.cfg.Metrics.Scheme, "metrics-scheme", "http", "Scheme of the vLLM metrics endpoints: http or https.")
	fs.StringVar(&f.cfg.Metrics.CAFile, "metrics-ca-file", "", "CA bundle that signs the vLLM endpoints' serving certificates (https).")
	fs.StringVar(&f.cfg.Metrics.TLSServerName, "metrics-tls-server-name", "", "Server name to verify the vLLM endpoints' certificates against (https).")
	fs.StringVar(&f.cfg.Metrics.BearerTokenFile, "metrics-bearer-token-file", "", "File holding a bearer token sent to the vLLM endpoints; re-read every minute.")
	fs.Int64Var(&f.cfg.Metrics.MaxBodyBytes, "scrape-max-body-bytes", 0, "Largest /metrics body accepted; 0 for the default (4 MiB). A larger body fails that scrape.")
	fs.IntVar(&f.cfg.Metrics.Concurrency, "scrape-concurrency", 0, "Scrapes in flight at most; 0 for the default (64).")
	fs.StringVar(&f.cfg.Metrics.LabelSelector, "inference-selector", api.LabelRole+"="+api.RoleInference, "Label selector of inference (vLLM) pods.")
	fs.DurationVar(&f.cfg.Metrics.Interval, "scrape-interval", 5e9, "Interval between scrapes of each vLLM /metrics endpoint.")
	fs.DurationVar(&f.cfg.Metrics.Timeout, "scrape-timeout", 2e9, "Timeout of one scrape.")
	fs.BoolVar(&f.leaderElect, "leader-elect", true, "Hold a Lease while acting; the scheduler reads it as this controller's heartbeat.")
	fs.StringVar(&f.le.Namespace, "leader-elect-resource-namespace", f.le.Namespace, "Namespace of the Lease.")
	fs.StringVar(&f.le.Name, "leader-elect-resource-name", f.le.Name, "Name of the Lease.")
	fs.DurationVar(&f.le.LeaseDuration, "leader-elect-lease-duration", f.le.LeaseDuration, "Lease duration; also how long the scheduler trusts the last heartbeat.")
	fs.DurationVar(&f.le.RenewDeadline, "leader-elect-renew-deadline", f.le.RenewDeadline, "Renew deadline.")
	fs.DurationVar(&f.le.RetryPeriod, "leader-elect-retry-period", f.le.RetryPeriod, "Retry period.")
	// /healthz, /readyz and /metrics over HTTPS; /metrics only for callers the
	// API server authenticates and authorizes (kube-scheduler's flags).
	f.serving.AddFlags(fs)
	fs.BoolVar(&f.showVersion, "version", false, "Print the version and exit.")
	return fs, f
}

func run(args []string) error {
	fs, f := newFlags()
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if f.showVersion {
		fmt.Println(version.String())
		return nil
	}
	sel, err := labels.Parse(f.poolSelector)
	if err != nil {
		return fmt.Errorf("--pool-selector %q: %w", f.poolSelector, err)
	}
	f.cfg.PoolSelector = sel
	if f.cfg.InferenceNamespaceSelector, err = labels.Parse(f.inferenceNamespaceSelector); err != nil {
		return fmt.Errorf("--inference-namespace-selector %q: %w", f.inferenceNamespaceSelector, err)
	}
	if f.cfg.InferenceNamespaceSelector.Empty() && len(f.cfg.Metrics.Namespaces) == 0 {
		return fmt.Errorf("--inference-namespace-selector is empty and --inference-namespaces lists none: every namespace, tenants' included, would count as inference")
	}
	if f.cfg.Policy.Windows, err = harvest.ParseWindows(f.windows, f.windowZone); err != nil {
		return fmt.Errorf("--harvest-windows %q --harvest-time-zone %q: %w", f.windows, f.windowZone, err)
	}
	if f.cfg.TargetKVCache <= 0 || f.cfg.TargetKVCache > 1 {
		return fmt.Errorf("--target-kv-cache %g: must be in (0, 1]", f.cfg.TargetKVCache)
	}
	if f.cfg.TargetLoad <= 0 {
		return fmt.Errorf("--target-load %g: must be greater than 0", f.cfg.TargetLoad)
	}
	if f.cfg.Policy.OpenAfter < 0 {
		return fmt.Errorf("--open-after %v: must not be negative", f.cfg.Policy.OpenAfter)
	}
	if f.cfg.Policy.OpenAfterBackoff < 1 {
		return fmt.Errorf("--open-after-backoff %d: must be at least 1 (1 switches damping off)", f.cfg.Policy.OpenAfterBackoff)
	}
	if f.cfg.Policy.ReclaimLead <= 0 {
		return fmt.Errorf("--reclaim-lead %v: must be positive", f.cfg.Policy.ReclaimLead)
	}
	if err := validateMetricsFlags(f.cfg.Metrics); err != nil {
		return err
	}
	if err := f.serving.Validate(); err != nil {
		return err
	}
	if f.cfg.PDBWait < 0 {
		return fmt.Errorf("--pdb-wait %v: must not be negative", f.cfg.PDBWait)
	}
	if f.cfg.StartupDeadline <= 0 {
		return fmt.Errorf("--inference-startup-deadline %v: must be positive", f.cfg.StartupDeadline)
	}
	if f.cfg.MaxReclaimGrace <= 0 {
		return fmt.Errorf("--max-reclaim-grace %v: must be positive", f.cfg.MaxReclaimGrace)
	}
	if f.cfg.SyncPeriod < 0 {
		return fmt.Errorf("--sync-period %v: must not be negative", f.cfg.SyncPeriod)
	}
	f.cfg.BestEffortPriorityThreshold = &f.threshold
	f.cfg.GPUResource = v1.ResourceName(f.gpuResource)

	restCfg, err := clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	// PodGroups are custom resources, which do not speak protobuf.
	pgCfg := rest.CopyConfig(restCfg)
	pgCfg.ContentType, pgCfg.AcceptContentTypes = "application/json", "application/json"
	if f.cfg.PodGroups, err = pgclientset.NewForConfig(pgCfg); err != nil {
		return fmt.Errorf("PodGroup client: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	klog.InfoS("Starting", "version", version.String())
	controller.RegisterMetrics()
	// Everything is checked before campaigning: a controller that cannot plan
	// must not hold the Lease while the scheduler waits on it.
	c, err := controller.New(client, f.cfg)
	if err != nil {
		return err
	}
	var health []controller.HealthCheck
	if f.leaderElect {
		f.le.WatchDog = leaderelection.NewLeaderHealthzAdaptor(f.le.RenewDeadline)
		health = append(health, func() error { return f.le.WatchDog.Check(nil) })
	}
	addr, err := f.serving.Serve(ctx, f.kubeconfig, health, []controller.HealthCheck{c.Planning})
	if err != nil {
		return err
	}
	if addr != nil {
		klog.InfoS("Serving health and metrics over HTTPS", "address", addr.String())
	}
	if !f.leaderElect {
		return c.Run(ctx)
	}
	return controller.RunLeaderElected(ctx, client, f.le, c.Run)
}

// validateMetricsFlags checks the vLLM informer's flags one by one, so that a
// bad value stops the controller naming its flag.
func validateMetricsFlags(o vllm.Options) error {
	if _, err := labels.Parse(o.LabelSelector); err != nil {
		return fmt.Errorf("--inference-selector %q: %w", o.LabelSelector, err)
	}
	if o.Scheme != "http" && o.Scheme != "https" {
		return fmt.Errorf("--metrics-scheme %q: want http or https", o.Scheme)
	}
	if o.Scheme == "http" && (o.CAFile != "" || o.TLSServerName != "") {
		return fmt.Errorf("--metrics-ca-file and --metrics-tls-server-name need --metrics-scheme=https")
	}
	if o.BearerTokenFile != "" && (o.Scheme != "https" || o.TLSServerName == "") {
		return fmt.Errorf("--metrics-bearer-token-file is sent only over --metrics-scheme=https with --metrics-tls-server-name set: any pod carrying the inference label would receive it")
	}
	for flag, file := range map[string]string{"--metrics-ca-file": o.CAFile, "--metrics-bearer-token-file": o.BearerTokenFile} {
		if file == "" {
			continue
		}
		if _, err := os.ReadFile(file); err != nil {
			return fmt.Errorf("%s: %w", flag, err)
		}
	}
	if o.Interval <= 0 {
		return fmt.Errorf("--scrape-interval %v: must be positive", o.Interval)
	}
	if o.Timeout <= 0 || o.Timeout > o.Interval {
		return fmt.Errorf("--scrape-timeout %v: must be positive and at most --scrape-interval (%v)", o.Timeout, o.Interval)
	}
	if o.MaxBodyBytes < 0 {
		return fmt.Errorf("--scrape-max-body-bytes %d: must not be negative", o.MaxBodyBytes)
	}
	if o.Concurrency < 0 {
		return fmt.Errorf("--scrape-concurrency %d: must not be negative", o.Concurrency)
	}
	return nil
}
