package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
)

// HealthCheck reports an unhealthy process with a non-nil error.
type HealthCheck func() error

// Serve exposes /healthz (every health check passes), /readyz (every health
// and readiness check passes) and /metrics (the legacy registry) on addr until
// ctx ends. It returns once the listener is open, with the address it bound,
// so ":0" works in tests.
func Serve(ctx context.Context, addr string, health, ready []HealthCheck) (net.Addr, error) {
	mux := http.NewServeMux()
	handle := func(path string, checks []HealthCheck) {
		mux.HandleFunc(path, func(w http.ResponseWriter, _ *http.Request) {
			for _, check := range checks {
				if err := check(); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
			}
			fmt.Fprintln(w, "ok")
		})
	}
	handle("/healthz", health)
	handle("/readyz", append(append([]HealthCheck(nil), health...), ready...))
	mux.Handle("/metrics", legacyregistry.Handler())
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("serving health and metrics on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "Health and metrics server stopped")
		}
	}()
	return ln.Addr(), nil
}
