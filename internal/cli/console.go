package cli

import (
	"bytes"
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"

	"github.com/gleaner-dev/gleaner/pkg/api/v1alpha1"
	"github.com/gleaner-dev/gleaner/pkg/version"
)

//go:embed console
var consoleFiles embed.FS

var consoleTemplates = template.Must(template.New("").Funcs(template.FuncMap{
	"hours": hours,
	"utc":   func(t metav1.Time) string { return t.UTC().Format(time.RFC3339) },
	"lower": strings.ToLower,
	// seq ranges over n GPUs (bounded: a node has at most a few dozen).
	"seq": func(n int64) []struct{} { return make([]struct{}, min(max(n, 0), 256)) },
}).ParseFS(consoleFiles, "console/*.html"))

type consoleOptions struct {
	*options
	address    string
	port       int
	pool       string
	namespaces []string
	// authenticate asks the API server about every request's bearer token;
	// perClient bounds each client's live pages.
	authenticate bool
	perClient    int
}

func newConsoleCommand(o *options) *cobra.Command {
	c := &consoleOptions{options: o}
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Serve the web console on this machine, with your rights",
		Long: `console serves Gleaner's web console on 127.0.0.1 and prints its URL: the
pool's nodes and GPUs (serving, lent, headroom, idle), the last 24 hours and
the next 24, your namespace's harvest and value, and your jobs with their
timelines. It reads with your kubeconfig's rights, and the page updates live.
It only reads; Ctrl-C stops it.

With --namespaces it serves several namespaces, one page each (?namespace=),
and nothing of any other: the form the chart deploys in-cluster, read-only,
behind the admin's ingress (docs/install.md). With --authenticate every
request but /healthz must carry a bearer token that the cluster accepts, for
a user it allows to read that namespace's HarvestReport.`,
		Example: `  kubectl gleaner console -n research
  kubectl gleaner console --port 8090
  kubectl gleaner console --address 0.0.0.0 --port 8080 --namespaces research,vision`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return c.run(cmd.Context()) },
	}
	cmd.Flags().StringVar(&c.address, "address", "127.0.0.1", "Address to listen on. Anything but a loopback address shows your namespace to whoever reaches it.")
	cmd.Flags().IntVar(&c.port, "port", 0, "Port to listen on; 0 picks a free one.")
	cmd.Flags().StringSliceVar(&c.namespaces, "namespaces", nil, "Namespaces to serve, one page each (the first is the default page); empty: --namespace's.")
	cmd.Flags().BoolVar(&c.authenticate, "authenticate", false, "Serve a page only to requests whose bearer token (Authorization: Bearer) the cluster authenticates (TokenReview), for a user it allows to get that namespace's HarvestReport (SubjectAccessReview). Needs create on tokenreviews and subjectaccessreviews.")
	cmd.Flags().IntVar(&c.perClient, "max-pages-per-client", defaultStreamsPerClient, "Live pages one client may hold open: one user with --authenticate, else one address (all clients of a proxy count as one).")
	poolFlag(cmd, &c.pool)
	return cmd
}

func (c *consoleOptions) run(ctx context.Context) error {
	cl, err := c.clients()
	if err != nil {
		return err
	}
	namespaces, err := servedNamespaces(c.namespaces, cl.namespace)
	if err != nil {
		return err
	}
	// Fail now, not in the browser, when the user may read nothing.
	for _, ns := range namespaces {
		if _, err := cl.report(ctx, ns); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(c.address, fmt.Sprint(c.port)))
	if err != nil {
		return fmt.Errorf("--address %s --port %d: %w", c.address, c.port, err)
	}
	if c.perClient < 1 {
		return fmt.Errorf("--max-pages-per-client %d: must be at least 1", c.perClient)
	}
	con := &console{clients: cl, pool: c.pool, namespaces: namespaces, now: c.now, guard: guard{perClient: c.perClient}}
	if c.authenticate {
		con.guard.reviewer = &reviewer{client: cl.kube, now: time.Now}
	}
	watchCtx, stopWatching := context.WithCancel(ctx)
	watching := make(chan struct{})
	go func() { defer close(watching); con.watch(watchCtx) }()
	defer func() { stopWatching(); <-watching }()
	srv := con.guard.server(con.handler())
	label := "namespace"
	if len(namespaces) > 1 {
		label = "namespaces"
	}
	fmt.Fprintf(c.streams.Out, "Gleaner console for %s %s: http://%s/\n", label, strings.Join(namespaces, ", "), ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
		return nil
	case err := <-errc:
		return err
	}
}

