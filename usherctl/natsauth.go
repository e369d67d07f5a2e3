package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"usher/internal/bus"
	"usher/internal/config"
)

const natsAuthSynopsis = `usherctl nats-auth --dir DIR [--base nats.conf] [--keys DIR [--key-dirs]]
         [--downstream NAME,...]

Writes what a NATS server with authentication needs, from the permissions
in the code (usher/internal/bus): an NKey seed per role — gateway, admitter,
notifier, orderworker, usherctl and each downstream reader — created once
and kept after (readable by its owner only), and DIR/auth.conf, the
server's users with each role's public key and least-privilege
permissions, rewritten every time so the server follows the code. With
--base, the server configuration that includes auth.conf is copied to
DIR/nats.conf. Seeds go to KEYS/<role>.nk, or with --key-dirs to
KEYS/<role>/<role>.nk (one folder per role, to mount each service its own).
A service finds its seed through USHER_NATS_NKEY_FILE, by default
<USHER_DATA_DIR>/nats/<role>.nk. The downstream readers are
USHER_DOWNSTREAM_READERS unless --downstream names them: the admitter
declares each a durable consumer from that same variable, which a reader
may bind to but not create. make run runs it at every start.`

func (c *cli) natsAuth(_ context.Context, args []string) error {
	fs := newFlags("nats-auth", natsAuthSynopsis)
	dir := fs.String("dir", "", "folder of auth.conf (and nats.conf with --base) (required)")
	base := fs.String("base", "", "server configuration to copy to DIR/nats.conf (it includes auth.conf)")
	keys := fs.String("keys", "", "folder of the roles' seeds (default: --dir)")
	keyDirs := fs.Bool("key-dirs", false, "each role's seed in a folder of its own: KEYS/<role>/<role>.nk")
	var downstream listFlag
	fs.Var(&downstream, "downstream", "downstream readers (each a durable consumer of USHER_ADMISSIONS), comma-separated (default: USHER_DOWNSTREAM_READERS)")
	pos, err := c.parse(fs, args)
	if err != nil {
		return done(err)
	}
	if len(pos) > 0 {
		return usagef("nats-auth: unexpected arguments %q", pos)
	}
	if *dir == "" {
		return usagef("nats-auth: --dir is required")
	}
	if *keys == "" {
		*keys = *dir
	}
	p := bus.Policy{Downstream: downstream}
	if downstream == nil {
		// The admitter's setting: the readers it declares consumers for.
		env := config.New(c.getenv)
		if p = bus.LoadPolicy(env); env.Err() != nil {
			return usagef("nats-auth: %v", env.Err())
		}
	}
	if err := p.Validate(); err != nil {
		return usagef("nats-auth: %v", err)
	}
	keyFile := func(r bus.Role) string { return filepath.Join(*keys, string(r)+".nk") }
	if *keyDirs {
		keyFile = func(r bus.Role) string { return filepath.Join(*keys, string(r), string(r)+".nk") }
	}
	created, err := bus.WriteAuth(p, *dir, keyFile)
	if err != nil {
		return err
	}
	if *base != "" {
		if err := copyFile(*base, filepath.Join(*dir, "nats.conf")); err != nil {
			return err
		}
	}
	for _, r := range created {
		fmt.Fprintf(c.stdout, "created the NKey of %s: %s\n", r, keyFile(r))
	}
	fmt.Fprintf(c.stdout, "wrote %s: %d roles\n", filepath.Join(*dir, bus.AuthFile), len(p.Roles()))
	return nil
}

// copyFile writes src's contents to dst, replacing it whole.
func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// listFlag is a comma-separated flag that may also be repeated.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

var _ flag.Value = (*listFlag)(nil)
