package vllm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// Informer defaults, exported so command-line flags can show them.
const (
	DefaultInterval = 5 * time.Second
	// DefaultConcurrency bounds scrapes in flight. An endpoint that hangs holds
	// one for the whole timeout, so this is sized for many of those (a node
	// cut off from the network) beside a fleet of healthy pods; memory in
	// flight is at most DefaultConcurrency bodies.
	DefaultConcurrency = 64
)

// scrapeJitter varies each endpoint's interval by up to ±5%, so endpoints
// discovered together drift apart instead of being scraped in bursts.
const scrapeJitter = 0.1

// Options for the Informer. Zero values take the documented defaults.
type Options struct {
	Namespace string // a namespace to watch; "" and no Namespaces = all namespaces
	// Namespaces to watch in addition to Namespace, each with its own watch, so
	// RBAC in just those namespaces suffices. "" among them means all namespaces.
	Namespaces []string
	// NamespaceSelector, when every namespace is watched (neither Namespace
	// nor Namespaces names one), keeps the Informer to the pods of
	// namespaces whose labels it matches: those the admin opted in. Pods
	// elsewhere are neither tracked nor scraped, however they are labelled,
	// so a tenant's pods cannot take scrape slots, memory or Snapshot
	// entries. Nil or empty: every namespace.
	NamespaceSelector labels.Selector
	LabelSelector     string        // default api.LabelRole + "=" + api.RoleInference
	Interval          time.Duration // scrape interval of each endpoint, default 5s
	Timeout           time.Duration // per scrape, default 2s
	StaleAfter        time.Duration // default 3*Interval: a pod whose last successful scrape is older is not Fresh
	Concurrency       int           // max parallel scrapes, default 64
	MaxBodyBytes      int64         // default 4 MiB; a larger body fails that endpoint's scrape
	// Limits bound the series and label values of one endpoint's body (see
	// Limits); a body over them fails that endpoint's scrape.
	Limits      Limits
	Scheme      string              // "http" (default) or "https"
	GPUResource corev1.ResourceName // default api.GPUResource
	Clock       clock.PassiveClock  // default real clock
	// ClientOptions: CA, server name and bearer-token file for the endpoints.
	ClientOptions
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
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.Scheme == "" {
		o.Scheme = "http"
	}
	if o.GPUResource == "" {
		o.GPUResource = api.GPUResource
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.IdleConnTimeout <= 0 {
		// Past the interval, or every scrape would dial a new connection.
		o.IdleConnTimeout = max(DefaultIdleConnTimeout, 2*o.Interval)
	}
	return o
}

// gated tells whether the Informer keeps to the namespaces NamespaceSelector
// matches: only when it watches every namespace.
func (o Options) gated() bool {
	all := o.namespaces()
	return len(all) == 1 && all[0] == metav1.NamespaceAll && o.NamespaceSelector != nil && !o.NamespaceSelector.Empty()
}

// namespaces to watch: sorted, or just NamespaceAll.
func (o Options) namespaces() []string {
	set := sets.New(o.Namespaces...)
	if o.Namespace != "" {
		set.Insert(o.Namespace)
	}
	if set.Len() == 0 || set.Has(metav1.NamespaceAll) {
		return []string{metav1.NamespaceAll}
	}
	return sets.List(set)
}

// PodLoad is the informer's view of one inference pod.
//
// The planning round reads Service, NodeName, Created, GPUs, Fresh, ScrapedAt, LastError and, of
// Metrics, Running, Waiting, KVCacheUsage and Asleep. Rates and the rest of Metrics
// are diagnostic, for whoever debugs a service's signal: no decision depends
// on them.
type PodLoad struct {
	Namespace, Name string
	Service         string    // label api.LabelService, else the owning Deployment, else the owner's name, else the pod name
	NodeName        string    // empty while the pod is pending
	Created         time.Time // the pod's creation time
	GPUs            int64     // api.PodGPUs(pod, GPUResource)
	// Metrics is the last successful scrape. Its slices are shared with the
	// informer and every other Snapshot: a scrape replaces them, never edits
	// them, and consumers must not edit them either.
	Metrics   Metrics
	Rates     Rates     // between the last two successful scrapes
	ScrapedAt time.Time // time of last successful scrape (zero if never)
	LastError error     // last scrape error, nil if the last scrape succeeded (or none was attempted)
	// Fresh: the last scrape succeeded within StaleAfter, after the pod last
	// became Ready, and the pod is still Running, Ready and has an IP.
	// Consumers must treat a pod that is not Fresh as busy.
	Fresh bool
}

// Informer discovers inference pods with client-go informers and scrapes
// each one's vLLM metrics on its own schedule: every Interval (with jitter),
// at most Concurrency at a time, driven by a delaying work queue so that a
// slow endpoint delays nobody else. Snapshot never waits for a scrape.
type Informer struct {
	opts      Options
	selector  labels.Selector
	configErr error // reported by Run, since NewInformer cannot fail
	factories []informers.SharedInformerFactory
	synced    []cache.InformerSynced
	scraper   *Scraper
	// pods index the pods watched, by namespace. namespaces is nil unless
	// Options.NamespaceSelector gates what is scraped (see counts).
	pods       []cache.Indexer
	namespaces corelisters.NamespaceLister
	queue      workqueue.TypedDelayingInterface[types.UID]
	started    atomic.Bool

	mu sync.Mutex
	// Keyed by UID so a pod recreated under the same name starts unscraped.
	endpoints map[types.UID]*endpoint
	// published is this informer's share of the endpoints-by-state gauge.
	published map[string]float64
}

// endpoint is one inference pod and what its scrapes found.
type endpoint struct {
	pod *corev1.Pod // latest object seen by the informer
	// readyGen counts the pod's transitions into scrapable; a sample taken in
	// an earlier generation (before a restart or readiness loss) is not fresh.
	readyGen   int
	scrapedGen int
	metrics    Metrics // last successful scrape
	rates      Rates
	scrapedAt  time.Time
	err        error
}

// NewInformer builds an Informer; nothing runs until Run. Invalid options are
// reported by Run. It registers the informer's metrics (RegisterMetrics).
func NewInformer(client kubernetes.Interface, opts Options) *Informer {
	RegisterMetrics()
	opts = opts.withDefaults()
	i := &Informer{
		opts:      opts,
		endpoints: map[types.UID]*endpoint{},
		published: map[string]float64{},
	}
	var errs []error
	var err error
	if i.selector, err = labels.Parse(opts.LabelSelector); err != nil {
		errs = append(errs, fmt.Errorf("vllm informer: invalid LabelSelector %q: %w", opts.LabelSelector, err))
		i.selector = labels.Nothing()
	}
	if opts.StaleAfter < opts.Interval {
		errs = append(errs, fmt.Errorf(
			"vllm informer: StaleAfter (%s) is shorter than Interval (%s), so every pod would read stale between scrapes; use at least 2*Interval",
			opts.StaleAfter, opts.Interval))
	}
	switch {
	case opts.Scheme != "http" && opts.Scheme != "https":
		errs = append(errs, fmt.Errorf("vllm informer: Scheme %q is neither http nor https", opts.Scheme))
	case opts.Scheme == "http" && (opts.CAFile != "" || opts.TLSServerName != "" || opts.InsecureSkipTLSVerify):
		errs = append(errs, errors.New("vllm informer: TLS settings are given but Scheme is http; set Scheme to https"))
	}
	// Any pod carrying the inference label is scraped: a token sent over plain
	// HTTP, or to a server whose name was not verified, goes to whoever runs it.
	if opts.BearerTokenFile != "" && (opts.Scheme != "https" || opts.TLSServerName == "" || opts.InsecureSkipTLSVerify) {
		errs = append(errs, errors.New("vllm informer: a BearerTokenFile is sent only over https with a verified TLSServerName (and InsecureSkipTLSVerify off)"))
	}
	httpClient, err := NewHTTPClient(opts.ClientOptions)
	if err != nil {
		errs = append(errs, fmt.Errorf("vllm informer: %w", err))
	}
	i.scraper = &Scraper{Client: httpClient, Timeout: opts.Timeout, MaxBodyBytes: opts.MaxBodyBytes, Limits: opts.Limits}

	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    i.onPod,
		UpdateFunc: func(_, obj any) { i.onPod(obj) },
		DeleteFunc: i.onPodDelete,
	}
	for _, ns := range opts.namespaces() {
		factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
			informers.WithNamespace(ns),
			informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = opts.LabelSelector }),
			informers.WithTransform(slimPod),
		)
		podInformer := factory.Core().V1().Pods().Informer()
		reg, err := podInformer.AddEventHandler(handler)
		if err != nil {
			errs = append(errs, fmt.Errorf("vllm informer: watching pods in namespace %q: %w", ns, err))
			continue
		}
		i.factories = append(i.factories, factory)
		i.pods = append(i.pods, podInformer.GetIndexer())
		// The registration's HasSynced also waits for the handler to have seen
		// the initial list, so Snapshot holds every pod once HasSynced is true.
		i.synced = append(i.synced, reg.HasSynced)
	}
	if opts.gated() {
		// Which namespaces count is read from their labels, and a namespace
		// opted in or out later takes its pods in or out (onNamespace).
		factory := informers.NewSharedInformerFactory(client, 0)
		nsInformer := factory.Core().V1().Namespaces()
		reg, err := nsInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    i.onNamespace,
			UpdateFunc: func(_, obj any) { i.onNamespace(obj) },
			DeleteFunc: i.onNamespaceDelete,
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("vllm informer: watching namespaces: %w", err))
		} else {
			i.factories = append(i.factories, factory)
			i.namespaces = nsInformer.Lister()
			i.synced = append(i.synced, reg.HasSynced)
		}
	}
	i.configErr = errors.Join(errs...)
	return i
}

