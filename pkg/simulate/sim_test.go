package simulate

import (
	"cmp"
	"math"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/availability"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
	"github.com/gleaner-dev/gleaner/pkg/round"
)

// handComputed is the evaluation default with the model the hand-computed
// figures below assume: each service follows its load at once (its own
// autoscaler), a resumed job restarts at no cost, and a job saves nothing
// on SIGTERM (so holds its GPUs for the whole grace period). The gleaner
// autoscaler, the restart cost and SIGTERM saves have tests of their own.
func handComputed() Config {
	cfg := DefaultConfig()
	cfg.InferenceAutoscaler, cfg.RestartCost, cfg.NoSIGTERMSave = ExternalAutoscaler, 0, true
	return cfg
}

// small is a one-node cluster (8 GPUs) serving one service with 4-GPU
// replicas of 20 req/s, its trace in one-hour windows, read as steps.
func small(rates ...float64) (Config, *Fleet) {
	cfg := handComputed()
	cfg.Duration = time.Duration(len(rates)) * time.Hour
	cfg.StepLoad = true
	cfg.NoReplay = true
	cfg.SampleEvery = 0
	return cfg, &Fleet{Window: time.Hour, Services: []ServiceTrace{{Name: "svc", Rates: rates}}}
}

func repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestAccounting pins the definitions against scenarios computed by hand.
func TestAccounting(t *testing.T) {
	type want struct {
		idle, harvested, fraction, lost, serving float64
		preemptions, starts, overBudget          int
		wait                                     float64
		started, completed                       int
		reclaimed, unused                        int64
	}
	tests := []struct {
		name   string
		policy Policy
		rates  []float64
		jobs   []Job
		tweak  func(*Config)
		window time.Duration // of the trace; 0 means an hour
		want   want
	}{{
		// Load 10 req/s needs 1 replica (4 GPUs) of the 8: idle = 4 GPUs x 2 h = 8 GPU-h.
		// Headroom: ceil(1.1 x 10 / 20) = 1 replica = the one running, so 4 GPUs are
		// harvestable; the gate (open-after 2 m, nothing published before) opens at
		// t = 120 s. The job (4 GPUs, 1 h) runs 120 s..3720 s: harvested 4 GPU-h,
		// fraction 4/8 = 0.5; it completes. Serving 4 GPUs x 2 h = 8 GPU-h.
		name: "continuous lends the spare replica's GPUs after open-after", policy: Continuous,
		rates: []float64{10, 10}, jobs: []Job{{Name: "a", GPUs: 4, Work: time.Hour}},
		want: want{idle: 8, harvested: 4, fraction: 0.5, serving: 8, started: 1, completed: 1},
	}, {
		// The queue first takes the 8-GPU job (it asks for the fleet's 8 GPUs, the
		// backlog's target), which never fits the 4 lendable GPUs. Those GPUs stay
		// free, so the 2-GPU job behind it is submitted too, and runs 120..3720 s:
		// harvested 2 GPU-h of 8 idle, fraction 0.25.
		name: "a job too big for the free GPUs does not keep smaller work off them", policy: Continuous,
		rates: []float64{10, 10}, jobs: []Job{{Name: "whole-node", GPUs: 8, Work: time.Hour}, {Name: "small", GPUs: 2, Work: time.Hour}},
		want: want{idle: 8, harvested: 2, fraction: 0.25, serving: 8, started: 1, completed: 1},
	}, {
		// No lending: idle as above, nothing harvested.
		name: "none", policy: None,
		rates: []float64{10, 10}, jobs: []Job{{Name: "a", GPUs: 4, Work: time.Hour}},
		want: want{idle: 8, serving: 8},
	}, {
		// Starting at 18:00, the 20:00-08:00 window opens at t = 2 h; the gate
		// opens 120 s later, so the job runs 7320..10920 s: harvested 4 GPU-h of
		// idle 4 GPUs x 4 h = 16 GPU-h, fraction 0.25.
		name: "nightly waits for the window", policy: Nightly,
		rates: []float64{10, 10, 10, 10}, jobs: []Job{{Name: "a", GPUs: 4, Work: time.Hour}},
		tweak: func(c *Config) { c.Start = time.Date(2024, 1, 1, 18, 0, 0, 0, time.UTC) },
		want:  want{idle: 16, harvested: 4, fraction: 0.25, serving: 16, started: 1, completed: 1},
	}, {
		// Hour 0: 10 req/s, 1 replica; the job (4 GPUs, 3 h of work) starts at 120 s.
		// Hour 1: 30 req/s wants 2 replicas; the second finds no free GPU at 3600 s.
		// The plan keeps one replica of headroom on the node, so its 4 lent GPUs must
		// come back: the job is evicted at 3600 s, having checkpointed at 120 + 1800 =
		// 1920 s: lost 4 x (3600 - 1920) = 6720 GPU-s = 1.8667 GPU-h. Its GPUs return
		// at 3600 + 120 = 3720 s and the replica binds then: one wait of 120 s, within
		// the 155 s budget. Harvested 4 x (3720 - 120) = 14400 GPU-s = 4 GPU-h; idle
		// 4 GPUs x 1 h + 0 = 4 GPU-h; fraction 1. Serving 4 x 3720 + 8 x 3480 = 42720
		// GPU-s = 11.8667 GPU-h. The job, queued again, never fits.
		name: "scale-up reclaims and waits out the grace period", policy: Continuous,
		rates: []float64{10, 30}, jobs: []Job{{Name: "a", GPUs: 4, Work: 3 * time.Hour}},
		want: want{idle: 4, harvested: 4, fraction: 1, lost: 6720.0 / 3600, serving: 42720.0 / 3600,
			preemptions: 1, starts: 1, wait: 120, started: 1, reclaimed: 4},
	}, {
		// The same with a 100 s budget: the 120 s wait is over it.
		name: "a wait over the budget counts", policy: Continuous,
		rates: []float64{10, 30}, jobs: []Job{{Name: "a", GPUs: 4, Work: 3 * time.Hour}},
		tweak: func(c *Config) { c.ReclaimBudget = 100 * time.Second },
		want: want{idle: 4, harvested: 4, fraction: 1, lost: 6720.0 / 3600, serving: 42720.0 / 3600,
			preemptions: 1, starts: 1, wait: 120, overBudget: 1, started: 1, reclaimed: 4},
	}, {
		// Two 2-GPU jobs: packing puts both on the one node (4 harvestable GPUs).
		// At 3600 s the node must return 4 GPUs, so both go. Job a started at 120 s
		// (checkpoint at 1920 s: loses 2 x 1680 = 3360 GPU-s), job b too: 6720 GPU-s
		// in all, as one 4-GPU job would. Harvested: 4 GPUs from 120 s to 3720 s.
		name: "every pod on the node is reclaimed", policy: Continuous,
		rates: []float64{10, 30}, jobs: []Job{{Name: "a", GPUs: 2, Work: 3 * time.Hour}, {Name: "b", GPUs: 2, Work: 3 * time.Hour}},
		want: want{idle: 4, harvested: 4, fraction: 1, lost: 6720.0 / 3600, serving: 42720.0 / 3600,
			preemptions: 2, starts: 1, wait: 120, started: 2, reclaimed: 4},
	}, {
		// The checkpoint interval decides the loss: with checkpoints every 10 min
		// the job last checkpointed at 120 + 5 x 600 = 3120 s: 4 x 480 = 1920 GPU-s.
		name: "frequent checkpoints lose less", policy: Continuous,
		rates: []float64{10, 30}, jobs: []Job{{Name: "a", GPUs: 4, Work: 3 * time.Hour}},
		tweak: func(c *Config) { c.CheckpointInterval = 10 * time.Minute },
		want: want{idle: 4, harvested: 4, fraction: 1, lost: 1920.0 / 3600, serving: 42720.0 / 3600,
			preemptions: 1, starts: 1, wait: 120, started: 1, reclaimed: 4},
	}, {
		// One-minute windows: 10 req/s for an hour, 30 for the minute from 3600 s,
		// then 10 again; no trend, so only the load speaks. At 3600 s the second
		// replica finds no GPU and the job is evicted as above (lost 6720 GPU-s).
		// At 3660 s the replica is no longer wanted: it waited 60 s and never binds.
		// The gate saw 0 harvestable at 3600 and 3630 s, so it lends again once the
		// last of those is 120 s old: at 3780 s (GPUs back at 3720 s). The 4
		// reclaimed GPUs are lent again unused. The job resumes at 3780 s from its
		// checkpoint and runs to the end. Harvested 4 x ((3720 - 120) + (7200 - 3780))
		// = 28080 GPU-s = 7.8 GPU-h; idle 4 x (7200 - 60) = 28560 GPU-s = 7.9333 GPU-h;
		// serving 4 x 7200 = 8 GPU-h; fraction 28080/28560.
		name: "a reclaim the load no longer needs is lent again", policy: Continuous,
		window: time.Minute,
		rates:  append(append(repeat(10, 60), 30), repeat(10, 59)...),
		jobs:   []Job{{Name: "a", GPUs: 4, Work: 3 * time.Hour}},
		tweak:  func(c *Config) { c.NoTrend, c.OpenAfterBackoff = true, 1 },
		want: want{idle: 28560.0 / 3600, harvested: 28080.0 / 3600, fraction: 28080.0 / 28560, lost: 6720.0 / 3600, serving: 8,
			preemptions: 1, wait: 60, started: 2, reclaimed: 4, unused: 4},
	}, {
		// The same with flap damping (the default): the drain at 3600 s doubles
		// the node's open-after to 240 s, so it lends again once the 0 offered
		// from 3600 s until 3660 s is 240 s old: at 3900 s. Harvested
		// 4 x ((3720 - 120) + (7200 - 3900)) = 27600 GPU-s = 7.6667 GPU-h.
		name: "flap damping waits longer after a drain", policy: Continuous,
		window: time.Minute,
		rates:  append(append(repeat(10, 60), 30), repeat(10, 59)...),
		jobs:   []Job{{Name: "a", GPUs: 4, Work: 3 * time.Hour}},
		tweak:  func(c *Config) { c.NoTrend = true },
		want: want{idle: 28560.0 / 3600, harvested: 27600.0 / 3600, fraction: 27600.0 / 28560, lost: 6720.0 / 3600, serving: 8,
			preemptions: 1, wait: 60, started: 2, reclaimed: 4, unused: 4},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, fleet := small(tt.rates...)
			if tt.window > 0 {
				fleet.Window = tt.window
				cfg.Duration = time.Duration(len(tt.rates)) * tt.window
			}
			if tt.tweak != nil {
				tt.tweak(&cfg)
			}
			r, err := Run(cfg, tt.policy, fleet, tt.jobs)
			if err != nil {
				t.Fatal(err)
			}
			got := want{r.IdleGPUHours, r.HarvestedGPUHours, r.HarvestedFraction, r.LostGPUHours, r.ServingGPUHours,
				r.Preemptions, r.InferenceReplicaStarts, r.InferenceWaitsOverBudget, r.InferenceWaitSeconds, r.JobsStarted, r.JobsCompleted,
				r.ReclaimedGPUs, r.ReclaimedUnusedGPUs}
			w := tt.want
			if !near(got.idle, w.idle) || !near(got.harvested, w.harvested) || !near(got.fraction, w.fraction) || !near(got.lost, w.lost) ||
				!near(got.serving, w.serving) || !near(got.wait, w.wait) || got.preemptions != w.preemptions || got.starts != w.starts ||
				got.overBudget != w.overBudget || got.started != w.started || got.completed != w.completed ||
				got.reclaimed != w.reclaimed || got.unused != w.unused {
				t.Fatalf("got  %+v\nwant %+v", got, w)
			}
			if r.Nodes != 1 || r.FleetGPUs != 8 {
				t.Fatalf("cluster %d nodes, %d GPUs; want 1 node of 8", r.Nodes, r.FleetGPUs)
			}
			if !near(r.Savings, r.HarvestedGPUHours*cfg.PricePerGPUHour) {
				t.Fatalf("savings %g, want %g", r.Savings, r.HarvestedGPUHours*cfg.PricePerGPUHour)
			}
		})
	}
}

