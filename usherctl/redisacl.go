package main

import (
	"context"
	"fmt"
	"path/filepath"

	"usher/internal/redisacl"
)

const redisACLSynopsis = `usherctl redis-acl --dir DIR

Writes what a Redis server with ACL users needs, from the users in the code
(usher/internal/redisacl): a password per user — usher-gateway,
usher-admitter, usher-notifier, usher-orderworker, usher-usherctl and
usher-admin (for people) — created once and kept after (DIR/<user>.pass,
readable by its owner only), and DIR/users.acl, each user's commands and
key patterns with its password's SHA-256 and the default user off,
rewritten every time so the server follows the code (redis-server
--aclfile DIR/users.acl, or ACL LOAD). A service finds its password
through USHER_REDIS_PASSWORD_FILE, or by default in
<USHER_DATA_DIR>/redis/usher-<service>.pass. make run runs it at every
start.`

func (c *cli) redisACL(_ context.Context, args []string) error {
	fs := newFlags("redis-acl", redisACLSynopsis)
	dir := fs.String("dir", "", "folder of users.acl and the password files (required)")
	pos, err := c.parse(fs, args)
	if err != nil {
		return done(err)
	}
	if len(pos) > 0 {
		return usagef("redis-acl: unexpected arguments %q", pos)
	}
	if *dir == "" {
		return usagef("redis-acl: --dir is required")
	}
	created, err := redisacl.Write(*dir)
	if err != nil {
		return err
	}
	for _, u := range created {
		fmt.Fprintf(c.stdout, "created the password of %s: %s\n", u, redisacl.PasswordFile(*dir, u))
	}
	fmt.Fprintf(c.stdout, "wrote %s: %d users\n", filepath.Join(*dir, redisacl.AuthFile), len(redisacl.Users()))
	return nil
}
