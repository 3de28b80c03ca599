package controller

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestEndpointsServeProfilesOnlyWhenAsked(t *testing.T) {
	get := func(h http.Handler, path string) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code
	}
	failing := []HealthCheck{func() error { return errors.New("not yet") }}
	off := endpoints(nil, failing, false)
	on := endpoints(nil, failing, true)
	if code := get(off, "/debug/pprof/heap"); code != http.StatusNotFound {
		t.Errorf("without --profiling /debug/pprof/heap answered %d, want 404", code)
	}
	if code := get(on, "/debug/pprof/heap"); code != http.StatusOK {
		t.Errorf("with --profiling /debug/pprof/heap answered %d, want 200", code)
	}
	for _, h := range []http.Handler{off, on} {
		if code := get(h, "/healthz"); code != http.StatusOK {
			t.Errorf("/healthz answered %d, want 200", code)
		}
		if code := get(h, "/readyz"); code != http.StatusInternalServerError {
			t.Errorf("/readyz with a failing readiness check answered %d, want 500", code)
		}
	}
}
