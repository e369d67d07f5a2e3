// Package redisacl is the Redis half of least privilege: the ACL user each
// usher process connects as, the keys it may touch and the commands it may
// run, and the ACL file a Redis server loads them from.
//
// Every key usher writes is under "usher:" (package keyspace): a queue's
// keys under "usher:{<queue>}:" (and the stock ledger the stock-aware
// queues share, "usher:{:stock}:", with them: whoever writes a line
// writes it), order records under "usher:order:{<id>}", and the shared
// payment breaker at "usher:breaker:payment". The users:
//
//	user               keys                                             commands
//	usher-gateway      queues, order records; the breaker read-only     the line's scripts and reads
//	usher-admitter     queues; the breaker read-only                    the line's scripts and reads; SCAN, UNLINK (a closed queue's drop)
//	usher-notifier     queues                                           reads only, in scripts too; ZADD of usher:{q}:seen only (presence)
//	usher-orderworker  queues, order records, the breaker               the line's scripts and reads; DEL of the breaker's key only
//	usher-usherctl     queues                                           the line's scripts and reads (rebuild)
//	usher-admin        everything                                       everything: for people (redis-cli), never a service
//
// and Redis's default user is off: a connection without credentials is
// refused.
//
// Each service takes only the roles of the line (packages under
// internal/waitqueue) that its user's commands allow:
//
//	service      roles of the line
//	gateway      line; admission (at once, closing); claims (claim, restock); drop (invites)
//	admitter     admission; projection (its Remove and Forget: SCAN, UNLINK); drop; claims (stock refresh)
//	notifier     line, for Poll, Ranks and Present only: reading scripts, ZADD of seen
//	orderworker  claims
//	usherctl     projection, for a rebuild's restore only
//
// TestEachServiceCanDoItsWork runs each service's roles as its user. No usher user may run an administrative or dangerous command
// (FLUSHALL, CONFIG, KEYS, DEBUG, ACL, MONITOR, SHUTDOWN…), touch a key
// outside its patterns, or use Pub/Sub.
//
// Scripts run with the permissions of the user calling them: each command a
// script calls is checked like one sent directly, so the notifier, allowed
// EVALSHA but only reading commands, cannot write through a script either.
// EVAL and EVALSHA declare their keys as read-write (Redis cannot tell what
// a script does with them), which is why even the notifier's key patterns
// are read-write: its commands are what keep it read-only.
//
// A process finds its password in a file (see waitqueue.Settings); Write
// creates each user's password file once and writes the ACL file with the
// passwords' SHA-256 hashes, never the passwords.
package redisacl

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"usher/internal/config"
)

// Roles are the processes with a Redis user, named as on the broker.
const (
	Gateway     = "gateway"
	Admitter    = "admitter"
	Notifier    = "notifier"
	OrderWorker = "orderworker"
	Usherctl    = "usherctl"
)

// Admin is the user for people: every command on every key.
const Admin = "usher-admin"

// UserOf is the Redis user of a process of role.
func UserOf(role string) string { return "usher-" + role }

// Key patterns, in ACL syntax (~ read-write, %R~ read-only).
const (
	queueKeys   = "~usher:{*"
	orderKeys   = "~usher:order:{*"
	breakerRW   = "~usher:breaker:payment"
	breakerRead = "%R~usher:breaker:payment"
	seenKeys    = "~usher:{*}:seen"
)

// Commands every process runs: the clock (TIME), readiness (PING), a
// cluster's slot map and redirections, a database other than 0 (SELECT),
// and scripts (EVALSHA; SCRIPT LOAD when batching starts or a rebuild
// begins, EVAL when Redis lost a script meanwhile).
var base = []string{"ping", "time", "select", "cluster|slots", "asking", "evalsha", "eval", "script|load"}

// lineReads are the reading commands the line's scripts and clients call.
var lineReads = []string{
	"exists", "get", "hexists", "hget", "hgetall", "hkeys", "hlen", "hmget", "hvals",
	"zcard", "zcount", "zrange", "zrangebyscore", "zrank", "zscore",
}

// lineWrites are the writing commands the line's, the order records' and
// the rate limiter's scripts call (every redis.call in internal/: a test
// keeps this list complete).
var lineWrites = []string{
	"expire", "persist", "set", "incrby",
	"mset",   // a group of joins sets its users' pointers at once (ingest_group.lua)
	"msetnx", // a rebuild sets the users' pointers at once (restoreScript)
	"hset", "hsetnx", "hdel", "hincrby",
	"zadd", "zrem", "zremrangebyscore", // zsets, a drop's invite codes too (drop.Drop.AddInvites, UseInvite)
	"rename",                   // a drop's draw makes the staged order the line (drawScript)
	"multi", "exec", "discard", // a drop's invite codes, put and used atomically (the gateway: drop.Drop.AddInvites, UseInvite)
}

