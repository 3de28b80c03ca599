package pluginmetrics

import (
	"os"
	"strings"
	"testing"
)

func TestMetricsAreDocumented(t *testing.T) {
	docs, err := os.ReadFile("../../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range schedulerMetrics.All() {
		if !strings.HasPrefix(m.FQName(), "gleaner_scheduler_") {
			t.Errorf("metric %s is not under gleaner_scheduler_", m.FQName())
		}
		if !strings.Contains(string(docs), "`"+m.FQName()+"`") {
			t.Errorf("metric %s is not documented in docs/metrics.md", m.FQName())
		}
	}
}
