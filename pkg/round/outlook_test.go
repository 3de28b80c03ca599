package round

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/gleaner-dev/gleaner/pkg/demand"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
)

// The outlook follows the learned profile: a service that peaks at 15:00
// keeps room for two more replicas in the hours that touch it, and the
// cautious band never lends more than the profile's.
func TestOutlookFollowsTheProfile(t *testing.T) {
	nodes := []harvest.Node{
		{Name: "n1", InPool: true, Schedulable: true, AllocatableGPUs: 8, ServingGPUs: 4, HostsInference: true},
		{Name: "n2", InPool: true, Schedulable: true, AllocatableGPUs: 8},
	}
	peak := t0.Add(5 * time.Hour) // 15:00
	stored := hourlyProfile(map[time.Time]float64{peak: 40})
	obs := Observation{Now: t0, Nodes: nodes, Published: map[string]int64{},
		Services: []Service{{Key: "serving/chat", Declared: true, StoredProfile: stored, Replicas: replicas(1, 10, 0),
			Settings: demand.Settings{TargetLoad: 16}}}}
	p := New(Config{OpenAfter: 0, Margin: -1})
	d := p.Plan(obs)
	out := p.Outlook(d, 8*time.Hour, time.Hour)
	if len(out) != 8 {
		t.Fatalf("%d points, want 8", len(out))
	}
	for i, pt := range out {
		// From 14:00 the step's window reaches 15:00 (three replicas of 4
		// GPUs for 40 requests); from 16:00 it is past.
		near := i == 4 || i == 5
		wantLendable, wantInference := int64(12), int64(4)
		if near {
			wantLendable, wantInference = 4, 12
		}
		if !pt.Time.Equal(t0.Add(time.Duration(i) * time.Hour)) {
			t.Errorf("point %d at %v", i, pt.Time)
		}
		if pt.LendableHigh != wantLendable || pt.ServingGPUs != wantInference {
			t.Errorf("%s: lendable %d, inference %d; want %d and %d", pt.Time.Format("15:04"), pt.LendableHigh, pt.ServingGPUs, wantLendable, wantInference)
		}
		if pt.LendableLow > pt.LendableHigh {
			t.Errorf("%s: cautious %d above expected %d", pt.Time.Format("15:04"), pt.LendableLow, pt.LendableHigh)
		}
	}
	if p.Outlook(d, 0, time.Hour) != nil || p.Outlook(d, time.Hour, 0) != nil {
		t.Error("an empty span or step gave points")
	}
}

// hourlyProfile is a stored profile learned by hour (version 1, read into
// the hours' slots) with each hour that holds one of at a peak, over two
// weeks.
func hourlyProfile(peaks map[time.Time]float64) string {
	hours := map[string]any{}
	for at, peak := range peaks {
		hour := demand.SlotOfWeek(at) / int(time.Hour/demand.SlotLength)
		hours[fmt.Sprint(hour)] = map[string]any{"peak": peak, "weeks": 2}
	}
	raw, err := json.Marshal(map[string]any{"v": 1, "hours": hours})
	if err != nil {
		panic(err)
	}
	return string(raw)
}

// On a demo's faster clock (Config.ProfileClock), a stored profile is read
// in the profiles' time, and the outlook's span and step are theirs: at 60
// times the wall clock, the day's 15:00 peak is 5 wall minutes away, and
// an outlook of 8 hours in steps of an hour covers 8 wall minutes.
func TestOutlookOnAFasterClock(t *testing.T) {
	nodes := []harvest.Node{
		{Name: "n1", InPool: true, Schedulable: true, AllocatableGPUs: 8, ServingGPUs: 4, HostsInference: true},
		{Name: "n2", InPool: true, Schedulable: true, AllocatableGPUs: 8},
	}
	stored := hourlyProfile(map[time.Time]float64{t0.Add(5 * time.Hour): 40})
	obs := Observation{Now: t0, Nodes: nodes, Published: map[string]int64{},
		Services: []Service{{Key: "serving/chat", Declared: true, StoredProfile: stored, Replicas: replicas(1, 10, 0),
			Settings: demand.Settings{TargetLoad: 16}}}}
	// The demo sets its horizons in wall time too: an hour of its day.
	p := New(Config{OpenAfter: 0, Margin: -1, Horizon: time.Minute, ReclaimLead: 30 * time.Second, ProfileClock: demand.Clock{Origin: t0, Scale: 60}})
	d := p.Plan(obs)
	if got := d.Services[0].Forecast.Profile; got != 0 {
		t.Errorf("at 10:00 of the profiles' day the horizon's hour reads a profile peak of %g, want none before 15:00", got)
	}
	out := p.Outlook(d, 8*time.Hour, time.Hour)
	if len(out) != 8 {
		t.Fatalf("%d points, want 8", len(out))
	}
	for i, pt := range out {
		want := int64(4)
		if i == 4 || i == 5 {
			want = 12 // 14:00 and 15:00 reach the peak, as on the wall clock's day
		}
		if !pt.Time.Equal(t0.Add(time.Duration(i) * time.Minute)) {
			t.Errorf("point %d at %v, want %d wall minutes on", i, pt.Time, i)
		}
		if pt.ServingGPUs != want {
			t.Errorf("point %d: inference %d GPUs, want %d", i, pt.ServingGPUs, want)
		}
	}
	// A round 4 wall minutes on (14:00 of the profiles' day) keeps room for
	// the peak its horizon's hour reaches, where the wall clock's 10:04 would not.
	obs.Now = t0.Add(4 * time.Minute)
	d = p.Plan(obs)
	if got := d.Services[0].Forecast.Profile; got != 40 {
		t.Errorf("the forecast 4 wall minutes on reads a profile peak of %g, want 40 (the 15:00 peak)", got)
	}
}
