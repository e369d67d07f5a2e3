package waitqueue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/config"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// writeFile writes a file of the test's own and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func load(env map[string]string) (waitqueue.Settings, error) {
	e := config.New(func(k string) string { return env[k] })
	s := waitqueue.LoadSettings(e, 4)
	return s, e.Err()
}

// Every inconsistent authentication or TLS setting is refused at start,
// each with what to set; none is reported as the secret it holds.
func TestLoadSettingsRefusesInconsistentAuth(t *testing.T) {
	pw := writeFile(t, "pw", "s3cret-file\n")
	empty := writeFile(t, "empty", "\n")
	certs := testenv.TLSCerts(t)
	tests := []struct {
		name string
		env  map[string]string
		want string // in the error; "" = no error
	}{
		{"nothing set: the default user, as always", nil, ""},
		{"a user with a password file", map[string]string{"USHER_REDIS_USER": "usher-gateway", "USHER_REDIS_PASSWORD_FILE": pw}, ""},
		{"a password alone: requirepass", map[string]string{"USHER_REDIS_PASSWORD": "s3cret-env"}, ""},
		{"TLS with a CA and a client pair", map[string]string{"USHER_REDIS_TLS_CA": certs.CA, "USHER_REDIS_TLS_CERT": certs.ClientCert, "USHER_REDIS_TLS_KEY": certs.ClientKey}, ""},
		{"a user without a password", map[string]string{"USHER_REDIS_USER": "usher-gateway"}, "needs USHER_REDIS_PASSWORD_FILE"},
		{"both kinds of password", map[string]string{"USHER_REDIS_PASSWORD_FILE": pw, "USHER_REDIS_PASSWORD": "s3cret-env"}, "both set"},
		{"a missing password file", map[string]string{"USHER_REDIS_PASSWORD_FILE": pw + ".nope"}, "USHER_REDIS_PASSWORD_FILE"},
		{"an empty password file", map[string]string{"USHER_REDIS_PASSWORD_FILE": empty}, "empty"},
		{"credentials in the URL and in settings", map[string]string{"USHER_REDIS_URL": "redis://u:s3cret-url@127.0.0.1:6379", "USHER_REDIS_USER": "x", "USHER_REDIS_PASSWORD": "s3cret-env"}, "in one place"},
		{"a certificate without its key", map[string]string{"USHER_REDIS_TLS_CERT": certs.ClientCert}, "set both or neither"},
		{"a CA that is no PEM", map[string]string{"USHER_REDIS_TLS_CA": pw}, "no PEM certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(tt.env)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("LoadSettings = %v, want no error", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("LoadSettings = %v, want an error saying %q", err, tt.want)
			}
			if err != nil {
				for _, secret := range []string{"s3cret-file", "s3cret-env", "s3cret-url"} {
					if strings.Contains(err.Error(), secret) {
						t.Errorf("the error %q shows the password", err)
					}
				}
			}
		})
	}
}

// Printing, logging or marshalling the settings never shows the password.
func TestPasswordIsNeverPrinted(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"file":  {"USHER_REDIS_USER": "u", "USHER_REDIS_PASSWORD_FILE": writeFile(t, "pw", "s3cret-file")},
		"value": {"USHER_REDIS_USER": "u", "USHER_REDIS_PASSWORD": "s3cret-env"},
	} {
		s, err := load(env)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		fmt.Fprintf(&out, "%v %+v %#v %s", s, s, s, s.Password)
		slog.New(slog.NewJSONHandler(&out, nil)).Info("settings", "redis", s, "password", s.Password)
		j, _ := json.Marshal(s)
		out.Write(j)
		if strings.Contains(out.String(), "s3cret") {
			t.Errorf("%s: the password shows in %s", name, out.String())
		}
		if got, _ := s.Password.Reveal(); !strings.HasPrefix(got, "s3cret") {
			t.Errorf("%s: Reveal() = %q, want the password", name, got)
		}
	}
}

// aclRedis starts a redis-server whose default user is off and whose one
// user, svc, has password pw.
func aclRedis(t *testing.T, pw string, extra ...string) string {
	t.Helper()
	acl := writeFile(t, "users.acl", "user default off\nuser svc on >"+pw+" ~usher:* resetchannels +@all\nuser admin on >admin-pw ~* &* +@all\n")
	url, _ := testenv.RedisServerWith(t, append([]string{"--aclfile", acl}, extra...)...)
	return url
}

