// Package args is a fixture for the reference tests: args with an embedded
// struct, a nested one, a skipped field and a list.
package args

// Shared is embedded inline.
type Shared struct {
	// Threshold is shared by several plugins.
	Threshold *int32 `json:"threshold,omitempty"`
}

// Args are a plugin's args.
type Args struct {
	Shared `json:",inline"`
	// Lease names a Lease.
	Lease Ref `json:"lease,omitempty"`
	// Internal is not an arg.
	Internal string `json:"-"`
	// Names are | piped.
	Names []string `json:"names,omitempty"`
	// Weight has no default.
	Weight *float64 `json:"weight,omitempty"`
}

// Ref names an object.
type Ref struct {
	// Name of the object.
	Name string `json:"name,omitempty"`
}
