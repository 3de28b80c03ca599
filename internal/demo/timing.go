package demo

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/gleaner-dev/gleaner/pkg/demand"
)

// timing compresses a day of demo time into DayMinutes of real time. Every
// time constant of the controller and the workload is set in demo time and
// converted with the same scale, then raised to a floor where the local
// control plane cannot act faster (a scrape a second at most, whole seconds of
// grace period). The floors are printed with the run, so what is compressed
// and what is not is explicit.
type timing struct {
	day   time.Duration // real length of the demo day
	scale float64       // demo seconds per real second

	scrape, scrapeTimeout, horizon, noticeHorizon, reclaimLead, trendWindow, openAfter, stableWindow, panicWindow time.Duration
	graceBestEffort, graceInference                                                                               int64 // seconds
	checkpoint                                                                                                    time.Duration
	// withoutNotices runs the controller with --reclaim-notices=false.
	withoutNotices bool
	// profileOrigin is when the controller's profile clock starts running
	// at the demo's scale (--profile-clock-origin).
	profileOrigin time.Time
}

// Demo-time settings, as an operator would choose them for a real fleet.
const (
	demoScrape       = 5 * time.Minute // what one real second of scraping stands for at the default scale
	demoHorizon      = 45 * time.Minute
	demoNotice       = 2 * time.Hour // as gleaner-controller's default hour is four 15-minute horizons
	demoTrendWindow  = 2 * time.Hour
	demoOpenAfter    = 20 * time.Minute
	demoStableWindow = time.Hour
	demoPanicWindow  = 12 * time.Minute
	demoGrace        = 10 * time.Minute // a training step's checkpoint on SIGTERM
	demoCheckpoint   = 30 * time.Minute // best-effort jobs checkpoint this often
)

func newTiming(dayMinutes float64) (timing, error) {
	if math.IsNaN(dayMinutes) || dayMinutes < 1 || dayMinutes > 60 {
		return timing{}, fmt.Errorf("the demo day must last between 1 and 60 minutes, not %v", dayMinutes)
	}
	t := timing{day: time.Duration(dayMinutes * float64(time.Minute))}
	t.scale = float64(24*time.Hour) / float64(t.day)
	t.scrape = t.real(demoScrape, time.Second)
	t.scrapeTimeout = t.scrape / 2
	t.horizon = t.real(demoHorizon, 3*time.Second)
	t.noticeHorizon = max(t.horizon, t.real(demoNotice, 0))
	t.trendWindow = t.real(demoTrendWindow, 10*time.Second)
	t.openAfter = t.real(demoOpenAfter, 3*time.Second)
	// The autoscaler needs several scrapes in each window.
	t.stableWindow = t.real(demoStableWindow, 6*t.scrape)
	t.panicWindow = t.real(demoPanicWindow, 2*t.scrape)
	t.graceBestEffort = int64(math.Ceil(t.real(demoGrace, time.Second).Seconds()))
	t.graceInference = 1
	// Evict once the forecast needs the GPUs within a grace period and two
	// rounds (the time to get them back); between that and the horizon, the
	// jobs there have reclaim notices.
	t.reclaimLead = min(t.horizon, time.Duration(t.graceBestEffort)*time.Second+2*t.scrape)
	t.checkpoint = t.real(demoCheckpoint, 2*time.Second)
	return t, nil
}

// real converts a demo duration to real time, at least floor.
func (t timing) real(demo, floor time.Duration) time.Duration {
	r := time.Duration(float64(demo) / t.scale).Round(100 * time.Millisecond)
	return max(r, floor)
}

// demo converts a real duration to demo time.
func (t timing) demo(real time.Duration) time.Duration {
	return time.Duration(float64(real) * t.scale)
}

// reclaimBudget is the longest an inference pod may wait for GPUs: a scrape
// to see the load, the best-effort pods' grace period, and 5 s for the
// autoscaler, schedulers and KWOK to act (as in the integration tests).
func (t timing) reclaimBudget() time.Duration {
	return t.scrape + time.Duration(t.graceBestEffort)*time.Second + 5*time.Second
}

// controllerFlags are gleaner-controller's time constants for the demo day.
func (t timing) controllerFlags() []string {
	return []string{
		"--scrape-interval=" + t.scrape.String(),
		"--scrape-timeout=" + t.scrapeTimeout.String(),
		"--sync-period=" + t.scrape.String(),
		"--forecast-horizon=" + t.horizon.String(),
		"--reclaim-lead=" + t.reclaimLead.String(),
		"--notice-horizon=" + t.noticeHorizon.String(),
		"--trend-window=" + t.trendWindow.String(),
		"--open-after=" + t.openAfter.String(),
		"--autoscale-stable-window=" + t.stableWindow.String(),
		"--autoscale-panic-window=" + t.panicWindow.String(),
		"--reclaim-notices=" + strconv.FormatBool(!t.withoutNotices),
		"--profile-clock-scale=" + strconv.FormatFloat(t.scale, 'g', -1, 64),
		"--profile-clock-origin=" + t.profileOrigin.UTC().Format(time.RFC3339Nano),
	}
}

// profileClock is the controller's clock for the learned profiles: the
// demo's, so that a quarter-hour slot lasts a quarter of a demo hour.
func (t timing) profileClock() demand.Clock {
	return demand.Clock{Origin: t.profileOrigin, Scale: t.scale}
}

// describe lists the compressed time constants, real and in demo time.
func (t timing) describe() string {
	row := func(name string, real time.Duration) string {
		return fmt.Sprintf("  %-34s %6v real = %s demo\n", name, real, clockDuration(t.demo(real)))
	}
	return fmt.Sprintf("Time: 24 h of demo time in %v of real time (1 real second = %s demo).\n", t.day, clockDuration(t.demo(time.Second))) +
		row("scrape interval and sync period", t.scrape) +
		row("forecast horizon", t.horizon) +
		row("notice horizon", t.noticeHorizon) +
		row("reclaim lead (notices before it)", t.reclaimLead) +
		row("trend window", t.trendWindow) +
		row("open after (spare GPUs stay spare)", t.openAfter) +
		row("autoscaler stable window", t.stableWindow) +
		row("autoscaler panic window", t.panicWindow) +
		row("best-effort grace period", time.Duration(t.graceBestEffort)*time.Second) +
		row("best-effort checkpoint interval", t.checkpoint) +
		row("reclaim budget (inference wait)", t.reclaimBudget()) +
		fmt.Sprintf("  %-34s %s\n", "learned weekly profile", "a week old: the services' day a week before (peaks up to 30m apart, 15% higher or lower), on the demo's clock") +
		fmt.Sprintf("  %-34s %s\n", "reclaim notices", map[bool]string{false: "on", true: "off (DEMO_NOTICES=off)"}[t.withoutNotices])
}

// clockDuration prints a demo duration as 1h30m or 45m or 12s.
func clockDuration(d time.Duration) string {
	switch {
	case d >= time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	case d >= time.Minute:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	default:
		return d.Round(time.Second).String()
	}
}
