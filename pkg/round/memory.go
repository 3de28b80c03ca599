package round

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gleaner-dev/gleaner/pkg/availability"
	"github.com/gleaner-dev/gleaner/pkg/demand"
)

// Memory is what a planner has learned of the pool that a restart must not
// forget, in the form it is kept (the controller keeps it in the GPUPool's
// status). Each service's own profile is kept with the service instead
// (ProfilesDue, Service.StoredProfile): it belongs to the service's owner,
// and a thousand of them would not fit in one object.
type Memory struct {
	// At is when it was taken; what is restored fades from then.
	At time.Time
	// PoolProfile is the pool's learned profile (JSON; empty: none).
	PoolProfile string
	// Survival and Recalibration are the availability forecasts' record.
	Survival      []availability.SurvivalCount
	Recalibration []availability.RecalibrationCount
}

// Memory is what the planner has learned of the pool, as of at.
func (p *Planner) Memory(at time.Time) Memory {
	m := Memory{At: at, Survival: p.avail.Survival(), Recalibration: p.avail.Recalibration()}
	if raw, err := json.Marshal(p.pool); err == nil {
		m.PoolProfile = string(raw)
	}
	return m
}

// Restore takes back what another planner's Memory kept, adding it to what
// this one learned since it started. Each part it cannot trust is refused
// whole and learned afresh; the error says which.
func (p *Planner) Restore(m Memory) error {
	var errs []error
	if err := p.avail.RestoreSurvival(m.Survival, m.At); err != nil {
		errs = append(errs, fmt.Errorf("%w; availability is learned afresh", err))
	}
	if err := p.avail.RestoreRecalibration(m.Recalibration, m.At); err != nil {
		errs = append(errs, fmt.Errorf("%w; it is learned afresh", err))
	}
	if err := p.restorePoolProfile(m.PoolProfile); err != nil {
		errs = append(errs, fmt.Errorf("%w; it is learned afresh", err))
	}
	return errors.Join(errs...)
}

// restorePoolProfile takes back a stored pool profile, refusing what it
// cannot trust (demand.PoolProfile.UnmarshalJSON) and bounding what it
// can change (demand.PoolProfile.Restore). Slots this planner learned
// itself since it started keep what it learned.
func (p *Planner) restorePoolProfile(stored string) error {
	if stored == "" {
		return nil
	}
	var in demand.PoolProfile
	if err := json.Unmarshal([]byte(stored), &in); err != nil {
		return fmt.Errorf("the stored pool profile is unreadable: %w", err)
	}
	p.pool.Restore(in)
	return nil
}

// Calibration is availability.Learner.Calibration of the planner's record.
func (p *Planner) Calibration() [len(availability.SurvivalHorizons)][][]availability.CalibrationBucket {
	return p.avail.Calibration()
}
