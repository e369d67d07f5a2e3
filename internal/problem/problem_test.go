package problem_test

import (
	"encoding/json"
	"testing"

	"usher/internal/problem"
)

// Extension members sit beside the standard ones and never replace them.
func TestExtensions(t *testing.T) {
	p := problem.New(428, "challenge-required", "solve it")
	p.Extensions = map[string]any{"challenge": map[string]any{"difficulty": 18}, "reason": "missing", "status": 200, "bad": func() {}}
	var got map[string]any
	if err := json.Unmarshal(p.JSON(), &got); err != nil {
		t.Fatalf("JSON() = %s: %v", p.JSON(), err)
	}
	if got["status"] != 428.0 || got["reason"] != "missing" || got["type"] != "https://usher.dev/problems/challenge-required" {
		t.Errorf("JSON() = %s, want status 428 kept, reason added", p.JSON())
	}
	if c, _ := got["challenge"].(map[string]any); c["difficulty"] != 18.0 {
		t.Errorf("JSON() = %s, want the challenge member", p.JSON())
	}
	if _, ok := got["bad"]; ok {
		t.Errorf("JSON() = %s: a member that cannot be encoded was written", p.JSON())
	}
	plain := problem.New(404, "not-found", "x")
	if string(plain.JSON()) != `{"type":"https://usher.dev/problems/not-found","title":"Not Found","status":404,"detail":"x"}` {
		t.Errorf("JSON() without extensions = %s", plain.JSON())
	}
}
