package api

import (
	"encoding/json"
	"time"

	v1 "k8s.io/api/core/v1"
)

// The time annotations (AnnotationReclaimNotice, AnnotationLastCheckpoint)
// hold RFC 3339 times. Every reader and writer goes through these, so the
// contract has one codec.

// FormatTime is a time as a time annotation holds it: RFC 3339, UTC, whole seconds.
func FormatTime(t time.Time) string { return t.UTC().Truncate(time.Second).Format(time.RFC3339) }

// ParseTime reads a time annotation's value.
func ParseTime(value string) (time.Time, error) { return time.Parse(time.RFC3339, value) }

// timeAnnotation is the time the pod's annotation key holds, if it holds a readable one.
func timeAnnotation(pod *v1.Pod, key string) (time.Time, bool) {
	raw, ok := pod.Annotations[key]
	if !ok || len(raw) > 64 {
		return time.Time{}, false
	}
	t, err := ParseTime(raw)
	return t, err == nil
}

// LastCheckpoint is the time the pod says it last checkpointed
// (AnnotationLastCheckpoint), if it says so readably. The pod's own word:
// callers bound what it may move.
func LastCheckpoint(pod *v1.Pod) (time.Time, bool) {
	return timeAnnotation(pod, AnnotationLastCheckpoint)
}

// ReclaimNotice is the time of the reclaim notice the pod carries
// (AnnotationReclaimNotice), if a readable one. Anyone who may patch the pod
// may write it: it tells the pod, and moves nothing in Gleaner.
func ReclaimNotice(pod *v1.Pod) (time.Time, bool) {
	return timeAnnotation(pod, AnnotationReclaimNotice)
}

// LastCheckpointPatch is the JSON merge patch recording a checkpoint at t on a pod.
func LastCheckpointPatch(t time.Time) []byte {
	return annotationPatch(AnnotationLastCheckpoint, FormatTime(t))
}

// CheckpointPatch is the JSON merge patch recording a checkpoint at t on a
// pod, and that it takes up to took to save once asked to stop
// (AnnotationSaveDuration, rounded up to a tenth of a second).
func CheckpointPatch(t time.Time, took time.Duration) []byte {
	took = (max(took, 0) + 100*time.Millisecond - 1).Truncate(100 * time.Millisecond)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		AnnotationLastCheckpoint: FormatTime(t), AnnotationSaveDuration: took.String()}}})
	return patch
}

// ReclaimNoticePatch is the JSON merge patch that gives a pod a reclaim
// notice for at, or withdraws it (the zero time).
func ReclaimNoticePatch(at time.Time) []byte {
	var value any
	if !at.IsZero() {
		value = FormatTime(at)
	}
	return annotationPatch(AnnotationReclaimNotice, value)
}

// annotationPatch sets (or, with nil, removes) one annotation.
func annotationPatch(key string, value any) []byte {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: value}}})
	return patch
}

// Truncate shortens s to at most n bytes, ending it with "…" when cut, without
// splitting a character: for text from outside (tenants, admins) kept in
// bounded fields.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}
