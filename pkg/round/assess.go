package round

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/gleaner-dev/gleaner/pkg/autoscale"
	"github.com/gleaner-dev/gleaner/pkg/demand"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
)

// service is what the planner remembers of one service.
type service struct {
	trend   demand.Trend
	profile demand.Profile
	scaler  *autoscale.Scaler
	// loaded: the stored profile was read (or there was none to read).
	loaded   bool
	declared bool
	// savedAt / savedJSON: the profile last reported saved.
	savedAt   time.Time
	savedJSON string
}

// ProfileWrite is a service's learned profile, due to be saved.
type ProfileWrite struct {
	Key  string
	JSON string
}

// assess observes each service's replicas once for the round, learning its
// load (trend, profile, the pool's profile). Services not observed are
// forgotten.
func (p *Planner) assess(obs Observation) *view {
	now := obs.Now
	v := &view{p: p, now: now, nodes: obs.Nodes, services: make([]ServiceDecision, 0, len(obs.Services))}
	seen := make(map[string]bool, len(obs.Services))
	pool := poolFit{nodes: obs.Nodes}
	loads, complete := make(map[string]float64, len(obs.Services)), true
	for _, s := range obs.Services {
		seen[s.Key] = true
		svc := p.services[s.Key]
		if svc == nil {
			svc = &service{trend: demand.Trend{Window: p.cfg.TrendWindow}, profile: demand.Profile{Clock: p.cfg.ProfileClock}, scaler: autoscale.New(p.cfg.Autoscale)}
			p.services[s.Key] = svc
		}
		sd := ServiceDecision{Key: s.Key, dra: s.DRA}
		svc.declared = s.Declared
		if !svc.loaded {
			sd.Problems = svc.load(s)
		}
		sd.observed = demand.Observe(demand.Service{Name: s.Key, Replicas: s.Replicas, Metric: s.Settings.Metric, TargetLoad: s.Settings.TargetLoad,
			GPUsPerReplica: s.Settings.GPUsPerReplica, MaxReplicas: pool.maxReplicas(s)})
		o := &sd.observed
		if o.GPUsPerReplica > 0 {
			sd.gpusPerLoad = float64(o.GPUsPerReplica) / o.Target
		}
		if len(s.Replicas) > 0 || s.Declared {
			if o.Complete {
				svc.trend.Add(demand.Sample{At: now, Load: o.Load})
				svc.profile.Observe(now, o.Load)
			}
			loads[s.Key] = o.Load * sd.gpusPerLoad
			complete = complete && o.Complete
		}
		if !p.cfg.WithoutTrend {
			sd.trend = &svc.trend
		}
		if !p.cfg.WithoutProfile {
			sd.profile = &svc.profile
		}
		v.services = append(v.services, sd)
	}
	if len(loads) > 0 {
		p.pool.Observe(now, loads, complete)
	}
	for key := range p.services {
		if !seen[key] {
			delete(p.services, key)
		}
	}
	return v
}

// poolFit counts, once per round and replica size, how many replicas the
// pool's nodes could hold: services mostly share a few sizes, and a round must
// not walk every node once per service.
type poolFit struct {
	nodes []harvest.Node
	fits  map[int64]int
}

// maxReplicas is the most replicas a service could run, which bounds the
// headroom kept for it: its autoscaler's maximum, else what the pool's nodes
// could hold of its replicas (0: no bound, when its replica size is unknown).
func (p *poolFit) maxReplicas(s Service) int {
	if s.Autoscale != nil && s.Autoscale.Limits.Max > 0 {
		return s.Autoscale.Limits.Max
	}
	gpus := s.Settings.GPUsPerReplica
	if gpus <= 0 {
		for _, r := range s.Replicas {
			gpus = max(gpus, r.GPUs) // as demand.Observe sizes replicas
		}
	}
	if gpus <= 0 {
		return 0
	}
	if fit, ok := p.fits[gpus]; ok {
		return fit
	}
	var fit int64
	for _, n := range p.nodes {
		if n.InPool {
			fit += n.AllocatableGPUs / gpus
		}
	}
	if p.fits == nil {
		p.fits = map[int64]int{}
	}
	p.fits[gpus] = int(max(fit, 1))
	return p.fits[gpus]
}

// load reads the service's stored profile, once. A service first seen without
// a workload object keeps its profile in memory only.
func (svc *service) load(s Service) []string {
	svc.loaded = true
	if !s.Declared || s.StoredProfile == "" {
		return nil
	}
	p := demand.Profile{Clock: svc.profile.Clock}
	if err := json.Unmarshal([]byte(s.StoredProfile), &p); err != nil {
		return []string{fmt.Sprintf("the stored demand profile is unreadable (%v); learning the profile afresh", err)}
	}
	svc.profile = p
	svc.savedJSON = s.StoredProfile
	return nil
}

// ProfilesDue lists the declared services' learned profiles that changed since
// last saved and are due: the profile's slot rolled over (a quarter of an
// hour ended and was learned) or ProfileWriteInterval passed since the last
// save (force: now, e.g. on shutdown). The API thus sees a few writes an hour
// per service at most (an hour of the profiles' time, Config.ProfileClock:
// a demo's faster clock writes more often). Report each one saved with ProfileSaved.
func (p *Planner) ProfilesDue(now time.Time, force bool) []ProfileWrite {
	var out []ProfileWrite
	clock := p.cfg.ProfileClock
	slot := clock.At(now).Truncate(demand.SlotLength)
	for key, svc := range p.services {
		if !svc.declared || !svc.loaded {
			continue
		}
		slotChanged := !svc.savedAt.IsZero() && slot != clock.At(svc.savedAt).Truncate(demand.SlotLength)
		if !force && !slotChanged && now.Sub(svc.savedAt) < p.cfg.ProfileWriteInterval {
			continue
		}
		raw, err := json.Marshal(svc.profile)
		if err != nil || string(raw) == svc.savedJSON {
			continue
		}
		out = append(out, ProfileWrite{Key: key, JSON: string(raw)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// ProfileSaved records that a profile ProfilesDue offered was saved at now.
func (p *Planner) ProfileSaved(w ProfileWrite, now time.Time) {
	if svc := p.services[w.Key]; svc != nil {
		svc.savedAt, svc.savedJSON = now, w.JSON
	}
}