// Err is what is wrong with the Informer's Options (nil when nothing is): Run
// would return it at once.
func (i *Informer) Err() error { return i.configErr }

// slimPod keeps of a pod only what the Informer reads: names, labels, owners,
// the metrics annotations, what api.PodGPUs counts, and readiness. Real pods
// carry kilobytes of env, volumes, probes, statuses and last-applied
// annotations; 2,000 of them would cost more memory than everything else.
func slimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:              pod.Name,
			Namespace:         pod.Namespace,
			UID:               pod.UID,
			ResourceVersion:   pod.ResourceVersion,
			Labels:            pod.Labels,
			OwnerReferences:   pod.OwnerReferences,
			DeletionTimestamp: pod.DeletionTimestamp,
			CreationTimestamp: pod.CreationTimestamp,
		},
		Spec: corev1.PodSpec{
			NodeName:       pod.Spec.NodeName,
			Containers:     slimContainers(pod.Spec.Containers),
			InitContainers: slimContainers(pod.Spec.InitContainers),
			Overhead:       pod.Spec.Overhead,
			Resources:      pod.Spec.Resources,
		},
		Status: corev1.PodStatus{Phase: pod.Status.Phase, PodIP: pod.Status.PodIP},
	}
	for _, key := range []string{api.AnnotationMetricsPort, api.AnnotationMetricsPath} {
		if v, ok := pod.Annotations[key]; ok {
			if slim.Annotations == nil {
				slim.Annotations = map[string]string{}
			}
			slim.Annotations[key] = v
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			slim.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return slim, nil
}

// slimContainers keeps what resource requests are computed from.
func slimContainers(containers []corev1.Container) []corev1.Container {
	if containers == nil {
		return nil
	}
	slim := make([]corev1.Container, len(containers))
	for n, c := range containers {
		slim[n] = corev1.Container{Name: c.Name, Resources: c.Resources, RestartPolicy: c.RestartPolicy}
	}
	return slim
}

// onPod tracks a new or changed pod and schedules the first scrape of a new one.
func (i *Informer) onPod(obj any) { i.track(obj, false) }

// track is onPod; onlyNew leaves a pod already tracked as it is (the
// namespace handler reads pods from the cache, perhaps older than the
// version onPod last saw).
func (i *Informer) track(obj any, onlyNew bool) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	// The watch already filters by selector; checking again keeps a source
	// that ignores it (e.g. a fake clientset) or a relabelled pod out.
	if !i.selector.Matches(labels.Set(pod.Labels)) || !i.counts(pod.Namespace) {
		i.forget(pod.UID)
		return
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	ep := i.endpoints[pod.UID]
	if ep != nil && onlyNew {
		return
	}
	if ep == nil {
		ep = &endpoint{}
		i.endpoints[pod.UID] = ep
		// A random first delay spreads the first scrapes of a fleet over one interval.
		i.queue.AddAfter(pod.UID, time.Duration(rand.Int64N(int64(i.opts.Interval))))
	}
	if scrapable(pod) && (ep.pod == nil || !scrapable(ep.pod)) {
		ep.readyGen++
	}
	ep.pod = pod
}

func (i *Informer) onPodDelete(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if pod, ok := obj.(*corev1.Pod); ok {
		i.forget(pod.UID)
	}
}

// counts tells whether the pods of namespace ns are scraped: always, unless
// NamespaceSelector gates them, and then only when the namespace exists and
// its labels match.
func (i *Informer) counts(ns string) bool {
	if i.namespaces == nil {
		return true
	}
	n, err := i.namespaces.Get(ns)
	return err == nil && i.opts.NamespaceSelector.Matches(labels.Set(n.Labels))
}

// onNamespace takes in the pods of a namespace opted in, and lets go of
// those of a namespace that is not (or no longer).
func (i *Informer) onNamespace(obj any) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return
	}
	in := i.counts(ns.Name)
	for _, indexer := range i.pods {
		pods, _ := indexer.ByIndex(cache.NamespaceIndex, ns.Name)
		for _, obj := range pods {
			if pod, ok := obj.(*corev1.Pod); ok && !in {
				i.forget(pod.UID)
			} else if ok {
				i.track(pod, true)
			}
		}
	}
}

