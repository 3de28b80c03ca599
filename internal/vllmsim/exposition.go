package vllmsim

import (
	"math"
	"strconv"
)

// appendExposition writes one server's metrics in the Prometheus text format,
// with vLLM V1's names, help texts, labels and `_created` gauges.
func appendExposition(b []byte, l Load, c *counters) []byte {
	labels := `{engine="0",model_name=` + strconv.Quote(l.Model) + `}`
	created := float64(c.created.UnixNano()) / 1e9
	gauge := func(name, help string, v float64) {
		b = append(b, "# HELP "+name+" "+help+"\n# TYPE "+name+" gauge\n"+name+labels+" "...)
		b = appendFloat(b, v)
		b = append(b, '\n')
	}
	counter := func(name, help string, v float64) {
		base := name[:len(name)-len("_total")]
		b = append(b, "# HELP "+name+" "+help+"\n# TYPE "+name+" counter\n"+name+labels+" "...)
		b = appendFloat(b, math.Floor(v))
		b = append(b, "\n# HELP "+base+"_created "+help+"\n# TYPE "+base+"_created gauge\n"+base+"_created"+labels+" "...)
		b = strconv.AppendFloat(b, created, 'e', -1, 64)
		b = append(b, '\n')
	}
	hist := func(name, help string, h histogram) {
		b = append(b, "# HELP "+name+" "+help+"\n# TYPE "+name+" histogram\n"...)
		le := `{engine="0",le="`
		model := `",model_name=` + strconv.Quote(l.Model) + "}"
		var cum float64
		for i, bound := range h.bounds {
			cum += h.counts[i]
			b = append(b, name+"_bucket"+le...)
			b = appendFloat(b, bound)
			b = append(b, model+" "...)
			b = appendFloat(b, math.Floor(cum))
			b = append(b, '\n')
		}
		b = append(b, name+"_bucket"+le+"+Inf"+model+" "...)
		b = appendFloat(b, math.Floor(h.count))
		b = append(b, '\n')
		b = append(b, name+"_count"+labels+" "...)
		b = appendFloat(b, math.Floor(h.count))
		b = append(b, "\n"+name+"_sum"+labels+" "...)
		b = appendFloat(b, h.sum)
		b = append(b, '\n')
	}
	gauge("vllm:num_requests_running", "Number of requests in model execution batches.", l.Running)
	gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", l.Waiting)
	gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", l.KVCache)
	counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", c.preemptions)
	counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", c.prompt)
	counter("vllm:generation_tokens_total", "Number of generation tokens processed.", c.generation)
	// request_success_total carries a finished_reason label.
	b = append(b, "# HELP vllm:request_success_total Count of successfully processed requests.\n# TYPE vllm:request_success_total counter\n"...)
	b = append(b, `vllm:request_success_total{engine="0",finished_reason="stop",model_name=`+strconv.Quote(l.Model)+"} "...)
	b = appendFloat(b, math.Floor(c.success))
	b = append(b, '\n')
	hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", c.queue)
	hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", c.ttft)
	hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", c.itl)
	return b
}

// appendFloat writes v as vLLM's Python client does: integral values with ".0".
func appendFloat(b []byte, v float64) []byte {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		b = strconv.AppendFloat(b, v, 'f', 0, 64)
		return append(b, '.', '0')
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}
