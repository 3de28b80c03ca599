package cli

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"

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
			History:    []v1alpha1.PoolSample{{Time: metav1.NewTime(now.Add(-time.Hour)), Inference: 4, Lent: 2}},
			Outlook:    []v1alpha1.OutlookPoint{{Time: metav1.NewTime(now), Inference: 4, LendableLow: 2, LendableHigh: 4}}}}
	report := &v1alpha1.HarvestReport{TypeMeta: metav1.TypeMeta{APIVersion: "gleaner.dev/v1alpha1", Kind: "HarvestReport"},
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.HarvestReportName, Namespace: "research"},
		Status: v1alpha1.HarvestReportStatus{HarvestedGPUHours: "1.00", Jobs: []v1alpha1.Job{{Kind: "Pod", Name: "x", State: v1alpha1.JobRunning, GPUs: 3,
			Timeline: []v1alpha1.JobEvent{{Time: metav1.NewTime(now), Type: v1alpha1.EventPlaced, Message: `<script>alert("tenant")</script>`}}}}}}
	scheme := runtime.NewScheme()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{
		v1alpha1.GPUPoolResource: "GPUPoolList", v1alpha1.HarvestReportResource: "HarvestReportList"}, toU(pool), toU(report))
	c := &console{clients: &clients{dynamic: dyn, kube: kubefake.NewClientset(), namespace: "research"}, pool: "inference", now: func() time.Time { return now }}
	srv := httptest.NewServer(c.handler())
	defer srv.Close()
	get := func(path string) (string, http.Header) {
		t.Helper()
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s: %s", path, res.Status, body)
		}
		return string(body), res.Header
	}
	page, header := get("/")
	if !strings.Contains(header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Errorf("no content security policy: %v", header)
	}
	if n := strings.Count(page, `class="gpu lent"`); n != 3+1 { // three in the grid, one in the legend
		t.Errorf("%d lent GPUs drawn, want 3 and the legend's", n)
	}
	for _, want := range []string{`<svg viewBox`, `class="band"`, `data-name="x"`, `/static/console.js`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	timeline, _ := get("/job?kind=Pod&name=x")
	if strings.Contains(timeline, "<script>") || !strings.Contains(timeline, "&lt;script&gt;") {
		t.Errorf("a tenant's message is not escaped: %s", timeline)
	}
	if js, _ := get("/static/console.js"); !strings.Contains(js, "EventSource") {
		t.Error("console.js is not served")
	}
}
