package cli

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/gleaner-dev/gleaner/pkg/api/v1alpha1"
)

// The console's page and fragments render from published objects, escape
// what tenants wrote, and keep to the page's own scripts.
func TestConsoleRenders(t *testing.T) {
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	toU := func(obj any) *unstructured.Unstructured {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			t.Fatal(err)
		}
		return &unstructured.Unstructured{Object: m}
	}
	pool := &v1alpha1.GPUPool{TypeMeta: metav1.TypeMeta{APIVersion: "gleaner.dev/v1alpha1", Kind: "GPUPool"}, ObjectMeta: metav1.ObjectMeta{Name: "inference"},
		Status: v1alpha1.GPUPoolStatus{ObservedTime: metav1.NewTime(now), Planning: true, GPUs: v1alpha1.GPUCounts{Total: 8, Serving: 4, Lent: 3, Idle: 1},
			NodeStates: []v1alpha1.NodeState{{Name: "gpu-a", Verdict: "open", GPUCounts: v1alpha1.GPUCounts{Total: 8, Serving: 4, Lent: 3, Idle: 1}}},
			History:    []v1alpha1.PoolSample{{Time: metav1.NewTime(now.Add(-time.Hour)), Serving: 4, Lent: 2}},
			Outlook:    []v1alpha1.OutlookPoint{{Time: metav1.NewTime(now), Serving: 4, LendableLow: 2, LendableHigh: 4}}}}
	report := &v1alpha1.HarvestReport{TypeMeta: metav1.TypeMeta{APIVersion: "gleaner.dev/v1alpha1", Kind: "HarvestReport"},
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.HarvestReportName, Namespace: "research"},
		Status: v1alpha1.HarvestReportStatus{HarvestedGPUHours: "1.00", Jobs: []v1alpha1.Job{{Kind: "Pod", Name: "x", State: v1alpha1.JobRunning, GPUs: 3,
			Timeline: []v1alpha1.JobEvent{{Time: metav1.NewTime(now), Type: v1alpha1.EventPlaced, Message: `<script>alert("tenant")</script>`}}}}}}
	scheme := runtime.NewScheme()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{
		v1alpha1.GPUPoolResource: "GPUPoolList", v1alpha1.HarvestReportResource: "HarvestReportList"}, toU(pool), toU(report))
	c := &console{clients: &clients{dynamic: dyn, kube: kubefake.NewClientset(), namespace: "research"}, pool: "inference", namespaces: []string{"research", "vision"}, now: func() time.Time { return now }}
	srv := httptest.NewServer(c.handler())
	defer srv.Close()
	fetch := func(path string) (int, string, http.Header) {
		t.Helper()
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body), res.Header
	}
	get := func(path string) (string, http.Header) {
		t.Helper()
		code, body, header := fetch(path)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d: %s", path, code, body)
		}
		return body, header
	}
	page, header := get("/")
	if !strings.Contains(header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Errorf("no content security policy: %v", header)
	}
	if n := strings.Count(page, `class="gpu lent"`); n != 3+1 { // three in the grid, one in the legend
		t.Errorf("%d lent GPUs drawn, want 3 and the legend's", n)
	}
	// The pool publishes no replica's state: the legend says where the GPUs
	// of a replica asleep in vLLM's sleep mode are, and that they are not lent.
	if !strings.Contains(page, `<span class="gpu serving" aria-hidden="true">S</span> serving inference, or held by a replica asleep until woken: never lent`) {
		t.Error("the legend does not say that an asleep replica's GPUs are held, never lent")
	}
	// Relative links (an ingress may serve it under a path), and a menu of
	// the namespaces served.
	for _, want := range []string{`<svg viewBox`, `class="band"`, `data-name="x"`, `src="static/console.js"`, `data-namespace="research"`,
		`<a href="?namespace=vision">vision</a>`, `<a href="?namespace=research" aria-current="page">`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	// A timeline is read from the view just rendered, not from the cluster again.
	before := len(dyn.Actions())
	timeline, _ := get("/job?kind=Pod&name=x")
	if n := len(dyn.Actions()) - before; n != 0 {
		t.Errorf("a timeline opened right after the page read the cluster %d more times", n)
	}
	if strings.Contains(timeline, "<script>") || !strings.Contains(timeline, "&lt;script&gt;") {
		t.Errorf("a tenant's message is not escaped: %s", timeline)
	}
	if js, _ := get("/static/console.js"); !strings.Contains(js, "EventSource") {
		t.Error("console.js is not served")
	}

	// Another namespace served has its own page; one not served has none,
	// by any route.
	if vision, _ := get("/live?namespace=vision"); !strings.Contains(vision, "No best-effort job has run in vision yet") || strings.Contains(vision, `data-name="x"`) {
		t.Errorf("vision's fragment: %s", vision)
	}
	for _, path := range []string{"/?namespace=kube-system", "/live?namespace=kube-system", "/job?namespace=kube-system&kind=Pod&name=x", "/events?namespace=kube-system"} {
		if code, body, _ := fetch(path); code != http.StatusNotFound || !strings.Contains(body, `does not serve namespace "kube-system"`) {
			t.Errorf("GET %s: %d %s", path, code, body)
		}
	}
	if code, _, _ := fetch("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d", code)
	}
}

