package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// startRun runs pgsim on a free loopback port and returns its base URL,
// the cancel function and run's result channel. It learns the address from
// the "listening" log line and keeps draining the log afterwards.
func startRun(t *testing.T, env map[string]string) (string, context.CancelFunc, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, envMap(env), pw)
		pw.Close()
		done <- err
	}()

	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			var line struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "listening" {
				addrc <- line.Addr
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()

	select {
	case addr := <-addrc:
		return "http://" + addr, cancel, done
	case err := <-done:
		cancel()
		t.Fatalf("run returned before listening: %v", err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("no listening log line")
	}
	return "", nil, nil
}

func TestRunServesPaymentsAndShutsDown(t *testing.T) {
	base, cancel, done := startRun(t, map[string]string{
		"PGSIM_ADDR":            "127.0.0.1:0",
		"PGSIM_LATENCY_MEAN_MS": "1",
		"PGSIM_LATENCY_TAIL":    "0",
		"PGSIM_ADMIN_TOKEN":     "e2e-token",
	})

	req, _ := http.NewRequest(http.MethodPost, base+"/v1/payments", strings.NewReader(validBody))
	req.Header.Set("Idempotency-Key", "e2e-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var p paymentResponse
	err = json.NewDecoder(resp.Body).Decode(&p)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated || p.IdempotencyKey != "e2e-1" || p.Status != "captured" {
		t.Fatalf("payment = %d %+v (%v)", resp.StatusCode, p, err)
	}

	req, _ = http.NewRequest(http.MethodGet, base+"/v1/admin/charges?key=e2e-1", nil)
	req.Header.Set("Authorization", "Bearer e2e-token")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var kc keyCharges
	err = json.NewDecoder(resp.Body).Decode(&kc)
	resp.Body.Close()
	if err != nil || kc.Charges != 1 {
		t.Fatalf("charges = %+v (%v), want 1", kc, err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run = %v, want nil after cancel", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	err := run(t.Context(), envMap(map[string]string{"PGSIM_FAILURE_RATE": "2"}), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "PGSIM_FAILURE_RATE") {
		t.Fatalf("run = %v, want a config error", err)
	}
}

func TestRunReportsBindErrorSynchronously(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = run(t.Context(), envMap(map[string]string{"PGSIM_ADDR": ln.Addr().String()}), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "listen") {
		t.Fatalf("run = %v, want a listen error", err)
	}
}

// A payment held by capture-hang mode does not hold up shutdown: run
// returns promptly and the client gets no answer, only a dropped
// connection.
func TestRunShutdownEndsCaptureHangRequests(t *testing.T) {
	base, cancel, done := startRun(t, map[string]string{
		"PGSIM_ADDR": "127.0.0.1:0", "PGSIM_LATENCY_MEAN_MS": "1", "PGSIM_ADMIN_TOKEN": "e2e-token",
	})
	req, _ := http.NewRequest(http.MethodPut, base+"/v1/admin/mode", strings.NewReader(`{"mode":"capture-hang"}`))
	req.Header.Set("Authorization", "Bearer e2e-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	held := make(chan error, 1) // nil: an answer came
	go func() {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/payments", strings.NewReader(validBody))
		req.Header.Set("Idempotency-Key", "held")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		held <- err
	}()
	// The charge is recorded before the request is held.
	deadline := time.Now().Add(10 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/payments/held", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the held charge was never recorded")
		}
		time.Sleep(5 * time.Millisecond)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run = %v, want nil", err)
		}
	case <-time.After(shutdownTimeout - time.Second):
		t.Fatal("run waited for the held request")
	}
	if err := <-held; err == nil {
		t.Fatal("the held payment was answered, want a dropped connection")
	}
}
