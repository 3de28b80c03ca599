package pluginargs

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

type testArgs struct {
	BestEffort `json:",inline"`
	Timeout    *int32 `json:"timeoutSeconds,omitempty"`
}

func (a *testArgs) Default() {
	a.BestEffort.Default()
	if a.Timeout == nil {
		a.Timeout = new(int32(30))
	}
}

func (a *testArgs) Validate(path *field.Path) field.ErrorList { return a.BestEffort.Validate(path) }

// A misspelt field stops the scheduler naming the plugin and the field, instead
// of leaving the default in place unnoticed; so does a wrong type.
func TestDecodeIsStrict(t *testing.T) {
	for _, tt := range []struct {
		raw, want string
	}{
		{`{"timeoutSecond": 5}`, `decoding Test args: unknown field "timeoutSecond"`},
		{`{"timeoutSeconds": 5, "timeoutSeconds": 6}`, `duplicate field "timeoutSeconds"`},
		{`{"timeoutSeconds": "five"}`, "decoding Test args: json: cannot unmarshal string"},
		{`{"gpuResourceName": "cpu"}`, `pluginConfig[Test].args.gpuResourceName: Invalid value: "cpu"`},
	} {
		var args testArgs
		err := Decode("Test", &runtime.Unknown{Raw: []byte(tt.raw), ContentType: runtime.ContentTypeJSON}, &args)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error containing %q", tt.raw, err, tt.want)
		}
	}
	var args testArgs
	if err := Decode("Test", &runtime.Unknown{Raw: []byte(`{"timeoutSeconds": 5}`)}, &args); err != nil || *args.Timeout != 5 || args.Threshold() != 0 {
		t.Fatalf("valid args: %v, %+v", err, args)
	}
	if err := Decode("Test", nil, &args); err != nil {
		t.Fatalf("no args: %v", err)
	}
}
