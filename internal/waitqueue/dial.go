package waitqueue

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/config"
	"usher/internal/keyspace"
	"usher/internal/redisacl"
)

// Settings say how a process reaches Redis and keeps its line.
//
// With no user, password or TLS setting (and no password file in the data
// folder, see As) a process connects as it always did: as Redis's default
// user, in plain text (what the fault suite and a laptop's Redis expect).
// In production each service connects as its own ACL user (package
// redisacl), over TLS when the network is not the host's own.
type Settings struct {
	// URL is a redis:// or rediss:// URL (or a bare host:port) of one
	// server, or a comma-separated list of host:port seeds of a Redis
	// Cluster (each may carry redis:// or rediss://).
	URL  string
	Pool int
	// Idle is how many idle connections each pool keeps per node
	// (USHER_REDIS_IDLE; 0 keeps every one): a connection handed back to a
	// pool that already holds Idle idle ones is closed, so most of a
	// burst's connections close as it ends (the rest: Lifetime).
	Idle int
	// Lifetime is how long a connection serves before the pool closes it
	// as it next takes it (zero: connLifetime). Below Idle a pool would
	// otherwise keep, for good, every connection the most it ever needed
	// at once dialed (see connLifetime).
	Lifetime time.Duration
	// AddrMap maps Redis Cluster node addresses to the ones this process
	// dials instead (USHER_REDIS_ADDR_MAP, "host:port=host:port,…"): a
	// cluster client learns its nodes' addresses from the cluster itself,
	// so the seeds alone cannot route one process through a proxy (NAT, a
	// sidecar, the fault suite's toxiproxy).
	AddrMap map[string]string
	// Tombstones is how long finished entries stay (USHER_TOMBSTONE_TTL).
	Tombstones time.Duration
	// User is the ACL user every connection authenticates as
	// (USHER_REDIS_USER); empty: Redis's default user.
	User string
	// Password authenticates User (USHER_REDIS_PASSWORD_FILE, or
	// USHER_REDIS_PASSWORD). It never appears in logs or errors.
	Password Password
	// TLS holds the PEM files of a TLS connection (USHER_REDIS_TLS_CA,
	// USHER_REDIS_TLS_CERT, USHER_REDIS_TLS_KEY). Any of them, or a
	// rediss:// URL, turns TLS on; without a CA the host's roots verify the
	// server.
	TLS TLSFiles

	dataDir string // USHER_DATA_DIR: where As looks for a role's password
}

// As returns s for a process of role (see package redisacl): when neither
// a user nor a password is set and the role's password file exists in the
// data folder (<USHER_DATA_DIR>/redis/usher-<role>.pass, as make run writes
// it), the process connects as the role's user with it. Explicit settings
// always win; without either, nothing changes.
func (s Settings) As(role string) Settings {
	if s.User != "" || s.Password.IsSet() || urlHasCredentials(s.URL) || role == "" || s.dataDir == "" {
		return s
	}
	user := redisacl.UserOf(role)
	path := redisacl.PasswordFile(DefaultPasswordDir(s.dataDir), user)
	if _, err := os.Stat(path); err != nil {
		return s
	}
	s.User, s.Password = user, PasswordFile(path)
	return s
}

// DefaultPasswordDir is where the users' password files live in a data
// folder: <dataDir>/redis.
func DefaultPasswordDir(dataDir string) string { return filepath.Join(dataDir, "redis") }

// TLSFiles are the PEM files of a TLS connection to Redis.
type TLSFiles struct {
	// CA verifies the server's certificate (empty: the host's roots).
	CA string
	// Cert and Key are the client's certificate and key, for a Redis that
	// requires them (tls-auth-clients yes); both or neither.
	Cert, Key string
}

func (f TLSFiles) set() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// Password is a Redis password, read from a file on every new connection
// (so a rotated file takes effect without a restart) or given as a value.
// Its String, GoString, LogValue and JSON forms are "[redacted]": printing
// Settings never shows it.
type Password struct {
	file  string
	value string
}

// PasswordFile is the password held in the file at path.
func PasswordFile(path string) Password { return Password{file: path} }

// PasswordValue is the password v.
func PasswordValue(v string) Password { return Password{value: v} }

// IsSet reports whether there is a password.
func (p Password) IsSet() bool { return p.file != "" || p.value != "" }

// Reveal returns the password: the file's contents without the trailing
// line break, or the value. An empty or unreadable file is an error that
// names the file, never its contents.
func (p Password) Reveal() (string, error) {
	if p.file == "" {
		return p.value, nil
	}
	b, err := os.ReadFile(p.file)
	if err != nil {
		return "", fmt.Errorf("redis password file: %w", err)
	}
	pw := strings.TrimRight(string(b), "\r\n")
	if pw == "" {
		return "", fmt.Errorf("redis password file %s: empty", p.file)
	}
	return pw, nil
}