func (i *Informer) onNamespaceDelete(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return
	}
	for _, indexer := range i.pods {
		pods, _ := indexer.ByIndex(cache.NamespaceIndex, ns.Name)
		for _, obj := range pods {
			if pod, ok := obj.(*corev1.Pod); ok {
				i.forget(pod.UID)
			}
		}
	}
}

// forget drops a pod; its queued scrape finds nothing and is not rescheduled.
func (i *Informer) forget(uid types.UID) {
	i.mu.Lock()
	defer i.mu.Unlock()
	delete(i.endpoints, uid)
}

// Run starts the pod informers and scrapes every known inference pod each
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
	// The queue starts a goroutine, so it is made here rather than in
	// NewInformer; event handlers use it only once the factories start.
	i.queue = workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[types.UID]{})
	defer i.queue.ShutDown()
	for _, f := range i.factories {
		f.Start(ctx.Done())
		defer f.Shutdown()
	}
	// WaitForCacheSync only gives up when ctx is done, which is a shutdown, not a failure.
	if !cache.WaitForCacheSync(ctx.Done(), i.synced...) {
		return nil
	}
	logger.V(2).Info("Scraping vLLM metrics of inference pods", "namespaces", i.opts.namespaces(), "namespaceSelector", i.opts.NamespaceSelector,
		"selector", i.opts.LabelSelector, "interval", i.opts.Interval, "concurrency", i.opts.Concurrency)

	var workers sync.WaitGroup
	for range i.opts.Concurrency {
		workers.Go(func() { i.work(ctx) })
	}
	ticker := time.NewTicker(i.opts.Interval)
	defer ticker.Stop()
	for done := false; !done; {
		i.publishStates()
		select {
		case <-ctx.Done():
			done = true
		case <-ticker.C:
		}
	}
	i.queue.ShutDown()
	workers.Wait()
	i.unpublishStates()
	return nil
}