// TestForecastReclaimsAhead: a service that needs a second replica from 12:00
// to 13:00 every day. Continuous reclaims only when the replica is wanted and
// it waits the grace period (120 s) every day: 14 x 120 = 1680 s. Forecast
// learns the hour in week 1 (waiting like continuous: 7 x 120 s) and in week 2
// reclaims from 11:45 (the 15-minute horizon touches hour 12), so the replica
// binds at once: 840 s. The oracle, which knows the hour, never lets it wait.
// Idle GPU-hours do not depend on the policy.
func TestForecastReclaimsAhead(t *testing.T) {
	rates := make([]float64, 14*24)
	for i := range rates {
		rates[i] = 10
		if i%24 == 12 {
			rates[i] = 30
		}
	}
	jobs := []Job{{Name: "long", GPUs: 4, Work: 1000 * time.Hour}}
	cfg, fleet := small(rates...)
	cfg.NoReplay = false
	waits := map[Policy]float64{Continuous: 1680, Forecast: 840, Oracle: 0}
	var idle, harvested []float64
	for _, p := range []Policy{Continuous, Forecast, Oracle} {
		r, err := Run(cfg, p, fleet, jobs)
		if err != nil {
			t.Fatal(err)
		}
		if r.InferenceWaitSeconds != waits[p] || r.InferenceWaitsOverBudget != 0 || r.InferenceReplicaStarts != 14 {
			t.Errorf("%s: waited %g s over %d starts (%d over budget), want %g s over 14, 0 over budget",
				p, r.InferenceWaitSeconds, r.InferenceReplicaStarts, r.InferenceWaitsOverBudget, waits[p])
		}
		idle = append(idle, r.IdleGPUHours)
		harvested = append(harvested, r.HarvestedGPUHours)
	}
	// Idle: 4 GPUs for the 23 quiet hours of each of 14 days.
	if idle[0] != idle[1] || idle[0] != idle[2] || !near(idle[0], 4*23*14) {
		t.Errorf("idle GPU-hours %v, want %d for each", idle, 4*23*14)
	}
	// The oracle lends at once when the hour ends (no open-after) and evicts
	// at 11:57:30, when its 150 s window (grace period and a step) first
	// reaches noon: the pod holds the GPUs through its grace period (counted
	// as harvested) and they are idle only from 11:59:30 until the replica
	// binds at 12:00. (Continuous harvests a little more, its pod's grace
	// period after 12:00, while the replica waits for it.)
	if want := 4 * (23*14*3600 - 14*30.0) / 3600; !near(harvested[2], want) {
		t.Errorf("harvested GPU-hours %v, want the oracle's %g", harvested, want)
	}
}

