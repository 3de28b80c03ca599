package vllm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// Informer defaults, exported so command-line flags can show them.
const (
	DefaultInterval    = 5 * time.Second
	DefaultConcurrency = 16
)

// Options for the Informer. Zero values take the documented defaults.
type Options struct {
	Namespace     string              // "" = all namespaces
	LabelSelector string              // default api.LabelRole + "=" + api.RoleInference
	Interval      time.Duration       // scrape interval, default 5s
	Timeout       time.Duration       // per scrape, default 2s
	StaleAfter    time.Duration       // default 3*Interval: a pod whose last successful scrape is older is not Fresh
	Concurrency   int                 // max parallel scrapes, default 16
	GPUResource   corev1.ResourceName // default api.GPUResource
	Clock         clock.PassiveClock  // default real clock
}

func (o Options) withDefaults() Options {
	if o.LabelSelector == "" {
		o.LabelSelector = api.LabelRole + "=" + api.RoleInference
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultScrapeTimeout
	}
	if o.StaleAfter <= 0 {
		o.StaleAfter = 3 * o.Interval
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.GPUResource == "" {
		o.GPUResource = api.GPUResource
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return o
}

// PodLoad is the informer's view of one inference pod.
type PodLoad struct {
	Namespace, Name string
	Service         string // label api.LabelService, else the owning Deployment, else the owner's name, else the pod name
	NodeName        string
	GPUs            int64     // api.PodGPUs(pod, GPUResource)
	Metrics         Metrics   // last successful scrape
	ScrapedAt       time.Time // time of last successful scrape (zero if never)
	LastError       error     // last scrape error, nil if the last scrape succeeded (or none was attempted)
	// Fresh: the last scrape succeeded within StaleAfter and the pod is still
	// Running, Ready and has an IP. Consumers must treat a pod that is not Fresh as busy.
	Fresh bool
}

// Informer discovers inference pods with a client-go informer and scrapes
// their vLLM metrics on an interval.
type Informer struct {
	opts      Options
	selector  labels.Selector
	configErr error // reported by Run, since NewInformer cannot fail
	factory   informers.SharedInformerFactory
	informer  cache.SharedIndexInformer
	scraper   *Scraper
	started   atomic.Bool

	mu sync.Mutex
	// Keyed by UID so a pod recreated under the same name starts unscraped.
	results map[types.UID]*scrapeResult
}

type scrapeResult struct {
	metrics   Metrics
	scrapedAt time.Time
	err       error
}

// NewInformer builds an Informer; nothing runs until Run. Invalid options are
// reported by Run.
func NewInformer(client kubernetes.Interface, opts Options) *Informer {
	opts = opts.withDefaults()
	i := &Informer{
		opts:    opts,
		scraper: &Scraper{Timeout: opts.Timeout},
		results: map[types.UID]*scrapeResult{},
	}
	var err error
	if i.selector, err = labels.Parse(opts.LabelSelector); err != nil {
		i.configErr = fmt.Errorf("vllm informer: invalid LabelSelector %q: %w", opts.LabelSelector, err)
		i.selector = labels.Nothing()
	}
	if opts.StaleAfter < opts.Interval {
		i.configErr = errors.Join(i.configErr, fmt.Errorf(
			"vllm informer: StaleAfter (%s) is shorter than Interval (%s), so every pod would read stale between scrapes; use at least 2*Interval",
			opts.StaleAfter, opts.Interval))
	}
	i.factory = informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(opts.Namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = opts.LabelSelector }),
		informers.WithTransform(stripManagedFields),
	)
	i.informer = i.factory.Core().V1().Pods().Informer()
	return i
}

// stripManagedFields drops the largest part of a pod object that Gleaner never reads.
func stripManagedFields(obj any) (any, error) {
	if pod, ok := obj.(*corev1.Pod); ok {
		pod.ManagedFields = nil
	}
	return obj, nil
}