// User is one Redis ACL user.
type User struct {
	Name     string
	Keys     []string // key patterns in ACL syntax
	Commands []string // allowed commands (and command|subcommand)
	// Selectors are further rule sets, each allowing its own commands on
	// its own keys (Redis 7 selectors): what the user may do to one key
	// and no other.
	Selectors []string
	All       bool // every command on every key (the admin)
}

func commands(groups ...[]string) []string {
	var out []string
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

// Users returns every usher user, the admin last.
func Users() []User {
	line := commands(base, lineReads, lineWrites)
	return []User{
		{Name: UserOf(Gateway), Keys: []string{queueKeys, orderKeys, breakerRead}, Commands: line},
		{Name: UserOf(Admitter), Keys: []string{queueKeys, breakerRead}, Commands: commands(line, []string{"scan", "unlink"})},
		{Name: UserOf(Notifier), Keys: []string{queueKeys}, Commands: commands(base, lineReads),
			Selectors: []string{seenKeys + " +zadd"}}, // presence of the shoppers whose streams it holds, and only that
		{Name: UserOf(OrderWorker), Keys: []string{queueKeys, orderKeys, breakerRW}, Commands: line,
			Selectors: []string{breakerRW + " +del"}}, // closing the breaker deletes its key, and only that key
		{Name: UserOf(Usherctl), Keys: []string{queueKeys}, Commands: line},
		{Name: Admin, All: true},
	}
}

// Rules is the user's ACL rules, without its password: it starts from
// nothing (reset), so the line alone says everything the user may do.
func (u User) Rules() string {
	if u.All {
		return "reset on ~* &* +@all"
	}
	r := []string{"reset", "on", "resetchannels"}
	r = append(r, u.Keys...)
	r = append(r, "-@all")
	for _, c := range u.Commands {
		r = append(r, "+"+c)
	}
	for _, sel := range u.Selectors {
		r = append(r, "("+sel+")")
	}
	return strings.Join(r, " ")
}

// Allows reports whether the user may run command (lower case).
func (u User) Allows(command string) bool {
	return u.All || slices.Contains(u.Commands, command)
}

// AuthFile is the name of the ACL file Write writes.
const AuthFile = "users.acl"

// PasswordFile is where user's password lives in dir: <dir>/<user>.pass.
func PasswordFile(dir, user string) string { return filepath.Join(dir, user+".pass") }

// Write creates, in dir, each user's password file when it does not exist
// yet (32 random bytes, hex, readable by its owner only) and keeps it
// after, and writes dir/users.acl — every user with its rules and its
// password's SHA-256, the default user off — anew every time, so the
// server follows the code. It returns the users whose password it created.
func Write(dir string) (created []string, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var b strings.Builder
	b.WriteString("user default reset off\n")
	for _, u := range Users() {
		path := PasswordFile(dir, u.Name)
		_, statErr := os.Stat(path)
		pw, err := loadOrCreatePassword(path)
		if err != nil {
			return nil, fmt.Errorf("password of %s: %w", u.Name, err)
		}
		if errors.Is(statErr, fs.ErrNotExist) {
			created = append(created, u.Name)
		}
		sum := sha256.Sum256([]byte(pw))
		fmt.Fprintf(&b, "user %s %s #%s\n", u.Name, u.Rules(), hex.EncodeToString(sum[:]))
	}
	// Written aside and renamed: a server loading it never reads half.
	tmp, err := os.CreateTemp(dir, "."+AuthFile+".*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(b.String()); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("write %s: %w", AuthFile, err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("write %s: %w", AuthFile, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, AuthFile)); err != nil {
		return nil, fmt.Errorf("write %s: %w", AuthFile, err)
	}
	return created, nil
}

// loadOrCreatePassword reads the password at path, creating it first when
// the file does not exist (see config.LoadOrCreateFile: writers racing
// all end up with the same password, and nobody reads half of one).
func loadOrCreatePassword(path string) (string, error) {
	b, err := config.LoadOrCreateFile(path, func() ([]byte, error) {
		var r [32]byte
		if _, err := rand.Read(r[:]); err != nil {
			return nil, err
		}
		return []byte(hex.EncodeToString(r[:]) + "\n"), nil
	})
	if err != nil {
		return "", err
	}
	pw := strings.TrimRight(string(b), "\r\n")
	if pw == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return pw, nil
}
