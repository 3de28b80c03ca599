package controller

import (
	"os"
	"strings"
	"testing"
)

// TestPolicyMetricsAreDocumented keeps docs/metrics.md in step with the demand
// and autoscaler metrics.
func TestPolicyMetricsAreDocumented(t *testing.T) {
	docs, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range policyMetrics {
		if !strings.Contains(string(docs), "`"+m.FQName()+"`") {
			t.Errorf("metric %s is not documented in docs/metrics.md", m.FQName())
		}
	}
}
