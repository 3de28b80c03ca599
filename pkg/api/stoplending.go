package api

import "fmt"

// The kill switch: a cluster admin stops all lending by annotating the
// heartbeat Lease (SystemNamespace/HeartbeatLeaseName), which
// gleaner-scheduler already watches and gleaner-controller already reads
// every round. `kubectl gleaner pause` and `resume` write it.
//
// AnnotationStopLending's value says how far the stop goes:
//   - StopHold: nothing new is lent; pods already placed run on, and are
//     reclaimed when inference needs their GPUs, as always.
//   - StopHoldAndDrain: as Hold, and every lent GPU is taken back at once
//     (evictions with the capped grace period).
//
// Any other value, empty included, is read as Hold: a half-written switch
// still stops lending. AnnotationStopLendingReason is free text for people
// (who stopped it, why), shown by `kubectl gleaner status` and cut to
// MaxStopReason bytes.
const (
	AnnotationStopLending       = "gleaner.dev/stop-lending"
	AnnotationStopLendingReason = "gleaner.dev/stop-lending-reason"
	MaxStopReason               = 256
)

// StopLending is the kill switch's setting.
type StopLending string

const (
	// LendingOn: no stop is set.
	LendingOn        StopLending = ""
	StopHold         StopLending = "Hold"
	StopHoldAndDrain StopLending = "HoldAndDrain"
)

// Stop is the kill switch as read from the heartbeat Lease's annotations.
type Stop struct {
	Mode StopLending
	// Reason is the admin's text, cut to MaxStopReason bytes.
	Reason string
	// Problem says why the value was not one of the modes (then Mode is Hold).
	Problem string
}

// Stopped reports whether lending is stopped.
func (s Stop) Stopped() bool { return s.Mode != LendingOn }

// Drain reports whether every lent GPU is to be taken back.
func (s Stop) Drain() bool { return s.Mode == StopHoldAndDrain }

func (s Stop) String() string {
	if !s.Stopped() {
		return "lending on"
	}
	out := fmt.Sprintf("lending stopped (%s=%s on Lease %s/%s)", AnnotationStopLending, s.Mode, SystemNamespace, HeartbeatLeaseName)
	if s.Problem != "" {
		out += ": " + s.Problem
	}
	if s.Reason != "" {
		out += ": " + s.Reason
	}
	return out
}

// ReadStop reads the kill switch from the heartbeat Lease's annotations.
func ReadStop(annotations map[string]string) Stop {
	v, ok := annotations[AnnotationStopLending]
	if !ok {
		return Stop{}
	}
	s := Stop{Mode: StopLending(v), Reason: Truncate(annotations[AnnotationStopLendingReason], MaxStopReason)}
	switch s.Mode {
	case StopHold, StopHoldAndDrain:
	default:
		s.Problem = fmt.Sprintf("value %q is neither %s nor %s, so it holds", Truncate(v, 64), StopHold, StopHoldAndDrain)
		s.Mode = StopHold
	}
	return s
}