const redacted = "[redacted]"

func (Password) String() string               { return redacted }
func (Password) GoString() string             { return redacted }
func (Password) LogValue() slog.Value         { return slog.StringValue(redacted) }
func (Password) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// LoadSettings reads the Redis settings; pool is the service's default
// pool size. A password file and the TLS files are read once here, so a
// missing or unreadable one is reported with every other problem.
func LoadSettings(env *config.Env, pool int) Settings {
	s := Settings{
		URL:        env.String("USHER_REDIS_URL", "redis://127.0.0.1:6379/0"),
		Pool:       env.Int("USHER_REDIS_POOL", pool, 1),
		Tombstones: env.Duration("USHER_TOMBSTONE_TTL", keyspace.TombstoneTTL),
		User:       env.String("USHER_REDIS_USER", ""),
		dataDir:    env.String("USHER_DATA_DIR", ".usher"),
		TLS: TLSFiles{
			CA:   env.String("USHER_REDIS_TLS_CA", ""),
			Cert: env.String("USHER_REDIS_TLS_CERT", ""),
			Key:  env.String("USHER_REDIS_TLS_KEY", ""),
		},
	}
	s.Idle = env.Int("USHER_REDIS_IDLE", min(s.Pool, idleConns), 0)
	if spec := env.String("USHER_REDIS_ADDR_MAP", ""); spec != "" {
		m, err := parseAddrMap(spec)
		env.Check(err)
		s.AddrMap = m
	}
	file, value := env.String("USHER_REDIS_PASSWORD_FILE", ""), env.String("USHER_REDIS_PASSWORD", "")
	switch {
	case file != "" && value != "":
		env.Check(errors.New("USHER_REDIS_PASSWORD_FILE and USHER_REDIS_PASSWORD are both set: set one"))
	case file != "":
		s.Password = PasswordFile(file)
		if _, err := s.Password.Reveal(); err != nil {
			env.Check(fmt.Errorf("USHER_REDIS_PASSWORD_FILE: %w", err))
		}
	case value != "":
		s.Password = PasswordValue(value)
	}
	env.Check(s.check())
	return s
}

