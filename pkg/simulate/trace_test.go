package simulate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseServices(t *testing.T) {
	in := "window_start_s,service,model_class,rate_req_per_s,cv\n" +
		"0,a,m,1.5,0.1\n0,b,m,0,0.1\n600,a,m,2.5,0.1\n600,b,m,3,0.1\n"
	f, err := ParseServices("s.csv", strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if f.Window != 600*time.Second || len(f.Services) != 2 || f.Services[0].Name != "a" || f.Services[0].Rates[1] != 2.5 || f.Services[1].Rates[1] != 3 {
		t.Fatalf("parsed %+v", f)
	}
	// Steps: window 1 from 600 s; past the end the trace repeats.
	if f.RateAt(0, 599*time.Second) != 1.5 || f.RateAt(0, 600*time.Second) != 2.5 || f.RateAt(0, 1200*time.Second) != 1.5 {
		t.Fatal("RateAt does not read steps")
	}
	// Linear: window 0's rate at its middle (300 s), window 1's at 900 s, halfway at 600 s.
	if f.LinearRateAt(0, 0) != 1.5 || f.LinearRateAt(0, 300*time.Second) != 1.5 || f.LinearRateAt(0, 600*time.Second) != 2 || f.LinearRateAt(0, 900*time.Second) != 2.5 {
		t.Fatal("LinearRateAt does not interpolate between window middles")
	}
	if f.Peak(0) != 2.5 {
		t.Fatal("Peak")
	}
}

func TestParseServicesErrors(t *testing.T) {
	const head = "window_start_s,service,model_class,rate_req_per_s,cv\n"
	tests := []struct{ name, in, want string }{
		{"missing column", "window_start_s,service,cv\n0,a,1\n", "s.csv:1: header lacks column(s) rate_req_per_s"},
		{"empty", "", "s.csv:1: empty file"},
		{"negative rate", head + "0,a,m,1,0\n600,a,m,-2,0\n", "s.csv:3: rate_req_per_s -2 is negative"},
		{"unsorted windows", head + "0,a,m,1,0\n600,a,m,1,0\n1200,a,m,1,0\n600,a,m,1,0\n", "s.csv:5: service a: window 600 s is not after the previous one (1200 s)"},
		{"gap", head + "0,a,m,1,0\n600,a,m,1,0\n1800,a,m,1,0\n", "s.csv:4: service a: window 1800 s follows 600 s, want windows of 600 s without gaps"},
		{"not from 0", head + "600,a,m,1,0\n", "s.csv:2: service a: first window starts at 600 s, want 0"},
		{"non-numeric rate", head + "0,a,m,lots,0\n", `s.csv:2: column rate_req_per_s: "lots" is not a number`},
		{"non-numeric window", head + "zero,a,m,1,0\n", `s.csv:2: column window_start_s: "zero" is not a number`},
		{"NaN rate", head + "0,a,m,NaN,0\n", `s.csv:2: column rate_req_per_s: "NaN" is not a number`},
		{"short row", head + "0,a,m\n", "s.csv:2: 3 fields, the header has 5"},
		{"empty service", head + "0,,m,1,0\n", "s.csv:2: column service is empty"},
		{"uneven services", head + "0,a,m,1,0\n600,a,m,1,0\n0,b,m,1,0\n", "service b has 1 windows"},
		{"bad quoting", head + "0,\"a,m,1,0\n", "s.csv:2:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseServices("s.csv", strings.NewReader(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestParseJobs(t *testing.T) {
	in := "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n" +
		"cpu-only,1000,1,0,0,,LS,Running,0,100,0\n" +
		"one,1000,1,1,1000,,LS,Running,10,110,20\n" +
		"never-scheduled,1000,1,2,1000,,LS,Pending,10,70,\n" +
		"instant,1000,1,1,1000,,LS,Failed,50,50,50\n"
	jobs, err := ParseJobs("j.csv", strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	// cpu-only has no GPU and instant does no work: skipped. one runs 110-20 = 90 s;
	// never-scheduled has no scheduled time, so 70-10 = 60 s from creation.
	if len(jobs) != 2 || jobs[0] != (Job{Name: "one", GPUs: 1, Work: 90 * time.Second}) || jobs[1] != (Job{Name: "never-scheduled", GPUs: 2, Work: 60 * time.Second}) {
		t.Fatalf("parsed %+v", jobs)
	}
}

func TestParseJobsErrors(t *testing.T) {
	const head = "name,num_gpu,creation_time,deletion_time,scheduled_time\n"
	tests := []struct{ name, in, want string }{
		{"missing columns", "name,num_gpu\nx,1\n", "j.csv:1: header lacks column(s) creation_time,deletion_time,scheduled_time"},
		{"non-numeric gpus", head + "a,1,0,10,0\nb,one,0,10,0\n", `j.csv:3: column num_gpu: "one" is not a number`},
		{"fractional gpus", head + "a,0.5,0,10,0\n", "j.csv:2: num_gpu 0.5 is not a whole number"},
		{"negative gpus", head + "a,-1,0,10,0\n", "j.csv:2: num_gpu -1 is not a whole number"},
		{"non-numeric time", head + "a,1,0,later,0\n", `j.csv:2: column deletion_time: "later" is not a number`},
		{"negative time", head + "a,1,0,10,-5\n", "j.csv:2: negative time"},
		{"no GPU job", head + "a,0,0,10,0\n", "j.csv: no job asks for a GPU"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseJobs("j.csv", strings.NewReader(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// repoRoot is the directory holding go.mod, found by walking up.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skip("no go.mod above the working directory, so no ../shared to read traces from")
		}
		dir = parent
	}
}

// sharedTraces is ../shared/traces next to the repository root, or skips the test.
func sharedTraces(t testing.TB) string {
	t.Helper()
	traces := filepath.Join(filepath.Dir(repoRoot(t)), "shared", "traces")
	for _, f := range []string{"servegen-services.csv", "openb/openb_pod_list_default.csv"} {
		if _, err := os.Stat(filepath.Join(traces, f)); err != nil {
			t.Skipf("public traces are not available next to the repository (%v); they live in ../shared/traces outside the repo", err)
		}
	}
	return traces
}

func readShared(t testing.TB) (*Fleet, []Job) {
	traces := sharedTraces(t)
	fleet, err := ReadServices(filepath.Join(traces, "servegen-services.csv"))
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := ReadJobs(filepath.Join(traces, "openb", "openb_pod_list_default.csv"))
	if err != nil {
		t.Fatal(err)
	}
	return fleet, jobs
}

func TestReadSharedTraces(t *testing.T) {
	fleet, jobs := readShared(t)
	if len(fleet.Services) != 24 || fleet.Window != 600*time.Second || len(fleet.Services[0].Rates) != 2016 {
		t.Fatalf("servegen: %d services, window %v, %d windows; want 24, 10m, 2016", len(fleet.Services), fleet.Window, len(fleet.Services[0].Rates))
	}
	if len(jobs) < 7000 {
		t.Fatalf("openb: %d GPU jobs, want about 7,060", len(jobs))
	}
}
