package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gleaner-dev/gleaner/internal/vllmsim"
)

// newVLLMSimCommand serves simulated vLLM /metrics for many pods on one port.
func newVLLMSimCommand() *cobra.Command {
	var (
		listen string
		def    vllmsim.Load
	)
	cmd := &cobra.Command{
		Use:   "vllm-sim",
		Short: "Serve simulated vLLM metrics for many pods from one process",
		Long: `vllm-sim serves vLLM V1 /metrics (vllm:num_requests_running, vllm:num_requests_waiting,
vllm:kv_cache_usage_perc, token counters and latency histograms) for many simulated
vLLM pods at once. Each pod is told apart by the local address its scrape arrived on,
so pods with loopback IPs (127.x.y.z) all reach one listener bound to 0.0.0.0.

Loads are set with PUT /sim/loads on 127.0.0.1, a JSON object from pod IP to
{"model": ..., "running": ..., "waiting": ..., "kvCache": ...}; GET /sim/loads shows them.
An address without a load gets 503 (a scraper reads it as busy) unless --model is
set, in which case it serves --running, --waiting and --kv-cache.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var dflt *vllmsim.Load
			if def.Model != "" {
				if err := def.Validate(); err != nil {
					return fmt.Errorf("vllm-sim default load: %w", err)
				}
				dflt = &def
			}
			sim := vllmsim.New(dflt)
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("vllm-sim cannot listen on %s (is the port in use? pick another with --listen): %w", listen, err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			srv := &http.Server{Handler: sim.Handler(), ReadHeaderTimeout: 5 * time.Second}
			go func() {
				<-ctx.Done()
				shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				_ = srv.Shutdown(shutdown)
			}()
			fmt.Fprintf(cmd.OutOrStdout(), "vllm-sim: serving vLLM metrics on %s\n", ln.Addr())
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "0.0.0.0:8000", "Address to serve on; 0.0.0.0 reaches every loopback address.")
	f.StringVar(&def.Model, "model", "", "Serve addresses without a load of their own as this model (default: answer 503).")
	f.Float64Var(&def.Running, "running", 0, "Running requests of the default load.")
	f.Float64Var(&def.Waiting, "waiting", 0, "Waiting requests of the default load.")
	f.Float64Var(&def.KVCache, "kv-cache", 0, "KV-cache usage (0..1) of the default load.")
	return cmd
}
