package demo

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/gleaner-dev/gleaner/internal/manifests"
	"github.com/gleaner-dev/gleaner/pkg/demand"
)

// TestComponentArgsFromShippedManifests: the demo runs the components with
// the args and scheduler configuration manifests/ ships, made local.
func TestComponentArgsFromShippedManifests(t *testing.T) {
	out, err := manifests.RenderInstall("../../manifests")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeYAML(out)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sched, err := componentArgs(objs, "gleaner-scheduler", dir, "/x/sched.kubeconfig")
	if err != nil {
		t.Fatal(err)
	}
	var config string
	for _, a := range sched.args {
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			config = v
		}
		if strings.HasPrefix(a, "--secure-port=10259") {
			t.Errorf("the shipped port was kept: %v", sched.args)
		}
	}
	data, err := os.ReadFile(config)
	if err != nil {
		t.Fatalf("scheduler config %q: %v (args %v)", config, err, sched.args)
	}
	var doc struct {
		ClientConnection struct{ Kubeconfig string } `json:"clientConnection"`
		Profiles         []struct{ SchedulerName string }
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.ClientConnection.Kubeconfig != "/x/sched.kubeconfig" || len(doc.Profiles) != 1 || doc.Profiles[0].SchedulerName != "gleaner-scheduler" {
		t.Fatalf("written scheduler config: %s", data)
	}
	if !strings.HasPrefix(sched.health, "https://127.0.0.1:") {
		t.Fatalf("scheduler health %s", sched.health)
	}

	ctrl, err := componentArgs(objs, "gleaner-controller", dir, "/x/ctrl.kubeconfig")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(ctrl.args, "--kubeconfig=/x/ctrl.kubeconfig") || !strings.HasPrefix(ctrl.health, "https://127.0.0.1:") {
		t.Fatalf("controller args %v, health %s", ctrl.args, ctrl.health)
	}
	tm, _ := newTiming(4)
	args := override(ctrl.args, tm.controllerFlags())
	count := func(prefix string) (n int) {
		for _, a := range args {
			if strings.HasPrefix(a, prefix) {
				n++
			}
		}
		return n
	}
	if count("--scrape-interval=") != 1 || !slices.Contains(args, "--scrape-interval=1s") || !slices.Contains(args, "--forecast-horizon=7.5s") || !slices.Contains(args, "--reclaim-lead=4s") {
		t.Fatalf("controller flags after override: %v", args)
	}
	// The controller's profile clock, read back from its flags as it parses
	// them, is the one the demo seeds last week's profile by, to the nanosecond.
	tm.profileOrigin = time.Date(2026, 12, 7, 22, 40, 13, 123456789, time.Local)
	var scale, origin string
	for _, a := range tm.controllerFlags() {
		if v, ok := strings.CutPrefix(a, "--profile-clock-scale="); ok {
			scale = v
		}
		if v, ok := strings.CutPrefix(a, "--profile-clock-origin="); ok {
			origin = v
		}
	}
	parsedScale, errScale := strconv.ParseFloat(scale, 64)
	parsedOrigin, errOrigin := time.Parse(time.RFC3339Nano, origin)
	start := tm.profileOrigin.Add(7 * time.Second)
	want := tm.profileClock().At(start)
	if errScale != nil || errOrigin != nil || !(demand.Clock{Origin: parsedOrigin, Scale: parsedScale}).At(start).Equal(want) {
		t.Fatalf("the controller's profile clock from --profile-clock-scale=%q --profile-clock-origin=%q (%v, %v) differs from the demo's, %v at its start", scale, origin, errScale, errOrigin, want)
	}
	if _, err := componentArgs(objs, "nope", dir, ""); err == nil {
		t.Fatal("a Deployment that is not rendered was found")
	}
}
