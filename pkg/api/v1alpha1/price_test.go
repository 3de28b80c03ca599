package v1alpha1

import "testing"

func TestParsePrice(t *testing.T) {
	for _, bad := range [][2]string{{"-1", "USD"}, {"two", "USD"}, {"NaN", "USD"}, {"1", ""}, {"1", "US$"}, {"1", "dollarsdollars"}} {
		if _, err := ParsePrice(bad[0], bad[1]); err == nil {
			t.Errorf("ParsePrice(%q, %q) accepted", bad[0], bad[1])
		}
	}
	p, err := ParsePrice("0.75", "EUR")
	if err != nil || p.Value(7200) != "1.50 EUR" {
		t.Errorf("ParsePrice: %v, %v; value %q", p, err, p.Value(7200))
	}
	if p, err := ParsePrice("", ""); p != nil || err != nil {
		t.Errorf("no price: %v %v", p, err)
	}
}
