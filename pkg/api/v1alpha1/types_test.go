package v1alpha1

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// TestCRDSchemasMatchTypes: each CRD the chart ships describes its Go type
// field for field, with the same JSON types, so what the controller writes is
// what the API server keeps (an unknown field would be pruned).
func TestCRDSchemasMatchTypes(t *testing.T) {
	for file, typ := range map[string]reflect.Type{
		"gleaner.dev_gpupools.yaml":       reflect.TypeFor[GPUPool](),
		"gleaner.dev_harvestreports.yaml": reflect.TypeFor[HarvestReport](),
	} {
		t.Run(file, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("..", "..", "..", "charts", "gleaner", "crds", file))
			if err != nil {
				t.Fatal(err)
			}
			docs := strings.Split(string(raw), "\n---\n")
			var crd apiextensionsv1.CustomResourceDefinition
			if err := yaml.UnmarshalStrict([]byte(docs[len(docs)-1]), &crd); err != nil {
				t.Fatal(err)
			}
			if crd.Spec.Group != Group || len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != Version {
				t.Fatalf("%s: group %s versions %v, want %s/%s", file, crd.Spec.Group, crd.Spec.Versions, Group, Version)
			}
			v := crd.Spec.Versions[0]
			if v.Subresources == nil || v.Subresources.Status == nil {
				t.Error("no status subresource: status is the controller's alone")
			}
			st, _ := typ.FieldByName("Status")
			compare(t, "status", st.Type, v.Schema.OpenAPIV3Schema.Properties["status"])
			for _, col := range v.AdditionalPrinterColumns {
				if !strings.HasPrefix(col.JSONPath, ".status.") {
					t.Errorf("column %s reads %s, outside status", col.Name, col.JSONPath)
				}
			}
		})
	}
}

var timeType = reflect.TypeFor[metav1.Time]()

// oldNames are fields the schema keeps, though the Go type reads them only
// from objects stored before they were renamed (compat.go): without them the
// API server would prune them from those objects.
var oldNames = map[string]bool{"status.history[].inference": true, "status.outlook[].inference": true}

// compare checks that schema describes typ: the same fields by JSON name and
// the same JSON types, recursively.
func compare(t *testing.T, path string, typ reflect.Type, schema apiextensionsv1.JSONSchemaProps) {
	t.Helper()
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	want := ""
	switch {
	case typ == timeType:
		want = "string"
		if schema.Format != "date-time" {
			t.Errorf("%s: format %q, want date-time", path, schema.Format)
		}
	case typ.Kind() == reflect.String:
		want = "string"
	case typ.Kind() == reflect.Bool:
		want = "boolean"
	case typ.Kind() == reflect.Int32 || typ.Kind() == reflect.Int64:
		want = "integer"
		if f := "int" + strings.TrimPrefix(typ.Kind().String(), "int"); schema.Format != f {
			t.Errorf("%s: format %q, want %s", path, schema.Format, f)
		}
	case typ.Kind() == reflect.Slice:
		want = "array"
		if schema.Items == nil || schema.Items.Schema == nil {
			t.Errorf("%s: an array without items", path)
			return
		}
		if schema.MaxItems == nil {
			t.Errorf("%s: an array without maxItems", path)
		}
		compare(t, path+"[]", typ.Elem(), *schema.Items.Schema)
	case typ.Kind() == reflect.Struct:
		want = "object"
		fields := map[string]reflect.Type{}
		jsonFields(typ, fields)
		for name, ft := range fields {
			sub, ok := schema.Properties[name]
			if !ok {
				t.Errorf("%s.%s: in the Go type, not in the schema", path, name)
				continue
			}
			compare(t, path+"."+name, ft, sub)
		}
		for name := range schema.Properties {
			if _, ok := fields[name]; !ok && !oldNames[path+"."+name] {
				t.Errorf("%s.%s: in the schema, not in the Go type", path, name)
			}
		}
		for _, r := range schema.Required {
			if !slices.Contains(keysOf(fields), r) {
				t.Errorf("%s: requires %s, which the Go type lacks", path, r)
			}
		}
	default:
		t.Fatalf("%s: Go kind %s has no JSON type here", path, typ.Kind())
	}
	if schema.Type != want {
		t.Errorf("%s: schema type %q, want %q (Go %s)", path, schema.Type, want, typ)
	}
}

// jsonFields collects a struct's fields by JSON name, inline ones flattened.
func jsonFields(typ reflect.Type, out map[string]reflect.Type) {
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" && (f.Anonymous || strings.Contains(opts, "inline")) {
			jsonFields(f.Type, out)
			continue
		}
		out[name] = f.Type
	}
}

func keysOf(m map[string]reflect.Type) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A GPUPool an earlier controller wrote, with the serving GPUs of its
// history and outlook under "inference", still reads, through JSON and
// through the unstructured converter the controller and the console use;
// a new one reads "serving", which wins when both are there.
func TestOldServingNameStillReads(t *testing.T) {
	old := []byte(`{"apiVersion":"gleaner.dev/v1alpha1","kind":"GPUPool","metadata":{"name":"inference"},
		"status":{"observedTime":"2026-03-02T10:00:00Z","planning":true,"nodes":{"open":0,"draining":0,"closed":0},
		"gpus":{"total":8,"serving":4,"lent":0,"headroom":0,"idle":4,"lendable":0},"harvestedGPUSeconds":0,
		"history":[{"time":"2026-03-02T09:50:00Z","inference":4,"lent":2,"lendable":2},{"time":"2026-03-02T10:00:00Z","serving":3,"inference":9,"lent":1,"lendable":1}],
		"outlook":[{"time":"2026-03-02T10:00:00Z","inference":6,"lendableLow":1,"lendableHigh":2}]}}`)
	check := func(how string, p GPUPool) {
		t.Helper()
		if h := p.Status.History; len(h) != 2 || h[0].Serving != 4 || h[1].Serving != 3 || h[0].Lent != 2 {
			t.Errorf("%s: history %+v, want serving 4 (old name) then 3 (new name wins)", how, h)
		}
		if o := p.Status.Outlook; len(o) != 1 || o[0].Serving != 6 || o[0].LendableHigh != 2 {
			t.Errorf("%s: outlook %+v, want serving 6", how, o)
		}
	}
	var viaJSON GPUPool
	if err := json.Unmarshal(old, &viaJSON); err != nil {
		t.Fatal(err)
	}
	check("JSON", viaJSON)
	var content map[string]any
	if err := json.Unmarshal(old, &content); err != nil {
		t.Fatal(err)
	}
	var viaUnstructured GPUPool
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(content, &viaUnstructured); err != nil {
		t.Fatal(err)
	}
	check("unstructured", viaUnstructured)
	written, err := json.Marshal(viaJSON.Status.History[0])
	if err != nil || strings.Contains(string(written), "inference") || !strings.Contains(string(written), `"serving":4`) {
		t.Errorf("a sample is written as %s (%v), want serving alone", written, err)
	}
}
