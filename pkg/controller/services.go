package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/autoscale"
	"github.com/gleaner-dev/gleaner/pkg/demand"
)

// Event reasons on Deployments.
const (
	ReasonInvalidAnnotation = "GleanerInvalidAnnotation"
	ReasonScaled            = "GleanerScaled"
)

// service is one inference service as the controller tracks it across rounds.
type service struct {
	key        string // namespace/name
	deployment *appsv1.Deployment
	trend      demand.Trend
	profile    demand.Profile
	// loaded: the profile was read from the Deployment (or there was none to read).
	loaded bool
	// writtenAt / writtenJSON: the last profile written to the API.
	writtenAt   time.Time
	writtenJSON string
	scaler      *autoscale.Scaler
	// reported is the last set of annotation problems reported as an Event.
	reported string
}

// serviceRound is one service's demand in one planning round.
type serviceRound struct {
	svc   *service
	input demand.Service
	need  demand.Need
	// soon is need over the reclaim lead: what must be evicted for now.
	soon     demand.Need
	forecast demand.Forecast
}

// deploymentFor finds the inference Deployment serving key (namespace/service):
// the one whose pod template carries gleaner.dev/service=service, else the one
// named service, as the metrics informer names services.
func deploymentFor(deployments []*appsv1.Deployment, namespace, name string) *appsv1.Deployment {
	var byName *appsv1.Deployment
	for _, d := range deployments {
		if d.Namespace != namespace {
			continue
		}
		if svc, ok := d.Spec.Template.Labels[api.LabelService]; ok {
			if svc == name {
				return d
			}
			continue
		}
		if d.Name == name {
			byName = d
		}
	}
	return byName
}

// serviceOf names the service a Deployment's pods serve.
func serviceOf(d *appsv1.Deployment) string {
	if s := d.Spec.Template.Labels[api.LabelService]; s != "" {
		return s
	}
	return d.Name
}

// assessServices groups the informer's inference pods by service, adds
// inference Deployments scaled to zero, reads each service's settings from its
// Deployment, and asks the demand model what each needs now and over the horizon.
func (c *Controller) assessServices(ctx context.Context, now time.Time, largestNodeGPUs int64) []serviceRound {
	deployments, err := c.deployments.List(labels.Everything())
	if err != nil {
		klog.FromContext(ctx).Error(err, "Listing Deployments; planning on pod load alone")
	}
	replicas := map[string][]demand.Replica{}
	for _, pl := range c.load.Snapshot() {
		key := pl.Namespace + "/" + pl.Service
		replicas[key] = append(replicas[key], demand.Replica{
			Known:    pl.Fresh,
			Starting: !pl.Fresh && pl.ScrapedAt.IsZero() && pl.LastError == nil,
			Running:  pl.Metrics.Running,
			Waiting:  pl.Metrics.Waiting,
			KVCache:  pl.Metrics.KVCacheUsage,
			GPUs:     pl.GPUs,
		})
	}
	for _, d := range deployments {
		if d.Spec.Template.Labels[api.LabelRole] == api.RoleInference {
			key := d.Namespace + "/" + serviceOf(d)
			if _, ok := replicas[key]; !ok {
				replicas[key] = nil
			}
		}
	}
	keys := make([]string, 0, len(replicas))
	for k := range replicas {
		keys = append(keys, k)
	}
	sort.Strings(keys)

	rounds := make([]serviceRound, 0, len(keys))
	for _, key := range keys {
		ns, name, _ := strings.Cut(key, "/")
		svc := c.services[key]
		if svc == nil {
			svc = &service{key: key, trend: demand.Trend{Window: c.cfg.TrendWindow}, scaler: autoscale.New(c.cfg.Autoscale)}
			c.services[key] = svc
		}
		svc.deployment = deploymentFor(deployments, ns, name)
		in := demand.Service{Name: key, Replicas: replicas[key], Margin: c.cfg.margin()}
		defaults := demand.Defaults{TargetLoad: c.cfg.TargetLoad, TargetKVCache: c.cfg.TargetKVCache}
		var problems []string
		if d := svc.deployment; d != nil {
			templateGPUs := api.PodGPUs(&v1.Pod{Spec: d.Spec.Template.Spec}, c.cfg.GPUResource)
			var settings demand.Settings
			settings, problems = demand.ParseSettings(d.Annotations, templateGPUs, largestNodeGPUs, defaults)
			in.Metric, in.TargetLoad, in.GPUsPerReplica = settings.Metric, settings.TargetLoad, settings.GPUsPerReplica
			if autoscale.Enabled(d.Annotations) {
				_, limitProblems := autoscale.ParseLimits(d.Annotations, c.cfg.Autoscale.MaxReplicas)
				problems = append(problems, limitProblems...)
			}
			if !svc.loaded {
				problems = append(problems, c.loadProfile(svc)...)
			}
			c.report(svc, problems)
		} else {
			in.TargetLoad = defaults.TargetLoad
			svc.loaded = true // nothing to read it from: the profile lives in memory only
		}
		now0 := demand.Assess(in)
		if now0.Complete && (len(in.Replicas) > 0 || svc.deployment != nil) {
			svc.trend.Add(demand.Sample{At: now, Load: now0.Load})
			svc.profile.Observe(now, now0.Load)
		}
		f := demand.PeakForecast(now, now0.Load, c.cfg.Horizon, &svc.trend, &svc.profile)
		in.ForecastLoad = f.Peak
		need := demand.Assess(in)
		soon := need
		if c.cfg.ReclaimLead < c.cfg.Horizon {
			lead := in
			lead.ForecastLoad = demand.PeakForecast(now, now0.Load, c.cfg.ReclaimLead, &svc.trend, &svc.profile).Peak
			soon = demand.Assess(lead)
		}
		forecastPeakLoad.WithLabelValues(ns, name).Set(f.Peak)
		rounds = append(rounds, serviceRound{svc: svc, input: in, need: need, soon: soon, forecast: f})
	}
	for key := range c.services {
		if _, ok := replicas[key]; !ok {
			ns, name, _ := strings.Cut(key, "/")
			forecastPeakLoad.DeleteLabelValues(ns, name)
			delete(c.services, key)
		}
	}
	return rounds
}

