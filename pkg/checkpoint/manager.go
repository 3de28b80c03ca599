package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"sort"
)

// Manager saves and finds checkpoints in a Store.
type Manager struct {
	store Store
	keep  int
}

// NewManager returns a Manager that keeps the newest keep checkpoints (at least
// one). Keeping more than one means a checkpoint found damaged on resume still
// leaves an older one to fall back to.
func NewManager(store Store, keep int) *Manager {
	return &Manager{store: store, keep: max(keep, 1)}
}

// Location names the store, for messages.
func (m *Manager) Location() string { return m.store.String() }

// Save stores c atomically, then deletes all but the newest keep checkpoints up
// to c, and any with a later step that does not read whole (torn or corrupt:
// left in place they would take the slots of good ones). A later one that
// reads whole stays: another writer on the same location got further. A
// failed clean-up is reported but the checkpoint is saved.
func (m *Manager) Save(ctx context.Context, c Checkpoint) error {
	if c.Step < 0 {
		return fmt.Errorf("checkpoint step %d is negative", c.Step)
	}
	if err := m.store.Put(ctx, Name(c.Step), Encode(c)); err != nil {
		return fmt.Errorf("saving checkpoint at step %d to %s: %w", c.Step, m.store, err)
	}
	steps, err := m.steps(ctx)
	if err != nil {
		return fmt.Errorf("checkpoint at step %d saved, but pruning old ones failed: %w", c.Step, err)
	}
	// A newer checkpoint that reads whole was written by a writer that got
	// further (an evicted pod's replacement, or the evicted pod's own last
	// save): it is not this writer's to delete. A newer one that does not read
	// (torn, corrupt) goes, as older ones beyond keep do.
	var errs []error
	kept := 0
	for _, s := range steps {
		if s > c.Step {
			var unreadable *unreadableError
			if _, err := m.load(ctx, s); !errors.As(err, &unreadable) {
				continue // whole, gone, or not readable now: not ours to delete
			}
		} else if kept < m.keep {
			kept++
			continue
		}
		if err := m.store.Delete(ctx, Name(s)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("checkpoint at step %d saved, but pruning old ones failed: %w", c.Step, err)
	}
	return nil
}

// Rejected is a checkpoint that was found but not loaded.
type Rejected struct {
	Name   string
	Reason error
}

// Latest returns the newest checkpoint that decodes and passes its checksum,
// or nil if there is none. Newer ones that fail (torn, corrupt, or named for a
// different step than they hold) are skipped and returned in rejected, so the
// caller can say why it resumed from an older one.
func (m *Manager) Latest(ctx context.Context) (latest *Checkpoint, rejected []Rejected, err error) {
	steps, err := m.steps(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, step := range steps {
		c, err := m.load(ctx, step)
		var unreadable *unreadableError
		switch {
		case errors.Is(err, ErrNotFound):
			continue // pruned between List and Get
		case errors.As(err, &unreadable):
			rejected = append(rejected, Rejected{Name: Name(step), Reason: unreadable.err})
			continue
		case err != nil:
			return nil, rejected, err
		}
		return c, rejected, nil
	}
	return nil, rejected, nil
}

// unreadableError: the checkpoint is there but does not decode whole.
type unreadableError struct{ err error }

func (e *unreadableError) Error() string { return e.err.Error() }

// load reads and checks the checkpoint of step: an error wrapping ErrNotFound
// when it is gone, an *unreadableError when it is torn, corrupt or named for
// another step.
func (m *Manager) load(ctx context.Context, step int64) (*Checkpoint, error) {
	name := Name(step)
	data, err := m.store.Get(ctx, name)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, err
		}
		return nil, fmt.Errorf("reading checkpoint %s from %s: %w", name, m.store, err)
	}
	c, err := Decode(data)
	if err == nil && c.Step != step {
		err = fmt.Errorf("holds step %d, not the step %d its name says", c.Step, step)
	}
	if err != nil {
		return nil, &unreadableError{err}
	}
	return &c, nil
}

// steps lists the checkpoint steps in the store, newest first.
func (m *Manager) steps(ctx context.Context) ([]int64, error) {
	names, err := m.store.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing checkpoints in %s: %w", m.store, err)
	}
	var steps []int64
	for _, n := range names {
		if s, ok := ParseName(n); ok {
			steps = append(steps, s)
		}
	}
	sort.Slice(steps, func(i, j int) bool { return steps[i] > steps[j] })
	return steps, nil
}