// A server whose default user is off: the right user and password get in,
// anything else is refused at once (Connect does not wait 30 seconds for
// credentials to get better), and a rotated password file is read by the
// next connection without a restart.
func TestConnectAsACLUser(t *testing.T) {
	url := aclRedis(t, "first-pw")
	pwFile := writeFile(t, "pw", "first-pw\n")
	ctx := context.Background()
	tests := []struct {
		name    string
		s       waitqueue.Settings
		refused bool
	}{
		{"no credentials", waitqueue.Settings{URL: url, Pool: 2}, true},
		{"a wrong password", waitqueue.Settings{URL: url, Pool: 2, User: "svc", Password: waitqueue.PasswordValue("nope")}, true},
		{"another user's password", waitqueue.Settings{URL: url, Pool: 2, User: "admin", Password: waitqueue.PasswordFile(pwFile)}, true},
		{"the user and its password file", waitqueue.Settings{URL: url, Pool: 2, User: "svc", Password: waitqueue.PasswordFile(pwFile)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			rdb, err := waitqueue.Connect(ctx, tt.s)
			if tt.refused {
				if err == nil {
					rdb.Close()
					t.Fatal("Connect = nil error, want refused")
				}
				if !strings.Contains(err.Error(), "refused user") || time.Since(start) > 5*time.Second {
					t.Fatalf("Connect = %v after %v, want a prompt refusal", err, time.Since(start))
				}
				return
			}
			if err != nil {
				t.Fatalf("Connect = %v", err)
			}
			rdb.Close()
		})
	}

	rdb, err := waitqueue.Connect(ctx, waitqueue.Settings{URL: url, Pool: 1, User: "svc", Password: waitqueue.PasswordFile(pwFile)})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	admin := redis.NewClient(&redis.Options{Addr: strings.TrimSuffix(strings.TrimPrefix(url, "redis://"), "/0"), Username: "admin", Password: "admin-pw"})
	defer admin.Close()
	// Rotation: the new password is added, the file rewritten, the old one
	// removed; connections made from then on use the new one.
	if err := admin.Do(ctx, "ACL", "SETUSER", "svc", ">second-pw").Err(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pwFile, []byte("second-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "svc", "<first-pw").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "CLIENT", "KILL", "USER", "svc").Err(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return rdb.Ping(ctx).Err() == nil }, "no connection with the rotated password")
	if who, err := rdb.Do(ctx, "ACL", "WHOAMI").Text(); err != nil || who != "svc" {
		t.Errorf("ACL WHOAMI = %q, %v; want svc", who, err)
	}
}

// TLS, for one server and for a Redis Cluster: a client with the CA and
// its certificate gets in; one without its certificate, or one that does
// not trust the server's CA, does not.
func TestConnectOverTLS(t *testing.T) {
	certs := testenv.TLSCerts(t)
	other := testenv.TLSCerts(t)
	tlsArgs := func(port int) []string {
		return []string{"--tls-port", strconv.Itoa(port), "--tls-cert-file", certs.ServerCert, "--tls-key-file", certs.ServerKey,
			"--tls-ca-cert-file", certs.CA, "--tls-auth-clients", "yes"}
	}
	single, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	aclRedis(t, "tls-pw", tlsArgs(single)...)
	cport, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// A cluster of one master holding every slot, announcing its TLS port.
	curl := aclRedis(t, "tls-pw", append(tlsArgs(cport), "--cluster-enabled", "yes", "--tls-cluster", "yes", "--cluster-announce-ip", "127.0.0.1",
		"--cluster-config-file", filepath.Join(t.TempDir(), "nodes.conf"))...)
	admin := redis.NewClient(&redis.Options{Addr: strings.TrimSuffix(strings.TrimPrefix(curl, "redis://"), "/0"), Username: "admin", Password: "admin-pw"})
	defer admin.Close()
	ctx := context.Background()
	if err := admin.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		info, _ := admin.ClusterInfo(ctx).Result()
		return strings.Contains(info, "cluster_state:ok")
	}, "the one-node cluster is not ok")

	auth := waitqueue.Settings{Pool: 2, User: "svc", Password: waitqueue.PasswordValue("tls-pw")}
	full := waitqueue.TLSFiles{CA: certs.CA, Cert: certs.ClientCert, Key: certs.ClientKey}
	for _, target := range []struct{ name, url string }{
		{"one server", fmt.Sprintf("rediss://127.0.0.1:%d", single)},
		{"a cluster", fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", cport, cport)},
	} {
		tests := []struct {
			name string
			tls  waitqueue.TLSFiles
			ok   bool
		}{
			{"CA and client certificate", full, true},
			{"no client certificate", waitqueue.TLSFiles{CA: certs.CA}, false},
			{"another CA", waitqueue.TLSFiles{CA: other.CA, Cert: certs.ClientCert, Key: certs.ClientKey}, false},
		}
		for _, tt := range tests {
			t.Run(target.name+"/"+tt.name, func(t *testing.T) {
				s := auth
				s.URL, s.TLS = target.url, tt.tls
				ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
				rdb, err := waitqueue.Connect(ctx, s)
				if !tt.ok {
					if err == nil {
						rdb.Close()
						t.Fatal("Connect = nil error, want refused")
					}
					return
				}
				if err != nil {
					t.Fatalf("Connect = %v", err)
				}
				defer rdb.Close()
				// A keyed command: a cluster client routes it to the node the
				// slots name, over TLS again.
				if err := rdb.Set(ctx, "usher:{tls}:probe", "1", time.Minute).Err(); err != nil {
					t.Fatalf("SET over TLS = %v", err)
				}
			})
		}
	}
}