// loadProfile reads a service's learned profile from its Deployment once.
func (c *Controller) loadProfile(svc *service) []string {
	svc.loaded = true
	raw, ok := svc.deployment.Annotations[api.AnnotationDemandProfile]
	if !ok {
		return nil
	}
	var p demand.Profile
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		return []string{fmt.Sprintf("%s is unreadable (%v); learning the profile afresh", api.AnnotationDemandProfile, err)}
	}
	svc.profile = p
	svc.writtenJSON = raw
	return nil
}

// report records an Event on the service's Deployment when its annotation
// problems change, so a bad value is reported once, not every round.
func (c *Controller) report(svc *service, problems []string) {
	joined := strings.Join(problems, "; ")
	if joined == svc.reported {
		return
	}
	svc.reported = joined
	if joined == "" {
		return
	}
	invalidAnnotations.Inc()
	c.recorder.Eventf(svc.deployment, v1.EventTypeWarning, ReasonInvalidAnnotation, "%s", joined)
}

// saveProfiles writes each service's profile to its Deployment when it changed
// and either the hour rolled over or ProfileWriteInterval passed (force: on
// shutdown), so the API sees a few writes an hour per service at most.
func (c *Controller) saveProfiles(ctx context.Context, now time.Time, force bool) {
	for _, svc := range c.services {
		if svc.deployment == nil || !svc.loaded {
			continue
		}
		raw, err := json.Marshal(svc.profile)
		if err != nil || string(raw) == svc.writtenJSON {
			continue
		}
		hourChanged := !svc.writtenAt.IsZero() && now.Truncate(time.Hour) != svc.writtenAt.Truncate(time.Hour)
		if !force && !hourChanged && now.Sub(svc.writtenAt) < c.cfg.ProfileWriteInterval {
			continue
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{api.AnnotationDemandProfile: string(raw)}}})
		d := svc.deployment
		if _, err := c.client.AppsV1().Deployments(d.Namespace).Patch(ctx, d.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: Component}); err != nil {
			profileWrites.WithLabelValues("error").Inc()
			klog.FromContext(ctx).Error(err, "Saving demand profile", "deployment", klog.KObj(d))
			continue
		}
		profileWrites.WithLabelValues("written").Inc()
		svc.writtenAt, svc.writtenJSON = now, string(raw)
	}
}

// autoscaleServices scales opted-in Deployments through their scale subresource.
func (c *Controller) autoscaleServices(ctx context.Context, now time.Time, rounds []serviceRound) []error {
	var errs []error
	for _, r := range rounds {
		d := r.svc.deployment
		if d == nil || !autoscale.Enabled(d.Annotations) || d.Spec.Replicas == nil {
			continue
		}
		r.svc.scaler.Observe(now, r.need.Load, r.need.Complete)
		lim, _ := autoscale.ParseLimits(d.Annotations, c.cfg.Autoscale.MaxReplicas)
		current := int(*d.Spec.Replicas)
		floor := int(math.Ceil(r.forecast.Peak/r.need.Target - 1e-9))
		dec := r.svc.scaler.Desired(now, current, r.need.Target, floor, lim)
		if dec.Replicas == current {
			continue
		}
		direction := "up"
		if dec.Replicas < current {
			direction = "down"
		}
		scale := &autoscalingv1.Scale{
			ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: d.Namespace, ResourceVersion: ""},
			Spec:       autoscalingv1.ScaleSpec{Replicas: int32(dec.Replicas)},
		}
		if _, err := c.client.AppsV1().Deployments(d.Namespace).UpdateScale(ctx, d.Name, scale, metav1.UpdateOptions{FieldManager: Component}); err != nil {
			autoscaleOps.WithLabelValues(direction, "error").Inc()
			errs = append(errs, fmt.Errorf("scaling deployment %s/%s from %d to %d: %w", d.Namespace, d.Name, current, dec.Replicas, err))
			continue
		}
		autoscaleOps.WithLabelValues(direction, "scaled").Inc()
		c.recorder.Eventf(d, v1.EventTypeNormal, ReasonScaled, "Scaled from %d to %d replicas: %s", current, dec.Replicas, dec.Reason)
		klog.FromContext(ctx).Info("Scaled inference Deployment", "deployment", klog.KObj(d), "from", current, "to", dec.Replicas, "panic", dec.Panic, "reason", dec.Reason)
	}
	return errs
}
