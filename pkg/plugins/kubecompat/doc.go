// Package kubecompat holds the few parts of the scheduler framework that differ
// between the Kubernetes minors Gleaner supports, so that the plugins build
// unchanged against each. The default build is for the newest minor; the
// modules under hack/minors build gleaner-scheduler for older ones with the
// build tag of their minor (kube1.35, kube1.36), each against that minor's
// k8s.io/kubernetes, as upstream's skew policy requires a kube-scheduler no
// newer than its API server.
package kubecompat
