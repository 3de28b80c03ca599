package simulate

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
)

// WriteJSON writes results as a JSON array, one object per policy.
func WriteJSON(w io.Writer, results []Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(results)
}

var columns = []string{"policy", "idleGpuHours", "harvestedGpuHours", "harvestedFraction", "lostGpuHours", "preemptions", "noticedEvictions", "noticeLeadP50Seconds", "noticeFirmLeadP50Seconds", "reclaimedGpus", "reclaimedUnusedGpus",
	"inferenceReplicaStarts", "inferenceWaitSeconds", "inferenceWaitsOverBudget", "maxInferenceWaitSeconds", "inferenceWaitP99Seconds", "restartGpuHours", "jobsStarted", "jobsCompleted", "savings"}

func row(r Result, prec int) []string {
	f := func(v float64, p int) string { return strconv.FormatFloat(v, 'f', p, 64) }
	return []string{string(r.Policy), f(r.IdleGPUHours, prec), f(r.HarvestedGPUHours, prec), f(r.HarvestedFraction, 4), f(r.LostGPUHours, prec),
		strconv.Itoa(r.Preemptions), strconv.Itoa(r.NoticedEvictions), f(r.NoticeLeadP50Seconds, 0), f(r.NoticeFirmLeadP50Seconds, 0), strconv.FormatInt(r.ReclaimedGPUs, 10), strconv.FormatInt(r.ReclaimedUnusedGPUs, 10), strconv.Itoa(r.InferenceReplicaStarts), f(r.InferenceWaitSeconds, 0), strconv.Itoa(r.InferenceWaitsOverBudget),
		f(r.MaxInferenceWaitSeconds, 0), f(r.InferenceWaitP99Seconds, 0), f(r.RestartGPUHours, prec), strconv.Itoa(r.JobsStarted), strconv.Itoa(r.JobsCompleted), f(r.Savings, 2)}
}

// WriteCSV writes results as CSV with a header row.
func WriteCSV(w io.Writer, results []Result) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(columns); err != nil {
		return err
	}
	for _, r := range results {
		if err := cw.Write(row(r, 3)); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteTable writes results as an aligned text table.
func WriteTable(w io.Writer, results []Result) error {
	if len(results) > 0 {
		r := results[len(results)-1] // none, if there, comes first: its autoscaler is always external
		fmt.Fprintf(w, "%g days, %d nodes, %d GPUs; reclaim budget %gs; $%g per GPU-hour; inference scaled by the %s autoscaler (none: its own)\n", r.Days, r.Nodes, r.FleetGPUs, r.ReclaimBudgetSeconds, r.PricePerGPUHour, r.InferenceAutoscaler)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"policy", "idle GPU-h before harvest", "harvested GPU-h", "fraction", "lost GPU-h", "preemptions", "noticed", "notice lead p50 s", "firm lead p50 s", "reclaimed GPUs", "reclaimed unused", "replica starts", "wait s", "over budget", "max wait s", "wait p99 s", "restart GPU-h", "jobs started", "jobs done", "savings $"}
	line := func(cells []string) {
		for _, c := range cells {
			fmt.Fprint(tw, c, "\t")
		}
		fmt.Fprintln(tw)
	}
	line(head)
	for _, r := range results {
		line(row(r, 1))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeCalibration(w, results)
}

// writeCalibration writes, per policy and span, the survival probabilities
// given to open nodes against the fraction of their GPUs that survived.
func writeCalibration(w io.Writer, results []Result) error {
	for _, r := range results {
		for _, c := range r.Availability {
			fmt.Fprintf(w, "\n%s: lendable GPUs surviving %gh (worst gap %.1f points over buckets with >= 1%% of GPU-hours, %.1f on average)\n", r.Policy, c.Hours, c.WorstPoints, c.MeanPoints)
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "probability given\tGPU-h\tmean given\tsurvived\tdays\tgap, 90% over the days drawn again\t")
			for _, b := range c.Buckets {
				fmt.Fprintf(tw, "%.1f-%.1f\t%.0f\t%.3f\t%.3f\t%d\t%+.1f to %+.1f\t\n", b.From, b.To, b.GPUHours, b.Predicted, b.Survived, b.Days, b.GapLow, b.GapHigh)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
	}
	return nil
}
