package waitqueue_test

import (
	"strings"
	"testing"
)

// A USHER_REDIS_URL no connection can be made with stops the start naming
// the variable, before anything is dialled: a list of redis://host:port/0
// URLs (the single server's spelling, copied for a cluster) was dialled
// for 30 s as "lookup tcp/6379/0: unknown port", and a URL of another
// scheme surfaced only once NATS was reached.
func TestLoadSettingsRefusesARedisURLThatCannotBeDialled(t *testing.T) {
	tests := []struct {
		url  string
		want string // in the error; "" = taken
	}{
		{"", ""},
		{"redis://127.0.0.1:6379/0", ""},
		{"rediss://redis.internal:6380/2", ""},
		{"127.0.0.1:6379", ""},
		{"127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002", ""},
		{"rediss://10.0.0.1:6379, rediss://10.0.0.2:6379", ""},
		{"redis://127.0.0.1:7000/0,redis://127.0.0.1:7001/0", `USHER_REDIS_URL: "127.0.0.1:7000/0" in the cluster's list is not host:port`},
		{"10.0.0.1,10.0.0.2", `USHER_REDIS_URL: "10.0.0.1" in the cluster's list is not host:port`},
		{"redis://u:s3cret-url@10.0.0.1:7000/0,10.0.0.2:7000", `USHER_REDIS_URL: "***@10.0.0.1:7000/0"`},
		{"http://127.0.0.1:6379", "USHER_REDIS_URL=http://127.0.0.1:6379: redis: invalid URL scheme: http"},
		{"redis://127.0.0.1:6379/zero", "USHER_REDIS_URL=redis://127.0.0.1:6379/zero: "},
	}
	for _, tt := range tests {
		_, err := load(map[string]string{"USHER_REDIS_URL": tt.url})
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("USHER_REDIS_URL=%q: LoadSettings = %v, want it taken", tt.url, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("USHER_REDIS_URL=%q: LoadSettings = %v, want an error saying %q", tt.url, err, tt.want)
		case err != nil && strings.Contains(err.Error(), "s3cret-url"):
			t.Errorf("USHER_REDIS_URL=%q: the error %q shows the password", tt.url, err)
		}
	}
}