// Run starts the pod informer and scrapes every known inference pod each
// Interval, at most Concurrency at a time, until ctx is done. Pods not Running
// and Ready or without a pod IP are kept (they hold GPUs) but not scraped.
// It returns nil on shutdown and an error only for invalid Options or a second call.
func (i *Informer) Run(ctx context.Context) error {
	if i.configErr != nil {
		return i.configErr
	}
	if !i.started.CompareAndSwap(false, true) {
		return errors.New("vllm informer: Run called more than once")
	}
	logger := klog.FromContext(ctx)
	i.factory.Start(ctx.Done())
	defer i.factory.Shutdown()
	// WaitForCacheSync only gives up when ctx is done, which is a shutdown, not a failure.
	if !cache.WaitForCacheSync(ctx.Done(), i.informer.HasSynced) {
		return nil
	}
	logger.V(2).Info("Scraping vLLM metrics of inference pods", "namespace", i.opts.Namespace,
		"selector", i.opts.LabelSelector, "interval", i.opts.Interval)

	ticker := time.NewTicker(i.opts.Interval)
	defer ticker.Stop()
	for {
		i.scrapeAll(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// HasSynced reports whether the pod informer has completed its initial list.
func (i *Informer) HasSynced() bool {
	return i.informer.HasSynced()
}

// Snapshot returns every known inference pod's PodLoad, sorted by
// namespace/name, with Fresh computed against the Clock at call time.
func (i *Informer) Snapshot() []PodLoad {
	pods := i.listPods()
	now := i.opts.Clock.Now()
	out := make([]PodLoad, 0, len(pods))

	i.mu.Lock()
	defer i.mu.Unlock()
	for _, pod := range pods {
		pl := PodLoad{
			Namespace: pod.Namespace,
			Name:      pod.Name,
			Service:   serviceName(pod),
			NodeName:  pod.Spec.NodeName,
			GPUs:      api.PodGPUs(pod, i.opts.GPUResource),
		}
		if r := i.results[pod.UID]; r != nil {
			pl.Metrics = r.metrics
			pl.Metrics.Models = slices.Clone(r.metrics.Models)
			pl.ScrapedAt = r.scrapedAt
			pl.LastError = r.err
			pl.Fresh = r.err == nil && !r.scrapedAt.IsZero() &&
				now.Sub(r.scrapedAt) <= i.opts.StaleAfter && scrapable(pod)
		}
		out = append(out, pl)
	}
	slices.SortFunc(out, func(a, b PodLoad) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

func (i *Informer) listPods() []*corev1.Pod {
	// The informer already lists and watches only the namespace and selector;
	// the selector is checked again so a watch source that ignores it (e.g. a
	// fake clientset) cannot slip other pods in.
	var pods []*corev1.Pod
	for _, obj := range i.informer.GetStore().List() {
		if pod, ok := obj.(*corev1.Pod); ok && i.selector.Matches(labels.Set(pod.Labels)) {
			pods = append(pods, pod)
		}
	}
	return pods
}

// scrapeAll runs one scrape round and forgets results of pods that are gone.
func (i *Informer) scrapeAll(ctx context.Context) {
	pods := i.listPods()
	live := make(map[types.UID]bool, len(pods))
	sem := make(chan struct{}, i.opts.Concurrency)
	var wg sync.WaitGroup
	for _, pod := range pods {
		live[pod.UID] = true
		if !scrapable(pod) {
			continue
		}
		target, err := metricsURL(pod)
		if err != nil {
			i.record(ctx, pod, Metrics{}, err)
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			m, err := i.scraper.Scrape(ctx, target)
			if ctx.Err() != nil {
				return // shutting down: a cancelled scrape says nothing about the pod
			}
			i.record(ctx, pod, m, err)
		}()
	}
	wg.Wait()

	i.mu.Lock()
	defer i.mu.Unlock()
	for uid := range i.results {
		if !live[uid] {
			delete(i.results, uid)
		}
	}
}

// record stores a scrape outcome. A failure keeps the last good Metrics and
// ScrapedAt so consumers can see how old the data is.
func (i *Informer) record(ctx context.Context, pod *corev1.Pod, m Metrics, err error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	r := i.results[pod.UID]
	if r == nil {
		r = &scrapeResult{}
		i.results[pod.UID] = r
	}
	logger := klog.FromContext(ctx)
	if err != nil {
		// Log transitions only, so a pod that is down does not flood the log.
		if r.err == nil {
			logger.V(2).Info("vLLM metrics scrape failing; pod counts as busy", "pod", klog.KObj(pod), "err", err)
		}
		r.err = err
		return
	}
	if r.err != nil {
		logger.V(2).Info("vLLM metrics scrape recovered", "pod", klog.KObj(pod))
	}
	r.metrics, r.scrapedAt, r.err = m, i.opts.Clock.Now(), nil
}

// scrapable: only a Running, Ready pod with an IP serves /metrics.
func scrapable(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// metricsURL is http://<podIP>:<port><path> from the pod's annotations.
func metricsURL(pod *corev1.Pod) (string, error) {
	port := api.DefaultMetricsPort
	if s, ok := pod.Annotations[api.AnnotationMetricsPort]; ok {
		p, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || p < 1 || p > 65535 {
			return "", fmt.Errorf("pod %s/%s: annotation %s=%q is not a port number (1-65535)",
				pod.Namespace, pod.Name, api.AnnotationMetricsPort, s)
		}
		port = p
	}
	path := api.DefaultMetricsPath
	if s, ok := pod.Annotations[api.AnnotationMetricsPath]; ok {
		if !strings.HasPrefix(s, "/") {
			return "", fmt.Errorf("pod %s/%s: annotation %s=%q must be an absolute path such as %q",
				pod.Namespace, pod.Name, api.AnnotationMetricsPath, s, api.DefaultMetricsPath)
		}
		if _, err := url.ParseRequestURI(s); err != nil {
			return "", fmt.Errorf("pod %s/%s: annotation %s=%q is not a valid URL path: %w",
				pod.Namespace, pod.Name, api.AnnotationMetricsPath, s, err)
		}
		path = s
	}
	return "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port)) + path, nil
}

// serviceName is the label api.LabelService, else the owning Deployment (the
// ReplicaSet name minus its pod-template-hash suffix), else the controlling
// owner's name, else the pod's own name.
func serviceName(pod *corev1.Pod) string {
	if s := pod.Labels[api.LabelService]; s != "" {
		return s
	}
	owner := metav1.GetControllerOf(pod)
	if owner == nil && len(pod.OwnerReferences) > 0 {
		owner = &pod.OwnerReferences[0]
	}
	if owner == nil {
		return pod.Name
	}
	if owner.Kind == "ReplicaSet" {
		if hash := pod.Labels[appsv1.DefaultDeploymentUniqueLabelKey]; hash != "" {
			if deployment, ok := strings.CutSuffix(owner.Name, "-"+hash); ok && deployment != "" {
				return deployment
			}
		}
	}
	return owner.Name
}
