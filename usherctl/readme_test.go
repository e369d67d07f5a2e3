package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"usher/internal/lottery"
	"usher/internal/ticket"
)

// drawScriptDoc is the page whose "Verifying a draw" section holds the script
// anyone runs to check a draw.
const drawScriptDoc = "../docs/events.md"

// documentedDrawScript is the "Verifying a draw" script of the events page,
// between its markers, without the code fence.
func documentedDrawScript(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(drawScriptDoc)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- verify-draw script: begin -->", "<!-- verify-draw script: end -->"
	s := string(b)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no %q … %q block", drawScriptDoc, begin, end)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(s[i+len(begin):j]), "\n") {
		if !strings.HasPrefix(l, "```") {
			lines = append(lines, l)
		}
	}
	if len(lines) > 10 {
		t.Errorf("the documented draw script has %d lines, it promises at most ten", len(lines))
	}
	return strings.Join(lines, "\n") + "\n"
}

func TestTheDocumentedDrawScriptRecomputesTheLotteryOrder(t *testing.T) {
	for _, tool := range []string{"bash", "curl", "jq", "xxd", "sha256sum", "openssl", "sort", "awk", "cut"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the documented draw script needs %s: %v", tool, err)
		}
	}
	script := documentedDrawScript(t)
	seed, err := lottery.NewSeed()
	if err != nil {
		t.Fatal(err)
	}
	// A pre-queue of user ids of every allowed character, in join order.
	var pre []lottery.Entry
	for i := range 40 {
		r := make([]byte, 3)
		rand.Read(r)
		pre = append(pre, lottery.Entry{Seq: uint64(i + 1), User: fmt.Sprintf("u.%d_%x:%d@shop-%d", i, r, i*7, i%3)})
	}
	pre = append(pre, lottery.Entry{Seq: 41, User: "Z"}, lottery.Entry{Seq: 42, User: "a"})
	want := lottery.Sorted(seed, pre)

	run := func(t *testing.T, seedHex string, users []lottery.Entry) (string, error) {
		t.Helper()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/queues/drop" {
				http.NotFound(w, r)
				return
			}
			json.NewEncoder(w).Encode(map[string]any{"name": "drop", "state": "open", "mode": "queue", "waiting": 0, "preQueue": 0,
				"lottery": map[string]any{"commitment": lottery.Commitment(seed), "seed": seedHex, "entries": len(users)}})
		}))
		defer srv.Close()
		dir := t.TempDir()
		var list strings.Builder
		for i, e := range users {
			list.WriteString(e.User)
			if i < len(users)-1 { // the last line without its newline: still read
				list.WriteByte('\n')
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "prequeue.txt"), []byte(list.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("bash", "-c", script)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GATEWAY="+srv.URL, "Q=drop", "USERS=prequeue.txt")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	t.Run("the order and digest usher computes", func(t *testing.T) {
		out, err := run(t, hex.EncodeToString(seed), pre)
		if err != nil {
			t.Fatalf("script: %v\n%s", err, out)
		}
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		if len(lines) != len(want)+1 {
			t.Fatalf("script printed %d lines, want %d ids and the digest:\n%s", len(lines), len(want), out)
		}
		for i, e := range want {
			if lines[i] != e.User {
				t.Fatalf("script's place %d = %q, want %q (lottery.Sorted)\n%s", i+1, lines[i], e.User, out)
			}
		}
		if got := strings.Fields(lines[len(want)])[0]; got != lottery.Digest(want) {
			t.Fatalf("script's digest = %s, want lottery.Digest = %s", got, lottery.Digest(want))
		}
	})
	t.Run("a seed that is not the one committed to", func(t *testing.T) {
		other, err := lottery.NewSeed()
		if err != nil {
			t.Fatal(err)
		}
		out, err := run(t, hex.EncodeToString(other), pre)
		if err == nil || !strings.Contains(out, "seed does not match the commitment") {
			t.Fatalf("script with another seed = %v\n%s\nwant a failure saying the seed does not match", err, out)
		}
	})
}