// servedNamespaces checks --namespaces (names, no repeats); without it, the
// console serves the namespace of the user's context.
func servedNamespaces(flag []string, current string) ([]string, error) {
	if len(flag) == 0 {
		return []string{current}, nil
	}
	seen := map[string]bool{}
	for _, ns := range flag {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, fmt.Errorf("--namespaces: %q is not a namespace name: %s", ns, strings.Join(errs, "; "))
		}
		if seen[ns] {
			return nil, fmt.Errorf("--namespaces: %q is named twice", ns)
		}
		seen[ns] = true
	}
	return flag, nil
}

// console serves the page, its live updates and job timelines, for each of
// its namespaces and no other.
type console struct {
	clients    *clients
	pool       string
	namespaces []string
	now        func() time.Time
	changes    changes
	guard      guard
}

// namespace is the namespace a request asks for (?namespace=, the first
// served when empty), and the request as the guard let it through; false,
// with the answer written, when the namespace is not served (404) or the
// requester may not read it (401, 403).
func (c *console) namespace(w http.ResponseWriter, r *http.Request) (*http.Request, string, bool) {
	if c.guard.reviewer != nil && !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
		// Which namespaces are served is not for the anonymous to learn.
		r, ok := c.guard.authorize(w, r, "")
		return r, "", ok
	}
	ns := r.URL.Query().Get("namespace")
	if ns == "" {
		ns = c.namespaces[0]
	}
	if !slices.Contains(c.namespaces, ns) {
		http.Error(w, "this console does not serve namespace "+strconv.Quote(oneLine(ns, 63)), http.StatusNotFound)
		return r, "", false
	}
	r, ok := c.guard.authorize(w, r, ns)
	return r, ns, ok
}

func (c *console) handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(consoleFiles, "console")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", c.page)
	mux.HandleFunc("GET /live", c.live)
	mux.HandleFunc("GET /events", c.events)
	mux.HandleFunc("GET /job", c.job)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	return securityHeaders(mux)
}

// securityHeaders keeps the page to its own scripts and styles.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		h.ServeHTTP(w, r)
	})
}

// view is what one rendering of the page shows.
type view struct {
	Namespace, Version string
	// Namespaces are the ones the console serves (a menu when more than one).
	Namespaces []string
	Now        time.Time
	Pool       *v1alpha1.GPUPool
	PoolError  string
	Report     *v1alpha1.HarvestReport
	Jobs       []jobView
	Chart      template.HTML
}

type jobView struct {
	v1alpha1.Job
	Why, Age, Checkpoint string
}

func (c *console) view(ctx context.Context, ns string) (view, error) {
	if v, ok := c.changes.view(ns); ok {
		return v, nil
	}
	v, err := c.read(ctx, ns)
	if err == nil {
		c.changes.keep(ns, v)
	}
	return v, err
}

// read reads what the page of namespace ns shows from the cluster.
func (c *console) read(ctx context.Context, ns string) (view, error) {
	v := view{Namespace: ns, Namespaces: c.namespaces, Version: version.Version, Now: c.now()}
	pool, err := c.clients.pool(ctx, c.pool)
	if err != nil {
		v.PoolError = err.Error()
	}
	v.Pool = pool
	report, err := c.clients.report(ctx, ns)
	if err != nil {
		return v, err
	}
	v.Report = report
	var pods map[string][]*v1.Pod
	if list, err := c.clients.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
		pods = podsByJob(list.Items)
	}
	o := &options{now: c.now}
	if report != nil {
		for _, j := range report.Status.Jobs {
			var submitted *metav1.Time
			if len(j.Timeline) > 0 {
				submitted = &j.Timeline[0].Time
			}
			v.Jobs = append(v.Jobs, jobView{Job: j, Why: explainJob(j, pods[j.Kind+"/"+j.Name], pool, v.Now),
				Age: o.age(submitted), Checkpoint: agoOrDash(o.age(j.LastCheckpoint))})
		}
	}
	if pool != nil {
		v.Chart = chartSVG(pool.Status, v.Now)
	}
	return v, nil
}

func (c *console) render(w http.ResponseWriter, r *http.Request, name string) {
	r, ns, ok := c.namespace(w, r)
	if !ok {
		return
	}
	v, err := c.view(r.Context(), ns)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	write(w, name, v)
}

// write renders the template name with data as the response.
func write(w http.ResponseWriter, name string, data any) {
	var buf bytes.Buffer
	if err := consoleTemplates.ExecuteTemplate(&buf, name, data); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(buf.Bytes())
}