// check lists what is wrong with the authentication and TLS settings.
func (s Settings) check() error {
	var errs []error
	if err := checkURL(s.URL); err != nil {
		errs = append(errs, err)
	}
	if s.User != "" && !s.Password.IsSet() {
		errs = append(errs, fmt.Errorf("USHER_REDIS_USER=%q needs USHER_REDIS_PASSWORD_FILE (or USHER_REDIS_PASSWORD)", s.User))
	}
	if (s.User != "" || s.Password.IsSet()) && urlHasCredentials(s.URL) {
		errs = append(errs, errors.New("USHER_REDIS_URL carries credentials and USHER_REDIS_USER or USHER_REDIS_PASSWORD(_FILE) is set: set them in one place"))
	}
	if (s.TLS.Cert == "") != (s.TLS.Key == "") {
		errs = append(errs, errors.New("USHER_REDIS_TLS_CERT and USHER_REDIS_TLS_KEY go together: set both or neither"))
	} else if s.TLS.set() {
		if _, err := s.TLS.config(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// checkURL refuses a USHER_REDIS_URL Dial could not connect with (see
// clusterAddrs and serverOptions), at start-up with the other settings:
// left to Dial, either would surface only once NATS was reached, a cluster
// list's after 30 s of dialling "lookup tcp/6379/0".
func checkURL(raw string) error {
	if strings.Contains(raw, ",") {
		_, _, err := clusterAddrs(raw)
		return err
	}
	_, err := serverOptions(raw)
	return err
}

// clusterAddrs reads a Redis Cluster's comma-separated list: each node's
// host:port, and whether any asked for TLS (rediss://). An entry that is
// not host:port is refused: a database path, "/0", has no place there (a
// cluster has database 0 only).
func clusterAddrs(raw string) (addrs []string, tls bool, err error) {
	for _, a := range strings.Split(raw, ",") {
		a = strings.TrimSpace(a)
		if rest, ok := strings.CutPrefix(a, "rediss://"); ok {
			a, tls = rest, true
		}
		if a = strings.TrimPrefix(a, "redis://"); a == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" || strings.ContainsAny(port, "/?#") {
			if i := strings.LastIndex(a, "@"); i >= 0 {
				a = "***" + a[i:] // credentials stay out of the error
			}
			return nil, false, fmt.Errorf("USHER_REDIS_URL: %q in the cluster's list is not host:port (a cluster has no database to name)", a)
		}
		addrs = append(addrs, a)
	}
	if len(addrs) == 0 {
		return nil, false, fmt.Errorf("USHER_REDIS_URL=%q: no address in the cluster's list", raw)
	}
	return addrs, tls, nil
}

// serverOptions reads a single server's URL (redis:// when it names no
// scheme).
func serverOptions(raw string) (*redis.Options, error) {
	u := raw
	if !strings.Contains(u, "://") {
		u = "redis://" + u
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		var ue *url.Error // it quotes the whole URL, password and all
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("USHER_REDIS_URL=%s: %w", redact(u), err)
	}
	if opt.DB < 0 { // go-redis would not SELECT it and use database 0
		return nil, fmt.Errorf("USHER_REDIS_URL=%s: no database %d: Redis numbers them from 0", redact(u), opt.DB)
	}
	return opt, nil
}

// config builds the TLS configuration of the files.
func (f TLSFiles) config() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("USHER_REDIS_TLS_CA: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("USHER_REDIS_TLS_CA %s: no PEM certificate in it", f.CA)
		}
	}
	if f.Cert != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("USHER_REDIS_TLS_CERT/USHER_REDIS_TLS_KEY: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// urlHasCredentials reports whether a single server's URL names a user or
// a password.
func urlHasCredentials(u string) bool {
	if strings.Contains(u, ",") || !strings.Contains(u, "://") {
		return false
	}
	p, err := url.Parse(u)
	return err == nil && p.User != nil
}

// protocol is RESP2. The line uses no RESP3 feature (push notifications,
// client-side caching), and on RESP3 go-redis looks for pushed data
// before reading each reply: 4.5 % of a busy gateway's CPU under polls.
const protocol = 2

// bufferSize is each Redis connection's read buffer and its write buffer,
// and pipelineBufferSize each of the pipeline pool's (go-redis's own pool
// for pipelines, at most 10 connections a node). At go-redis's defaults,
// 32 KiB and 128 KiB each, the connections a service's pools keep were
// nearly half of its live heap, and what grew when its pools did (the
// soak's heap profiles). The line's commands and replies are mostly a few
// hundred bytes, a batch of them a few KiB; a longer one is read or
// written in more calls, never refused.
const (
	bufferSize         = 8 << 10
	pipelineBufferSize = 32 << 10
)

// idleConns is the default Idle: enough for a service's steady load to
// reuse its connections, few enough that a burst's extra ones close when
// it ends.
const idleConns = 8

// connLifetime is the default Lifetime, and connLifetimeJitter spreads
// the connections' ends so they are not all dialed again at once. go-redis
// runs no reaper: it judges a connection's age or idleness only as it
// takes it from the pool, and it takes the one returned last, so the
// connections a burst added below Idle sat under the busy ones, never
// taken, never judged — a pool climbed over hours to the most it had
// needed at once (the soak's connections and open files grew so). With a
// lifetime, the connection on top expires too; the pool closes it and each
// expired one under it as it reaches them, and dials only what the load
// then needs. A few dials a minute a pool; and no connection outlives by
// more than this the topology it was dialed for.
const (
	connLifetime       = 5 * time.Minute
	connLifetimeJitter = time.Minute
)

// Dial connects to Redis (see Settings): as User with Password when they
// are set, over TLS when the URL is rediss:// or TLS files are set, to one
// server or to a Redis Cluster alike.
func Dial(s Settings) (redis.UniversalClient, error) {
	var tlsConfig *tls.Config
	if s.TLS.set() {
		cfg, err := s.TLS.config()
		if err != nil {
			return nil, err
		}
		tlsConfig = cfg
	}
	creds := s.credentials()
	lifetime := s.Lifetime
	if lifetime <= 0 {
		lifetime = connLifetime
	}
	jitter := min(connLifetimeJitter, lifetime/5)
	if strings.Contains(s.URL, ",") {
		addrs, secure, err := clusterAddrs(s.URL)
		if err != nil {
			return nil, err
		}
		if secure && tlsConfig == nil {
			tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		c := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: addrs, PoolSize: s.Pool, MaxIdleConns: s.Idle, Protocol: protocol,
			ReadBufferSize: bufferSize, WriteBufferSize: bufferSize,
			PipelineReadBufferSize: pipelineBufferSize, PipelineWriteBufferSize: pipelineBufferSize,
			ConnMaxLifetime: lifetime, ConnMaxLifetimeJitter: jitter,
			// The dialer does the TLS handshake itself, naming each
			// node by its own address.
			Dialer:                     mapDialer(s.AddrMap, tlsConfig),
			DialTimeout:                dialTimeout,
			CredentialsProviderContext: creds,
			// A failover shows as failed commands, not as MOVED: see
			// followTopology.
			ClusterStateReloadInterval: topologyRefresh,
		})
		followTopology(c)
		return c, nil
	}
	opt, err := serverOptions(s.URL)
	if err != nil {
		return nil, err
	}
	opt.PoolSize, opt.MaxIdleConns, opt.Protocol = s.Pool, s.Idle, protocol
	opt.ReadBufferSize, opt.WriteBufferSize = bufferSize, bufferSize
	opt.PipelineReadBufferSize, opt.PipelineWriteBufferSize = pipelineBufferSize, pipelineBufferSize
	opt.ConnMaxLifetime, opt.ConnMaxLifetimeJitter = lifetime, jitter
	if tlsConfig != nil {
		if opt.TLSConfig != nil {
			tlsConfig.ServerName = opt.TLSConfig.ServerName
		}
		opt.TLSConfig = tlsConfig
	}
	if creds != nil {
		opt.CredentialsProviderContext = creds
	}
	return redis.NewClient(opt), nil
}

// credentials is the provider of User and Password, asked on every new
// connection (nil: none set; a URL's own credentials apply).
func (s Settings) credentials() func(context.Context) (string, string, error) {
	if !s.Password.IsSet() {
		return nil
	}
	user, pw := s.User, s.Password
	return func(context.Context) (string, string, error) {
		p, err := pw.Reveal()
		return user, p, err
	}
}

// DialURL connects to the Redis at url with a pool of pool connections.
func DialURL(url string, pool int) (redis.UniversalClient, error) {
	return Dial(Settings{URL: url, Pool: pool})
}

// Connect dials Redis (see Dial) and waits until it answers PING — a Redis
// that is still loading its data set at start-up answers LOADING — for at
// most 30 seconds or until ctx ends. Refused credentials, and a database
// the server does not have, end the wait at once: they will not get better
// by waiting.
func Connect(ctx context.Context, s Settings) (redis.UniversalClient, error) {
	rdb, err := Dial(s)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		err := rdb.Ping(ctx).Err()
		if err == nil {
			return rdb, nil
		}
		if refused(err) {
			rdb.Close()
			return nil, fmt.Errorf("redis %s refused user %q (USHER_REDIS_USER, USHER_REDIS_PASSWORD_FILE, USHER_REDIS_TLS_*): %w", redact(s.URL), userName(s.User), err)
		}
		if strings.Contains(err.Error(), "DB index is out of range") { // SELECT, on every new connection
			rdb.Close()
			return nil, fmt.Errorf("USHER_REDIS_URL=%s: redis has no database %d (it has as many as its databases setting, 16 by default, numbered from 0): %w", redact(s.URL), database(rdb), err)
		}
		select {
		case <-ctx.Done():
			rdb.Close()
			return nil, fmt.Errorf("redis %s not ready: %w", redact(s.URL), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// refused reports whether err is Redis turning the credentials down, or
// either side of a TLS handshake refusing the other's certificate.
func refused(err error) bool {
	var cv *tls.CertificateVerificationError
	if errors.As(err, &cv) {
		return true
	}
	msg := err.Error()
	for _, p := range []string{"WRONGPASS", "NOAUTH", "NOPERM", "remote error: tls:"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// database is the index a single server's client SELECTs (a cluster has
// database 0 only).
func database(rdb redis.UniversalClient) int {
	if c, ok := rdb.(*redis.Client); ok {
		return c.Options().DB
	}
	return 0
}

func userName(u string) string {
	if u == "" {
		return "default"
	}
	return u
}

// mapDialer dials the address m maps addr to, with TLS when tlsConfig is
// set, verifying the server as the node's own address (not the mapped
// one: a proxy in between is not who the certificate names); nil when
// there is neither: go-redis's own dialer.
func mapDialer(m map[string]string, tlsConfig *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if len(m) == 0 && tlsConfig == nil {
		return nil
	}
	d := net.Dialer{Timeout: dialTimeout}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		to := addr
		if mapped, ok := m[addr]; ok {
			to = mapped
		}
		conn, err := d.DialContext(ctx, network, to)
		if err != nil || tlsConfig == nil {
			return conn, err
		}
		cfg := tlsConfig.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, err
		}
		return tc, nil
	}
}

// parseAddrMap reads "from=to,from=to".
func parseAddrMap(spec string) (map[string]string, error) {
	m := map[string]string{}
	for _, pair := range strings.Split(spec, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		from, to, ok := strings.Cut(pair, "=")
		if _, _, err := net.SplitHostPort(from); !ok || err != nil {
			return nil, fmt.Errorf("USHER_REDIS_ADDR_MAP: %q is not host:port=host:port", pair)
		}
		if _, _, err := net.SplitHostPort(to); err != nil {
			return nil, fmt.Errorf("USHER_REDIS_ADDR_MAP: %q is not host:port=host:port", pair)
		}
		m[from] = to
	}
	return m, nil
}

// redact hides a password in a Redis URL before it is shown.
func redact(u string) string {
	if i := strings.LastIndex(u, "@"); i >= 0 {
		if j := strings.Index(u, "://"); j >= 0 && j < i {
			return u[:j+3] + "***" + u[i:]
		}
	}
	return u
}
