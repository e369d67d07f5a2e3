package deploycheck

import (
	"os"
	"path"
	"regexp"
	"strings"
	"testing"

	"usher/internal/redisacl"
)

// secretKey is one key of one Secret.
type secretKey struct{ secret, key string }

// docSecrets reads the Secrets the install guide's kubectl commands
// create: each key, and the file it comes from (empty for a literal).
func docSecrets(t *testing.T, doc string) map[secretKey]string {
	t.Helper()
	joined := strings.ReplaceAll(doc, "\\\n", " ")
	create := regexp.MustCompile(`kubectl -n shop create secret generic (\S+)(.*)`)
	out := map[secretKey]string{}
	for _, m := range create.FindAllStringSubmatch(joined, -1) {
		for _, word := range strings.Fields(m[2]) {
			switch {
			case strings.HasPrefix(word, "--from-file="):
				key, file, ok := strings.Cut(strings.TrimPrefix(word, "--from-file="), "=")
				if !ok {
					key, file = path.Base(key), key
				}
				out[secretKey{m[1], key}] = file
			case strings.HasPrefix(word, "--from-literal="):
				key, _, _ := strings.Cut(strings.TrimPrefix(word, "--from-literal="), "=")
				out[secretKey{m[1], key}] = ""
			}
		}
	}
	return out
}

// chartReads lists the Secret keys a rendering mounts or reads as
// variables, in its Deployments and in the migration Job.
func chartReads(t *testing.T, set string) map[secretKey]bool {
	t.Helper()
	type jobOrDeployment struct {
		Kind string `yaml:"kind"`
		Spec struct {
			Template struct {
				Spec podSpec `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	reads := map[secretKey]bool{}
	for _, o := range objects(t, set) {
		if o.Kind != "Deployment" && o.Kind != "Job" {
			continue
		}
		pod := o.Spec.Template.Spec
		for _, v := range pod.Volumes {
			if v.Secret != nil {
				for _, it := range v.Secret.Items {
					reads[secretKey{v.Secret.SecretName, it.Key}] = true
				}
			}
		}
		for _, c := range pod.Containers {
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					reads[secretKey{e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key}] = true
				}
			}
		}
	}
	return reads
}

// The install guide is the chart's: it quotes the values file the tests
// render verbatim, and its kubectl commands create every Secret key the
// chart then reads, each service's password from the file usherctl
// redis-acl writes for that service's user and its seed from the one
// nats-auth writes for its role.
func TestHelmInstallGuideCreatesWhatTheChartReads(t *testing.T) {
	b, err := os.ReadFile("../../docs/integration.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	values, err := os.ReadFile(chart + "/ci/install-values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(doc, "```yaml\n"+string(values)+"```") {
		t.Error("docs/integration.md does not quote deploy/helm/usher/ci/install-values.yaml verbatim")
	}
	created := docSecrets(t, doc)
	reads := chartReads(t, "install")
	if len(reads) < 10 {
		t.Fatalf("the install rendering reads %d Secret keys: %v", len(reads), reads)
	}
	for k := range reads {
		if _, ok := created[k]; !ok {
			t.Errorf("the chart reads key %s of Secret %s, which the guide does not create", k.key, k.secret)
		}
	}
	for _, role := range usherServices {
		secret := "usher-" + role
		if got, want := created[secretKey{secret, "redis.pass"}], redisacl.PasswordFile("redis", redisacl.UserOf(role)); got != want {
			t.Errorf("Secret %s: redis.pass from %q, want %s (usherctl redis-acl --dir redis)", secret, got, want)
		}
		if got, want := created[secretKey{secret, "nats.nk"}], "nats/"+role+".nk"; got != want {
			t.Errorf("Secret %s: nats.nk from %q, want %s (usherctl nats-auth --dir nats)", secret, got, want)
		}
	}
}