func TestConfigErrors(t *testing.T) {
	cfg, fleet := small(10)
	cfg.GPUsPerReplica = 16
	if _, err := Run(cfg, Continuous, fleet, nil); err == nil {
		t.Fatal("a replica larger than a node was accepted")
	}
	if _, err := ParsePolicies("sometimes"); err == nil {
		t.Fatal("an unknown policy was accepted")
	}
}

// TestReplicasBindInTheOrderWanted: two services on two nodes; node-0000
// serves both, node-0001 lends its 8 GPUs to two 4-GPU jobs from 120 s.
// Service b wants a second replica at 540 s, service a at 600 s; each time one
// job is evicted (no trend: only the load speaks). The GPUs freed at 660 s go
// to b, which has waited longest, though a comes first: both wait the grace
// period, 120 s. Bound by service instead, a would take them after 60 s and b
// would wait 180 s, over the 155 s budget.
func TestReplicasBindInTheOrderWanted(t *testing.T) {
	cfg := handComputed()
	cfg.StepLoad, cfg.NoReplay, cfg.NoTrend, cfg.SampleEvery = true, true, true, 0
	cfg.Duration = 20 * time.Minute
	fleet := &Fleet{Window: time.Minute, Services: []ServiceTrace{
		{Name: "a", Rates: append(repeat(10, 10), repeat(30, 10)...)},
		{Name: "b", Rates: append(repeat(10, 9), repeat(30, 11)...)},
	}}
	jobs := []Job{{Name: "j1", GPUs: 4, Work: 10 * time.Hour}, {Name: "j2", GPUs: 4, Work: 10 * time.Hour}}
	r, err := Run(cfg, Continuous, fleet, jobs)
	if err != nil {
		t.Fatal(err)
	}
	if r.Nodes != 2 || r.Preemptions != 2 || r.InferenceReplicaStarts != 2 {
		t.Fatalf("%d nodes, %d preemptions, %d replica starts; want 2, 2, 2", r.Nodes, r.Preemptions, r.InferenceReplicaStarts)
	}
	if r.InferenceWaitSeconds != 240 || r.MaxInferenceWaitSeconds != 120 || r.InferenceWaitsOverBudget != 0 {
		t.Fatalf("waited %g s, longest %g s, %d over budget; want 240 s, 120 s, 0", r.InferenceWaitSeconds, r.MaxInferenceWaitSeconds, r.InferenceWaitsOverBudget)
	}
}

