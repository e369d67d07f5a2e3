package bus

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nats-io/nkeys"

	"usher/internal/config"
)

// AuthFile is the name of the authorization block WriteAuth writes; the
// server configuration (nats.conf) includes it.
const AuthFile = "auth.conf"

// LoadOrCreateKey returns the public key of the NKey whose seed is at
// path, creating the seed first (readable by its owner only) when there
// is none. A seed, once written, is never replaced: the role keeps its
// identity across restarts.
func LoadOrCreateKey(path string) (pub string, err error) {
	seed, err := config.LoadOrCreateFile(path, func() ([]byte, error) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return nil, err
		}
		seed, err := kp.Seed()
		return append(seed, '\n'), err
	})
	if err != nil {
		return "", fmt.Errorf("nkey %s: %w", path, err)
	}
	kp, err := nkeys.ParseDecoratedNKey(seed)
	if err != nil {
		return "", fmt.Errorf("nkey %s: %w", path, err)
	}
	defer kp.Wipe()
	if pub, err = kp.PublicKey(); err != nil {
		return "", fmt.Errorf("nkey %s: %w", path, err)
	}
	if !nkeys.IsValidPublicUserKey(pub) {
		return "", fmt.Errorf("nkey %s: not a user seed", path)
	}
	return pub, nil
}

// WriteAuth writes what a broker with authentication needs: each role's
// NKey seed at keyFile(role) (created when missing, kept otherwise) and
// dir/auth.conf, the authorization block with every role's public key
// and Permissions. It rewrites auth.conf every time, so the server's
// permissions follow the code; it returns the roles whose keys it created.
func WriteAuth(p Policy, dir string, keyFile func(Role) string) (created []Role, err error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	keys := map[Role]string{}
	for _, r := range p.Roles() {
		path := keyFile(r)
		_, statErr := os.Stat(path)
		if keys[r], err = LoadOrCreateKey(path); err != nil {
			return nil, err
		}
		if statErr != nil {
			created = append(created, r)
		}
	}
	conf, err := p.AuthConfig(keys)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// Written aside and renamed: a server reloading never reads half of it.
	tmp, err := os.CreateTemp(dir, "."+AuthFile+".*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(conf); err != nil {
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

// AuthConfig renders the nats-server authorization block: one NKey user
// per role of the policy, with its permissions. keys holds each role's
// public key.
func (p Policy) AuthConfig(keys map[Role]string) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# Written by `usherctl nats-auth` from usher/internal/bus (Policy.Permissions),\n")
	b.WriteString("# again at every start of `make run`: edit the code, not this file.\n")
	b.WriteString("authorization {\n  users = [\n")
	for _, r := range p.Roles() {
		key := keys[r]
		if !nkeys.IsValidPublicUserKey(key) {
			return nil, fmt.Errorf("role %s: %q is not a user's public NKey", r, key)
		}
		perms, _ := p.Permissions(r)
		fmt.Fprintf(&b, "    # %s\n    {\n      nkey: %s\n      permissions: {\n", r, strconv.Quote(key))
		writeRules(&b, "publish", perms.Publish)
		writeRules(&b, "subscribe", perms.Subscribe)
		b.WriteString("      }\n    }\n")
	}
	b.WriteString("  ]\n}\n")
	return b.Bytes(), nil
}

func writeRules(b *bytes.Buffer, name string, r Rules) {
	fmt.Fprintf(b, "        %s: {\n", name)
	list := func(key string, subjects []string) {
		if len(subjects) == 0 {
			return
		}
		quoted := make([]string, len(subjects))
		for i, s := range subjects {
			quoted[i] = "            " + strconv.Quote(s)
		}
		fmt.Fprintf(b, "          %s: [\n%s\n          ]\n", key, strings.Join(quoted, "\n"))
	}
	list("allow", r.Allow)
	list("deny", r.Deny)
	b.WriteString("        }\n")
}
