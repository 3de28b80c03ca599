package cli

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gleaner-dev/gleaner/pkg/api/v1alpha1"
)

// Defaults of the console's guards.
const (
	// defaultStreamsPerClient bounds the live pages one client (a user when
	// the console authenticates, else an address) holds open: a browser
	// holds one per tab, and no client may take every slot.
	defaultStreamsPerClient = 8
	// Timeouts: a request's headers and body within readTimeout, a response
	// written within writeTimeout (each event of a live page too), a
	// kept-alive connection dropped after idleTimeout without a request, and
	// a live page's stream ended after streamLifetime (the page reconnects).
	readTimeout    = 30 * time.Second
	writeTimeout   = 30 * time.Second
	idleTimeout    = 2 * time.Minute
	streamLifetime = 30 * time.Minute
	// reviewTTL is how long an answer of the API server's about a token is
	// kept: pages fetch often, and a revoked token stops working within it.
	reviewTTL = 10 * time.Second
	// maxReviews bounds the answers kept.
	maxReviews = 4096
)

// guard is the console's protection against whoever reaches it: the
// cluster's own authentication when asked for, a per-client bound on live
// pages, and the server's timeouts.
type guard struct {
	// reviewer asks the API server about tokens; nil serves anyone.
	reviewer *reviewer
	// perClient bounds each client's live pages (0: defaultStreamsPerClient).
	perClient int
	// Timeouts; zero values take the defaults above.
	readTimeout, writeTimeout, idleTimeout, streamLifetime time.Duration

	mu      sync.Mutex
	streams map[string]int // open live pages by client
}

func (g *guard) timeouts() (read, write, idle, stream time.Duration) {
	or := func(d, def time.Duration) time.Duration {
		if d > 0 {
			return d
		}
		return def
	}
	return or(g.readTimeout, readTimeout), or(g.writeTimeout, writeTimeout), or(g.idleTimeout, idleTimeout), or(g.streamLifetime, streamLifetime)
}

// server is an http.Server for handler with the guard's timeouts.
func (g *guard) server(handler http.Handler) *http.Server {
	read, write, idle, _ := g.timeouts()
	return &http.Server{Handler: handler, ReadHeaderTimeout: min(read, 10*time.Second), ReadTimeout: read, WriteTimeout: write, IdleTimeout: idle}
}

// openStream takes one of client's live-page slots; false when it holds
// them all. closeStream gives it back.
func (g *guard) openStream(client string) bool {
	limit := g.perClient
	if limit <= 0 {
		limit = defaultStreamsPerClient
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.streams[client] >= limit {
		return false
	}
	if g.streams == nil {
		g.streams = map[string]int{}
	}
	g.streams[client]++
	return true
}

func (g *guard) closeStream(client string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.streams[client]--; g.streams[client] <= 0 {
		delete(g.streams, client)
	}
}

// clientKey is who a request counts as for the per-client bound: its user
// when the console authenticates, else its remote address (behind a proxy
// that does not authenticate, the proxy's: all its clients count as one).
func clientKey(r *http.Request) string {
	if u, ok := r.Context().Value(userKey{}).(string); ok {
		return "user:" + u
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "addr:" + host
}

type userKey struct{}

// authorize lets a request for namespace ns through only if it carries a
// bearer token the API server authenticates, for a user it allows to get
// the namespace's HarvestReport (what the namespace's view role grants),
// and records the user on the request. Without a reviewer it lets
// everything through.
func (g *guard) authorize(w http.ResponseWriter, r *http.Request, ns string) (*http.Request, bool) {
	if g.reviewer == nil {
		return r, true
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || strings.TrimSpace(token) == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="gleaner-console"`)
		http.Error(w, "this console needs a bearer token the cluster accepts (Authorization: Bearer ...)", http.StatusUnauthorized)
		return r, false
	}
	user, allowed, err := g.reviewer.review(r.Context(), strings.TrimSpace(token), ns)
	switch {
	case err != nil:
		http.Error(w, "could not check the token with the cluster: "+err.Error(), http.StatusServiceUnavailable)
		return r, false
	case user == "":
		w.Header().Set("WWW-Authenticate", `Bearer realm="gleaner-console", error="invalid_token"`)
		http.Error(w, "the cluster does not accept this token", http.StatusUnauthorized)
		return r, false
	case !allowed:
		http.Error(w, fmt.Sprintf("%s may not read namespace %s's harvest", user, ns), http.StatusForbidden)
		return r, false
	}
	return r.WithContext(context.WithValue(r.Context(), userKey{}, user)), true
}

// reviewer asks the API server who a token is (TokenReview) and whether
// that user may read a namespace's HarvestReport (SubjectAccessReview), as
// gleaner-controller's /metrics asks about its callers, and keeps each
// answer for reviewTTL.
type reviewer struct {
	client kubernetes.Interface
	now    func() time.Time

	mu      sync.Mutex
	answers map[[sha256.Size]byte]answer
}

type answer struct {
	user    string // "" when the token is not accepted
	allowed bool
	at      time.Time
}

func (rv *reviewer) review(ctx context.Context, token, ns string) (user string, allowed bool, err error) {
	key := sha256.Sum256([]byte(ns + "\x00" + token))
	now := rv.now()
	rv.mu.Lock()
	a, ok := rv.answers[key]
	rv.mu.Unlock()
	if ok && now.Sub(a.at) < reviewTTL {
		return a.user, a.allowed, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tr, err := rv.client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return "", false, fmt.Errorf("TokenReview: %w", err)
	}
	a = answer{at: now}
	if tr.Status.Authenticated && tr.Status.User.Username != "" {
		a.user = tr.Status.User.Username
		extra := map[string]authorizationv1.ExtraValue{}
		for k, v := range tr.Status.User.Extra {
			extra[k] = authorizationv1.ExtraValue(v)
		}
		sar, err := rv.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User: tr.Status.User.Username, UID: tr.Status.User.UID, Groups: tr.Status.User.Groups, Extra: extra,
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "get", Group: v1alpha1.Group,
					Resource: v1alpha1.HarvestReportResource.Resource, Name: v1alpha1.HarvestReportName},
			}}, metav1.CreateOptions{})
		if err != nil {
			return "", false, fmt.Errorf("SubjectAccessReview: %w", err)
		}
		a.allowed = sar.Status.Allowed
	}
	rv.mu.Lock()
	if rv.answers == nil {
		rv.answers = map[[sha256.Size]byte]answer{}
	}
	if len(rv.answers) >= maxReviews {
		for k, old := range rv.answers {
			if now.Sub(old.at) >= reviewTTL {
				delete(rv.answers, k)
			}
		}
		if len(rv.answers) >= maxReviews {
			clear(rv.answers)
		}
	}
	rv.answers[key] = a
	rv.mu.Unlock()
	return a.user, a.allowed, nil
}

// errTooManyStreams is said to a client holding all its live pages.
var errTooManyStreams = errors.New("you have too many live pages open on this console; close some, or try again later")
