// Command gleaner-controller reads vLLM load, publishes which pool GPUs may be
// lent and reclaims them when inference needs them. Run it with leader election
// (the default): its Lease is also its heartbeat for gleaner-scheduler.
package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/klog/v2"
	pgclientset "sigs.k8s.io/scheduler-plugins/pkg/generated/clientset/versioned"
	"sigs.k8s.io/yaml"

	"github.com/gleaner-dev/gleaner/internal/memlimit"
	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/api/v1alpha1"
	"github.com/gleaner-dev/gleaner/pkg/controller"
	"github.com/gleaner-dev/gleaner/pkg/demand"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
	"github.com/gleaner-dev/gleaner/pkg/plugins/pluginargs"
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
	kubeAPIQPS                 float32
	kubeAPIBurst               int
	reclaimAPIQPS              float32
	reclaimAPIBurst            int
	poolSelector               string
	inferenceNamespaceSelector string
	threshold                  int32
	gpuResource                string
	schedulerConfig            string
	config                     string
	help                       *bool
	logs                       *logsapi.LoggingConfiguration
	leaderElect                bool
	showVersion                bool
	windows                    string
	windowZone                 string
	notices                    bool
	profileClockOrigin         string
	price, currency            string
	cfg                        controller.Config
	le                         controller.LeaderElection
	serving                    *controller.ServingOptions
}

