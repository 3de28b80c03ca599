package simulate

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkServeGen14Days simulates every policy (concurrently) over the
// 14-day ServeGen trace of 24 services with the openb job stream, with the
// evaluation defaults. It reports the wall time per run and, after the last
// run, writes the results as JSON and the timeline plot to bench/ in the
// repository, which bench/README.md shows. Skipped without ../shared/traces.
func BenchmarkServeGen14Days(b *testing.B) {
	fleet, jobs := readShared(b)
	cfg := DefaultConfig()
	var results []Result
	var err error
	start := time.Now()
	for b.Loop() {
		if results, err = RunAll(cfg, Policies, fleet, jobs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(time.Since(start).Seconds()/float64(b.N), "s/run")
	b.StopTimer()
	bench := filepath.Join(repoRoot(b), "bench")
	var js, png bytes.Buffer
	if err := WriteJSON(&js, results); err != nil {
		b.Fatal(err)
	}
	if err := WritePlot(&png, results); err != nil {
		b.Fatal(err)
	}
	for name, data := range map[string][]byte{"simulate-servegen-openb.json": js.Bytes(), "simulate-servegen-openb.png": png.Bytes()} {
		if err := os.WriteFile(filepath.Join(bench, name), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("wrote %s/simulate-servegen-openb.{json,png}", bench)
}
