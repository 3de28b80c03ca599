package v1alpha1

import "encoding/json"

// Earlier controllers wrote the GPUs inference holds as "inference" in the
// pool's history and outlook; it is now "serving", as in GPUCounts. An old
// object still reads: "serving" wins, else "inference" is taken. The CRD
// keeps "inference" in its schema so that the API server does not prune it
// from objects stored before.

// UnmarshalJSON reads a PoolSample, old or new.
func (s *PoolSample) UnmarshalJSON(data []byte) error {
	type plain PoolSample
	if err := json.Unmarshal(data, (*plain)(s)); err != nil {
		return err
	}
	if v, ok := oldServing(data); ok {
		s.Serving = v
	}
	return nil
}

// UnmarshalJSON reads an OutlookPoint, old or new.
func (p *OutlookPoint) UnmarshalJSON(data []byte) error {
	type plain OutlookPoint
	if err := json.Unmarshal(data, (*plain)(p)); err != nil {
		return err
	}
	if v, ok := oldServing(data); ok {
		p.Serving = v
	}
	return nil
}

// oldServing is the "inference" of an object an earlier controller wrote,
// with no "serving".
func oldServing(data []byte) (int64, bool) {
	var old struct {
		Serving   *int64 `json:"serving"`
		Inference *int64 `json:"inference"`
	}
	if json.Unmarshal(data, &old) != nil || old.Serving != nil || old.Inference == nil {
		return 0, false
	}
	return *old.Inference, true
}
