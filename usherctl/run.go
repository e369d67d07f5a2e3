package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"usher/internal/waitqueue"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1 // a command failed, or audit found violations
	exitUsage   = 2 // bad command line
)

// errViolations is returned by audit when the history breaks an invariant;
// the verdict has already been printed.
var errViolations = errors.New("audit found violations")

// usageError is a bad command line: unknown command, bad flag, missing
// argument. It exits with status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// exitCode maps run's error to the process exit status.
func exitCode(err error) int {
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		return exitUsage
	default:
		return exitFailure
	}
}

// cli is one invocation: its environment, its streams and its clock.
type cli struct {
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	log    *slog.Logger
	now    func() time.Time
	// hooks let tests act at a command's racy points.
	hooks hooks
	// rebuildChunk is how many records a rebuild writes between progress
	// reports (and hook calls); 0 means defaultRebuildChunk.
	rebuildChunk int
}

// hooks are called at points where a test wants to interleave work.
type hooks struct {
	// rebuildBatch runs after each batch a rebuild writes to Redis.
	rebuildBatch func(written int)
}

const usage = `usherctl: ops tool for usher queues.

Usage:
  usherctl queue create|set|get|list|pause|resume|close|delete [flags] [QUEUE]
  usherctl replay --stream entries|admissions|orders|ops --queue Q [flags]
  usherctl rebuild --queue Q [--force] [--dry-run]
  usherctl audit --queue Q [--show N] [--lottery-list FILE]
  usherctl report --queue Q [--since DURATION|RFC3339] [--out report.html] [--json report.json]
  usherctl migrate
  usherctl redis-acl --dir DIR
  usherctl nats-auth --dir DIR [--base nats.conf] [--keys DIR [--key-dirs]] [--downstream NAME,...]

Run "usherctl COMMAND --help" for a command's flags.

Environment:
  USHER_NATS_URL      NATS server URLs, comma-separated (default nats://127.0.0.1:4222)
  USHER_DATA_DIR      the data folder make run wrote (default .usher under the current directory:
                      run usherctl from the repository's root, or set it)
  USHER_NATS_NKEY_FILE  usherctl's NKey seed (default $USHER_DATA_DIR/nats/usherctl.nk when it exists);
                      USHER_NATS_TLS_CA/_CERT/_KEY for TLS
  USHER_REDIS_URL     Redis URL or cluster seeds (default redis://127.0.0.1:6379/0)
  USHER_REDIS_USER, USHER_REDIS_PASSWORD_FILE  Redis ACL user and its password (default: usher-usherctl
                      with $USHER_DATA_DIR/redis/usher-usherctl.pass when it exists); USHER_REDIS_TLS_CA/_CERT/_KEY
  USHER_DATABASE_MIGRATE_URL  PostgreSQL URL of the schema's owner, for migrate (default USHER_DATABASE_URL)
  USHER_GATEWAY_URL   gateway base URL for the admin API (default http://127.0.0.1:8080)
  USHER_ADMIN_TOKEN   bearer token of the admin API (default dev-admin-token)
  USHER_LOG_LEVEL     diagnostics on stderr: debug, info, warn, error (default warn)
  USER                recorded as who changed a queue (X-Admin-User; 1-128 printable characters)

Exit status: 0 success, 1 failure or audit violations, 2 usage error.
`

// run executes one usherctl command line (without the program name).
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	c := &cli{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr, now: time.Now}
	return c.run(ctx, args)
}

func (c *cli) run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(c.stderr, usage)
		return usagef("no command given")
	}
	level := slog.LevelWarn
	if v := c.getenv("USHER_LOG_LEVEL"); v != "" {
		if err := level.UnmarshalText([]byte(v)); err != nil {
			return usagef("USHER_LOG_LEVEL=%q: want debug, info, warn or error", v)
		}
	}
	if c.log == nil {
		c.log = slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: level}))
	}
	// go-redis logs through a logger of its own, straight to stderr: with
	// Redis down, each dial failure would come out in its format ahead of
	// usherctl's one error, which already names the cause. It goes to
	// usherctl's log at debug level instead, as in every service.
	waitqueue.LogRedisTo(c.log)
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(c.stdout, usage)
		return nil
	case "queue":
		return c.queue(ctx, args[1:])
	case "replay":
		return c.replay(ctx, args[1:])
	case "rebuild":
		return c.rebuild(ctx, args[1:])
	case "audit":
		return c.audit(ctx, args[1:])
	case "report":
		return c.report(ctx, args[1:])
	case "migrate":
		return c.migrate(ctx, args[1:])
	case "redis-acl":
		return c.redisACL(ctx, args[1:])
	case "nats-auth":
		return c.natsAuth(ctx, args[1:])
	default:
		fmt.Fprint(c.stderr, usage)
		return usagef("unknown command %q", args[0])
	}
}

// errHelp ends a command after its --help was printed.
var errHelp = errors.New("help printed")

// parse parses a subcommand's flags, allowing flags after positional
// arguments (usherctl queue set q1 --tick-ms 50). --help prints the flags
// to stdout; a bad flag prints them to stderr and is a usage error.
func (c *cli) parse(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(c.stderr)
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" {
			fs.SetOutput(c.stdout)
		}
	}
	var positional []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			return nil, errHelp
		}
		if err != nil {
			return nil, usageError{err.Error()}
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// newFlags returns a flag set whose usage starts with the command's synopsis.
func newFlags(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s\n\nFlags:\n", strings.TrimSpace(synopsis))
		fs.PrintDefaults()
	}
	return fs
}

// done turns errHelp into success.
func done(err error) error {
	if errors.Is(err, errHelp) {
		return nil
	}
	return err
}