// work scrapes endpoints as their time comes, then schedules each one's next
// scrape one Interval (with jitter) after this one started.
func (i *Informer) work(ctx context.Context) {
	for {
		uid, shutdown := i.queue.Get()
		if shutdown {
			return
		}
		started := time.Now()
		keep := i.scrape(ctx, uid)
		i.queue.Done(uid)
		if keep {
			jitter := time.Duration((rand.Float64() - 0.5) * scrapeJitter * float64(i.opts.Interval))
			i.queue.AddAfter(uid, max(0, i.opts.Interval+jitter-time.Since(started)))
		}
	}
}

// scrape scrapes one endpoint if its pod is scrapable and records the
// outcome. It returns false when the pod is gone or the informer is stopping.
func (i *Informer) scrape(ctx context.Context, uid types.UID) bool {
	i.mu.Lock()
	ep := i.endpoints[uid]
	if ep == nil {
		i.mu.Unlock()
		return false
	}
	pod, gen := ep.pod, ep.readyGen
	i.mu.Unlock()
	// A namespace opted out since the pod was taken in: not one more scrape.
	if !i.counts(pod.Namespace) {
		i.forget(uid)
		return false
	}
	if !scrapable(pod) {
		return true
	}

	target, err := metricsURL(pod, i.opts.Scheme)
	var m Metrics
	if err != nil {
		scrapeErrors.WithLabelValues(ReasonInvalidTarget).Inc()
	} else {
		start := time.Now()
		m, err = i.scraper.Scrape(ctx, target)
		if ctx.Err() != nil {
			return false // shutting down: a cancelled scrape says nothing about the pod
		}
		scrapeDuration.Observe(time.Since(start).Seconds())
		if se := (*ScrapeError)(nil); errors.As(err, &se) {
			scrapeErrors.WithLabelValues(se.Reason).Inc()
		}
	}
	i.record(ctx, uid, gen, m, err)
	return true
}