// --namespaces takes namespace names, each once; without it the console
// serves the context's namespace.
func TestServedNamespaces(t *testing.T) {
	if got, err := servedNamespaces(nil, "research"); err != nil || len(got) != 1 || got[0] != "research" {
		t.Errorf("no flag: %v, %v", got, err)
	}
	if got, err := servedNamespaces([]string{"a", "b"}, "research"); err != nil || strings.Join(got, ",") != "a,b" {
		t.Errorf("a,b: %v, %v", got, err)
	}
	for _, bad := range [][]string{{"a", "a"}, {"Research"}, {""}, {"a/b"}} {
		if _, err := servedNamespaces(bad, "research"); err == nil || !strings.Contains(err.Error(), "--namespaces") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// However many pages are open, the console watches the pool and each served
// namespace's report once; a change reaches the pages that show it, and no
// others; past its limit of open pages, a new one is refused rather than
// costing the API server a watch.
func TestConsoleWatchesOnceForManyPages(t *testing.T) {
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		v1alpha1.GPUPoolResource: "GPUPoolList", v1alpha1.HarvestReportResource: "HarvestReportList"})
	var mu sync.Mutex
	watchers := map[string]*watch.FakeWatcher{} // by namespace, "" for the pool
	dyn.PrependWatchReactor("*", func(action clienttesting.Action) (bool, watch.Interface, error) {
		mu.Lock()
		defer mu.Unlock()
		if _, twice := watchers[action.GetNamespace()]; twice {
			t.Errorf("a second watch of %q", action.GetNamespace())
		}
		w := watch.NewFakeWithChanSize(10, false)
		watchers[action.GetNamespace()] = w
		return true, w, nil
	})
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	c := &console{clients: &clients{dynamic: dyn, kube: kubefake.NewClientset(), namespace: "research"}, pool: "inference",
		namespaces: []string{"research", "vision"}, now: func() time.Time { return now }, changes: changes{max: 4}}
	ctx, cancel := context.WithCancel(context.Background())
	watching := make(chan struct{})
	go func() { defer close(watching); c.watch(ctx) }()
	defer func() {
		cancel()
		mu.Lock()
		for _, w := range watchers { // a real watch ends with its context; these fakes do not
			w.Stop()
		}
		mu.Unlock()
		<-watching
	}()
	srv := httptest.NewServer(c.handler())
	defer srv.Close()
	defer srv.CloseClientConnections()

	type page struct{ events chan string }
	open := func(ns string) (*page, int) {
		res, err := http.Get(srv.URL + "/events?namespace=" + ns)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusOK {
			res.Body.Close()
			return nil, res.StatusCode
		}
		p := &page{events: make(chan string, 10)}
		go func() {
			defer res.Body.Close()
			sc := bufio.NewScanner(res.Body)
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "event: ") {
					p.events <- strings.TrimPrefix(sc.Text(), "event: ")
				}
			}
		}()
		return p, res.StatusCode
	}
	var research, vision []*page
	for range 3 {
		p, _ := open("research")
		research = append(research, p)
	}
	v, _ := open("vision")
	vision = append(vision, v)
	if _, code := open("research"); code != http.StatusServiceUnavailable {
		t.Errorf("a fifth page on a console for four: %d, want 503", code)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(watchers)
		mu.Unlock()
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d watches, want the pool's and two reports'", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	got := func(p *page) bool {
		select {
		case <-p.events:
			return true
		case <-time.After(300 * time.Millisecond):
			return false
		}
	}
	mu.Lock()
	watchers["research"].Modify(&unstructured.Unstructured{Object: map[string]any{"kind": "HarvestReport"}})
	mu.Unlock()
	for i, p := range research {
		if !got(p) {
			t.Errorf("research page %d did not hear its report change", i)
		}
	}
	if got(vision[0]) {
		t.Error("vision's page heard research's report change")
	}
	time.Sleep(time.Second) // each page hears at most one change a second
	mu.Lock()
	watchers[""].Modify(&unstructured.Unstructured{Object: map[string]any{"kind": "GPUPool"}})
	mu.Unlock()
	for i, p := range append(research, vision...) {
		if !got(p) {
			t.Errorf("page %d did not hear the pool change", i)
		}
	}
}

