package controller

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericserver "k8s.io/apiserver/pkg/server"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
	apiserveroptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/component-base/metrics/legacyregistry"
	netutils "k8s.io/utils/net"
)

// HealthCheck reports an unhealthy process with a non-nil error.
type HealthCheck func() error

// DefaultSecurePort is where gleaner-controller serves /healthz, /readyz and /metrics.
const DefaultSecurePort = 10261

// ServingOptions serve the controller's endpoints over HTTPS the way
// kube-scheduler serves its own: /healthz and /readyz to anyone (probes carry
// no credentials), /metrics only to callers the API server authenticates
// (TokenReview) and authorizes (a SubjectAccessReview of get on the
// non-resource URL /metrics). Without a serving certificate one is
// self-signed in memory.
type ServingOptions struct {
	SecureServing  *apiserveroptions.SecureServingOptions
	Authentication *apiserveroptions.DelegatingAuthenticationOptions
	Authorization  *apiserveroptions.DelegatingAuthorizationOptions
	// Profiling serves Go's /debug/pprof/ handlers behind the same
	// authentication and authorization as /metrics (a SubjectAccessReview of
	// get on the non-resource URL), as kube-scheduler's --profiling does. Off
	// by default: a heap profile names the objects the controller holds.
	Profiling bool
}

// NewServingOptions returns the defaults: port 10261 on every address.
func NewServingOptions() *ServingOptions {
	o := &ServingOptions{
		SecureServing:  apiserveroptions.NewSecureServingOptions(),
		Authentication: apiserveroptions.NewDelegatingAuthenticationOptions(),
		Authorization:  apiserveroptions.NewDelegatingAuthorizationOptions(),
	}
	o.SecureServing.BindPort = DefaultSecurePort
	// No certificate directory: without --tls-cert-file the certificate is
	// self-signed in memory, so a read-only root filesystem is enough.
	o.SecureServing.ServerCert.CertDirectory = ""
	o.SecureServing.ServerCert.PairName = "gleaner-controller"
	// Outside a cluster, --kubeconfig stands in (see Serve); inside, the
	// in-cluster config does.
	o.Authentication.TolerateInClusterLookupFailure = true
	o.Authentication.RemoteKubeConfigFileOptional = true
	o.Authorization.RemoteKubeConfigFileOptional = true
	return o
}

// AddFlags adds kube-scheduler's serving, authentication and authorization flags.
func (o *ServingOptions) AddFlags(fs *pflag.FlagSet) {
	o.SecureServing.AddFlags(fs)
	o.Authentication.AddFlags(fs)
	o.Authorization.AddFlags(fs)
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling,
		"Serve Go's profiles at /debug/pprof/ on the secure port, to callers allowed get on that non-resource URL.")
}

// Validate reports every invalid flag, each by name.
func (o *ServingOptions) Validate() error {
	var errs []error
	errs = append(errs, o.SecureServing.Validate()...)
	errs = append(errs, o.Authentication.Validate()...)
	errs = append(errs, o.Authorization.Validate()...)
	cert, key := o.SecureServing.ServerCert.CertKey.CertFile, o.SecureServing.ServerCert.CertKey.KeyFile
	if (cert == "") != (key == "") {
		errs = append(errs, fmt.Errorf("--tls-cert-file and --tls-private-key-file must be set together"))
	}
	for _, f := range []struct{ flag, path string }{{"--tls-cert-file", cert}, {"--tls-private-key-file", key}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.flag, err))
		}
	}
	return utilerrors.NewAggregate(errs)
}

// Serve exposes /healthz (every health check passes), /readyz (every health
// and readiness check passes) and /metrics (the legacy registry) until ctx
// ends. kubeconfig, when set, is what the API server is asked through if
// --authentication-kubeconfig or --authorization-kubeconfig are not. It
// returns once the listener is open, with its address (nil when
// --secure-port is 0: nothing is served).
func (o *ServingOptions) Serve(ctx context.Context, kubeconfig string, health, ready []HealthCheck) (net.Addr, error) {
	if o.SecureServing.BindPort == 0 && o.SecureServing.Listener == nil {
		return nil, nil
	}
	if err := o.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil, []net.IP{netutils.ParseIPSloppy("127.0.0.1")}); err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	if o.Authentication.RemoteKubeConfigFile == "" {
		o.Authentication.RemoteKubeConfigFile = kubeconfig
	}
	if o.Authorization.RemoteKubeConfigFile == "" {
		o.Authorization.RemoteKubeConfigFile = kubeconfig
	}
	var secure *genericserver.SecureServingInfo
	if err := o.SecureServing.ApplyTo(&secure); err != nil {
		return nil, fmt.Errorf("secure serving: %w", err)
	}
	var authn genericserver.AuthenticationInfo
	if err := o.Authentication.ApplyTo(&authn, secure, nil); err != nil {
		return nil, fmt.Errorf("delegated authentication: %w", err)
	}
	var authz genericserver.AuthorizationInfo
	if err := o.Authorization.ApplyTo(&authz); err != nil {
		return nil, fmt.Errorf("delegated authorization: %w", err)
	}
	handler := withAuth(endpoints(health, ready, o.Profiling), authn, authz)
	if _, _, err := secure.Serve(handler, 5*time.Second, ctx.Done()); err != nil {
		return nil, fmt.Errorf("serving health and metrics: %w", err)
	}
	return secure.Listener.Addr(), nil
}

// endpoints is the controller's mux; profiling adds /debug/pprof/.
func endpoints(health, ready []HealthCheck, profiling bool) http.Handler {
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
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// withAuth wraps handler in the filters kube-scheduler's endpoints run behind.
func withAuth(handler http.Handler, authn genericserver.AuthenticationInfo, authz genericserver.AuthorizationInfo) http.Handler {
	resolver := &apirequest.RequestInfoFactory{}
	handler = genericapifilters.WithAuthorization(handler, authz.Authorizer, scheme.Codecs)
	handler = genericapifilters.WithAuthentication(handler, authn.Authenticator, genericapifilters.Unauthorized(scheme.Codecs), nil, nil)
	handler = genericapifilters.WithRequestInfo(handler, resolver)
	handler = genericapifilters.WithCacheControl(handler)
	return genericfilters.WithPanicRecovery(handler, resolver)
}
