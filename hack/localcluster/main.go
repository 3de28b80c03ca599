// Command localcluster is the local cluster's parts in one binary, so that a
// fresh machine compiles and links one program for `make demo` instead of
// etcd, kube-apiserver, kube-controller-manager, kube-scheduler and KWOK
// (gleaner-scheduler runs the default profile too). Each part still runs as a
// process of its own:
//
//	localcluster etcd [etcd flags]
//	localcluster kube-apiserver [kube-apiserver flags]
//	localcluster controllers --kubeconfig FILE [--workers N]
//	localcluster kwok [kwok flags]
//
// Run through a link named etcd (or kube-apiserver, kwok), it is that part:
// scheduler_perf starts etcd from PATH.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/cli"
	"k8s.io/klog/v2"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/pkg/controller/deployment"
	"k8s.io/kubernetes/pkg/controller/replicaset"
	kwokconfig "sigs.k8s.io/kwok/pkg/config"
	kwokcmd "sigs.k8s.io/kwok/pkg/kwok/cmd"
	kwoklog "sigs.k8s.io/kwok/pkg/log"
	"sigs.k8s.io/kwok/pkg/utils/signals"
)

const usage = "usage: localcluster etcd|kube-apiserver|controllers|kwok [flags]"

func main() {
	part, args := filepath.Base(os.Args[0]), os.Args[1:]
	if part == "localcluster" {
		if len(args) == 0 {
			fmt.Fprintln(os.Stderr, usage)
			os.Exit(2)
		}
		part, args = args[0], args[1:]
	}
	switch part {
	case "etcd":
		etcdmain.Main(append([]string{"etcd"}, args...))
	case "kube-apiserver":
		cmd := apiserver.NewAPIServerCommand()
		cmd.SetArgs(args)
		os.Exit(cli.Run(cmd))
	case "controllers":
		if err := controllers(args); err != nil {
			fmt.Fprintln(os.Stderr, "controllers:", err)
			os.Exit(1)
		}
	case "kwok":
		os.Exit(kwok(args))
	default:
		fmt.Fprintf(os.Stderr, "unknown part %q\n%s\n", part, usage)
		os.Exit(2)
	}
}

// controllers runs the two controllers of kube-controller-manager the local
// cluster needs, Deployment and ReplicaSet, as it runs them: Deployments
// (inference services, autoscaled) make ReplicaSets, which make pods.
func controllers(args []string) error {
	fs := flag.NewFlagSet("controllers", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the cluster")
	workers := fs.Int("workers", 2, "concurrent syncs of each controller")
	klog.InitFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *kubeconfig == "" {
		return errors.New("--kubeconfig is required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	cfg.UserAgent = "localcluster-controllers"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	factory := informers.NewSharedInformerFactory(client, 12*time.Hour)
	apps, core := factory.Apps().V1(), factory.Core().V1()
	dc, err := deployment.NewDeploymentController(ctx, apps.Deployments(), apps.ReplicaSets(), core.Pods(), client)
	if err != nil {
		return err
	}
	rsc := replicaset.NewReplicaSetController(ctx, apps.ReplicaSets(), core.Pods(), client, replicaset.BurstReplicas)
	factory.Start(ctx.Done())
	go dc.Run(ctx, *workers)
	go rsc.Run(ctx, *workers)
	klog.InfoS("Deployment and ReplicaSet controllers running", "workers", *workers)
	<-ctx.Done()
	factory.Shutdown()
	return nil
}

// kwok is KWOK's command (sigs.k8s.io/kwok/cmd/kwok) with args.
func kwok(args []string) int {
	os.Args = append([]string{"kwok"}, args...) // its flags are parsed from os.Args
	// cobra adds pflag.CommandLine to every root command, and Kubernetes'
	// packages linked in here register their own --version there: start KWOK
	// with the empty set its own binary has.
	pflag.CommandLine = pflag.NewFlagSet("kwok", pflag.ExitOnError)
	flagset := pflag.NewFlagSet("global", pflag.ContinueOnError)
	flagset.ParseErrorsAllowlist.UnknownFlags = true
	flagset.Usage = func() {}
	ctx := signals.SetupSignalContext()
	ctx, logger := kwoklog.InitFlags(ctx, flagset)
	ctx, err := kwokconfig.InitFlags(ctx, flagset)
	if err != nil {
		logger.Error("Init config flags", "err", err)
		return 1
	}
	command := kwokcmd.NewCommand(ctx)
	command.PersistentFlags().AddFlagSet(flagset)
	command.SetArgs(args)
	if err := command.ExecuteContext(ctx); err != nil {
		logger.Error("Execute exit", "err", err)
		return 1
	}
	return 0
}
