package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
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
	"github.com/gleaner-dev/gleaner/pkg/ledger"
	"github.com/gleaner-dev/gleaner/pkg/round"
)

// Event reasons on Deployments.
const (
	ReasonInvalidAnnotation = "GleanerInvalidAnnotation"
	ReasonScaled            = "GleanerScaled"
)

// deploymentIndex finds the inference Deployment serving a service
// (namespace/service): the one whose pod template carries
// gleaner.dev/service=service, else the one of that name whose template
// carries no such label, as the metrics informer names services. It is built
// once a round: a round looks up every service, and a scan of every
// Deployment for each was quadratic in the fleet's services.
type deploymentIndex struct {
	byLabel, byName map[string]*appsv1.Deployment
}

func indexDeployments(deployments []*appsv1.Deployment) deploymentIndex {
	x := deploymentIndex{byLabel: map[string]*appsv1.Deployment{}, byName: map[string]*appsv1.Deployment{}}
	for _, d := range deployments {
		if svc, ok := d.Spec.Template.Labels[api.LabelService]; ok {
			if key := d.Namespace + "/" + svc; x.byLabel[key] == nil {
				x.byLabel[key] = d
			}
			continue
		}
		x.byName[d.Namespace+"/"+d.Name] = d
	}
	return x
}

func (x deploymentIndex) serving(key string) *appsv1.Deployment {
	if d := x.byLabel[key]; d != nil {
		return d
	}
	return x.byName[key]
}

// serviceOf names the service a Deployment's pods serve.
func serviceOf(d *appsv1.Deployment) string {
	if s := d.Spec.Template.Labels[api.LabelService]; s != "" {
		return s
	}
	return d.Name
}