func (c *console) page(w http.ResponseWriter, r *http.Request) { c.render(w, r, "page.html") }

func (c *console) live(w http.ResponseWriter, r *http.Request) { c.render(w, r, "live") }

// job serves one job's timeline, from the namespace's view: the timelines a
// page reopens after each refresh cost the cluster nothing more.
func (c *console) job(w http.ResponseWriter, r *http.Request) {
	r, ns, ok := c.namespace(w, r)
	if !ok {
		return
	}
	v, err := c.view(r.Context(), ns)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	job, err := findJob(reportJobs(v.Report), ns, r.URL.Query().Get("kind")+"/"+r.URL.Query().Get("name"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	write(w, "timeline", job)
}

// maxStreams bounds the pages open on one console at a time: each holds a
// connection, and the console may be exposed to many.
const maxStreams = 200

// changes tells the open pages when what they show changed. It watches the
// GPUPool and each served namespace's HarvestReport once, however many pages
// are open (watch), so a crowd of pages costs the API server nothing more.
type changes struct {
	// max bounds the open pages; 0 for maxStreams.
	max  int
	mu   sync.Mutex
	subs map[chan struct{}]string // each open page's channel, and its namespace
	// views are the views rendered in the last second, by namespace: pages
	// that refresh together read the cluster once. A change drops them.
	views map[string]cachedView
}

type cachedView struct {
	at time.Time
	v  view
}

// subscribe opens a page's channel for namespace ns; false when the most
// pages allowed are open already.
func (h *changes) subscribe(ns string) (chan struct{}, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs == nil {
		h.subs = map[chan struct{}]string{}
	}
	if limit := cmp.Or(h.max, maxStreams); len(h.subs) >= limit {
		return nil, false
	}
	ch := make(chan struct{}, 1)
	h.subs[ch] = ns
	return ch, true
}

func (h *changes) unsubscribe(ch chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, ch)
}

// changed tells the pages of namespace ns, or every page when ns is "" (the
// pool), that what they show changed.
func (h *changes) changed(ns string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch, sub := range h.subs {
		if ns == "" || sub == ns {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	if ns == "" {
		clear(h.views)
	} else {
		delete(h.views, ns)
	}
}

// view is the view of namespace ns rendered within the last second, if any.
func (h *changes) view(ns string) (view, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.views[ns]
	return c.v, ok && time.Since(c.at) < time.Second
}

func (h *changes) keep(ns string, v view) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.views == nil {
		h.views = map[string]cachedView{}
	}
	h.views[ns] = cachedView{at: time.Now(), v: v}
}

// watch watches the GPUPool and every served namespace's HarvestReport until
// ctx ends, watching again when a watch ends (after 5 s when it failed).
func (c *console) watch(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	targets := map[string]dynamic.ResourceInterface{"": c.clients.dynamic.Resource(v1alpha1.GPUPoolResource)}
	for _, ns := range c.namespaces {
		targets[ns] = c.clients.dynamic.Resource(v1alpha1.HarvestReportResource).Namespace(ns)
	}
	for ns, ri := range targets {
		name := c.pool
		if ns != "" {
			name = v1alpha1.HarvestReportName
		}
		wg.Go(func() {
			sel := fields.OneTermEqualSelector("metadata.name", name).String()
			for ctx.Err() == nil {
				w, err := ri.Watch(ctx, metav1.ListOptions{FieldSelector: sel})
				if err == nil {
					for range w.ResultChan() {
						c.changes.changed(ns)
					}
					w.Stop()
				}
				wait := time.Second
				if err != nil {
					wait = 5 * time.Second
				}
				select {
				case <-ctx.Done():
				case <-time.After(wait):
				}
			}
		})
	}
}

// events tells the page when what it shows changed (server-sent events),
// "changed" at most once a second; the page then fetches /live. Each client
// holds at most the guard's share of the pages; each event must be written
// within the write timeout (a client that stops reading loses its page), and
// a stream ends after the stream lifetime (the page reconnects).
func (c *console) events(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	r, ns, ok := c.namespace(w, r)
	if !ok {
		return
	}
	client := clientKey(r)
	if !c.guard.openStream(client) {
		http.Error(w, errTooManyStreams.Error(), http.StatusTooManyRequests)
		return
	}
	defer c.guard.closeStream(client)
	changed, ok := c.changes.subscribe(ns)
	if !ok {
		http.Error(w, "too many pages are open on this console; try again later", http.StatusServiceUnavailable)
		return
	}
	defer c.changes.unsubscribe(changed)
	// The server's write deadline runs from the request; each event gets a
	// deadline of its own instead.
	_, writeTimeout, _, lifetime := c.guard.timeouts()
	send := func(text string) bool {
		if err := rc.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return false
		}
		if _, err := io.WriteString(w, text); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	ctx := r.Context()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	if !send("retry: 2000\n\n") {
		return
	}
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	end := time.NewTimer(lifetime)
	defer end.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-end.C:
			return
		case <-keepalive.C:
			if !send(": keepalive\n\n") {
				return
			}
		case <-changed:
			if !send("event: changed\ndata: {}\n\n") {
				return
			}
			select { // at most once a second
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// chartSVG draws the last 24 hours (inference and lent GPUs) and the next 24
// (the lendable band and the inference expected) on one time axis, now in
// the middle.
func chartSVG(st v1alpha1.GPUPoolStatus, now time.Time) template.HTML {
	const w, h, left, right, top, bottom = 720.0, 240.0, 40.0, 10.0, 10.0, 30.0
	total := float64(max(st.GPUs.Total, 1))
	x := func(t time.Time) float64 {
		frac := (t.Sub(now).Hours() + 24) / 48
		return left + min(max(frac, 0), 1)*(w-left-right)
	}
	y := func(v int64) float64 { return top + (1-float64(v)/total)*(h-top-bottom) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg viewBox="0 0 %.0f %.0f" role="img" aria-labelledby="chart-title chart-desc" class="chart">`, w, h)
	fmt.Fprintf(&b, `<title id="chart-title">GPUs over the last 24 hours and the next 24</title>`)
	fmt.Fprintf(&b, `<desc id="chart-desc">Left of the line marked now: GPUs serving inference and GPUs lent, sampled every 10 minutes. Right: the forecast band of lendable GPUs and the GPUs inference is expected to need, per hour. %d GPUs in all.</desc>`, st.GPUs.Total)
	for _, v := range []int64{0, st.GPUs.Total / 2, st.GPUs.Total} {
		fmt.Fprintf(&b, `<line class="grid" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f"/><text class="axis" x="%.1f" y="%.1f" text-anchor="end">%d</text>`, left, w-right, y(v), y(v), left-4, y(v)+4, v)
	}
	for hAgo := -24; hAgo <= 24; hAgo += 6 {
		t := now.Add(time.Duration(hAgo) * time.Hour)
		label := t.UTC().Format("15h")
		if hAgo == 0 {
			label = "now"
		}
		fmt.Fprintf(&b, `<text class="axis" x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, x(t), h-10, label)
	}
	fmt.Fprintf(&b, `<line class="now" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f"/>`, x(now), x(now), top, h-bottom)
	if len(st.Outlook) > 0 {
		var upper, lower []string
		for _, p := range st.Outlook {
			for _, t := range []time.Time{p.Time.Time, p.Time.Add(time.Hour)} {
				upper = append(upper, fmt.Sprintf("%.1f,%.1f", x(t), y(p.LendableHigh)))
				lower = append([]string{fmt.Sprintf("%.1f,%.1f", x(t), y(p.LendableLow))}, lower...)
			}
		}
		fmt.Fprintf(&b, `<polygon class="band" points="%s"><title>lendable GPUs, forecast (cautious to expected)</title></polygon>`, strings.Join(append(upper, lower...), " "))
		var inf []string
		for _, p := range st.Outlook {
			inf = append(inf, fmt.Sprintf("%.1f,%.1f", x(p.Time.Time), y(p.Serving)), fmt.Sprintf("%.1f,%.1f", x(p.Time.Add(time.Hour)), y(p.Serving)))
		}
		fmt.Fprintf(&b, `<polyline class="serving forecast" points="%s"><title>serving GPUs, expected</title></polyline>`, strings.Join(inf, " "))
	}
	for _, series := range []struct {
		class, title string
		of           func(v1alpha1.PoolSample) int64
	}{
		{"serving", "serving GPUs", func(s v1alpha1.PoolSample) int64 { return s.Serving }},
		{"lent", "lent GPUs", func(s v1alpha1.PoolSample) int64 { return s.Lent }},
	} {
		var pts []string
		for _, s := range st.History {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.Time.Time), y(series.of(s))))
		}
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(now), y(series.of(v1alpha1.PoolSample{Serving: st.GPUs.Serving, Lent: st.GPUs.Lent}))))
		fmt.Fprintf(&b, `<polyline class="%s" points="%s"><title>%s</title></polyline>`, series.class, strings.Join(pts, " "), series.title)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
