package vllm

import (
	"bytes"
	"testing"
	"time"

	"github.com/gleaner-dev/gleaner/internal/vllmsim"
)

// BenchmarkParseSimulated is the CPU of parsing what `gleaner vllm-sim`
// serves (make bench-informer scrapes it): as served, and without the
// queue-time and time-to-first-token buckets, which only Rates' quantiles read.
func BenchmarkParseSimulated(b *testing.B) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	body := vllmsim.NewEndpoint(now).Render(vllmsim.Load{Model: "meta-llama/Llama-3.1-8B-Instruct", Running: 12, Waiting: 2, KVCache: 0.42}, now.Add(time.Hour))
	var withoutBuckets []byte
	for _, line := range bytes.SplitAfter(body, []byte("\n")) {
		if !bytes.HasPrefix(line, []byte(metricQueueTime+"_bucket")) && !bytes.HasPrefix(line, []byte(metricTimeToFirstToken+"_bucket")) {
			withoutBuckets = append(withoutBuckets, line...)
		}
	}
	for _, c := range []struct {
		name string
		body []byte
	}{{"as-served", body}, {"without-latency-buckets", withoutBuckets}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := parseBytes(c.body, Limits{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
