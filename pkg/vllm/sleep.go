package vllm

import (
	"fmt"
	"maps"
	"math"
	"slices"
)

// engineSleep is what one engine's sleep series say.
type engineSleep struct {
	// states by sleep_state label value; "" holds a series without the label.
	states   map[string]float64
	level    float64
	hasLevel bool
}

// sleep reads vLLM's sleep mode engine by engine:
//
//	asleep = awake == 0, or (without an awake series) weights_offloaded or discard_all == 1
//	       = vllm:engine_sleep_state == 1, for a series without a sleep_state label
//	level  = 1 with weights_offloaded, 2 with discard_all, else vllm:engine_sleep_level, else 0
//
// and returns how many engines report a state, how many of them sleep, and
// the deepest level among those. An engine with no state series (nothing,
// or only a level) reports none and reads as awake. Other sleep_state values
// are checked but do not decide anything.
//
// Values that are not 0 or 1 (levels not 0, 1 or 2), and series that
// contradict each other, are errors, so the replica reads as failing (busy),
// never as asleep: awake and a level both 1, both levels 1, a level gauge
// that disagrees with the state, one engine in both forms, or two series of
// one engine's state that differ.
func (e *exposition) sleep() (reported, sleeping, deepest int, err error) {
	states, levels := e.family(metricSleepState), e.family(metricSleepLevel)
	if states == nil && levels == nil {
		return 0, 0, 0, nil
	}
	engines := map[string]*engineSleep{}
	of := func(s *series) *engineSleep {
		engine := string(labelValue(s.labels, labelEngine))
		if engines[engine] == nil {
			engines[engine] = &engineSleep{states: map[string]float64{}}
		}
		return engines[engine]
	}
	if states != nil {
		for i := range states.series {
			s := &states.series[i]
			v, err := sampleValue(metricSleepState, states, s)
			if err != nil {
				return 0, 0, 0, err
			}
			if v != 0 && v != 1 {
				return 0, 0, 0, fmt.Errorf("vLLM metric %s%s has value %v, want 0 or 1", metricSleepState, formatLabels(s.labels), v)
			}
			es, state := of(s), string(labelValue(s.labels, labelSleepState))
			if old, ok := es.states[state]; ok && old != v {
				return 0, 0, 0, fmt.Errorf("vLLM metric %s%s has value %v, but another series of the same engine and state has %v",
					metricSleepState, formatLabels(s.labels), v, old)
			}
			es.states[state] = v
			e.note(s)
		}
	}
	if levels != nil {
		for i := range levels.series {
			s := &levels.series[i]
			v, err := sampleValue(metricSleepLevel, levels, s)
			if err != nil {
				return 0, 0, 0, err
			}
			if v != math.Trunc(v) || v > 2 {
				return 0, 0, 0, fmt.Errorf("vLLM metric %s%s has value %v, want 0, 1 or 2", metricSleepLevel, formatLabels(s.labels), v)
			}
			es := of(s)
			if es.hasLevel && es.level != v {
				return 0, 0, 0, fmt.Errorf("vLLM metric %s%s has value %v, but another series of the same engine has %v",
					metricSleepLevel, formatLabels(s.labels), v, es.level)
			}
			es.level, es.hasLevel = v, true
			e.note(s)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(engines)) {
		known, asleep, level, err := engines[name].read()
		if err != nil {
			where := metricSleepState
			if name != "" {
				where += fmt.Sprintf("{engine=%q}", name)
			}
			return 0, 0, 0, fmt.Errorf("vLLM metric %s: %w", where, err)
		}
		if known {
			reported++
			if asleep {
				sleeping++
				deepest = max(deepest, level)
			}
		}
	}
	return reported, sleeping, deepest, nil
}

// read decides one engine's state (see sleep); known is false when no
// series states it.
func (es *engineSleep) read() (known, asleep bool, level int, err error) {
	plain, hasPlain := es.states[""]
	switch {
	case hasPlain && len(es.states) > 1:
		return false, false, 0, fmt.Errorf("series with and without a %s label; which one holds is unknown", labelSleepState)
	case hasPlain:
		known, asleep = true, plain == 1
	default:
		awake, hasAwake := es.states[sleepAwake]
		offloaded, discarded := es.states[sleepWeightsOffloaded] == 1, es.states[sleepDiscardAll] == 1
		switch {
		case offloaded && discarded:
			return false, false, 0, fmt.Errorf("both %s and %s are 1; an engine sleeps at one level", sleepWeightsOffloaded, sleepDiscardAll)
		case hasAwake && awake == 1 && (offloaded || discarded):
			return false, false, 0, fmt.Errorf("%s is 1, and so is a sleep level; an engine is awake or asleep, not both", sleepAwake)
		}
		known = hasAwake || offloaded || discarded
		asleep = known && !(hasAwake && awake == 1)
		switch {
		case offloaded:
			level = 1
		case discarded:
			level = 2
		}
	}
	if !known || !es.hasLevel {
		return known, asleep, level, nil
	}
	switch gauge := int(es.level); {
	case !asleep && gauge != 0:
		return false, false, 0, fmt.Errorf("the engine is awake, but %s is %d", metricSleepLevel, gauge)
	case asleep && level != 0 && gauge != level:
		return false, false, 0, fmt.Errorf("the engine sleeps at level %d, but %s is %d", level, metricSleepLevel, gauge)
	case asleep:
		level = gauge
	}
	return known, asleep, level, nil
}