// TestNoticeCheckpoint pins the job's side of a reclaim notice: a 1-GPU job
// on 8-GPU nodes takes 3 min x 1/8 = 22.5 s to save a checkpoint. It started
// at 0 and last checkpointed periodically at 1800 s (every 30 min). Unless
// the case says sigterm, it saves nothing on SIGTERM (NoSIGTERMSave).
func TestNoticeCheckpoint(t *testing.T) {
	const cost = 22500 * time.Millisecond
	tests := []struct {
		name string
		// The notice is given at given (0: 2400 s) for noticeAt; the job is
		// evicted at evictAt (0: not evicted), or the notice is withdrawn at
		// withdrawAt (0: never).
		given, noticeAt, evictAt, withdrawAt time.Duration
		// sigterm: the job declares its save duration and saves on SIGTERM;
		// gpus: its GPUs (0: 1).
		sigterm             bool
		gpus                int64
		lost, checkpointing time.Duration // GPU-seconds of each
		grace               time.Duration // of its eviction (0: not checked)
	}{{
		// Taken at 2970 s, before its notice's checkpoint began, it is given
		// its save's 22.5 s and 10 s to exit, whole seconds: 33 s. It saves on
		// SIGTERM and loses nothing.
		name: "taken early, it saves on SIGTERM in the grace its save needs", noticeAt: 3000 * time.Second, evictAt: 2970 * time.Second,
		sigterm: true, grace: 33 * time.Second,
	}, {
		// The same job with no notice at all.
		name: "taken without notice, it saves on SIGTERM", noticeAt: 9000 * time.Second, evictAt: 2970 * time.Second,
		sigterm: true, grace: 33 * time.Second,
	}, {
		// Evicted at the noticed time having saved for it: 10 s, too short to
		// save again; it loses the checkpoint's time as without SIGTERM saves.
		name: "saved for its notice, it gets 10 s and saves nothing more", noticeAt: 3000 * time.Second, evictAt: 3000 * time.Second,
		sigterm: true, lost: cost, checkpointing: cost, grace: reclaim.SavedGrace,
	}, {
		// A 8-GPU job takes 3 min to save: more than its 2 min grace period.
		// Taken early, it saves nothing and loses the 1170 s since 1800 s on
		// each GPU.
		name: "a save that does not fit the grace period saves nothing", noticeAt: 9000 * time.Second, evictAt: 2970 * time.Second,
		sigterm: true, gpus: 8, lost: 8 * 1170 * time.Second, grace: 2 * time.Minute,
	}, {
		// The checkpoint runs 2977.5..3000 s and saves the progress to 2977.5 s:
		// evicted at 3000 s, the job loses only the checkpoint's own 22.5 s.
		name: "evicted at the noticed time loses the checkpoint's time", noticeAt: 3000 * time.Second, evictAt: 3000 * time.Second,
		lost: cost, checkpointing: cost,
	}, {
		// Evicted 30 s after the noticed time: the 30 s worked since are lost too.
		name: "evicted after the noticed time loses the work since", noticeAt: 3000 * time.Second, evictAt: 3030 * time.Second,
		lost: cost + 30*time.Second, checkpointing: cost,
	}, {
		// Evicted at 2970 s, before the checkpoint was due to start: nothing is
		// saved since 1800 s, and nothing was spent saving.
		name: "evicted before the checkpoint began loses the work since the last one", noticeAt: 3000 * time.Second, evictAt: 2970 * time.Second,
		lost: 1170 * time.Second,
	}, {
		// Withdrawn at 2700 s, before the checkpoint was due: it costs nothing.
		name: "a notice withdrawn in time costs nothing", noticeAt: 3000 * time.Second, withdrawAt: 2700 * time.Second,
	}, {
		// Given at 1800 s for 1815 s, the checkpoint would save no work since
		// the periodic one at 1800 s, for 22.5 s: skipped.
		name: "a checkpoint that saves less than it costs is skipped", given: 1800 * time.Second, noticeAt: 1815 * time.Second, evictAt: 1830 * time.Second,
		lost: 30 * time.Second,
	}, {
		// Given in the round that evicts: the checkpoint starts at once and
		// completes within the grace period, saving the 600 s since 1800 s. The
		// grace period is spent either way: nothing is lost.
		name: "a checkpoint begun as the eviction comes completes in the grace period", noticeAt: 2400 * time.Second, evictAt: 2400 * time.Second,
	}, {
		// Noticed for 2985 s, the checkpoint runs from 2962.5 s; evicted at 2970
		// s, 7.5 s into it, it completes in the grace period: the 7.5 s spent
		// before the eviction are lost.
		name: "a checkpoint under way at the eviction completes in the grace period", noticeAt: 2985 * time.Second, evictAt: 2970 * time.Second,
		lost: 7500 * time.Millisecond, checkpointing: 7500 * time.Millisecond,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := handComputed()
			cfg.NoSIGTERMSave = !tt.sigterm
			s := &sim{cfg: cfg, nodes: []simNode{{name: "n", alloc: 8}}, graceSeconds: int64(cfg.GracePeriod / time.Second)}
			j := &simJob{Job: Job{Name: "j", GPUs: cmp.Or(tt.gpus, 1), Work: 100 * time.Hour}, node: 0}
			s.running = []*simJob{j}
			step := cfg.ScrapeInterval
			given := cmp.Or(tt.given, 2400*time.Second)
			end := max(tt.evictAt, tt.withdrawAt, tt.noticeAt) + 5*time.Minute
			for now := time.Duration(0); now <= end; now += step {
				if !j.evicted {
					s.checkpoint(j, now)
				}
				if now == given {
					j.noticed, j.noticeSince, j.noticeAt = true, now, tt.noticeAt
					s.justInTime(j, now)
				}
				if now == tt.withdrawAt {
					j.noticed = false
				}
				if now == tt.evictAt && !j.evicted {
					c := reclaim.NewCandidate(s.pod(j, now), api.GPUResource, s.now(now), cfg.GracePeriod, nil)
					c.Saved = j.noticed && j.savedAt >= j.noticeSince && now >= j.noticeAt
					s.evict(j, c, now)
					if tt.grace > 0 && j.grace != tt.grace {
						t.Errorf("evicted with a grace period of %v, want %v", j.grace, tt.grace)
					}
				}
			}
			lost := time.Duration(s.res.LostGPUHours * float64(time.Hour))
			spent := time.Duration(s.res.NoticeCheckpointGPUHours * float64(time.Hour))
			if (lost-tt.lost).Abs() > time.Millisecond || (spent-tt.checkpointing).Abs() > time.Millisecond {
				t.Fatalf("lost %v of which %v checkpointing; want %v of which %v", lost, spent, tt.lost, tt.checkpointing)
			}
		})
	}
}

