package controller

import (
	"context"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// LeaderElection configures the controller's Lease. The scheduler reads the same
// Lease as the controller's heartbeat: when it is not renewed within
// LeaseDuration, every node counts as closed.
type LeaderElection struct {
	Namespace     string
	Name          string
	Identity      string
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// WatchDog, if set, fails health checks when this process leads but stopped renewing.
	WatchDog *leaderelection.HealthzAdaptor
}

// DefaultLeaderElection is the client-go convention: 15s / 10s / 2s.
func DefaultLeaderElection() LeaderElection {
	host, _ := os.Hostname()
	return LeaderElection{
		Namespace:     api.SystemNamespace,
		Name:          api.ControllerLeaseName,
		Identity:      host + "_" + string(uuid.NewUUID()),
		LeaseDuration: 15 * time.Second,
		RenewDeadline: 10 * time.Second,
		RetryPeriod:   2 * time.Second,
	}
}

// RunLeaderElected runs run while this process holds the Lease. It returns when
// ctx ends, or with an error when leadership is lost, so the process restarts
// from a clean state rather than acting on a stale view.
func RunLeaderElected(ctx context.Context, client kubernetes.Interface, le LeaderElection, run func(context.Context) error) error {
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, le.Namespace, le.Name,
		client.CoreV1(), client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: le.Identity})
	if err != nil {
		return fmt.Errorf("leader election lock %s/%s: %w", le.Namespace, le.Name, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	lost := false
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          lock,
		LeaseDuration: le.LeaseDuration,
		RenewDeadline: le.RenewDeadline,
		RetryPeriod:   le.RetryPeriod,
		WatchDog:      le.WatchDog,
		// A stopping leader hands the Lease over at once instead of making the
		// standby wait out the lease duration. The scheduler sees the released
		// Lease as stale, so nothing is lent until the standby takes over.
		ReleaseOnCancel: true,
		Name:            Component,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				klog.FromContext(ctx).Info("Became leader", "lease", klog.KRef(le.Namespace, le.Name), "identity", le.Identity)
				err := run(ctx)
				runErr <- err
				cancel()
			},
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					lost = true
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	elector.Run(ctx)
	select {
	case err := <-runErr:
		if err != nil {
			return err
		}
	default:
	}
	if lost {
		return fmt.Errorf("lost lease %s/%s", le.Namespace, le.Name)
	}
	return nil
}
