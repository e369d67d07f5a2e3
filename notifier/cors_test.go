package main

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"usher/internal/config"
)

func TestLoadCORSOrigins(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    []string
		wantErr string
	}{
		{"unset: the gateway's default address", nil, []string{"http://127.0.0.1:8080", "http://localhost:8080"}, ""},
		{"the gateway's own port", map[string]string{"USHER_GATEWAY_ADDR": "127.0.0.1:9090"}, []string{"http://127.0.0.1:9090", "http://localhost:9090"}, ""},
		{"the gateway on every interface", map[string]string{"USHER_GATEWAY_ADDR": ":8080"}, []string{"http://127.0.0.1:8080", "http://localhost:8080"}, ""},
		{"the gateway on a LAN address", map[string]string{"USHER_GATEWAY_ADDR": "10.1.2.3:8080"}, []string{"http://127.0.0.1:8080", "http://localhost:8080", "http://10.1.2.3:8080"}, ""},
		{"the gateway's public URL wins", map[string]string{"USHER_GATEWAY_PUBLIC_URL": "https://Shop.Example/", "USHER_GATEWAY_ADDR": ":8080"}, []string{"https://shop.example"}, ""},
		{"listed origins win", map[string]string{"USHER_NOTIFIER_CORS_ORIGINS": "https://a.example, https://b.example:8443", "USHER_GATEWAY_PUBLIC_URL": "https://shop.example"}, []string{"https://a.example", "https://b.example:8443"}, ""},
		{"any, said out loud", map[string]string{"USHER_NOTIFIER_CORS_ORIGINS": "*"}, []string{"*"}, ""},
		{"a listed URL with a path", map[string]string{"USHER_NOTIFIER_CORS_ORIGINS": "https://a.example/page"}, nil, "has a path"},
		{"a listed non-URL", map[string]string{"USHER_NOTIFIER_CORS_ORIGINS": "shop.example"}, nil, "is not an origin"},
		{"a public URL that is none", map[string]string{"USHER_GATEWAY_PUBLIC_URL": "ftp://shop.example"}, nil, "USHER_GATEWAY_PUBLIC_URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := config.New(func(k string) string { return tt.env[k] })
			got := loadCORSOrigins(env)
			err := env.Err()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("loadCORSOrigins = %v, %v; want an error saying %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("loadCORSOrigins = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// "Any origin" is a developer's choice on loopback and refused anywhere
// else, with what to set instead.
func TestAnyOriginIsRefusedBeyondLoopback(t *testing.T) {
	tests := []struct {
		addr    string
		origins []string
		refused bool
	}{
		{"127.0.0.1:8081", []string{"*"}, false},
		{"0.0.0.0:8081", []string{"*"}, true},
		{":8081", []string{"https://shop.example", "*"}, true},
		{"0.0.0.0:8081", []string{"https://shop.example"}, false},
	}
	for _, tt := range tests {
		err := unsafeCORS(tt.addr, tt.origins)
		if (err != nil) != tt.refused {
			t.Errorf("unsafeCORS(%s, %q) = %v, want refused %v", tt.addr, tt.origins, err, tt.refused)
		}
	}
}

// run with any origin on every interface stops before it connects to
// anything, and says what to set.
func TestRunRefusesAnyOriginOnEveryInterface(t *testing.T) {
	env := map[string]string{
		"USHER_NOTIFIER_ADDR": "0.0.0.0:0", "USHER_NOTIFIER_CORS_ORIGINS": "*",
		"USHER_NATS_URL": "nats://127.0.0.1:1", "USHER_REDIS_URL": "redis://127.0.0.1:1",
		"USHER_DATA_DIR": t.TempDir(),
	}
	err := run(context.Background(), func(k string) string { return env[k] }, &strings.Builder{})
	for _, want := range []string{"USHER_NOTIFIER_CORS_ORIGINS=* lets pages of any site read shoppers' streams", "listens on 0.0.0.0:0", "list the origins"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("run = %v\nwant it to say %q", err, want)
		}
	}
}

// Without USHER_NOTIFIER_CORS_ORIGINS a running notifier lets the gateway's
// pages open streams, and no one else's.
func TestCORSDefaultsToTheGatewaysOrigin(t *testing.T) {
	w := newWorld(t)
	tests := []struct {
		name    string
		env     []string
		allowed []string
		refused []string
	}{
		{"development: the gateway's loopback address", []string{"USHER_GATEWAY_ADDR", "127.0.0.1:8080"},
			[]string{"http://127.0.0.1:8080", "http://localhost:8080"}, []string{"http://evil.example", "http://127.0.0.1:9999", "null"}},
		{"production: the gateway's public URL", []string{"USHER_GATEWAY_PUBLIC_URL", "https://shop.example"},
			[]string{"https://shop.example"}, []string{"http://shop.example", "http://127.0.0.1:8080", "https://evil.example"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := w.start(tt.env...)
			url := n.url(w.queue, w.join(1, "alice"))
			check := func(origin, want string) {
				t.Helper()
				req, _ := http.NewRequest("OPTIONS", url, nil)
				req.Header.Set("Origin", origin)
				req.Header.Set("Access-Control-Request-Method", "GET")
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				if got := res.Header.Get("Access-Control-Allow-Origin"); got != want {
					t.Errorf("preflight from %s: Access-Control-Allow-Origin = %q, want %q", origin, got, want)
				}
			}
			for _, o := range tt.allowed {
				check(o, o)
			}
			for _, o := range tt.refused {
				check(o, "")
			}
		})
	}
}