// TestNoticesSaveWork: on two days of a synthetic fleet, the forecast
// policy's notices reach most evicted jobs, which then lose less work than
// the same run without notices; the notice checkpoints' own time is part of
// the loss. The jobs save nothing on SIGTERM: one that does loses little
// either way, and its notice buys inference its GPUs sooner instead.
func TestNoticesSaveWork(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Duration, cfg.SampleEvery, cfg.NoSIGTERMSave = 2*24*time.Hour, 0, true
	fleet, jobs := SyntheticFleet(6, 2, 1), SyntheticJobs(2000, 1)
	with, err := Run(cfg, Forecast, fleet, jobs)
	if err != nil {
		t.Fatal(err)
	}
	cfg.WithoutNotices = true
	without, err := Run(cfg, Forecast, fleet, jobs)
	if err != nil {
		t.Fatal(err)
	}
	if without.Notices != 0 || without.NoticedEvictions != 0 || without.NoticeCheckpointGPUHours != 0 {
		t.Fatalf("without notices: %d notices, %d noticed evictions, %g GPU-h checkpointing", without.Notices, without.NoticedEvictions, without.NoticeCheckpointGPUHours)
	}
	if with.NoticedEvictions == 0 || 2*with.NoticedEvictions < with.Preemptions || with.NoticeLeadP50Seconds <= 0 {
		t.Fatalf("%d of %d evictions noticed (lead p50 %g s): want most", with.NoticedEvictions, with.Preemptions, with.NoticeLeadP50Seconds)
	}
	// A notice's time can only have been moved earlier after it was given.
	if with.NoticeFirmLeadP50Seconds <= 0 || with.NoticeFirmLeadP50Seconds > with.NoticeLeadP50Seconds {
		t.Fatalf("firm lead p50 %g s against lead p50 %g s: want in (0, lead]", with.NoticeFirmLeadP50Seconds, with.NoticeLeadP50Seconds)
	}
	if with.NoticeCheckpointGPUHours <= 0 || with.NoticeCheckpointGPUHours > with.LostGPUHours || with.LostGPUHours >= without.LostGPUHours {
		t.Fatalf("lost %g GPU-h (%g checkpointing) with notices, %g without: want less, checkpoints included",
			with.LostGPUHours, with.NoticeCheckpointGPUHours, without.LostGPUHours)
	}
	t.Logf("lost %.1f GPU-h with notices (%.1f checkpointing, %d of %d evictions noticed), %.1f without",
		with.LostGPUHours, with.NoticeCheckpointGPUHours, with.NoticedEvictions, with.Preemptions, without.LostGPUHours)
}

