package httpapi

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"

	"usher/internal/testenv"
)

// A gateway holds at most its bound of connections: one more is answered
// 503 with a problem and Retry-After once it has sent its request, and
// closed; once a held connection closes, its place serves the next client.
func TestConnectionsPastTheBoundAreRefusedWithAProblem(t *testing.T) {
	app := NewApp("test", Limits{}, slog.New(slog.DiscardHandler), func(c *fiber.Ctx) error { return c.Next() })
	app.Get("/ok", func(c *fiber.Ctx) error { return c.SendString("ok") })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	go Listen(app, CapConns(ln, 2, reg))
	t.Cleanup(func() { app.Shutdown() })
	addr := ln.Addr().String()

	// Two clients each hold a keep-alive connection, served.
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if code := exchange(t, c); code != http.StatusOK {
			t.Fatalf("a connection within the bound answered %d, want 200", code)
		}
		held = append(held, c)
	}

	// A third is not answered before it sends its request: a client takes
	// an answer before its request as an unsolicited response.
	early, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer early.Close()
	early.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, err := early.Read(make([]byte, 1)); n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection past the bound read %d bytes (%v) before sending its request, want none", n, err)
	}
	early.SetReadDeadline(time.Time{})
	if code := exchange(t, early); code != http.StatusServiceUnavailable {
		t.Fatalf("a connection past the bound answered %d, want 503", code)
	}

	// A fourth is refused, by the stock client, with what to do.
	res, err := http.Get("http://" + addr + "/ok")
	if err != nil {
		t.Fatalf("the refused client saw %v, want the 503 answer", err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "1" ||
		res.Header.Get("Content-Type") != "application/problem+json" || json.Unmarshal(body, &p) != nil ||
		p.Status != 503 || !strings.Contains(p.Detail, "connections") {
		t.Fatalf("past the bound: %d, Retry-After %q, %s, want 503 with Retry-After 1 and a problem",
			res.StatusCode, res.Header.Get("Retry-After"), body)
	}
	if got := testenv.GatherValues(t, reg).Value("usher_http_connections_refused_total", nil); got != 2 {
		t.Errorf("usher_http_connections_refused_total = %v, want 2", got)
	}

	// One held connection closes: the next client is served.
	held[0].Close()
	testenv.Eventually(t, 10*time.Second, func() bool {
		res, err := http.Get("http://" + addr + "/ok")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}, "no client served after a held connection closed")
}

// exchange sends GET /ok on c and reads the status of the answer.
func exchange(t *testing.T, c net.Conn) int {
	t.Helper()
	if _, err := io.WriteString(c, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}
