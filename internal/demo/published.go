package demo

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"

	"github.com/gleaner-dev/gleaner/internal/cli"
	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/api/v1alpha1"
)

// published is what gleaner-controller published by the end of the day:
// the GPUPool, and the research namespace's HarvestReport.
type published struct {
	pool                     bool
	gpuSeconds               int64
	jobs, evicted, timelines int
	err                      error
	// consoleErr: what kept the console the demo prints from showing the
	// pool (nil: it showed it).
	consoleErr error
}

// readPublished reads back what the controller published, as kubectl
// gleaner does.
func readPublished(ctx context.Context, c *cluster) published {
	var p published
	dyn, err := dynamic.NewForConfig(c.config)
	if err != nil {
		return published{err: err}
	}
	if _, err := dyn.Resource(v1alpha1.GPUPoolResource).Get(ctx, api.PoolInference, metav1.GetOptions{}); err == nil {
		p.pool = true
	}
	u, err := dyn.Resource(v1alpha1.HarvestReportResource).Namespace(researchNS).Get(ctx, v1alpha1.HarvestReportName, metav1.GetOptions{})
	if err != nil {
		return published{pool: p.pool, err: err}
	}
	var r v1alpha1.HarvestReport
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &r); err != nil {
		return published{pool: p.pool, err: err}
	}
	p.gpuSeconds, p.jobs = r.Status.HarvestedGPUSeconds, len(r.Status.Jobs)
	for _, j := range r.Status.Jobs {
		if j.Evictions > 0 {
			p.evicted++
		}
		if len(j.Timeline) > 1 {
			p.timelines++
		}
	}
	return p
}

func (p published) print(w io.Writer, scale float64) {
	if p.err != nil {
		fmt.Fprintf(w, "  Published by gleaner-controller      nothing readable: %v\n", p.err)
		return
	}
	console := "shows it"
	if p.consoleErr != nil {
		console = "failed: " + p.consoleErr.Error()
	}
	fmt.Fprintf(w, "  Published by gleaner-controller      research's HarvestReport: %.1f GPU-hours, %d jobs (%d evicted at least once); GPUPool %v; the console %s\n",
		float64(p.gpuSeconds)*scale/3600, p.jobs, p.evicted, p.pool, console)
}

// check says what is missing from what the controller published.
func (p published) check() []string {
	switch {
	case p.err != nil:
		return []string{fmt.Sprintf("gleaner-controller published no readable HarvestReport for %s: %v", researchNS, p.err)}
	case !p.pool:
		return []string{"gleaner-controller published no GPUPool"}
	case p.gpuSeconds <= 0 || p.timelines == 0:
		return []string{fmt.Sprintf("%s's HarvestReport shows no harvest (%d GPU-seconds) or no job's timeline", researchNS, p.gpuSeconds)}
	case p.consoleErr != nil:
		return []string{fmt.Sprintf("the console the demo prints did not show the pool: %v", p.consoleErr)}
	}
	return nil
}

// tryConsole runs kubectl gleaner console on the demo's cluster, as the
// printed command does, and checks that its page shows the pool's nodes and
// its chart.
func tryConsole(ctx context.Context, kubeconfig string) error {
	ctx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	out, w := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- cli.Execute(ctx, []string{"--kubeconfig", kubeconfig, "-n", researchNS, "console"},
			genericiooptions.IOStreams{In: strings.NewReader(""), Out: w, ErrOut: w}, time.Now)
		w.Close()
	}()
	defer func() { stop(); <-done }()
	line, err := bufio.NewReader(out).ReadString('\n')
	go func() { _, _ = io.Copy(io.Discard, out) }()
	if err != nil {
		return fmt.Errorf("no URL printed: %w", err)
	}
	i := strings.Index(line, "http://")
	if i < 0 {
		return fmt.Errorf("no URL printed: %q", line)
	}
	url := strings.TrimSpace(line[i:])
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	page, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK || !strings.Contains(string(page), `role="listitem"`) || !strings.Contains(string(page), `<svg`) {
		return fmt.Errorf("GET %s: %s, %d bytes without the pool's nodes and chart", url, res.Status, len(page))
	}
	return nil
}
