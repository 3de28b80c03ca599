// Package pluginargs holds the argument fields Gleaner's scheduler plugins share
// and the decoding every plugin's args go through.
package pluginargs

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/plugins/pluginmetrics"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
)

// BestEffort says which pods are best-effort and which resource they borrow.
// Plugins embed it inline in their args.
type BestEffort struct {
	// BestEffortPriorityThreshold: pods with a lower priority are best-effort. Default 0.
	BestEffortPriorityThreshold *int32 `json:"bestEffortPriorityThreshold,omitempty"`
	// GPUResourceName is the extended resource lent. Default nvidia.com/gpu.
	GPUResourceName string `json:"gpuResourceName,omitempty"`
}

// Default fills unset fields.
func (b *BestEffort) Default() {
	if b.BestEffortPriorityThreshold == nil {
		t := api.DefaultBestEffortPriorityThreshold
		b.BestEffortPriorityThreshold = &t
	}
	if b.GPUResourceName == "" {
		b.GPUResourceName = string(api.GPUResource)
	}
}

// Validate checks defaulted fields.
func (b *BestEffort) Validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	name := v1.ResourceName(b.GPUResourceName)
	if msgs := validation.IsQualifiedName(b.GPUResourceName); len(msgs) > 0 || name == v1.ResourceCPU || name == v1.ResourceMemory {
		errs = append(errs, field.Invalid(path.Child("gpuResourceName"), b.GPUResourceName, "must be an extended resource name such as nvidia.com/gpu"))
	}
	return errs
}

// Threshold is the defaulted priority threshold.
func (b *BestEffort) Threshold() int32 { return *b.BestEffortPriorityThreshold }

// Resource is the defaulted GPU resource name.
func (b *BestEffort) Resource() v1.ResourceName { return v1.ResourceName(b.GPUResourceName) }

// Args is what every plugin's args type implements.
type Args interface {
	Default()
	Validate(path *field.Path) field.ErrorList
}

// Decode turns a profile's raw plugin args (nil when none are given) into
// defaulted, validated args. Decoding is strict: a misspelt or unknown field is
// an error, not silently a default. Errors name the plugin and the offending
// field, so a bad configuration stops the scheduler at start with a clear message.
func Decode(plugin string, obj runtime.Object, into Args) error {
	if raw, ok := obj.(*runtime.Unknown); ok && raw.Raw != nil && (raw.ContentType == "" || raw.ContentType == runtime.ContentTypeJSON) {
		strictErrs, err := sigsjson.UnmarshalStrict(raw.Raw, into)
		if err == nil && len(strictErrs) > 0 {
			err = errors.Join(strictErrs...)
		}
		if err != nil {
			return fmt.Errorf("decoding %s args: %w", plugin, err)
		}
	} else if obj != nil {
		if err := frameworkruntime.DecodeInto(obj, into); err != nil {
			return fmt.Errorf("decoding %s args: %w", plugin, err)
		}
	}
	into.Default()
	if errs := into.Validate(field.NewPath("pluginConfig").Key(plugin).Child("args")); len(errs) > 0 {
		return errs.ToAggregate()
	}
	return nil
}

// Load is the first step of every Gleaner plugin's New: the plugin's args,
// decoded as Decode does, and the plugins' metrics registered.
func Load[T any, P interface {
	*T
	Args
}](plugin string, obj runtime.Object) (T, error) {
	var args T
	if err := Decode(plugin, obj, P(&args)); err != nil {
		return args, err
	}
	pluginmetrics.Register()
	return args, nil
}

// gleanerPlugins are the plugins whose args carry BestEffort.
var gleanerPlugins = []string{"GPUHarvest", "ReclaimPreemption"}

// CheckProfiles reports where a KubeSchedulerConfiguration (YAML or JSON, as
// gleaner-scheduler reads it) disagrees with want about which pods are
// best-effort and which resource they borrow, or, in ReclaimPreemption's
// maxGraceSeconds, with maxGrace, the longest grace period a reclaim gives.
// Every profile that enables or configures GPUHarvest or ReclaimPreemption is
// checked, with the scheduler's defaults for args it leaves out. A
// controller and a scheduler that disagree would lend and reclaim different
// pods' GPUs, or count the same terminating pod's GPUs as returning and as
// owed, so gleaner-controller refuses to run on an error from here.
func CheckProfiles(config []byte, want BestEffort, maxGrace time.Duration) error {
	want.Default()
	var cfg struct {
		Kind     string `json:"kind"`
		Profiles []struct {
			SchedulerName string                                               `json:"schedulerName"`
			Plugins       map[string]struct{ Enabled []struct{ Name string } } `json:"plugins"`
			PluginConfig  []struct {
				Name string          `json:"name"`
				Args json.RawMessage `json:"args"`
			} `json:"pluginConfig"`
		} `json:"profiles"`
	}
	if err := yaml.Unmarshal(config, &cfg); err != nil {
		return fmt.Errorf("reading the scheduler's configuration: %w", err)
	}
	if cfg.Kind != "KubeSchedulerConfiguration" {
		return fmt.Errorf("the scheduler's configuration is a %q, not a KubeSchedulerConfiguration", cfg.Kind)
	}
	var errs []error
	checked := 0 // plugins checked over every profile
	for _, p := range cfg.Profiles {
		enabled := map[string]bool{}
		for _, point := range p.Plugins {
			for _, e := range point.Enabled {
				enabled[e.Name] = true
			}
		}
		for _, plugin := range gleanerPlugins {
			var got struct {
				BestEffort
				MaxGraceSeconds *int32 `json:"maxGraceSeconds,omitempty"`
			}
			uses := enabled[plugin]
			for _, pc := range p.PluginConfig {
				if pc.Name != plugin || len(pc.Args) == 0 {
					continue
				}
				uses = true
				if err := json.Unmarshal(pc.Args, &got); err != nil {
					errs = append(errs, fmt.Errorf("profile %s, %s args: %w", p.SchedulerName, plugin, err))
				}
			}
			if !uses {
				continue
			}
			checked++
			got.Default()
			if got.Threshold() != want.Threshold() {
				errs = append(errs, fmt.Errorf("profile %s, %s: bestEffortPriorityThreshold %d, but %d here", p.SchedulerName, plugin, got.Threshold(), want.Threshold()))
			}
			if got.Resource() != want.Resource() {
				errs = append(errs, fmt.Errorf("profile %s, %s: gpuResourceName %s, but %s here", p.SchedulerName, plugin, got.Resource(), want.Resource()))
			}
			if plugin == "ReclaimPreemption" {
				grace := reclaim.DefaultMaxGrace
				if got.MaxGraceSeconds != nil {
					grace = time.Duration(*got.MaxGraceSeconds) * time.Second
				}
				if grace != maxGrace {
					errs = append(errs, fmt.Errorf("profile %s, %s: maxGraceSeconds %d, but a reclaim grace of %v here", p.SchedulerName, plugin, int64(grace/time.Second), maxGrace))
				}
			}
		}
	}
	if len(errs) == 0 && checked == 0 {
		errs = append(errs, errors.New("no profile uses GPUHarvest or ReclaimPreemption"))
	}
	return errors.Join(errs...)
}