// A bucket's gap is read against how far other days of the same traffic
// could move it: days alike leave no room, one bad day among good ones a
// range that holds both the gap with it and the gap without it.
func TestCalibrationRangeOverTheDays(t *testing.T) {
	bucket := func(from, predicted, survived float64) availability.CalibrationBucket {
		return availability.CalibrationBucket{From: from, To: from + 0.1, GPUHours: 100, Predicted: predicted, Survived: survived}
	}
	var alike, oneBad [][]availability.CalibrationBucket
	for day := range 14 {
		alike = append(alike, []availability.CalibrationBucket{bucket(0.7, 0.75, 0.72), bucket(0.9, 0.95, 0.95)})
		survived := 0.80
		if day == 9 {
			survived = 0.10
		}
		oneBad = append(oneBad, []availability.CalibrationBucket{bucket(0.7, 0.75, survived)})
	}
	c := newCalibration(time.Hour, alike)
	if len(c.Buckets) != 2 || math.Abs(c.WorstPoints-3) > 1e-9 || math.Abs(c.MeanPoints-1.5) > 1e-9 {
		t.Fatalf("days alike: %+v, want two buckets, worst gap 3 points, 1.5 on average", c)
	}
	if b := c.Buckets[0]; math.Abs(b.GapLow+3) > 1e-9 || math.Abs(b.GapHigh+3) > 1e-9 || b.Days != 14 {
		t.Errorf("days alike: gap from %+.2f to %+.2f over %d days, want -3 to -3 over 14", b.GapLow, b.GapHigh, b.Days)
	}
	c = newCalibration(time.Hour, oneBad)
	b := c.Buckets[0]
	gap := 100 * (b.Survived - b.Predicted) // 0.75 given, 0.75 survived
	if math.Abs(gap) > 1e-9 || b.GapLow > -5 || b.GapHigh < 5 || b.GapHigh > 5.0001 {
		t.Errorf("one bad day: gap %+.1f from %+.1f to %+.1f, want 0 within a range from below -5 up to +5 (no bad day drawn)", gap, b.GapLow, b.GapHigh)
	}
	if again := newCalibration(time.Hour, oneBad); again.Buckets[0] != b {
		t.Errorf("drawn again: %+v, then %+v; want the same draws every run", b, again.Buckets[0])
	}
}

