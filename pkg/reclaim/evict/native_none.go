//go:build kube1.35 || kube1.36

package evict

import "k8s.io/client-go/informers"

// NativeGroups stands for a native PodGroup lister in a build for a
// Kubernetes minor before 1.37 (hack/minors), which reads none: it is always
// nil.
type NativeGroups interface{ nativeGroups() }

// NativeGroupsFrom is nil: there are no native PodGroups to read.
func NativeGroupsFrom(informers.SharedInformerFactory) NativeGroups { return nil }

// NativeQuorum is 0: no pod is in a native gang.
func NativeQuorum(NativeGroups, string, string) int32 { return 0 }