// record stores a scrape outcome. A failure keeps the last good Metrics,
// Rates and ScrapedAt so consumers can see how old the data is.
func (i *Informer) record(ctx context.Context, uid types.UID, gen int, m Metrics, err error) {
	now := i.opts.Clock.Now()
	i.mu.Lock()
	defer i.mu.Unlock()
	ep := i.endpoints[uid]
	if ep == nil {
		return // deleted while being scraped
	}
	logger := klog.FromContext(ctx)
	if err != nil {
		// Log transitions only, so a pod that is down does not flood the log.
		if ep.err == nil {
			logger.V(2).Info("vLLM metrics scrape failing; pod counts as busy", "pod", klog.KObj(ep.pod), "err", err)
		}
		ep.err = err
		return
	}
	if ep.err != nil {
		logger.V(2).Info("vLLM metrics scrape recovered", "pod", klog.KObj(ep.pod))
	}
	// Rates only over a window short enough to say something about now.
	ep.rates = Rates{}
	if window := now.Sub(ep.scrapedAt); !ep.scrapedAt.IsZero() && window <= i.opts.StaleAfter {
		ep.rates = deriveRates(ep.metrics, m, window)
	}
	ep.metrics, ep.scrapedAt, ep.scrapedGen, ep.err = m, now, gen, nil
}

// state classifies an endpoint; only StateFresh may be read as known load.
func (i *Informer) state(ep *endpoint, now time.Time) string {
	switch {
	case !scrapable(ep.pod):
		return StateNotReady
	case ep.err != nil:
		return StateFailing
	case ep.scrapedAt.IsZero() || ep.scrapedGen != ep.readyGen:
		return StatePending
	case now.Sub(ep.scrapedAt) > i.opts.StaleAfter:
		return StateStale
	default:
		return StateFresh
	}
}

// publishStates sets this informer's share of the endpoints gauge. Shares are
// added, not set, so that several informers in one process sum correctly.
func (i *Informer) publishStates() {
	now := i.opts.Clock.Now()
	counts := map[string]float64{}
	i.mu.Lock()
	for _, ep := range i.endpoints {
		counts[i.state(ep, now)]++
	}
	i.mu.Unlock()
	for _, s := range endpointStates {
		endpointsGauge.WithLabelValues(s).Add(counts[s] - i.published[s])
		i.published[s] = counts[s]
	}
}

func (i *Informer) unpublishStates() {
	for _, s := range endpointStates {
		endpointsGauge.WithLabelValues(s).Add(-i.published[s])
		i.published[s] = 0
	}
}

// HasSynced reports whether the pod informers have completed their initial
// list and the Informer has taken in every pod listed.
func (i *Informer) HasSynced() bool {
	for _, synced := range i.synced {
		if !synced() {
			return false
		}
	}
	return true
}

// Snapshot returns every known inference pod's PodLoad, sorted by
// namespace/name, with Fresh computed against the Clock at call time. It takes
// a lock held only for bookkeeping, never across a scrape. Metrics are not
// copied (PodLoad.Metrics): at a thousand services copying them was a tenth of
// a planning round.
func (i *Informer) Snapshot() []PodLoad {
	now := i.opts.Clock.Now()
	i.mu.Lock()
	// In namespace/name order: the endpoints are sorted, not the PodLoads,
	// which are ten times their size to move.
	eps := make([]*endpoint, 0, len(i.endpoints))
	for _, ep := range i.endpoints {
		eps = append(eps, ep)
	}
	slices.SortFunc(eps, func(a, b *endpoint) int {
		if c := strings.Compare(a.pod.Namespace, b.pod.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.pod.Name, b.pod.Name)
	})
	out := make([]PodLoad, 0, len(eps))
	for _, ep := range eps {
		pod := ep.pod
		out = append(out, PodLoad{
			Namespace: pod.Namespace,
			Name:      pod.Name,
			Service:   api.ServiceName(pod),
			NodeName:  pod.Spec.NodeName,
			Created:   pod.CreationTimestamp.Time,
			GPUs:      api.PodGPUs(pod, i.opts.GPUResource),
			Metrics:   ep.metrics,
			Rates:     ep.rates,
			ScrapedAt: ep.scrapedAt,
			LastError: ep.err,
			Fresh:     i.state(ep, now) == StateFresh,
		})
	}
	i.mu.Unlock()
	return out
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

// metricsURL is <scheme>://<podIP>:<port><path> from the pod's annotations.
func metricsURL(pod *corev1.Pod, scheme string) (string, error) {
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
	return scheme + "://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port)) + path, nil
}