// The console's guards against whoever reaches it, on a real server: one
// client holds at most its share of the live pages, another client still
// gets one; a live page outlives the read timeout but ends with its
// lifetime, giving its slot back; a client that sends its headers slowly,
// or keeps a connection idle, is cut off.
func TestConsoleGuards(t *testing.T) {
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		v1alpha1.GPUPoolResource: "GPUPoolList", v1alpha1.HarvestReportResource: "HarvestReportList"})
	const timeout, lifetime = 300 * time.Millisecond, 1500 * time.Millisecond
	c := &console{clients: &clients{dynamic: dyn, kube: kubefake.NewClientset(), namespace: "research"}, pool: "inference",
		namespaces: []string{"research"}, now: time.Now,
		guard: guard{perClient: 2, readTimeout: timeout, writeTimeout: timeout, idleTimeout: timeout, streamLifetime: lifetime}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := c.guard.server(c.handler())
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	base := "http://" + ln.Addr().String()

	// from is an HTTP client whose connections come from a loopback address of its own.
	from := func(ip string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	}
	type stream struct {
		ended  chan struct{}
		events chan string
		start  time.Time
	}
	open := func(client *http.Client) (*stream, int) {
		res, err := client.Get(base + "/events")
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusOK {
			res.Body.Close()
			return nil, res.StatusCode
		}
		s := &stream{ended: make(chan struct{}), events: make(chan string, 10), start: time.Now()}
		go func() {
			defer close(s.ended)
			defer res.Body.Close()
			sc := bufio.NewScanner(res.Body)
			for sc.Scan() {
				if e, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
					s.events <- e
				}
			}
		}()
		return s, res.StatusCode
	}
	one, other := from("127.0.0.1"), from("127.0.0.2")
	first, _ := open(one)
	second, _ := open(one)
	if _, code := open(one); code != http.StatusTooManyRequests {
		t.Errorf("a third page from one client: %d, want 429", code)
	}
	if s, code := open(other); code != http.StatusOK {
		t.Errorf("another client's page: %d, want 200", code)
	} else {
		defer func() { <-s.ended }()
	}
	// Past the read and write timeouts the pages are still open and hear a
	// change; they end with their lifetime, and their slots come back.
	time.Sleep(3 * timeout)
	c.changes.changed("")
	for i, s := range []*stream{first, second} {
		select {
		case <-s.events:
		case <-s.ended:
			t.Errorf("page %d ended after %v, before its lifetime", i, time.Since(s.start))
		case <-time.After(time.Second):
			t.Errorf("page %d did not hear a change %v after it opened", i, time.Since(s.start))
		}
	}
	for i, s := range []*stream{first, second} {
		select {
		case <-s.ended:
			if took := time.Since(s.start); took > lifetime+time.Second {
				t.Errorf("page %d ended %v after it opened, lifetime %v", i, took, lifetime)
			}
		case <-time.After(lifetime + 2*time.Second):
			t.Fatalf("page %d still open past its lifetime", i)
		}
	}
	if s, code := open(one); code != http.StatusOK {
		t.Errorf("a page once the first two ended: %d, want 200", code)
	} else {
		defer func() { <-s.ended }()
	}

	// Headers sent slowly, and a kept-alive connection left idle: both cut.
	for _, tc := range []struct {
		name  string
		write string
	}{
		{"half a request's headers", "GET /healthz HTTP/1.1\r\nHost: x\r\n"},
		{"an idle kept-alive connection", "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	} {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := io.WriteString(conn, tc.write); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = io.Copy(io.Discard, conn) // the answer, if any, then the end
		conn.Close()
		if took := time.Since(start); err != nil || took > 2*time.Second {
			t.Errorf("%s: closed after %v (%v), want within about %v", tc.name, took, err, timeout)
		}
	}
}
