package v1alpha1

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParsePrice reads a GPU-hour price and its currency, as an admin sets them:
// a non-negative decimal, and a currency of 1 to 8 letters. An empty price
// is none (nil).
func ParsePrice(perGPUHour, currency string) (*Price, error) {
	if perGPUHour == "" {
		return nil, nil
	}
	if _, err := parsePerGPUHour(perGPUHour); err != nil {
		return nil, err
	}
	if len(currency) == 0 || len(currency) > 8 {
		return nil, fmt.Errorf("currency %q: want 1 to 8 letters (USD, EUR, credits)", currency)
	}
	for _, r := range currency {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z') {
			return nil, fmt.Errorf("currency %q: want 1 to 8 letters (USD, EUR, credits)", currency)
		}
	}
	return &Price{PerGPUHour: perGPUHour, Currency: currency}, nil
}

func parsePerGPUHour(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("GPU-hour price %q: want a non-negative decimal such as 2.50", s)
	}
	return v, nil
}

// Value is gpuSeconds at the price, rounded to cents ("" without a readable price).
func (p *Price) Value(gpuSeconds int64) string {
	if p == nil {
		return ""
	}
	per, err := parsePerGPUHour(p.PerGPUHour)
	if err != nil {
		return ""
	}
	v := per * float64(gpuSeconds) / 3600
	return strings.TrimSpace(fmt.Sprintf("%.2f %s", v, p.Currency))
}
