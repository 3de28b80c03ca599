package round

import (
	"fmt"
	"time"

	"github.com/gleaner-dev/gleaner/pkg/autoscale"
	"github.com/gleaner-dev/gleaner/pkg/demand"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
)

// Config is the policy's settings. gleaner-controller's flags and gleaner
// simulate's defaults both start from DefaultConfig, so a default cannot differ
// between what runs and what is simulated.
type Config struct {
	// Horizon is how far ahead demand is forecast: nodes stop lending as soon as
	// the forecast over it needs their GPUs. Zero means demand.DefaultHorizon.
	Horizon time.Duration
	// ReclaimLead is how far ahead demand must need lent GPUs before they are
	// evicted (harvest.Gate.JustInTime). Zero means demand.DefaultReclaimLead; a
	// lead of at least Horizon evicts at the horizon.
	ReclaimLead time.Duration
	// NoticeHorizon is how far ahead the forecast warns: the pods on nodes
	// whose lent GPUs the forecast over it needs get reclaim notices
	// (Decision.Notices), while nodes stop lending only at Horizon. Zero means
	// demand.DefaultNoticeHorizon; a horizon shorter than Horizon is Horizon.
	// Notices are given only with a ReclaimLead shorter than Horizon.
	NoticeHorizon time.Duration
	// TrendWindow is the recent history the trend is fitted to. Zero means
	// demand.DefaultTrendWindow.
	TrendWindow time.Duration
	// Margin is the safety margin on forecast load, as a fraction. Zero means
	// DefaultMargin; negative means none. It is kept for one service at a
	// time, the one it keeps the most room for, unless MarginPerService.
	Margin float64
	// MarginPerService keeps the margin for every service at once: fewer
	// replicas wait for lent GPUs to be evicted, and less is lent.
	MarginPerService bool
	// ProfilePerService keeps room for every service's learned peak at once,
	// as if the services peaked together: without it, the room is scaled
	// down to what the pool's learned profile (demand.PoolProfile) expects
	// them to need together.
	ProfilePerService bool
	// OpenAfter is how long a node's capacity must stay spare before it is lent
	// (draining is never delayed). Zero lends at once.
	OpenAfter time.Duration
	// OpenAfterBackoff damps flapping nodes (harvest.Gate.BackoffLimit). Zero
	// means harvest.DefaultBackoffLimit; 1 switches damping off.
	OpenAfterBackoff int
	// OpenAfterRelax is harvest.Gate.RelaxAfter; zero for the gate's default.
	OpenAfterRelax int
	// Windows restrict lending to times of day. Default: continuous.
	Windows harvest.Windows
	// Autoscale tunes the autoscaler of the services that opt in.
	Autoscale autoscale.Config
	// ProfileWriteInterval bounds how often a service's learned profile is
	// offered for saving (also when a profile slot ends). Zero means 5 minutes.
	ProfileWriteInterval time.Duration
	// ProfileClock is the time the learned profiles keep their slots of the
	// week by (demand.Clock): the wall clock (zero) but in a demo that plays
	// a day in minutes.
	ProfileClock demand.Clock
	// WithoutProfile forecasts from the load and its trend alone, ignoring the
	// learned profile of the week (the simulator's continuous and nightly
	// policies); gleaner-controller always uses the profile.
	WithoutProfile bool
	// WithoutTrend leaves the trend out of the forecast (a diagnostic).
	WithoutTrend bool
	// WithoutNotices skips Decision.Notices (a simulation that measures what
	// notices save).
	WithoutNotices bool
	// RoundPeriod is how often rounds run: gleaner-controller's sync period,
	// whose rounds start on multiples of it, and the simulator's step. A
	// notice's time is the first round at or after the time found, the
	// round in which its pod is evicted, so that the time the pod reads (to
	// the second) is when it goes rather than up to a round before.
	// Zero: times as found.
	RoundPeriod time.Duration
	// Oracle, when set, is the exact peak load of a service (by key) over
	// [from, from+window]: it replaces the trend and the profile. Only gleaner
	// simulate's oracle policy, which knows the future, sets it.
	Oracle func(service string, from time.Time, window time.Duration) float64
}

// DefaultMargin keeps room for 10% more load than forecast.
const DefaultMargin = 0.1

// DefaultOpenAfter is gleaner-controller's --open-after.
const DefaultOpenAfter = 2 * time.Minute

// DefaultConfig is the policy as gleaner-controller runs it by default.
func DefaultConfig() Config {
	return Config{
		Horizon:              demand.DefaultHorizon,
		ReclaimLead:          demand.DefaultReclaimLead,
		NoticeHorizon:        demand.DefaultNoticeHorizon,
		TrendWindow:          demand.DefaultTrendWindow,
		Margin:               DefaultMargin,
		OpenAfter:            DefaultOpenAfter,
		OpenAfterBackoff:     harvest.DefaultBackoffLimit,
		ProfileWriteInterval: 5 * time.Minute,
	}
}

// withDefaults fills the zero values that mean "the default".
func (c Config) withDefaults() Config {
	if c.Horizon <= 0 {
		c.Horizon = demand.DefaultHorizon
	}
	if c.ReclaimLead <= 0 {
		c.ReclaimLead = demand.DefaultReclaimLead
	}
	if c.NoticeHorizon <= 0 {
		c.NoticeHorizon = demand.DefaultNoticeHorizon
	}
	if c.TrendWindow <= 0 {
		c.TrendWindow = demand.DefaultTrendWindow
	}
	if c.OpenAfterBackoff <= 0 {
		c.OpenAfterBackoff = harvest.DefaultBackoffLimit
	}
	if c.ProfileWriteInterval <= 0 {
		c.ProfileWriteInterval = 5 * time.Minute
	}
	return c
}

// margin is the safety margin applied.
func (c Config) margin() float64 {
	switch {
	case c.Margin == 0:
		return DefaultMargin
	case c.Margin < 0:
		return 0
	default:
		return c.Margin
	}
}

// noticeHorizon is how far ahead notices are given: NoticeHorizon, at least Horizon.
func (c Config) noticeHorizon() time.Duration { return max(c.NoticeHorizon, c.Horizon) }

// justInTime reports whether evictions wait for the reclaim lead.
func (c Config) justInTime() bool { return c.ReclaimLead < c.Horizon }

// Validate reports the first setting no planner can run with, naming its
// field; zero values are not errors (they mean the default).
func (c Config) Validate() error {
	switch {
	case c.Horizon < 0:
		return fmt.Errorf("Horizon %v: must not be negative", c.Horizon)
	case c.ReclaimLead < 0:
		return fmt.Errorf("ReclaimLead %v: must not be negative", c.ReclaimLead)
	case c.NoticeHorizon < 0:
		return fmt.Errorf("NoticeHorizon %v: must not be negative", c.NoticeHorizon)
	case c.TrendWindow < 0:
		return fmt.Errorf("TrendWindow %v: must not be negative", c.TrendWindow)
	case c.OpenAfter < 0:
		return fmt.Errorf("OpenAfter %v: must not be negative", c.OpenAfter)
	case c.OpenAfterBackoff < 0:
		return fmt.Errorf("OpenAfterBackoff %d: must not be negative (1 switches damping off)", c.OpenAfterBackoff)
	case c.OpenAfterRelax < 0:
		return fmt.Errorf("OpenAfterRelax %d: must not be negative", c.OpenAfterRelax)
	case c.ProfileWriteInterval < 0:
		return fmt.Errorf("ProfileWriteInterval %v: must not be negative", c.ProfileWriteInterval)
	}
	return nil
}
