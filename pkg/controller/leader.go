package controller

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
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

// RunLeaderElected runs run while this process holds the Lease. When ctx ends,
// run is stopped and allowed to finish (its last writes included) before the
// Lease is released, so a standby never acts beside it. It returns run's error,
// or an error when leadership was lost, so the process restarts from a clean
// state rather than acting on a stale view.
func RunLeaderElected(ctx context.Context, client kubernetes.Interface, le LeaderElection, run func(context.Context) error) error {
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, le.Namespace, le.Name,
		client.CoreV1(), client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: le.Identity})
	if err != nil {
		return fmt.Errorf("leader election lock %s/%s: %w", le.Namespace, le.Name, err)
	}
	// The elector has a context of its own: it ends after run has returned.
	electorCtx, stopElector := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElector()
	var started atomic.Bool
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
			OnStartedLeading: func(leading context.Context) {
				started.Store(true)
				klog.FromContext(leading).Info("Became leader", "lease", klog.KRef(le.Namespace, le.Name), "identity", le.Identity)
				runCtx, stopRun := context.WithCancel(leading)
				stopOnShutdown := context.AfterFunc(ctx, stopRun)
				err := run(runCtx)
				stopOnShutdown()
				stopRun()
				runErr <- err
				stopElector()
			},
			OnStoppedLeading: func() {
				if electorCtx.Err() == nil {
					lost = true // the elector gave up renewing; nobody asked it to stop
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	// Not leading when ctx ends: nothing to finish, stop campaigning.
	stopCampaign := context.AfterFunc(ctx, func() {
		if !started.Load() {
			stopElector()
		}
	})
	defer stopCampaign()
	elector.Run(electorCtx)
	if started.Load() {
		if err := <-runErr; err != nil {
			return err
		}
	}
	if lost {
		return fmt.Errorf("lost lease %s/%s", le.Namespace, le.Name)
	}
	return nil
}
