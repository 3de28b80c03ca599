package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"

	"github.com/gleaner-dev/gleaner/internal/cli"
	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/api/v1alpha1"
)

// chromium is the headless browser the console is tested in: Debian's
// chromium, which `make test-integration` installs (hack/ensure-chromium.sh).
// Without it the test is skipped, unless GLEANER_REQUIRE_BROWSER is set.
func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := exec.LookPath(p); err == nil {
			return p
		}
	}
	if os.Getenv("GLEANER_REQUIRE_BROWSER") != "" {
		t.Fatal("no chromium: run hack/ensure-chromium.sh (make test-integration does)")
	}
	t.Skip("no chromium to test the console in: hack/ensure-chromium.sh installs Debian's package")
	return ""
}

// TestConsole drives the web console in a real browser against a live
// apiserver: the grid shows the GPUs lent, a change in the cluster appears
// without a reload, a job's timeline opens on click (and from the keyboard),
// and the page logs no error. Screenshots land in bin/console/.
func TestConsole(t *testing.T) {
	browser := chromium(t)
	cp := startControlPlane(t)
	createNamespace(t, cp.client, researchNS)
	publishFixture(t, cp)

	// kubectl gleaner console, as a user runs it, until the test ends.
	ctx, stop := context.WithCancel(context.Background())
	out, w := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- cli.Execute(ctx, []string{"--kubeconfig", cp.kubeconfig, "-n", researchNS, "console"},
			genericiooptions.IOStreams{In: strings.NewReader(""), Out: w, ErrOut: w}, func() time.Time { return cliNow })
		w.Close()
	}()
	t.Cleanup(func() {
		stop()
		if code := <-done; code != 0 {
			t.Errorf("kubectl gleaner console exited %d", code)
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	url := regexp.MustCompile(`http://127\.0\.0\.1:\d+/`).FindString(line)
	if url == "" {
		t.Fatalf("kubectl gleaner console printed %q, want its URL on 127.0.0.1", line)
	}

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.WindowSize(1366, 900))...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(alloc)
	defer cancelBrowser()
	var mu sync.Mutex
	var pageErrors []string
	err = chromedp.Listen(bctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			pageErrors = append(pageErrors, fmt.Sprintf("%s at %s:%d", e.ExceptionDetails.Text, e.ExceptionDetails.URL, e.ExceptionDetails.LineNumber))
		case *runtime.EventConsoleAPICalled:
			if e.Type == "error" {
				var args []string
				for _, a := range e.Args {
					args = append(args, fmt.Sprint(a.Description, a.Value))
				}
				pageErrors = append(pageErrors, strings.Join(args, " "))
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	shots := filepath.Join(repoRoot(t), "bin", "console")
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	screenshot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100)) // quality 100: a PNG
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(shots, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	count := func(selector string) int {
		t.Helper()
		n, err := chromedp.Run(bctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, selector)))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitFor := func(what, js string, timeout time.Duration) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for {
			ok, err := chromedp.Run(bctx, chromedp.Evaluate[bool](js))
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v", what, timeout)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	if err := chromedp.Do(bctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(`.grid`))); err != nil {
		t.Fatal(err)
	}
	waitFor("the live connection", `document.getElementById("connection").textContent === "live"`, 10*time.Second)
	// The fixture's pool: gpu-a lends 2, gpu-b 4.
	if lent, nodes := count(`.grid .gpu.lent`), count(`.grid .node`); lent != 6 || nodes != 2 {
		t.Errorf("the grid shows %d lent GPUs on %d nodes, want 6 on 2", lent, nodes)
	}
	if n := count(`svg.chart polygon.band`); n != 1 {
		t.Errorf("the chart has %d forecast bands, want 1", n)
	}
	screenshot("console.png")

	// A change in the cluster reaches the open page without a reload.
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`window.__sameLoad = true`)); err != nil {
		t.Fatal(err)
	}
	pools := dynamic.NewForConfigOrDie(cp.config).Resource(v1alpha1.GPUPoolResource)
	u, err := pools.Get(context.Background(), api.PoolInference, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	states, _, _ := unstructured.NestedSlice(u.Object, "status", "nodeStates")
	gpuB := states[1].(map[string]any)
	gpuB["lent"], gpuB["idle"] = int64(6), int64(0)
	if err := unstructured.SetNestedSlice(u.Object, states, "status", "nodeStates"); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	if _, err := pools.UpdateStatus(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("the new lent GPUs on the page", `document.querySelectorAll(".grid .gpu.lent").length === 8`, 5*time.Second)
	t.Logf("the page showed the change %v after it was written", time.Since(changed).Round(time.Millisecond))
	if sameLoad, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`window.__sameLoad === true`)); err != nil || !sameLoad {
		t.Errorf("the page reloaded to show the change (%v)", err)
	}

	// A job's timeline opens on a click, and another from the keyboard.
	if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS(`button.job[data-name="sft-x7k2p"]`))); err != nil {
		t.Fatal(err)
	}
	waitFor("sft-x7k2p's timeline", `(document.querySelector('.timeline[data-for="Workflow/sft-x7k2p"]') || {}).textContent.includes("evicted: the GPUs of node gpu-b are needed by serving/chat")`, 5*time.Second)
	screenshot("console-timeline.png")
	if err := chromedp.Do(bctx, chromedp.Focus(chromedp.CSS(`button.job[data-name="pretrain"]`)), chromedp.KeyEvent("\r")); err != nil {
		t.Fatal(err)
	}
	waitFor("pretrain's timeline from the keyboard", `(document.querySelector('.timeline[data-for="PodGroup/pretrain"]') || {}).textContent.includes("Noticed")`, 5*time.Second)

	mu.Lock()
	defer mu.Unlock()
	if len(pageErrors) > 0 {
		t.Errorf("the page logged errors: %v", pageErrors)
	}
}
