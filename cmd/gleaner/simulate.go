package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/gleaner-dev/gleaner/pkg/demand"
	"github.com/gleaner-dev/gleaner/pkg/simulate"
)

func newSimulateCommand() *cobra.Command {
	var (
		cfg           = simulate.DefaultConfig()
		servicesFile  string
		jobsFile      string
		days          int
		policy        string
		format        string
		plotFile      string
		synthetic     int
		loadShape     string
		prom          prometheusFlags
		saveOnSIGTERM bool
	)
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "Estimate the GPU-hours Gleaner would harvest from a fleet, and what it would cost inference",
		Long: `Replay per-service inference traffic and a stream of best-effort jobs in
virtual time through the same demand model, planner, gate, reclaimer and
placement score that gleaner-controller and gleaner-scheduler run, and report
per policy the idle GPU-hours, what was harvested, work lost to preemption and
how long inference replicas waited for lent GPUs.

Policies: none (lend nothing), nightly (lend only within --nightly-windows,
UTC), continuous (lend what is spare now; headroom from the load trend),
forecast (continuous plus each service's quarter-hour-of-week profile, learned online
as the controller learns it), oracle (knows each service's future load: lends
every GPU no replica wants within the grace period and evicts just in time;
the bound to read the others against), or all.

--services: CSV with window_start_s,service,rate_req_per_s (e.g. ServeGen's
per-client rates): one row per service per window, windows from 0 without
gaps, window 0 at 00:00 UTC on a Monday. Without it, a synthetic diurnal fleet
of --synthetic-services services is generated. The trace repeats if --days
runs past its end. A window's rate is its mean: by default load is
interpolated linearly between window middles (--load-shape step holds it
constant within each window instead). Each service's replicas are sized to its peak window at
--replica-capacity req/s per replica, and the cluster (--nodes 0) to hold
them all.

--prometheus: read each service's history from the Prometheus that scrapes
vLLM instead of a CSV: per --query-step window, the mean of running plus
waiting requests summed over the service's replicas (the load the controller
plans on), services named by --group-by, from --since ago to --until. The
history starts the simulation's clock, so weekly profiles line up with
the real week. --replica-capacity then defaults to the controller's target
load (` + fmt.Sprint(demand.DefaultTargetLoad) + ` requests per replica). Gaps and services that
appear or go midway are reported on stderr.

--jobs: CSV in the openb pod-list format (name,num_gpu,creation_time,
deletion_time,scheduled_time, seconds); a job's run time is deletion minus
scheduled time; rows with no GPU are skipped. Without it, a synthetic job mix
is generated. Jobs arrive as a backlog: in trace order, whenever the queued
jobs ask for fewer GPUs than the fleet has, or lendable GPUs stay free because
every queued job is too big for them, so there is always more best-effort work
than idle GPUs, of every size (the trace's own arrival times are not used;
it is replayed from the start when it runs out). Jobs checkpoint every
--checkpoint-interval of run time; a preempted job loses the work since its
last checkpoint and is retried at the back of the queue. A job given a
reclaim notice saves a checkpoint timed to complete by the noticed time (it
takes --checkpoint-cost for a whole-node job, in proportion for smaller ones,
and counts as lost work), so its eviction loses little; --without-notices
shows the difference.

The defaults are the evaluation defaults: judge every trace with them.`,
		Example: `  gleaner simulate --policy all
  gleaner simulate --services servegen-services.csv --jobs openb_pod_list_default.csv --days 14 --policy all --format json --plot gpus.png`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			policies, err := simulate.ParsePolicies(policy)
			if err != nil {
				return err
			}
			var write func(io.Writer, []simulate.Result) error
			switch format {
			case "table":
				write = simulate.WriteTable
			case "json":
				write = simulate.WriteJSON
			case "csv":
				write = simulate.WriteCSV
			default:
				return fmt.Errorf("--format %q: want table, json or csv", format)
			}
			switch loadShape {
			case "linear":
			case "step":
				cfg.StepLoad = true
			default:
				return fmt.Errorf("--load-shape %q: want linear or step", loadShape)
			}
			if days <= 0 {
				return fmt.Errorf("--days %d: must be positive", days)
			}
			cfg.Duration = time.Duration(days) * 24 * time.Hour
			var fleet *simulate.Fleet
			if prom.url != "" {
				if servicesFile != "" {
					return fmt.Errorf("--prometheus and --services: give one source of inference load")
				}
				var notes []string
				if fleet, notes, err = prom.read(cmd.Context()); err != nil {
					return fmt.Errorf("--prometheus: %w", err)
				}
				for _, n := range notes {
					fmt.Fprintln(cmd.ErrOrStderr(), "note:", n)
				}
				cfg.Start = prom.from
				if span := time.Duration(len(fleet.Services[0].Rates)) * fleet.Window; cfg.Duration > span {
					fmt.Fprintf(cmd.ErrOrStderr(), "note: the history covers %v; --days %d replays it from its start, so past it the hours of the week no longer fall on the real ones\n", span, days)
				}
				if !cmd.Flags().Changed("replica-capacity") {
					cfg.ReplicaCapacity = demand.DefaultTargetLoad
				}
			} else if servicesFile != "" {
				if fleet, err = simulate.ReadServices(servicesFile); err != nil {
					return fmt.Errorf("--services: %w", err)
				}
			} else {
				if synthetic <= 0 {
					return fmt.Errorf("--synthetic-services %d: must be positive", synthetic)
				}
				fleet = simulate.SyntheticFleet(synthetic, 7, 1)
			}
			var jobs []simulate.Job
			if jobsFile != "" {
				if jobs, err = simulate.ReadJobs(jobsFile); err != nil {
					return fmt.Errorf("--jobs: %w", err)
				}
			} else {
				jobs = simulate.SyntheticJobs(5000, 1)
			}
			if plotFile == "" {
				cfg.SampleEvery = 0
			}
			cfg.NoSIGTERMSave = !saveOnSIGTERM
			results, err := simulate.RunAll(cfg, policies, fleet, jobs)
			if err != nil {
				return err
			}
			if err := write(cmd.OutOrStdout(), results); err != nil {
				return err
			}
			if plotFile != "" {
				f, err := os.Create(plotFile)
				if err != nil {
					return fmt.Errorf("--plot: %w", err)
				}
				if err := simulate.WritePlot(f, results); err != nil {
					f.Close()
					return fmt.Errorf("plotting to %s: %w", plotFile, err)
				}
				return f.Close()
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&servicesFile, "services", "", "Per-service request-rate trace (CSV); empty for a synthetic diurnal fleet.")
	prom.add(f)
	f.StringVar(&jobsFile, "jobs", "", "Best-effort job trace (openb pod-list CSV); empty for a synthetic job mix.")
	f.IntVar(&days, "days", 14, "Days to simulate.")
	f.StringVar(&policy, "policy", "all", "none, nightly, continuous, forecast, oracle or all.")
	f.StringVar(&format, "format", "table", "Output format: table, json or csv.")
	f.StringVar(&plotFile, "plot", "", "Write a PNG of GPUs serving / lent / idle over time, one panel per policy.")
	f.BoolVar(&cfg.NoTrend, "no-trend", false, "Diagnostic: leave the load trend out of the forecast (gleaner-controller always uses it).")
	f.StringVar(&loadShape, "load-shape", "linear", "How a window's rate becomes load over time: linear (interpolated between window middles) or step (constant within the window).")
	f.IntVar(&synthetic, "synthetic-services", 24, "Services of the synthetic fleet (without --services).")
	f.IntVar(&cfg.Nodes, "nodes", 0, "Nodes in the cluster; 0 to size it to every service's peak window.")
	f.Int64Var(&cfg.GPUsPerNode, "gpus-per-node", cfg.GPUsPerNode, "GPUs of each node.")
	f.Int64Var(&cfg.GPUsPerReplica, "gpus-per-replica", cfg.GPUsPerReplica, "GPUs of each inference replica (on one node).")
	f.Float64Var(&cfg.ReplicaCapacity, "replica-capacity", cfg.ReplicaCapacity, "Load one replica carries (req/s), also the demand model's target load.")
	f.DurationVar(&cfg.ScrapeInterval, "scrape-interval", cfg.ScrapeInterval, "Scrape and planning interval: the simulation's step.")
	f.DurationVar(&cfg.GracePeriod, "grace-period", cfg.GracePeriod, "Grace period of evicted best-effort pods.")
	f.DurationVar(&cfg.CheckpointInterval, "checkpoint-interval", cfg.CheckpointInterval, "Run time between a job's checkpoints.")
	f.DurationVar(&cfg.CheckpointCost, "checkpoint-cost", cfg.CheckpointCost, "How long a job as large as a node takes to save a checkpoint on a reclaim notice (a smaller job: in proportion to its GPUs); the job makes no progress meanwhile.")
	f.BoolVar(&cfg.DeclareInterval, "declare-checkpoint-interval", false, "Jobs declare --checkpoint-interval (gleaner.dev/checkpoint-interval), so placement weighs how long each node's GPUs are expected to stay lent.")
	f.BoolVar(&saveOnSIGTERM, "jobs-save-on-sigterm", true, "Jobs keep the checkpoint contract's SIGTERM part, as the reference trainers do: they declare how long their saves take (gleaner.dev/save-duration), a pod taken before it saved for a notice gets that and 10 s to exit (when shorter than --grace-period) and saves on SIGTERM. false: they declare nothing, hold their GPUs for the whole grace period and save nothing then.")
	f.BoolVar(&cfg.WithoutNotices, "without-notices", false, "Give no reclaim notices, so every eviction comes unannounced (gleaner-controller gives them).")
	f.Var(autoscalerFlag{&cfg.InferenceAutoscaler}, "inference-autoscaler", "What scales the inference services: gleaner (gleaner-controller's autoscaler, as docs/inference.md recommends: replicas it starts wait for GPUs as pending pods and serve after --replica-startup) or external (each service follows its load at once, as an autoscaler of its own would).")
	f.DurationVar(&cfg.ReplicaStartup, "replica-startup", cfg.ReplicaStartup, "With --inference-autoscaler gleaner: how long a bound replica takes to serve (image, weights, engine start).")
	f.DurationVar(&cfg.RestartCost, "restart-cost", cfg.RestartCost, "What a best-effort job resumed after an eviction loses before its first step, counted as lost work; a job of g GPUs loses this x (1 + log2 g) on each GPU.")
	f.DurationVar(&cfg.Horizon, "forecast-horizon", cfg.Horizon, "Reclaim horizon of the demand forecast.")
	f.DurationVar(&cfg.OpenAfter, "open-after", cfg.OpenAfter, "How long GPUs must stay spare before they are lent (gleaner-controller's default).")
	f.IntVar(&cfg.OpenAfterBackoff, "open-after-backoff", cfg.OpenAfterBackoff, "Flap damping: each drain of a node doubles its open-after, up to this multiple of --open-after; 1 for none (gleaner-controller's default).")
	f.IntVar(&cfg.OpenAfterRelax, "open-after-relax", cfg.OpenAfterRelax, "Diagnostic: a node forgets one doubling of its open-after after this many times it without a drain; 0 for the gate's default (2).")
	f.DurationVar(&cfg.ReclaimLead, "reclaim-lead", cfg.ReclaimLead, "Evict lent GPUs only when the forecast over this lead needs them; nodes stop lending at --forecast-horizon. 0 evicts at the horizon (gleaner-controller's default).")
	f.DurationVar(&cfg.NoticeHorizon, "notice-horizon", cfg.NoticeHorizon, "Give reclaim notices to the pods on nodes whose lent GPUs the forecast over this horizon needs (at least --forecast-horizon; gleaner-controller's default).")
	f.Float64Var(&cfg.Margin, "headroom-margin", cfg.Margin, "Safety margin on forecast load, as a fraction, kept for the one service it keeps the most room for (gleaner-controller's default).")
	f.BoolVar(&cfg.MarginPerService, "headroom-margin-per-service", false, "Keep --headroom-margin for every service at once (gleaner-controller's --headroom-margin-per-service).")
	f.BoolVar(&cfg.ProfilePerService, "headroom-profile-per-service", false, "Keep room for every service's learned peak at once, as if they peaked together (gleaner-controller's --headroom-profile-per-service).")
	f.StringVar(&cfg.NightlyWindows, "nightly-windows", cfg.NightlyWindows, "Harvest windows (UTC) of the nightly policy.")
	f.DurationVar(&cfg.ReclaimBudget, "reclaim-budget", 0, "A replica waiting longer for GPUs is over budget; 0 for scrape interval + grace period + 5s.")
	f.Float64Var(&cfg.PricePerGPUHour, "gpu-price", cfg.PricePerGPUHour, "Price of one GPU-hour, for savings.")
	return cmd
}

// autoscalerFlag is --inference-autoscaler.
type autoscalerFlag struct{ v *simulate.InferenceAutoscaler }

func (f autoscalerFlag) String() string {
	if f.v == nil {
		return ""
	}
	return string(*f.v)
}

func (f autoscalerFlag) Set(s string) error {
	a, err := simulate.ParseInferenceAutoscaler(s)
	if err == nil {
		*f.v = a
	}
	return err
}

func (autoscalerFlag) Type() string { return "gleaner|external" }