// The planner's survival probabilities are checked against what happened:
// with the oracle's exact forecast they hold within a few points on average,
// and the forecast policy's are reported too. Four days: the record fades by
// half in two (round.SurvivalHalfLife), and three hold too few outcomes of
// the rare levels to judge it by. Jobs that declare their checkpoint
// interval are placed by availability as well, which changes where they run.
func TestAvailabilityCalibration(t *testing.T) {
	cfg := handComputed()
	cfg.Duration, cfg.SampleEvery = 4*24*time.Hour, 0
	fleet, jobs := SyntheticFleet(6, 3, 1), SyntheticJobs(2000, 1)
	results := map[Policy]Result{}
	for _, p := range []Policy{Oracle, Forecast} {
		r, err := Run(cfg, p, fleet, jobs)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Availability) != 2 || r.Availability[0].Hours != 1 || r.Availability[1].Hours != 4 {
			t.Fatalf("%s: availability %+v, want the 1 h and 4 h checks", p, r.Availability)
		}
		results[p] = r
		t.Logf("%s: worst gap %.1f points at 1 h, %.1f at 4 h", p, r.Availability[0].WorstPoints, r.Availability[1].WorstPoints)
	}
	// Four days of six services hold few events per tenth: judge the
	// oracle's by the gap averaged over GPU-hours.
	for _, c := range results[Oracle].Availability {
		t.Logf("oracle: %g h probabilities off by %.1f points on average", c.Hours, c.MeanPoints)
		if c.MeanPoints > 3 {
			t.Errorf("oracle: %g h probabilities off by %.1f points on average: %+v", c.Hours, c.MeanPoints, c.Buckets)
		}
	}
	cfg.DeclareInterval = true
	declared, err := Run(cfg, Forecast, fleet, jobs)
	if err != nil {
		t.Fatal(err)
	}
	if f := results[Forecast]; declared.JobsStarted == f.JobsStarted && declared.Preemptions == f.Preemptions && declared.LostGPUHours == f.LostGPUHours {
		t.Fatalf("jobs declaring their interval ran exactly as without (%d started, %d preempted)", f.JobsStarted, f.Preemptions)
	}
}

