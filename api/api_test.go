package api_test

import (
	"encoding/json"
	"testing"

	"usher/api"
	"usher/api/contract"
)

// The document is valid OpenAPI 3.1, by the OpenAPI Initiative's schema
// of it (which package contract embeds).
func TestDocumentIsValidOpenAPI31(t *testing.T) {
	var doc struct {
		OpenAPI string `json:"openapi"`
	}
	if err := json.Unmarshal(api.JSON(), &doc); err != nil {
		t.Fatalf("JSON(): %v", err)
	}
	if doc.OpenAPI != "3.1.1" {
		t.Errorf("openapi = %q, want 3.1.1", doc.OpenAPI)
	}
	d, err := contract.Load()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.ValidateDocument(); err != nil {
		t.Fatalf("the document is not valid OpenAPI 3.1: %v", err)
	}
}
