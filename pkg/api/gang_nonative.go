//go:build kube1.35 || kube1.36

package api

import v1 "k8s.io/api/core/v1"

// NativeGroupOf is "" for every pod. Native gangs are supported from
// Kubernetes 1.37 (scheduling.k8s.io/v1beta1); built for an older minor
// (hack/minors), Gleaner reads no native PodGroup and treats their members as
// lone pods.
func NativeGroupOf(*v1.Pod) string { return "" }