// observeServices groups the informer's inference pods by service, adds
// inference Deployments scaled to zero, and reads each service's settings,
// stored profile and autoscaling from its Deployment. It remembers each
// service's Deployment for acting on the decision, and returns each
// service's replicas and those pending (for its owner's report), and its
// annotation problems.
//
// claimed holds every pod with ResourceClaims, and the GPUs they hold.
func (c *Controller) observeServices(ctx context.Context, now time.Time, largestNodeGPUs int64, claimed map[types.NamespacedName]int64) ([]round.Service, []ledger.ServiceNow, map[string][]string) {
	deployments, err := c.deployments.List(labels.Everything())
	if err != nil {
		klog.FromContext(ctx).Error(err, "Listing Deployments; planning on pod load alone")
	}
	replicas := map[string][]demand.Replica{}
	pendingSince := map[string]time.Time{}
	byClaims := map[string]bool{}
	optedIn := c.inferenceNamespaces()
	for _, pl := range c.load.Snapshot() {
		if !optedIn(pl.Namespace) {
			continue
		}
		key := pl.Namespace + "/" + pl.Service
		if since, ok := pendingSince[key]; pl.NodeName == "" && (!ok || pl.Created.Before(since)) {
			pendingSince[key] = pl.Created
		}
		// A replica takes its GPUs through claims when they hold some, or
		// (pending, not allocated yet) when it has claims and requests none.
		held, hasClaims := claimed[types.NamespacedName{Namespace: pl.Namespace, Name: pl.Name}]
		if held > 0 || (hasClaims && pl.GPUs == 0) {
			byClaims[key] = true
		}
		replicas[key] = append(replicas[key], demand.Replica{
			Pending: pl.NodeName == "",
			Known:   pl.Fresh,
			// Never scraped yet, and not for longer than a start may take.
			Starting: !pl.Fresh && pl.ScrapedAt.IsZero() && pl.LastError == nil && now.Sub(pl.Created) < c.cfg.StartupDeadline,
			Running:  pl.Metrics.Running,
			Waiting:  pl.Metrics.Waiting,
			KVCache:  pl.Metrics.KVCacheUsage,
			// A replica's GPUs: its request, and what its DRA claims hold.
			GPUs:   pl.GPUs + held,
			Asleep: pl.Metrics.Asleep(),
		})
	}
	for _, d := range deployments {
		if d.Spec.Template.Labels[api.LabelRole] == api.RoleInference && optedIn(d.Namespace) {
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

	defaults := demand.Defaults{TargetLoad: c.cfg.TargetLoad, TargetKVCache: c.cfg.TargetKVCache}
	services := make([]round.Service, 0, len(keys))
	summaries := make([]ledger.ServiceNow, 0, len(keys))
	problems := map[string][]string{}
	clear(c.served)
	index := indexDeployments(deployments)
	for _, key := range keys {
		ns, name, _ := strings.Cut(key, "/")
		sn := ledger.ServiceNow{Namespace: ns, Name: name, Replicas: int32(len(replicas[key])), PendingSince: pendingSince[key]}
		for _, r := range replicas[key] {
			if r.Pending {
				sn.Pending++
			}
		}
		summaries = append(summaries, sn)
		s := round.Service{Key: key, Replicas: replicas[key], Settings: demand.Settings{TargetLoad: defaults.TargetLoad}, DRA: byClaims[key]}
		if d := index.serving(key); d != nil {
			templateGPUs := api.PodGPUs(&v1.Pod{Spec: d.Spec.Template.Spec}, c.cfg.GPUResource)
			s.DRA = s.DRA || (len(d.Spec.Template.Spec.ResourceClaims) > 0 && templateGPUs == 0)
			c.served[key] = d
			s.Settings, problems[key] = demand.ParseSettings(d.Annotations, templateGPUs, largestNodeGPUs, defaults)
			s.Declared = true
			s.StoredProfile = d.Annotations[api.AnnotationDemandProfile]
			if autoscale.Enabled(d.Annotations) {
				lim, limitProblems := autoscale.ParseLimits(d.Annotations, c.cfg.Policy.Autoscale.MaxReplicas)
				problems[key] = append(problems[key], limitProblems...)
				if !c.cfg.DisableAutoscale && d.Spec.Replicas != nil {
					s.Autoscale = &round.Autoscaled{Replicas: int(*d.Spec.Replicas), Limits: lim}
				}
			}
		}
		services = append(services, s)
	}
	return services, summaries, problems
}

// inferenceNamespaces says which namespaces the admin opted in as inference:
// those listed in Metrics.Namespaces when any are, else those whose labels
// match InferenceNamespaceSelector; never one labelled
// gleaner.dev/inference=false, which is opting out (the admission policies
// read the same). A namespace that cannot be read is not.
func (c *Controller) inferenceNamespaces() func(string) bool {
	if listed := c.cfg.Metrics.Namespaces; len(listed) > 0 && !slices.Contains(listed, metav1.NamespaceAll) {
		return func(name string) bool {
			if !slices.Contains(listed, name) {
				return false
			}
			ns, err := c.namespaces.Get(name)
			return err == nil && ns.Labels[api.LabelInferenceNamespace] != "false"
		}
	}
	return func(name string) bool {
		ns, err := c.namespaces.Get(name)
		return err == nil && c.cfg.InferenceNamespaceSelector.Matches(labels.Set(ns.Labels))
	}
}

// report records an Event on the service's Deployment when its problems
// change, so a bad value is reported once, not every round.
func (c *Controller) report(key string, problems []string) {
	joined := strings.Join(problems, "; ")
	if joined == c.reported[key] {
		return
	}
	c.reported[key] = joined
	d := c.served[key]
	if joined == "" || d == nil {
		return
	}
	invalidAnnotations.Inc()
	c.recorder.Eventf(d, v1.EventTypeWarning, ReasonInvalidAnnotation, "%s", joined)
}

// saveProfiles writes the learned profiles the round found due to their
// services' Deployments.
func (c *Controller) saveProfiles(ctx context.Context, now time.Time, writes []round.ProfileWrite) {
	for _, w := range writes {
		d := c.served[w.Key]
		if d == nil {
			continue
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{api.AnnotationDemandProfile: w.JSON}}})
		if _, err := c.client.AppsV1().Deployments(d.Namespace).Patch(ctx, d.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: Component}); err != nil {
			profileWrites.WithLabelValues("error").Inc()
			klog.FromContext(ctx).Error(err, "Saving demand profile", "deployment", klog.KObj(d))
			continue
		}
		profileWrites.WithLabelValues("written").Inc()
		c.planner.ProfileSaved(w, now)
	}
}

// scale applies the autoscaler's decisions through the Deployments' scale subresource.
func (c *Controller) scale(ctx context.Context, changes []round.Scale) []error {
	var errs []error
	for _, sc := range changes {
		d := c.served[sc.Key]
		if d == nil {
			continue
		}
		to := sc.Decision.Replicas
		direction := "up"
		if to < sc.From {
			direction = "down"
		}
		scale := &autoscalingv1.Scale{
			ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: d.Namespace},
			Spec:       autoscalingv1.ScaleSpec{Replicas: int32(to)},
		}
		if _, err := c.client.AppsV1().Deployments(d.Namespace).UpdateScale(ctx, d.Name, scale, metav1.UpdateOptions{FieldManager: Component}); err != nil {
			autoscaleOps.WithLabelValues(direction, "error").Inc()
			errs = append(errs, fmt.Errorf("scaling deployment %s/%s from %d to %d: %w", d.Namespace, d.Name, sc.From, to, err))
			continue
		}
		autoscaleOps.WithLabelValues(direction, "scaled").Inc()
		c.recorder.Eventf(d, v1.EventTypeNormal, ReasonScaled, "Scaled from %d to %d replicas: %s", sc.From, to, sc.Decision.Reason)
		klog.FromContext(ctx).Info("Scaled inference Deployment", "deployment", klog.KObj(d), "from", sc.From, "to", to, "panic", sc.Decision.Panic, "reason", sc.Decision.Reason)
	}
	return errs
}
