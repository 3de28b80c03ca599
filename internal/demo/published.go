package demo

import (
	"context"
	"fmt"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

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
	fmt.Fprintf(w, "  Published by gleaner-controller      research's HarvestReport: %.1f GPU-hours, %d jobs (%d evicted at least once); GPUPool %v\n",
		float64(p.gpuSeconds)*scale/3600, p.jobs, p.evicted, p.pool)
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
	}
	return nil
}
