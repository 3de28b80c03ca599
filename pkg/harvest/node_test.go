package harvest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

func nodeWith(labels, annotations map[string]string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: labels, Annotations: annotations}}
}

func TestReadNode(t *testing.T) {
	label := func(v string) map[string]string { return map[string]string{api.LabelHarvest: v} }
	gpus := func(v string) map[string]string { return map[string]string{api.AnnotationHarvestableGPUs: v} }

	tests := []struct {
		name    string
		node    *v1.Node
		want    Verdict
		wantErr bool
	}{
		{
			name: "no labels at all is closed",
			node: nodeWith(nil, nil),
			want: Closed,
		},
		{
			name: "missing label is closed even with an annotation",
			node: nodeWith(map[string]string{"other": "x"}, gpus("4")),
			want: Closed,
		},
		{
			name: "open",
			node: nodeWith(label("open"), gpus("4")),
			want: Verdict{State: api.HarvestOpen, HarvestableGPUs: 4},
		},
		{
			name: "open with zero",
			node: nodeWith(label("open"), gpus("0")),
			want: Verdict{State: api.HarvestOpen, HarvestableGPUs: 0},
		},
		{
			name: "draining",
			node: nodeWith(label("draining"), gpus("2")),
			want: Verdict{State: api.HarvestDraining, HarvestableGPUs: 2},
		},
		{
			name: "closed with annotation",
			node: nodeWith(label("closed"), gpus("0")),
			want: Verdict{State: api.HarvestClosed, HarvestableGPUs: 0},
		},
		{
			name: "closed without annotation is fine",
			node: nodeWith(label("closed"), nil),
			want: Closed,
		},
		{
			name:    "unknown state value",
			node:    nodeWith(label("Open"), gpus("4")),
			want:    Closed,
			wantErr: true,
		},
		{
			name:    "empty state value",
			node:    nodeWith(label(""), gpus("4")),
			want:    Closed,
			wantErr: true,
		},
		{
			name:    "open without annotation is half-written",
			node:    nodeWith(label("open"), nil),
			want:    Closed,
			wantErr: true,
		},
		{
			name:    "draining without annotation is half-written",
			node:    nodeWith(label("draining"), map[string]string{"other": "1"}),
			want:    Closed,
			wantErr: true,
		},
		{
			name:    "open with non-numeric annotation",
			node:    nodeWith(label("open"), gpus("four")),
			want:    Closed,
			wantErr: true,
		},
		{
			name:    "open with empty annotation",
			node:    nodeWith(label("open"), gpus("")),
			want:    Closed,
			wantErr: true,
		},
		{
			name:    "open with fractional annotation",
			node:    nodeWith(label("open"), gpus("1.5")),
			want:    Closed,
			wantErr: true,
		},
		{
			name:    "open with negative annotation",
			node:    nodeWith(label("open"), gpus("-1")),
			want:    Closed,
			wantErr: true,
		},
		{
			name:    "draining with malformed annotation",
			node:    nodeWith(label("draining"), gpus("2 ")),
			want:    Closed,
			wantErr: true,
		},
		{
			name:    "closed with malformed annotation",
			node:    nodeWith(label("closed"), gpus("x")),
			want:    Closed,
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadNode(tt.node)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ReadNode() error = %v, wantErr %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("ReadNode() = %+v, want %+v", got, tt.want)
			}
			// Callers treat an error as closed; the returned verdict must say so too.
			if err != nil && got.State != api.HarvestClosed {
				t.Errorf("ReadNode() returned state %q with error %v", got.State, err)
			}
		})
	}
}

