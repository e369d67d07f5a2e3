package orderapi

import (
	"strings"
	"testing"

	"usher/gateway/httpapi"
)

// A key twice in an order's body is a 400 naming it: encoding/json would
// take the last, where a validating proxy in front may have checked the
// first.
func TestADuplicatedKeyInAnOrderBodyIsRefused(t *testing.T) {
	if _, _, err := parseOrderBody([]byte(`{"sku": "sku-1", "quantity": 1, "quantity": 50}`)); httpapi.StatusOf(err) != 400 || !strings.Contains(err.Error(), `"quantity" appears twice`) {
		t.Errorf(`parseOrderBody with "quantity" twice = %v, want a 400 naming it`, err)
	}
}

func FuzzOrderBody(f *testing.F) {
	for _, s := range []string{`{"sku":"a","quantity":1}`, `{"sku":"a"}`, `{}`, `{"quantity":1e99}`, `[]`, `{"sku":"a"} {}`, `{"sku":"a","sku":"b"}`, "\x00", `{"sku":"` + strings.Repeat("a", 65) + `"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sku, q, err := parseOrderBody(b)
		if err != nil {
			if httpapi.StatusOf(err) != 400 {
				t.Fatalf("parseOrderBody(%q) error status %d, want 400", b, httpapi.StatusOf(err))
			}
			return
		}
		if q < 1 || q > maxOrderQuantity || sku == "" {
			t.Fatalf("parseOrderBody(%q) = %q, %d: accepted an invalid order", b, sku, q)
		}
	})
}