// TestGleanerAutoscalerStartsTheReplicaAtTheLead: one service on one node,
// 10 req/s but 30 from noon to one every day, a job lending the other half
// of the node. With Gleaner's autoscaler and the forecast policy, in week 2
// the learned profile sees noon coming: the job gets its notice an hour
// ahead, the replica is started at 11:55 (the reclaim lead before noon,
// when the plan over the lead takes the job's GPUs back, not at 11:45 when
// the horizon first reaches noon), binds when the job's grace period ends
// and serves before the load arrives: no wait anyone sees. In week 1 the
// load itself asks for the replica at noon and it waits for the eviction.
func TestGleanerAutoscalerStartsTheReplicaAtTheLead(t *testing.T) {
	rates := make([]float64, 14*24)
	for i := range rates {
		rates[i] = 10
		if i%24 == 12 {
			rates[i] = 30
		}
	}
	cfg, fleet := small(rates...)
	cfg.InferenceAutoscaler, cfg.NoReplay = GleanerAutoscaler, false
	var scaledUp []time.Time
	cfg.OnRound = func(obs round.Observation, d round.Decision) {
		for _, sc := range d.Scale {
			if sc.Decision.Replicas > sc.From {
				scaledUp = append(scaledUp, obs.Now)
			}
		}
	}
	r, err := Run(cfg, Forecast, fleet, []Job{{Name: "long", GPUs: 4, Work: 1000 * time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	var week2 []string
	for _, at := range scaledUp {
		if at.Sub(cfg.start()) >= 7*24*time.Hour {
			week2 = append(week2, at.Format("15:04:05"))
		}
	}
	if len(week2) != 7 || slices.ContainsFunc(week2, func(s string) bool { return s != "11:55:00" }) {
		t.Errorf("week 2 started replicas at %v, want 11:55:00 each day", week2)
	}
	// Week 1: each day the round at noon starts the replica and evicts the
	// job, and the replica waits out its grace period (120 s); week 2: never.
	if r.InferenceWaitSeconds != 7*120 || r.InferenceWaitsOverBudget != 0 || r.MaxInferenceWaitSeconds != 120 {
		t.Errorf("waited %g s (max %g, %d over budget), want 7 x 120 s in week 1 alone", r.InferenceWaitSeconds, r.MaxInferenceWaitSeconds, r.InferenceWaitsOverBudget)
	}
	if r.Preemptions != 14 || r.NoticedEvictions < 7 || r.NoticeLeadP50Seconds < 30*60 {
		t.Errorf("%d evictions, %d noticed, lead p50 %gs: want every week-2 eviction noticed well ahead", r.Preemptions, r.NoticedEvictions, r.NoticeLeadP50Seconds)
	}
}

// A job resumed after an eviction loses RestartCost x (1 + log2 GPUs) on
// each GPU before its first step, counted as lost work; evicted while it
// restarts, it loses only the part it spent.
func TestRestartCost(t *testing.T) {
	cfg := handComputed()
	cfg.RestartCost = 30 * time.Second
	s := &sim{cfg: cfg, nodes: []simNode{{name: "n", alloc: 8}}, verdicts: []harvest.NodePlan{{Verdict: harvest.Verdict{State: api.HarvestOpen, HarvestableGPUs: 8}}}}
	j := &simJob{Job: Job{Name: "j", GPUs: 4, Work: 100 * time.Hour}, node: -1, runs: 1}
	s.queue = []*simJob{j}
	s.place(0)
	// 4 GPUs: 30 s x (1 + 2) = 90 s each.
	if got := time.Duration(s.res.RestartGPUHours * float64(time.Hour)); got != 4*90*time.Second || j.start != 90*time.Second {
		t.Fatalf("a resumed 4-GPU job: %v GPU-time restarting, progress from %v; want 6m0s from 1m30s", got, j.start)
	}
	s.evict(j, reclaim.Candidate{Pod: &v1.Pod{}}, 60*time.Second)
	if got := time.Duration(s.res.RestartGPUHours * float64(time.Hour)); got != 4*60*time.Second || s.res.LostGPUHours != s.res.RestartGPUHours {
		t.Fatalf("evicted 60 s into its restart: %v GPU-time restarting, %g GPU-h lost; want 4m0s, all of it restart", got, s.res.LostGPUHours)
	}
	first := &simJob{Job: Job{Name: "f", GPUs: 8, Work: time.Hour}, node: -1}
	s.queue, s.nodes[0].lent = []*simJob{first}, 0
	s.place(0)
	if first.start != 0 {
		t.Errorf("a first run starts making progress at %v, want at once", first.start)
	}
}

// A replica's load arrives when the load crosses its share within the step,
// on the line between the step's ends: not at the step's end. A load there
// at the step's start, never there, or read as steps arrives at the end.
func TestLoadArrived(t *testing.T) {
	cfg := handComputed()
	// Window middles at 5 and 15 minutes: from 0 to 60 req/s, 6 a minute.
	s := &sim{cfg: cfg, fleet: &Fleet{Window: 10 * time.Minute, Services: []ServiceTrace{{Name: "svc", Rates: []float64{0, 60}}}}}
	end := 8*time.Minute + 30*time.Second // the load goes from 18 to 21 req/s in this step
	for _, tt := range []struct {
		name    string
		replica int
		step    bool
		want    time.Duration
	}{
		{"the second replica's 20 req/s are crossed within the step", 1, false, 8*time.Minute + 20*time.Second},
		{"the first replica's load was there at the step's start", 0, false, end},
		{"the fourth replica's is not there yet", 3, false, end},
		{"read as steps, the load changes at steps", 1, true, end},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s.cfg.StepLoad = tt.step
			if got := s.loadArrived(0, tt.replica, end); (got - tt.want).Abs() > time.Millisecond {
				t.Errorf("loadArrived = %v, want %v", got, tt.want)
			}
		})
	}
}

// A replica waiting for GPUs binds 5 s (bindDelay) after the evicted pods
// that made its room left within the step, or when it was wanted if later;
// at the step's end when its room came earlier, only with the GPUs given
// back at the step itself, or too late in the step.
func TestBoundAt(t *testing.T) {
	cfg := handComputed()
	const at = 10 * time.Minute // the step's end; it began 30 s before
	for _, tt := range []struct {
		name           string
		freedAt        time.Duration
		freedNow, lent int64
		wanted, want   time.Duration
	}{
		{"freed 20 s into the step", at - 10*time.Second, 0, 0, at - time.Minute, at - 5*time.Second},
		{"freed early in the step: 5 s later", at - 25*time.Second, 0, 0, at - time.Minute, at - 20*time.Second},
		{"wanted after it was freed", at - 25*time.Second, 0, 0, at - 15*time.Second, at - 15*time.Second},
		{"freed too late in the step for the 5 s", at - 2*time.Second, 0, 0, at - time.Minute, at},
		{"freed in an earlier step", at - 40*time.Second, 0, 0, at - time.Minute, at},
		{"its room needs GPUs given back at the step", at - 20*time.Second, 4, 2, at - time.Minute, at},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &sim{cfg: cfg, nodes: []simNode{{name: "n", alloc: 8, lent: tt.lent, freedAt: tt.freedAt, freedNow: tt.freedNow}}}
			if got := s.boundAt(0, tt.wanted, at); got != tt.want {
				t.Errorf("boundAt = %v, want %v", got, tt.want)
			}
		})
	}
}