func TestPublishedOn(t *testing.T) {
	v := Verdict{State: api.HarvestOpen, HarvestableGPUs: 3}
	tests := []struct {
		name string
		node *v1.Node
		want bool
	}{
		{"exact", nodeWith(map[string]string{api.LabelHarvest: "open", "x": "y"}, map[string]string{api.AnnotationHarvestableGPUs: "3", "a": "b"}), true},
		{"other state", nodeWith(map[string]string{api.LabelHarvest: "draining"}, map[string]string{api.AnnotationHarvestableGPUs: "3"}), false},
		{"other count", nodeWith(map[string]string{api.LabelHarvest: "open"}, map[string]string{api.AnnotationHarvestableGPUs: "4"}), false},
		{"missing annotation", nodeWith(map[string]string{api.LabelHarvest: "open"}, nil), false},
		{"missing label", nodeWith(nil, map[string]string{api.AnnotationHarvestableGPUs: "3"}), false},
		{"nothing", nodeWith(nil, nil), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := v.PublishedOn(tt.node); got != tt.want {
				t.Errorf("PublishedOn() = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestMergePatchRoundTrip applies the patch the way the controller does (a JSON
// merge patch on the Node) and reads the verdict back.
func TestMergePatchRoundTrip(t *testing.T) {
	verdicts := []Verdict{
		{State: api.HarvestOpen, HarvestableGPUs: 3},
		{State: api.HarvestOpen, HarvestableGPUs: 0},
		{State: api.HarvestDraining, HarvestableGPUs: 1},
		Closed,
	}
	starts := []struct {
		name string
		node *v1.Node
	}{
		{"bare node", nodeWith(nil, nil)},
		{"node with other metadata", nodeWith(map[string]string{"zone": "a"}, map[string]string{"note": "keep"})},
		{"node with a previous verdict", nodeWith(
			map[string]string{api.LabelHarvest: "draining", "zone": "a"},
			map[string]string{api.AnnotationHarvestableGPUs: "7", "note": "keep"})},
	}
	for _, v := range verdicts {
		for _, s := range starts {
			t.Run(string(v.State)+"/"+s.name, func(t *testing.T) {
				patch := v.MergePatch()
				if !json.Valid(patch) {
					t.Fatalf("MergePatch() is not JSON: %s", patch)
				}
				client := fake.NewClientset(s.node.DeepCopy())
				got, err := client.CoreV1().Nodes().Patch(context.Background(), s.node.Name, types.MergePatchType, patch, metav1.PatchOptions{})
				if err != nil {
					t.Fatalf("Patch: %v", err)
				}
				read, err := ReadNode(got)
				if err != nil {
					t.Fatalf("ReadNode after patch: %v", err)
				}
				if read != v {
					t.Errorf("ReadNode after patch = %+v, want %+v", read, v)
				}
				if !v.PublishedOn(got) {
					t.Errorf("PublishedOn after patch = false; labels %v annotations %v", got.Labels, got.Annotations)
				}
				// Unrelated metadata survives.
				for k, want := range s.node.Labels {
					if k != api.LabelHarvest && got.Labels[k] != want {
						t.Errorf("label %s = %q, want %q", k, got.Labels[k], want)
					}
				}
				for k, want := range s.node.Annotations {
					if k != api.AnnotationHarvestableGPUs && got.Annotations[k] != want {
						t.Errorf("annotation %s = %q, want %q", k, got.Annotations[k], want)
					}
				}
			})
		}
	}
}

func TestVerdictFit(t *testing.T) {
	open4 := Verdict{State: api.HarvestOpen, HarvestableGPUs: 4}
	tests := []struct {
		name       string
		v          Verdict
		lent, gpus int64
		want       Fit
	}{
		{"fits exactly", open4, 1, 3, Fits},
		{"one GPU too many", open4, 2, 3, NotEnoughGPUs},
		{"draining lends nothing new", Verdict{State: api.HarvestDraining, HarvestableGPUs: 8}, 0, 1, NotOpen},
		{"closed", Closed, 0, 1, NotOpen},
		{"a pod asking for no GPU still needs an open node", Closed, 0, 0, NotOpen},
	}
	for _, tt := range tests {
		if got := tt.v.Fit(tt.lent, tt.gpus); got != tt.want {
			t.Errorf("%s: Fit(%d, %d) = %d, want %d", tt.name, tt.lent, tt.gpus, got, tt.want)
		}
	}
}

// A verdict published with its merge patch, as the API server applies it
// (a strategic merge of a plain merge patch: the same for labels and annotations),
// reads back as itself.
func TestMergePatchReadsBack(t *testing.T) {
	for _, v := range []Verdict{{State: api.HarvestOpen, HarvestableGPUs: 6}, {State: api.HarvestDraining, HarvestableGPUs: 2}, Closed} {
		original, err := json.Marshal(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"zone": "a"}}})
		if err != nil {
			t.Fatal(err)
		}
		patched, err := strategicpatch.StrategicMergePatch(original, v.MergePatch(), v1.Node{})
		if err != nil {
			t.Fatal(err)
		}
		n := &v1.Node{}
		if err := json.Unmarshal(patched, n); err != nil {
			t.Fatal(err)
		}
		got, err := ReadNode(n)
		if err != nil || got != v || !v.PublishedOn(n) || n.Labels["zone"] != "a" {
			t.Errorf("%+v published: read back %+v, %v; labels %v", v, got, err, n.Labels)
		}
	}
}

// A node's availability reads back as written, chances not yet learned
// left out, and anything else written there (by hand, or half) reads as no
// availability.
func TestAvailabilityAnnotation(t *testing.T) {
	node := func(v string) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{api.AnnotationAvailability: v}}}
	}
	for _, a := range []Availability{
		{For: 105 * time.Minute, Survive1h: 0.93, Survive4h: 0.41},
		{For: 4 * time.Hour, AtLeast: true, Survive1h: 1, Survive4h: 0.9},
		{For: 2 * time.Hour, Survive1h: 0.5, Survive4h: NotLearned},
		{For: time.Hour, Survive1h: NotLearned, Survive4h: NotLearned},
	} {
		got, ok := ReadAvailability(node(a.String()))
		if !ok || got != a {
			t.Errorf("%q read as %+v (%v), want %+v", a.String(), got, ok, a)
		}
	}
	if got := (Availability{For: time.Hour, Survive1h: NotLearned, Survive4h: 0.25}).String(); got != "for=1h0m0s,survive-4h=0.25" {
		t.Errorf("a chance not learned is written as %q", got)
	}
	for _, bad := range []string{"", "survive-1h=0.5,survive-4h=0.5", "for=1h,survive-1h=-1", "for=1h,survive-1h=0.5,survive-4h=1.5", "for=-1h,survive-1h=0.5,survive-4h=0.5",
		"for=1h,survive-1h=NaN,survive-4h=0.5", "survive-1h=1,survive-1h=1,survive-1h=1", "for=1h,for>=2h,survive-1h=0.5", "for=1h,survive-1h=0.5,survive-4h=0.5,owner=me", "for=soon,survive-1h=0.5,survive-4h=0.5"} {
		if a, ok := ReadAvailability(node(bad)); ok {
			t.Errorf("%q read as %+v, want none", bad, a)
		}
	}
	if _, ok := ReadAvailability(&v1.Node{}); ok {
		t.Error("a node without the annotation has an availability")
	}
}