// newFlags binds every flag of gleaner-controller to a new set of named
// flag sets, as kube-controller-manager groups its flags: --help prints them
// by section, and docs/reference/gleaner-controller.md is generated from them.
func newFlags() (cliflag.NamedFlagSets, *flags) {
	f := &flags{
		cfg:     controller.Config{Policy: round.DefaultConfig()},
		le:      controller.DefaultLeaderElection(),
		serving: controller.NewServingOptions(),
		logs:    logsapi.NewLoggingConfiguration(),
	}
	var nfs cliflag.NamedFlagSets
	nfs.FlagSet("generic").StringVar(&f.config, "config", "", "YAML file of flag names to values, e.g. {forecast-horizon: 20m, inference-namespaces: [llm, chat]}: the same settings as the flags, which win when given on the command line too. Unknown names are an error.")
	nfs.FlagSet("generic").StringVar(&f.kubeconfig, "kubeconfig", "", "Path to a kubeconfig; empty for in-cluster configuration.")
	nfs.FlagSet("generic").Float32Var(&f.kubeAPIQPS, "kube-api-qps", 50, "Requests per second to the API server, as kube-scheduler's client: a round writes verdicts on every node whose state changed, notices and evictions, within --sync-period.")
	nfs.FlagSet("generic").IntVar(&f.kubeAPIBurst, "kube-api-burst", 100, "Requests to the API server allowed in a burst above --kube-api-qps.")
	nfs.FlagSet("generic").Float32Var(&f.reclaimAPIQPS, "reclaim-api-qps", 1000, "Requests per second for the writes inference waits on, Node verdicts and evictions, apart from --kube-api-qps so that nothing else queues ahead of them: a load step on 2,000 nodes writes about 4,000 within the reclaim budget. The API server's priority and fairness still applies.")
	nfs.FlagSet("generic").IntVar(&f.reclaimAPIBurst, "reclaim-api-burst", 2000, "Verdicts and evictions allowed in a burst above --reclaim-api-qps.")
	nfs.FlagSet("generic").IntVar(&f.cfg.WriteWorkers, "api-write-workers", 128, "Writes a round makes at once: verdicts, evictions, availability. Each eviction waits on the API server even when it has CPU to spare: on a 2-core test cluster with nothing else writing, 32 writers evicted about 300 pods a second and 128 writers 430 to 555 (bench/README.md). Under API Priority and Fairness, writers beyond the controller's seats queue.")
	nfs.FlagSet("pool").StringVar(&f.poolSelector, "pool-selector", api.LabelPool+"="+api.PoolInference, "Label selector of the GPU nodes Gleaner may lend.")
	nfs.FlagSet("pool").Int32Var(&f.threshold, "best-effort-priority-threshold", api.DefaultBestEffortPriorityThreshold, "Pods with a lower priority are best-effort.")
	nfs.FlagSet("pool").StringVar(&f.gpuResource, "gpu-resource", string(api.GPUResource), "Extended resource name of the GPUs lent.")
	nfs.FlagSet("pool").StringVar(&f.schedulerConfig, "scheduler-config", "", "NAMESPACE/NAME of the ConfigMap holding gleaner-scheduler's KubeSchedulerConfiguration (key config.yaml). The controller refuses to start when a profile's GPUHarvest or ReclaimPreemption args disagree with --best-effort-priority-threshold or --gpu-resource. Empty skips the check.")
	nfs.FlagSet("status").StringVar(&f.cfg.Status.PoolName, "pool-name", api.PoolInference, "Name of the GPUPool this controller publishes (kubectl get gpupools): the pool at a glance, its last 24 hours and the next 24 forecast.")
	nfs.FlagSet("status").DurationVar(&f.cfg.Status.Interval, "status-interval", 10*time.Second, "Least time between two writes of the GPUPool or of one namespace's HarvestReport when they change; unchanged, they are written again every minute.")
	nfs.FlagSet("status").StringVar(&f.price, "gpu-hour-price", "", "Price of one GPU-hour, a decimal such as 2.50: each namespace's HarvestReport values its harvested GPU-hours at it. Empty: no value is published.")
	nfs.FlagSet("status").StringVar(&f.currency, "currency", "USD", "Currency of --gpu-hour-price, 1 to 8 letters.")
	nfs.FlagSet("demand").Float64Var(&f.cfg.TargetLoad, "target-load", demand.DefaultTargetLoad, "Running plus waiting requests one inference replica should carry.")
	nfs.FlagSet("demand").Float64Var(&f.cfg.TargetKVCache, "target-kv-cache", demand.DefaultTargetKVCache, "KV-cache usage (0..1) one replica should carry, for services with gleaner.dev/load-metric: kv-cache.")
	nfs.FlagSet("policy").DurationVar(&f.cfg.Policy.Horizon, "forecast-horizon", f.cfg.Policy.Horizon, "How far ahead demand is forecast: GPUs are freed this long before the forecast says inference needs them.")
	nfs.FlagSet("policy").DurationVar(&f.cfg.Policy.TrendWindow, "trend-window", f.cfg.Policy.TrendWindow, "Recent history the demand trend is fitted to.")
	nfs.FlagSet("policy").Float64Var(&f.cfg.Policy.Margin, "headroom-margin", f.cfg.Policy.Margin, "Safety margin on forecast load, as a fraction (0.1 keeps room for 10% more); negative for none. It is kept for one service at a time, the one it keeps the most room for: the pool's spare GPUs serve whichever service rises, and a replica that finds none gets lent GPUs back within the reclaim budget.")
	nfs.FlagSet("policy").BoolVar(&f.cfg.Policy.ProfilePerService, "headroom-profile-per-service", f.cfg.Policy.ProfilePerService, "Keep room for every service's learned weekly peak at once, as if the services peaked together, instead of what the pool's learned profile expects them to need together: fewer inference replicas wait, and less is lent.")
	nfs.FlagSet("policy").BoolVar(&f.cfg.Policy.MarginPerService, "headroom-margin-per-service", f.cfg.Policy.MarginPerService, "Keep --headroom-margin for every service at once: fewer inference replicas wait for lent GPUs to be evicted, and less is lent.")
	nfs.FlagSet("policy").DurationVar(&f.cfg.Policy.OpenAfter, "open-after", f.cfg.Policy.OpenAfter, "How long a node's GPUs must stay spare before they are lent; draining is never delayed. 0 lends at once.")
	nfs.FlagSet("policy").IntVar(&f.cfg.Policy.OpenAfterBackoff, "open-after-backoff", f.cfg.Policy.OpenAfterBackoff, "Flap damping: each time a node must take lent GPUs back, its open-after doubles, up to this multiple of --open-after; it relaxes once the node stays undrained. 1 for none.")
	nfs.FlagSet("policy").DurationVar(&f.cfg.Policy.ReclaimLead, "reclaim-lead", f.cfg.Policy.ReclaimLead, "Evict lent GPUs only when the forecast over this lead needs them (at least the best-effort grace period plus a sync period); nodes stop lending at --forecast-horizon already. Set it to --forecast-horizon to evict as early as nodes close.")
	nfs.FlagSet("policy").DurationVar(&f.cfg.Policy.NoticeHorizon, "notice-horizon", f.cfg.Policy.NoticeHorizon, "Give a reclaim notice (gleaner.dev/reclaim-notice) to the best-effort pods on nodes whose lent GPUs the forecast over this horizon needs, with the time they are expected to be evicted; at least --forecast-horizon, where nodes stop lending.")
	nfs.FlagSet("policy").BoolVar(&f.notices, "reclaim-notices", true, "Give reclaim notices up to --notice-horizon ahead; false gives none, so every eviction comes unannounced (to measure what notices save).")
	nfs.FlagSet("policy").Float64Var(&f.cfg.Policy.ProfileClock.Scale, "profile-clock-scale", 1, "Seconds of the learned weekly profiles' time (gleaner.dev/demand-profile) that pass in one real second from --profile-clock-origin. 1 outside a demo: make demo plays a day in minutes and speeds the profiles' clock up to match, so that its services' stored week of history applies to its day.")
	nfs.FlagSet("policy").StringVar(&f.profileClockOrigin, "profile-clock-origin", "", "Time (RFC 3339) from which --profile-clock-scale applies: the profiles' clock reads it then. Required with a scale other than 1, and the same across restarts.")
	nfs.FlagSet("policy").StringVar(&f.windows, "harvest-windows", "", "Comma-separated times of day when GPUs may be lent, e.g. 20:00-08:00 (may cross midnight); empty for continuous.")
	nfs.FlagSet("policy").StringVar(&f.windowZone, "harvest-time-zone", "UTC", "IANA time zone of --harvest-windows, e.g. Europe/Berlin.")
	nfs.FlagSet("generic").DurationVar(&f.cfg.WatchProgressBound, "watch-progress-bound", controller.DefaultWatchProgressBound, "How long the node and pod watches may take to reach a resource version the API server was at (read every quarter of this, at most every 30 s) before the controller stops renewing the heartbeat, so the scheduler stops lending on a view that stopped moving. At least 90 s: the API server's bookmarks come every minute.")
	nfs.FlagSet("demand").DurationVar(&f.cfg.StartupDeadline, "inference-startup-deadline", controller.DefaultStartupDeadline, "How long a bound inference pod may go unscraped after its creation (image pull, model load) and count as capacity still starting; past it, it counts as saturated and its service keeps room for one more replica.")
	nfs.FlagSet("reclaim").DurationVar(&f.cfg.MaxReclaimGrace, "max-reclaim-grace", reclaim.DefaultMaxGrace, "Longest grace period a reclaimed best-effort pod gets to checkpoint, whatever its own terminationGracePeriodSeconds; a pod still terminating past it counts as owing its GPUs, so others are evicted.")
	nfs.FlagSet("reclaim").DurationVar(&f.cfg.PDBWait, "pdb-wait", 0, "How long evictions of a best-effort pod may be refused (by a PodDisruptionBudget) before it is deleted, with its capped grace, without the budget's check; 0 for --max-reclaim-grace. A tenant's budget cannot shield its pods from reclaim for longer.")
	nfs.FlagSet("autoscale").BoolVar(&f.cfg.DisableAutoscale, "disable-autoscale", false, "Do not scale Deployments annotated gleaner.dev/autoscale=true.")
	nfs.FlagSet("autoscale").DurationVar(&f.cfg.Policy.Autoscale.StableWindow, "autoscale-stable-window", time.Minute, "Window the autoscaler averages load over; also how long load must be low before it scales in.")
	nfs.FlagSet("autoscale").DurationVar(&f.cfg.Policy.Autoscale.PanicWindow, "autoscale-panic-window", 6*time.Second, "Short window the autoscaler watches for bursts.")
	nfs.FlagSet("autoscale").Float64Var(&f.cfg.Policy.Autoscale.PanicThreshold, "autoscale-panic-threshold", 2, "Scale out at once when the panic window asks for this many times the current replicas.")
	nfs.FlagSet("autoscale").IntVar(&f.cfg.Policy.Autoscale.MaxScaleUp, "autoscale-max-scale-up", 4, "Most replicas added in one decision.")
	nfs.FlagSet("autoscale").IntVar(&f.cfg.Policy.Autoscale.MaxScaleDown, "autoscale-max-scale-down", 1, "Most replicas removed in one decision.")
	nfs.FlagSet("autoscale").IntVar(&f.cfg.Policy.Autoscale.MaxReplicas, "autoscale-max-replicas", 64, "Replica ceiling for Deployments without gleaner.dev/max-replicas.")
	nfs.FlagSet("policy").DurationVar(&f.cfg.SyncPeriod, "sync-period", 0, "How often to re-plan; default: the scrape interval. Rounds start on its multiples (in wall time), and reclaim notices name a round's time.")
	nfs.FlagSet("demand").StringSliceVar(&f.cfg.Metrics.Namespaces, "inference-namespaces", nil, "Namespaces of inference pods, comma-separated: the only ones whose inference pods and Deployments count. Empty: every namespace labelled by --inference-namespace-selector.")
	nfs.FlagSet("demand").StringVar(&f.inferenceNamespaceSelector, "inference-namespace-selector", api.LabelInferenceNamespace+"=true", "Label selector of the namespaces opted in as inference when --inference-namespaces is empty. Inference pods elsewhere make no demand, so tenants cannot forge it; only the admin should be able to label namespaces.")
	nfs.FlagSet("vllm metrics").StringVar(&f.cfg.Metrics.Scheme, "metrics-scheme", "http", "Scheme of the vLLM metrics endpoints: http or https.")
	nfs.FlagSet("vllm metrics").StringVar(&f.cfg.Metrics.CAFile, "metrics-ca-file", "", "CA bundle that signs the vLLM endpoints' serving certificates (https).")
	nfs.FlagSet("vllm metrics").StringVar(&f.cfg.Metrics.TLSServerName, "metrics-tls-server-name", "", "Server name to verify the vLLM endpoints' certificates against (https).")
	nfs.FlagSet("vllm metrics").StringVar(&f.cfg.Metrics.BearerTokenFile, "metrics-bearer-token-file", "", "File holding a bearer token sent to the vLLM endpoints; re-read every minute.")
	nfs.FlagSet("vllm metrics").Int64Var(&f.cfg.Metrics.MaxBodyBytes, "scrape-max-body-bytes", 0, "Largest /metrics body accepted; 0 for the default (4 MiB). A larger body fails that scrape.")
	nfs.FlagSet("vllm metrics").IntVar(&f.cfg.Metrics.Concurrency, "scrape-concurrency", 0, "Scrapes in flight at most; 0 for the default (64).")
	nfs.FlagSet("demand").StringVar(&f.cfg.Metrics.LabelSelector, "inference-selector", api.LabelRole+"="+api.RoleInference, "Label selector of inference (vLLM) pods.")
	nfs.FlagSet("vllm metrics").DurationVar(&f.cfg.Metrics.Interval, "scrape-interval", 5e9, "Interval between scrapes of each vLLM /metrics endpoint.")
	nfs.FlagSet("vllm metrics").DurationVar(&f.cfg.Metrics.Timeout, "scrape-timeout", 2e9, "Timeout of one scrape.")
	nfs.FlagSet("leader election").BoolVar(&f.leaderElect, "leader-elect", true, "Hold a Lease while acting; the scheduler reads it as this controller's heartbeat.")
	nfs.FlagSet("leader election").StringVar(&f.le.Namespace, "leader-elect-resource-namespace", f.le.Namespace, "Namespace of the Lease.")
	nfs.FlagSet("leader election").StringVar(&f.le.Name, "leader-elect-resource-name", f.le.Name, "Name of the Lease.")
	nfs.FlagSet("leader election").DurationVar(&f.le.LeaseDuration, "leader-elect-lease-duration", f.le.LeaseDuration, "Lease duration; also how long the scheduler trusts the last heartbeat.")
	nfs.FlagSet("leader election").DurationVar(&f.le.RenewDeadline, "leader-elect-renew-deadline", f.le.RenewDeadline, "Renew deadline.")
	nfs.FlagSet("leader election").DurationVar(&f.le.RetryPeriod, "leader-elect-retry-period", f.le.RetryPeriod, "Retry period.")
	// /healthz, /readyz and /metrics over HTTPS; /metrics only for callers the
	// API server authenticates and authorizes (kube-scheduler's flags).
	f.serving.AddFlags(nfs.FlagSet("secure serving"))
	nfs.FlagSet("generic").BoolVar(&f.showVersion, "version", false, "Print the version and exit.")
	f.help = nfs.FlagSet("generic").BoolP("help", "h", false, "Print the flags by section and exit.")
	// component-base's logging flags (--v, --vmodule, --logging-format, ...),
	// not klog's own underscore-style set.
	logsapi.AddFlags(f.logs, nfs.FlagSet("logs"))
	return nfs, f
}