// Every ticket the README, the pages under docs/ and the OpenAPI document
// show is one the gateway could issue: the current format
// (ticket.Signer.Issue) with its queue, user, epoch and place, and a MAC of
// the right length (or elided, "…"). Only the MAC itself cannot be checked:
// it is keyed by a deployment's secret.
func TestTheDocumentsShowTicketsAsTheGatewayIssuesThem(t *testing.T) {
	signer, err := ticket.NewSigner(bytes.Repeat([]byte("k"), 32))
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.Strict()
	shown := regexp.MustCompile("\\bt\\d+\\.[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+\\.[^\\s\"/`),]*")
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil || len(pages) == 0 {
		t.Fatalf("no pages under ../docs: %v", err)
	}
	for _, doc := range append([]string{"../README.md", "../api/openapi.yaml"}, pages...) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, ex := range shown.FindAllString(string(b), -1) {
			parts := strings.Split(ex, ".")
			if len(parts) != 6 || parts[0] != "t2" {
				t.Errorf("%s shows ticket %s, want t2.<queue>.<user>.<epoch>.<seq>.<mac>", doc, ex)
				continue
			}
			q, err1 := b64.DecodeString(parts[1])
			user, err2 := b64.DecodeString(parts[2])
			seq, err3 := strconv.ParseUint(parts[4], 10, 64)
			if err := errors.Join(err1, err2, err3); err != nil {
				t.Errorf("%s shows ticket %s: %v", doc, ex, err)
				continue
			}
			want := signer.Issue(ticket.Ticket{Queue: string(q), User: string(user), Epoch: parts[3], Seq: seq})
			if _, err := signer.Parse(want); err != nil {
				t.Errorf("%s shows ticket %s, which no gateway issues (%v)", doc, ex, err)
				continue
			}
			wantParts := strings.Split(want, ".")
			if strings.Join(parts[:5], ".") != strings.Join(wantParts[:5], ".") ||
				(parts[5] != "…" && len(parts[5]) != len(wantParts[5])) {
				t.Errorf("%s shows ticket %s, want the shape of %s", doc, ex, want)
			}
		}
	}
}

// streamExampleDoc is the page whose push-stream section shows the event
// stream a client reads.
const streamExampleDoc = "../docs/api.md"

// The API guide's Server-Sent Events example is the OpenAPI document's, line
// for line — the heartbeat comment the notifier sends (": hb") included —
// so the two cannot tell a client different things.
func TestTheDocumentedStreamExampleIsTheOpenAPIOne(t *testing.T) {
	b, err := os.ReadFile("../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]struct {
			Get struct {
				Responses map[string]struct {
					Content map[string]struct {
						Example any `yaml:"example"`
					} `yaml:"content"`
				} `yaml:"responses"`
			} `yaml:"get"`
		} `yaml:"paths"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	want, _ := doc.Paths["/v1/queues/{queue}/tickets/{ticket}/events"].Get.Responses["200"].Content["text/event-stream"].Example.(string)
	if want == "" {
		t.Fatal("api/openapi.yaml has no example of the event stream")
	}
	b, err = os.ReadFile(streamExampleDoc)
	if err != nil {
		t.Fatal(err)
	}
	const curl, open = "curl -N localhost:8081/v1/queues/demo/tickets/$TICKET/events\n```\n```text\n", "\n```"
	_, after, ok := strings.Cut(string(b), curl)
	got, _, closed := strings.Cut(after, open)
	if !ok || !closed {
		t.Fatalf("%s has no text block after %q", streamExampleDoc, strings.TrimSpace(curl))
	}
	if strings.TrimSpace(got) != strings.TrimSpace(want) {
		t.Errorf("%s's event stream example:\n%s\nwant the OpenAPI document's:\n%s", streamExampleDoc, got, want)
	}
}
