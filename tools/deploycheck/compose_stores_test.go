package deploycheck

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"usher/internal/redisacl"
)

// mount is one entry of a compose service's volumes, in either syntax.
type mount struct {
	Source, Target, Subpath string
	ReadOnly                bool
}

func (m *mount) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode { // source:target[:ro]
		parts := strings.Split(n.Value, ":")
		if len(parts) < 2 {
			return fmt.Errorf("volume %q: want source:target", n.Value)
		}
		*m = mount{Source: parts[0], Target: parts[1], ReadOnly: len(parts) > 2 && parts[2] == "ro"}
		return nil
	}
	var long struct {
		Source   string `yaml:"source"`
		Target   string `yaml:"target"`
		ReadOnly bool   `yaml:"read_only"`
		Volume   struct {
			Subpath string `yaml:"subpath"`
		} `yaml:"volume"`
	}
	if err := n.Decode(&long); err != nil {
		return err
	}
	*m = mount{Source: long.Source, Target: long.Target, Subpath: long.Volume.Subpath, ReadOnly: long.ReadOnly}
	return nil
}

// command is a service's command as one string, whichever form it has.
func (s composeService) command() string {
	if s.Command.Kind == yaml.ScalarNode {
		return s.Command.Value
	}
	var words []string
	for _, n := range s.Command.Content {
		words = append(words, n.Value)
	}
	return strings.Join(words, " ")
}

// mountOf is the mount whose target holds file, if any.
func (s composeService) mountOf(file string) (mount, bool) {
	for _, m := range s.Volumes {
		if path.Clean(m.Target) == path.Dir(file) {
			return m, true
		}
	}
	return mount{}, false
}

// usherServices are the services that connect to Redis, as their roles.
var usherServices = []string{redisacl.Gateway, redisacl.Admitter, redisacl.Notifier, redisacl.OrderWorker}

// Every usher service in compose.yaml connects to Redis as its own ACL
// user (internal/redisacl), whose password file is mounted read-only from
// a folder holding that password alone; the server loads users.acl (the
// default user off) from the same generator; nobody but the generator and
// the hand-out step sees every password.
func TestComposeGivesEveryServiceItsOwnRedisUser(t *testing.T) {
	c := readCompose(t)
	handout := c.Services["redis-auth"].command()
	if cmd := c.Services["redis-acl"].command(); !strings.Contains(cmd, "redis-acl --dir /home/nonroot/acl") {
		t.Fatalf("redis-acl runs %q, want usherctl redis-acl --dir /home/nonroot/acl", cmd)
	}
	for _, role := range usherServices {
		svc := c.Services[role]
		user := svc.Environment["USHER_REDIS_USER"]
		if user != redisacl.UserOf(role) {
			t.Errorf("%s: USHER_REDIS_USER=%q, want its own ACL user %s", role, user, redisacl.UserOf(role))
		}
		file := svc.Environment["USHER_REDIS_PASSWORD_FILE"]
		m, ok := svc.mountOf(file)
		if !ok || m.Source != "redis-auth" || m.Subpath != role || !m.ReadOnly {
			t.Errorf("%s: USHER_REDIS_PASSWORD_FILE=%q is not in redis-auth's %s/ mounted read-only (%+v)", role, file, role, m)
		}
		want := fmt.Sprintf("-o 65532 -g 65532 -m 0400 %s /auth/%s/%s",
			redisacl.PasswordFile("/acl", redisacl.UserOf(role)), role, path.Base(file))
		if !strings.Contains(handout, want) {
			t.Errorf("%s: redis-auth does not hand it its password alone (want %q in %q)", role, want, handout)
		}
		for _, m := range svc.Volumes {
			if m.Source == "redis-acl" || (m.Source == "redis-auth" && m.Subpath != role) {
				t.Errorf("%s mounts %s/%s: another user's password", role, m.Source, m.Subpath)
			}
		}
	}
	redis := c.Services["redis"]
	acl := regexp.MustCompile(`--aclfile (\S+)`).FindStringSubmatch(redis.command())
	if acl == nil {
		t.Fatalf("redis runs %q, without --aclfile", redis.command())
	}
	if m, ok := redis.mountOf(acl[1]); !ok || m.Source != "redis-auth" || m.Subpath != "server" {
		t.Errorf("redis: --aclfile %s is not redis-auth's server/ (%+v)", acl[1], m)
	}
	if want := "/acl/" + redisacl.AuthFile + " /auth/server/" + path.Base(acl[1]); !strings.Contains(handout, want) {
		t.Errorf("redis-auth does not hand the server usherctl's %s (want %q)", redisacl.AuthFile, want)
	}
	if c.Services["redis"].DependsOn["redis-auth"].Condition != "service_completed_successfully" {
		t.Error("redis starts before redis-auth has written its users")
	}
}

// roleArray finds the roles an SQL file's ARRAY[...] lists.
func roleArray(t *testing.T, file string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`ARRAY\[([^\]]*)\]`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s lists no roles", file)
	}
	out := map[string]bool{}
	for _, r := range strings.Split(string(m[1]), ",") {
		out[strings.Trim(strings.TrimSpace(r), "'")] = true
	}
	return out
}

// Every service that uses PostgreSQL logs in as its own role, one the
// migrations grant only its rows' work, never as the superuser or the
// owner; pg-roles creates each with LOGIN, and only the migration runs as
// the owner, before the services start.
func TestComposeGivesEveryServiceItsOwnPostgresRole(t *testing.T) {
	c := readCompose(t)
	granted := roleArray(t, "../../internal/orders/migrations/0003_roles.sql")
	made := roleArray(t, "../../deploy/compose/pg-roles.sql")
	if cmd := c.Services["pg-roles"].command(); !strings.Contains(cmd, "/etc/usher/pg-roles.sql") {
		t.Errorf("pg-roles runs %q, not deploy/compose/pg-roles.sql", cmd)
	}
	for name, svc := range c.Services {
		for _, v := range []string{"USHER_DATABASE_URL", "USHER_DATABASE_MIGRATE_URL"} {
			raw, ok := svc.Environment[v]
			if !ok {
				continue
			}
			u, err := url.Parse(raw)
			if err != nil {
				t.Errorf("%s: %s: %v", name, v, err)
				continue
			}
			role := u.User.Username()
			switch {
			case v == "USHER_DATABASE_MIGRATE_URL" && role != "usher_owner":
				t.Errorf("%s migrates as %q, want the schema's owner usher_owner", name, role)
			case v == "USHER_DATABASE_URL" && (role != "usher_"+name || !granted[role]):
				t.Errorf("%s connects as %q, want its own role usher_%s, which the migrations grant", name, role, name)
			case !made[role]:
				t.Errorf("%s connects as %q, which pg-roles.sql does not create", name, role)
			}
		}
	}
	for _, name := range []string{"gateway", "admitter", "orderworker"} {
		if _, ok := c.Services[name].Environment["USHER_DATABASE_URL"]; !ok {
			t.Errorf("%s has no USHER_DATABASE_URL: it would connect to the default, as postgres", name)
		}
		if c.Services[name].DependsOn["migrate"].Condition != "service_completed_successfully" {
			t.Errorf("%s starts before the schema is migrated", name)
		}
	}
	sql, _ := os.ReadFile("../../deploy/compose/pg-roles.sql")
	if !strings.Contains(string(sql), "ALTER DATABASE usher OWNER TO usher_owner") {
		t.Error("pg-roles.sql does not make usher_owner the database's owner")
	}
}