var applyLogging sync.Once

func run(args []string) error {
	nfs, f := newFlags()
	fs := flatten(nfs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *f.help {
		fmt.Fprintf(os.Stdout, "gleaner-controller reads vLLM load, publishes which GPU nodes may lend to best-effort pods, and reclaims lent GPUs when inference needs them.\n\nUsage:\n  gleaner-controller [flags]\n")
		cliflag.PrintSections(os.Stdout, nfs, 0)
		return nil
	}
	if f.showVersion {
		fmt.Println(version.String())
		return nil
	}
	if f.config != "" {
		if err := applyConfigFile(fs, f.config); err != nil {
			return err
		}
	}
	if errs := logsapi.Validate(f.logs, nil, field.NewPath("logging")); len(errs) > 0 {
		return fmt.Errorf("logging flags: %w", errs.ToAggregate())
	}
	// Logging is set up once per process (run is called again by tests).
	var logErr error
	applyLogging.Do(func() { logErr = logsapi.ValidateAndApply(f.logs, nil) })
	if logErr != nil {
		return fmt.Errorf("logging flags: %w", logErr)
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
	f.cfg.Policy.WithoutNotices = !f.notices
	if f.cfg.Policy.ProfileClock, err = profileClock(f.cfg.Policy.ProfileClock.Scale, f.profileClockOrigin); err != nil {
		return err
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
	if f.cfg.Policy.NoticeHorizon < f.cfg.Policy.Horizon {
		return fmt.Errorf("--notice-horizon %v: must be at least --forecast-horizon (%v)", f.cfg.Policy.NoticeHorizon, f.cfg.Policy.Horizon)
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
	bestEffort := pluginargs.BestEffort{BestEffortPriorityThreshold: &f.threshold, GPUResourceName: f.gpuResource}
	if errs := bestEffort.Validate(field.NewPath("")); len(errs) > 0 {
		return fmt.Errorf("--gpu-resource %q: must be an extended resource name such as nvidia.com/gpu", f.gpuResource)
	}
	f.cfg.BestEffortPriorityThreshold = &f.threshold
	f.cfg.GPUResource = v1.ResourceName(f.gpuResource)
	if f.cfg.Status.Price, err = v1alpha1.ParsePrice(f.price, f.currency); err != nil {
		return fmt.Errorf("--gpu-hour-price %q --currency %q: %w", f.price, f.currency, err)
	}
	if f.cfg.Status.Interval < time.Second {
		return fmt.Errorf("--status-interval %v: must be at least 1s", f.cfg.Status.Interval)
	}
	if errs := validation.IsDNS1123Subdomain(f.cfg.Status.PoolName); len(errs) > 0 {
		return fmt.Errorf("--pool-name %q: %s", f.cfg.Status.PoolName, strings.Join(errs, "; "))
	}

	if f.kubeAPIQPS <= 0 || f.kubeAPIBurst <= 0 {
		return fmt.Errorf("--kube-api-qps %v and --kube-api-burst %d: must be positive", f.kubeAPIQPS, f.kubeAPIBurst)
	}
	if f.cfg.WatchProgressBound < 90*time.Second {
		return fmt.Errorf("--watch-progress-bound %v: at least 90s, as the API server sends a watch's bookmarks every minute", f.cfg.WatchProgressBound)
	}
	if f.reclaimAPIQPS <= 0 || f.reclaimAPIBurst <= 0 || f.cfg.WriteWorkers <= 0 {
		return fmt.Errorf("--reclaim-api-qps %v, --reclaim-api-burst %d and --api-write-workers %d: must be positive", f.reclaimAPIQPS, f.reclaimAPIBurst, f.cfg.WriteWorkers)
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	restCfg.QPS, restCfg.Burst = f.kubeAPIQPS, f.kubeAPIBurst
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	reclaimCfg := rest.CopyConfig(restCfg)
	reclaimCfg.QPS, reclaimCfg.Burst = f.reclaimAPIQPS, f.reclaimAPIBurst
	if f.cfg.ReclaimClient, err = kubernetes.NewForConfig(reclaimCfg); err != nil {
		return err
	}
	// PodGroups are custom resources, which do not speak protobuf.
	pgCfg := rest.CopyConfig(restCfg)
	pgCfg.ContentType, pgCfg.AcceptContentTypes = "application/json", "application/json"
	if f.cfg.PodGroups, err = pgclientset.NewForConfig(pgCfg); err != nil {
		return fmt.Errorf("PodGroup client: %w", err)
	}
	if f.cfg.Status.Client, err = dynamic.NewForConfig(pgCfg); err != nil {
		return fmt.Errorf("status client: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if f.schedulerConfig != "" {
		if err := checkSchedulerConfig(ctx, client, f.schedulerConfig, bestEffort, f.cfg.MaxReclaimGrace); err != nil {
			return err
		}
	}
	klog.InfoS("Starting", "version", version.String())
	memlimit.Set()
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

// checkSchedulerConfig reads gleaner-scheduler's profile from the ConfigMap
// ref (NAMESPACE/NAME) and fails unless it agrees with want: a scheduler and a
// controller that disagree about which pods are best-effort, or which resource
// they borrow, would lend GPUs the controller never takes back.
func checkSchedulerConfig(ctx context.Context, client kubernetes.Interface, ref string, want pluginargs.BestEffort, maxGrace time.Duration) error {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" {
		return fmt.Errorf("--scheduler-config %q: want NAMESPACE/NAME of a ConfigMap", ref)
	}
	cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("--scheduler-config: reading gleaner-scheduler's profile: %w", err)
	}
	config, ok := cm.Data["config.yaml"]
	if !ok {
		return fmt.Errorf("--scheduler-config: ConfigMap %s has no key config.yaml", ref)
	}
	if err := pluginargs.CheckProfiles([]byte(config), want, maxGrace); err != nil {
		return fmt.Errorf("gleaner-scheduler's profile (ConfigMap %s) disagrees with --best-effort-priority-threshold=%d --gpu-resource=%s --max-reclaim-grace=%v; set both from one value (the chart's bestEffortPriorityThreshold, gpuResourceName and maxReclaimGraceSeconds): %w",
			ref, want.Threshold(), want.Resource(), maxGrace, err)
	}
	klog.InfoS("gleaner-scheduler's profile agrees with this controller", "configMap", ref, "bestEffortPriorityThreshold", want.Threshold(), "gpuResource", want.Resource(), "maxReclaimGrace", maxGrace)
	return nil
}

// profileClock is the learned profiles' clock from its flags. A faster
// clock needs its origin: counted from each start, a restart would set the
// profiles' time back, and they would ignore what they saw until it caught up.
func profileClock(scale float64, origin string) (demand.Clock, error) {
	switch {
	case !(scale > 0) || math.IsInf(scale, 1):
		return demand.Clock{}, fmt.Errorf("--profile-clock-scale %g: must be positive and finite", scale)
	case scale == 1 && origin != "":
		return demand.Clock{}, fmt.Errorf("--profile-clock-origin %q has no effect with --profile-clock-scale 1", origin)
	case scale == 1:
		return demand.Clock{}, nil
	case origin == "":
		return demand.Clock{}, fmt.Errorf("--profile-clock-scale %g needs --profile-clock-origin", scale)
	}
	t, err := time.Parse(time.RFC3339Nano, origin)
	if err != nil {
		return demand.Clock{}, fmt.Errorf("--profile-clock-origin %q: %w", origin, err)
	}
	return demand.Clock{Origin: t, Scale: scale}, nil
}

// flatten is every named flag set in one, for parsing.
func flatten(nfs cliflag.NamedFlagSets) *pflag.FlagSet {
	fs := pflag.NewFlagSet("gleaner-controller", pflag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned; --help prints the sections
	for _, name := range nfs.Order {
		fs.AddFlagSet(nfs.FlagSets[name])
	}
	return fs
}

// applyConfigFile sets each flag the YAML file path names, unless the command
// line set it already: the file holds defaults, the command line overrides.
// Lists become comma-separated values; an unknown name is an error.
func applyConfigFile(fs *pflag.FlagSet, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	var settings map[string]any
	if err := yaml.UnmarshalStrict(data, &settings); err != nil {
		return fmt.Errorf("--config %s: %w", path, err)
	}
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		fl := fs.Lookup(name)
		switch {
		case fl == nil || name == "config" || name == "help" || name == "version":
			return fmt.Errorf("--config %s: %q is not a gleaner-controller flag", path, name)
		case fl.Changed:
			continue
		}
		var value string
		switch v := settings[name].(type) {
		case []any:
			parts := make([]string, len(v))
			for i, e := range v {
				parts[i] = fmt.Sprint(e)
			}
			value = strings.Join(parts, ",")
		case map[string]any:
			return fmt.Errorf("--config %s: %s: want a value or a list, not a map", path, name)
		default:
			value = fmt.Sprint(v)
		}
		if err := fs.Set(name, value); err != nil {
			return fmt.Errorf("--config %s: %s: %w", path, name, err)
		}
	}
	return nil
}
