package bus_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"usher/internal/bus"
	"usher/internal/config"
	"usher/internal/event"
)

// pki is a CA made for one test, and files of certificates it signed.
type pki struct {
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caFile string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "usher test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	p := &pki{dir: t.TempDir(), ca: ca, caKey: key}
	p.caFile = p.write(t, "ca.pem", "CERTIFICATE", der)
	return p
}

func (p *pki) write(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// issue signs a certificate for name (a server's on 127.0.0.1, or a
// client's) and returns its and its key's files.
func (p *pki) issue(t *testing.T, name string, usage x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return p.write(t, name+".pem", "CERTIFICATE", der), p.write(t, name+"-key.pem", "EC PRIVATE KEY", keyDER)
}

// TLS is one setting away: a server that requires TLS and verifies client
// certificates takes a process that names the CA, its certificate and its
// key — the URL stays nats:// — and nobody without them.
func TestTLSIsOneSettingAway(t *testing.T) {
	p := newPKI(t)
	srvCert, srvKey := p.issue(t, "nats", x509.ExtKeyUsageServerAuth)
	cliCert, cliKey := p.issue(t, "gateway", x509.ExtKeyUsageClientAuth)
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: srvCert, KeyFile: srvKey, CaFile: p.caFile, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		TLS: true, TLSVerify: true, TLSConfig: tc, TLSTimeout: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(s.Shutdown)
	url := s.ClientURL() // nats://127.0.0.1:port

	settings := func(env map[string]string) (bus.Settings, error) {
		env["USHER_NATS_URL"] = url
		e := config.New(func(k string) string { return env[k] })
		return bus.LoadSettings(e), e.Err()
	}
	t.Run("with the CA, a certificate and its key", func(t *testing.T) {
		s, err := settings(map[string]string{"USHER_NATS_TLS_CA": p.caFile, "USHER_NATS_TLS_CERT": cliCert, "USHER_NATS_TLS_KEY": cliKey})
		if err != nil {
			t.Fatal(err)
		}
		nc, js, err := bus.Open(context.Background(), s, "tls-test")
		if err != nil {
			t.Fatalf("Open over TLS: %v", err)
		}
		defer nc.Close()
		if st, err := nc.TLSConnectionState(); err != nil || st.Version < tls.VersionTLS12 {
			t.Fatalf("connection state %v, %v: want TLS", st.Version, err)
		}
		if _, err := js.Publish(context.Background(), event.EnterSubject("tls"), []byte("{}")); err != nil {
			t.Fatalf("publish over TLS: %v", err)
		}
	})
	refused := []struct {
		name string
		env  map[string]string
		want string // in the error
	}{
		{"without the CA", map[string]string{"USHER_NATS_TLS_CERT": cliCert, "USHER_NATS_TLS_KEY": cliKey}, "certificate"},
		{"without a client certificate", map[string]string{"USHER_NATS_TLS_CA": p.caFile}, ""},
		{"without TLS", map[string]string{}, ""},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			s, err := settings(tt.env)
			if err != nil {
				t.Fatal(err)
			}
			nc, err := bus.Connect(s, "tls-test")
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Connect = %v, want an error about %q", err, tt.want)
			}
		})
	}
	t.Run("a certificate without its key is a configuration error", func(t *testing.T) {
		if _, err := settings(map[string]string{"USHER_NATS_TLS_CERT": cliCert}); err == nil {
			t.Fatal("accepted")
		}
	})
}
