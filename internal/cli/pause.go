package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// The kill switch (api.ReadStop): an annotation on the heartbeat Lease, which
// gleaner-scheduler watches (it places nothing more from the moment it sees
// it) and gleaner-controller reads every round (it drains for HoldAndDrain).
// Setting it takes the right to patch Leases in Gleaner's namespace: a
// cluster admin's, not a researcher's.

type pauseOptions struct {
	*options
	drain  bool
	reason string
}

func newPauseCommand(o *options) *cobra.Command {
	p := &pauseOptions{options: o}
	cmd := &cobra.Command{
		Use:   "pause",
		Short: "Stop all lending at once (the cluster admin's kill switch)",
		Long: `pause stops Gleaner lending GPUs: gleaner-scheduler places no best-effort pod
from the moment it sees the switch (one watch event), whatever gleaner-controller
is doing. Jobs already running keep their GPUs until inference needs them, as
always; with --drain gleaner-controller also takes every lent GPU back in its
next round, through evictions with the capped grace period. Inference is not
touched. resume undoes it.

The switch is the annotation ` + api.AnnotationStopLending + ` (Hold, or HoldAndDrain with
--drain) on the Lease ` + api.SystemNamespace + `/` + api.HeartbeatLeaseName + `; any other value
also stops lending. It needs the right to patch that Lease.`,
		Example: `  kubectl gleaner pause --reason "GPU driver upgrade, CHG-1234"
  kubectl gleaner pause --drain --reason "inference launch tonight"
  kubectl gleaner resume`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			mode := api.StopHold
			if p.drain {
				mode = api.StopHoldAndDrain
			}
			return p.set(cmd, map[string]any{api.AnnotationStopLending: string(mode), api.AnnotationStopLendingReason: orNil(p.reason)}, mode)
		},
	}
	cmd.Flags().BoolVar(&p.drain, "drain", false, "Also take every lent GPU back now (evictions with the capped grace period), not only stop lending more.")
	cmd.Flags().StringVar(&p.reason, "reason", "", fmt.Sprintf("Why, for the people who see it in kubectl gleaner status (at most %d bytes).", api.MaxStopReason))
	return cmd
}

func newResumeCommand(o *options) *cobra.Command {
	p := &pauseOptions{options: o}
	cmd := &cobra.Command{
		Use:   "resume",
		Short: "Let lending resume after pause",
		Long: `resume removes the kill switch pause set: gleaner-scheduler lends again as soon
as it sees it lifted, while gleaner-controller's heartbeat is fresh, and sends
the pods it refused back to its queue.`,
		Example: `  kubectl gleaner resume`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return p.set(cmd, map[string]any{api.AnnotationStopLending: nil, api.AnnotationStopLendingReason: nil}, api.LendingOn)
		},
	}
	return cmd
}

// orNil is s, or nil (which a merge patch reads as "remove") when empty.
func orNil(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// set merges annotations into the heartbeat Lease, creating it when no
// controller has yet: a Lease without a holder lends nothing anyway.
func (p *pauseOptions) set(cmd *cobra.Command, annotations map[string]any, mode api.StopLending) error {
	if len(p.reason) > api.MaxStopReason {
		return fmt.Errorf("--reason is %d bytes: at most %d", len(p.reason), api.MaxStopReason)
	}
	c, err := p.clients()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	// Gleaner installs into api.SystemNamespace only, and the scheduler
	// watches the Lease there: no other namespace's would stop anything.
	leases := c.kube.CoordinationV1().Leases(api.SystemNamespace)
	what := fmt.Sprintf("Lease %s/%s", api.SystemNamespace, api.HeartbeatLeaseName)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	_, err = leases.Patch(ctx, api.HeartbeatLeaseName, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "kubectl-gleaner"})
	switch {
	case apierrors.IsNotFound(err) && mode == api.LendingOn:
		err = nil // no Lease, no switch: and nothing is lent without a heartbeat
	case apierrors.IsNotFound(err):
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: api.SystemNamespace, Name: api.HeartbeatLeaseName, Annotations: map[string]string{}}}
		for k, v := range annotations {
			if s, ok := v.(string); ok {
				lease.Annotations[k] = s
			}
		}
		_, err = leases.Create(ctx, lease, metav1.CreateOptions{FieldManager: "kubectl-gleaner"})
	}
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("you may not patch %s: the kill switch is the cluster admin's (%s)", what, errMessage(err))
	}
	if err != nil {
		return fmt.Errorf("setting the kill switch on %s: %w", what, err)
	}
	out := p.streams.Out
	switch mode {
	case api.StopHold:
		fmt.Fprintln(out, "Lending stopped (Hold): gleaner-scheduler places no best-effort pod from now on; jobs already running keep their GPUs until inference needs them.")
	case api.StopHoldAndDrain:
		fmt.Fprintln(out, "Lending stopped (HoldAndDrain): gleaner-scheduler places no best-effort pod from now on, and gleaner-controller takes every lent GPU back in its next round (evictions with the capped grace period).")
	default:
		fmt.Fprintln(out, "Lending resumes as soon as gleaner-scheduler sees the switch lifted, while gleaner-controller's heartbeat is fresh.")
		return nil
	}
	fmt.Fprintln(out, "kubectl gleaner status shows it; kubectl gleaner resume undoes it.")
	return nil
}
