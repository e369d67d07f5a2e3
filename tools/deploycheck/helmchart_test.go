package deploycheck

import (
	"net"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// Every service is probed on the listener it really serves /healthz and
// /readyz on: startup and liveness /healthz, readiness /readyz, on the
// container port its own address variable listens on.
func TestHelmChartProbesEveryServiceOnItsOpsListener(t *testing.T) {
	for set := range valueSets {
		objs := objects(t, set)
		for service, addrVar := range services {
			c := deployment(t, objs, service)
			_, port, err := net.SplitHostPort(c.env()[addrVar])
			if err != nil {
				t.Errorf("%s (%s): %s=%q: %v", service, set, addrVar, c.env()[addrVar], err)
				continue
			}
			for kind, want := range map[string]struct {
				p    *probe
				path string
			}{
				"startup":   {c.StartupProbe, "/healthz"},
				"liveness":  {c.LivenessProbe, "/healthz"},
				"readiness": {c.ReadinessProbe, "/readyz"},
			} {
				if want.p == nil || want.p.HTTPGet == nil {
					t.Errorf("%s (%s): no HTTP %s probe", service, set, kind)
					continue
				}
				got := want.p.HTTPGet
				if got.Path != want.path || strconv.Itoa(c.port(got.Port)) != port {
					t.Errorf("%s (%s): %s probe GET %s on port %s (%d), want %s on %s's port %s",
						service, set, kind, got.Path, got.Port, c.port(got.Port), want.path, addrVar, port)
				}
			}
		}
	}
}

// secretFiles are the files each service reads its credentials and keys
// from, by the variable naming the file, and the Secret's key that must
// be mounted there. The notifier holds neither the challenge secret nor
// the gate key; the admitter and the order worker no key at all.
var secretFiles = map[string]map[string]string{
	"gateway": {
		"USHER_NATS_NKEY_FILE": "nats.nk", "USHER_REDIS_PASSWORD_FILE": "redis.pass",
		"USHER_SIGNING_KEY_FILE": "signing.key", "USHER_TICKET_SECRET_FILE": "ticket.secret",
		"USHER_CHALLENGE_SECRET_FILE": "challenge.secret",
	},
	"notifier": {
		"USHER_NATS_NKEY_FILE": "nats.nk", "USHER_REDIS_PASSWORD_FILE": "redis.pass",
		"USHER_SIGNING_KEY_FILE": "signing.key", "USHER_TICKET_SECRET_FILE": "ticket.secret",
	},
	"admitter":    {"USHER_NATS_NKEY_FILE": "nats.nk", "USHER_REDIS_PASSWORD_FILE": "redis.pass"},
	"orderworker": {"USHER_NATS_NKEY_FILE": "nats.nk", "USHER_REDIS_PASSWORD_FILE": "redis.pass"},
}

// mountedKey finds the Secret key (or ConfigMap) mounted at file: the
// volume mounted at its folder and that volume's item of its name.
func mountedKey(pod podSpec, c container, file string) (source, key string) {
	dir, base := path.Split(file)
	for _, m := range c.VolumeMounts {
		if path.Clean(m.MountPath) != path.Clean(dir) {
			continue
		}
		for _, v := range pod.Volumes {
			switch {
			case v.Name != m.Name:
			case v.Secret != nil:
				for _, it := range v.Secret.Items {
					if it.Path == base {
						return "Secret/" + v.Secret.SecretName, it.Key
					}
				}
			case v.ConfigMap != nil:
				return "ConfigMap/" + v.ConfigMap.Name, base
			}
		}
	}
	return "", ""
}

// Each service finds its NKey seed, Redis password and keys where it reads
// them: the variable names a file that a Secret volume mounts, holding
// the right key of the Secret, which the production values render with
// that key; the gate's rules and key, and the older signing keys, with
// the gate on and a rotation under way.
func TestHelmChartMountsEverySecretWhereTheServiceReadsIt(t *testing.T) {
	for set := range valueSets {
		objs := objects(t, set)
		for service, files := range secretFiles {
			d := objs["Deployment/usher-"+service]
			c := deployment(t, objs, service)
			want := maps(files)
			if set == "production" && service == "gateway" {
				want["USHER_GATE_KEY_FILE"] = "gate.key"
				want["USHER_GATE_FILE"] = "gate.json"
			}
			for v, key := range want {
				file := c.env()[v]
				src, got := mountedKey(d.Spec.Template.Spec, c, file)
				if got != key || src != sourceOf(service, key) {
					t.Errorf("%s (%s): %s=%q mounts %q of %s, want %s of %s", service, set, v, file, got, src, key, sourceOf(service, key))
					continue
				}
				if set == "production" {
					if o := objs[src]; o.StringData[key] == "" && o.Data[key] == "" {
						t.Errorf("%s (%s): %s has no %s", service, set, src, key)
					}
				}
			}
			if set == "production" && (service == "gateway" || service == "notifier") {
				file := c.env()["USHER_VERIFY_KEY_FILES"]
				if _, key := mountedKey(d.Spec.Template.Spec, c, file); key != "signing-2026-11.key" {
					t.Errorf("%s: USHER_VERIFY_KEY_FILES=%q mounts %q, want the older key", service, file, key)
				}
			}
			if service == "notifier" {
				for _, v := range d.Spec.Template.Spec.Volumes {
					for _, it := range secretItems(v) {
						if it == "challenge.secret" || it == "gate.key" {
							t.Errorf("notifier (%s) mounts %s, which only the gateway reads", set, it)
						}
					}
				}
			}
		}
	}
}

// sourceOf is where a file must come from: a service's own credentials
// from its own Secret, the shared keys from the keys' Secret, the gate's
// rules from their ConfigMap.
func sourceOf(service, key string) string {
	switch key {
	case "nats.nk", "redis.pass":
		return "Secret/usher-" + service
	case "gate.json":
		return "ConfigMap/usher-gate"
	}
	return "Secret/usher-keys"
}

func maps(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func secretItems(v volume) []string {
	if v.Secret == nil {
		return nil
	}
	var out []string
	for _, it := range v.Secret.Items {
		out = append(out, it.Key)
	}
	return out
}

// The PostgreSQL URL (the gateway's, the admitter's and the order
// worker's own role) and the admin token come from the service's own
// Secret, never from a plain value.
func TestHelmChartTakesDatabaseURLsAndAdminTokenFromSecrets(t *testing.T) {
	want := map[string][]string{
		"gateway":     {"USHER_DATABASE_URL", "USHER_ADMIN_TOKEN"},
		"admitter":    {"USHER_DATABASE_URL"},
		"orderworker": {"USHER_DATABASE_URL"},
	}
	for set := range valueSets {
		objs := objects(t, set)
		for service, vars := range want {
			c := deployment(t, objs, service)
			for _, v := range vars {
				i := slices.IndexFunc(c.Env, func(e envVar) bool { return e.Name == v })
				if i < 0 || c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.SecretKeyRef == nil ||
					c.Env[i].ValueFrom.SecretKeyRef.Name != "usher-"+service {
					t.Errorf("%s (%s): %s is not read from Secret usher-%s", service, set, v, service)
				}
			}
		}
	}
}

// Every variable the chart sets on a service is one that service reads
// (a misspelt one would be silently ignored), and each connects as its
// own Redis ACL user.
func TestHelmChartSetsOnlyVariablesTheServicesRead(t *testing.T) {
	for set := range valueSets {
		objs := objects(t, set)
		for service := range services {
			c := deployment(t, objs, service)
			reads := readVars(t, "../../"+service, "../../internal")
			var unknown []string
			for _, e := range c.Env {
				if !reads[e.Name] {
					unknown = append(unknown, e.Name)
				}
			}
			sort.Strings(unknown)
			if len(unknown) > 0 {
				t.Errorf("%s (%s) sets %v, which %s/ does not read", service, set, unknown, service)
			}
			if got := c.env()["USHER_REDIS_USER"]; got != "usher-"+service {
				t.Errorf("%s (%s): USHER_REDIS_USER=%q, want usher-%s", service, set, got, service)
			}
		}
	}
}

// Every service has a PodDisruptionBudget selecting its pods; the
// gateway and the notifier an autoscaling/v2 HorizontalPodAutoscaler
// (the production values run the notifier at a fixed count instead); and
// every pod runs as a non-root user on a read-only root with no
// capabilities.
func TestHelmChartHasBudgetsAutoscalersAndRunsAsNonRoot(t *testing.T) {
	for set := range valueSets {
		objs := objects(t, set)
		for service := range services {
			pdb, ok := objs["PodDisruptionBudget/usher-"+service]
			if !ok || pdb.APIVersion != "policy/v1" || pdb.Spec.Selector.MatchLabels["app.kubernetes.io/component"] != service {
				t.Errorf("%s (%s): no policy/v1 PodDisruptionBudget selecting its pods", service, set)
			}
			hpa, ok := objs["HorizontalPodAutoscaler/usher-"+service]
			wantHPA := service == "gateway" || (service == "notifier" && set != "production")
			if ok != wantHPA {
				t.Errorf("%s (%s): HorizontalPodAutoscaler rendered %v, want %v", service, set, ok, wantHPA)
			}
			if ok && (hpa.APIVersion != "autoscaling/v2" || hpa.Spec.ScaleTargetRef.Kind != "Deployment" || hpa.Spec.ScaleTargetRef.Name != "usher-"+service) {
				t.Errorf("%s (%s): the autoscaler is %s scaling %+v", service, set, hpa.APIVersion, hpa.Spec.ScaleTargetRef)
			}
			pod := objs["Deployment/usher-"+service].Spec.Template.Spec
			c := deployment(t, objs, service)
			sc := c.SecurityContext
			if pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot ||
				pod.SecurityContext.RunAsUser == nil || *pod.SecurityContext.RunAsUser == 0 ||
				sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
				sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				!slices.Contains(sc.Capabilities.Drop, "ALL") {
				t.Errorf("%s (%s): pod %+v, container %+v: want non-root, read-only root, no escalation, no capabilities", service, set, pod.SecurityContext, sc)
			}
			if want := "usher-" + service + ":"; !strings.Contains(c.Image, want) {
				t.Errorf("%s (%s): image %q, want the Dockerfile's %s image (%s<tag>)", service, set, c.Image, service, want)
			}
		}
	}
}
