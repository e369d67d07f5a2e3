package deploycheck

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"
)

const chart = "../../deploy/helm/usher"

// valueSets are the values the chart is rendered with: its defaults (the
// Secrets made beforehand by the operator), the install guide's
// (docs/integration.md#kubernetes quotes ci/install-values.yaml) and a
// production-like file (the chart makes the Secrets, the gate is on, a
// key is being rotated, the notifier does not autoscale).
var valueSets = map[string][]string{
	"default":    nil,
	"install":    {"--values", chart + "/ci/install-values.yaml"},
	"production": {"--values", chart + "/ci/production-values.yaml"},
}

// defaultSecrets are the Secrets the default and the install values refer
// to and do not render: docs/integration.md#kubernetes creates them.
var defaultSecrets = []string{"usher-keys", "usher-gateway", "usher-admitter", "usher-notifier", "usher-orderworker", "usher-migrate"}

var (
	toolsOnce sync.Once
	toolsDir  string
	toolsErr  error
)

// helmTools builds helm, k8scheck and envoycheck
// (deploy/helm/tools/build.sh), or waits for scripts/test.sh's build of
// them, and returns their folder.
func helmTools(t *testing.T) string {
	t.Helper()
	toolsOnce.Do(func() {
		cmd := exec.Command("bash", "../../deploy/helm/tools/build.sh")
		out, err := cmd.CombinedOutput()
		if err != nil {
			toolsErr = errors.New("deploy/helm/tools/build.sh: " + err.Error() + "\n" + string(out))
			return
		}
		toolsDir, toolsErr = filepath.Abs("../../.usher/bin")
	})
	if toolsErr != nil {
		t.Fatal(toolsErr)
	}
	return toolsDir
}

// tool is a command of helmTools' folder; helm keeps its cache, config
// and data in the test's own folders, never the user's.
func tool(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(filepath.Join(helmTools(t), name), args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache",
		"HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	return cmd
}

func runTool(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	cmd := tool(t, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return out
}

var (
	renderMu sync.Mutex
	rendered = map[string][]byte{}
)

// render is helm template's output for a value set, rendered once per
// test binary. The release is "usher" in namespace "shop".
func render(t *testing.T, set string) []byte {
	t.Helper()
	renderMu.Lock()
	defer renderMu.Unlock()
	if out, ok := rendered[set]; ok {
		return out
	}
	args := append([]string{"template", "usher", chart, "--namespace", "shop"}, valueSets[set]...)
	out := runTool(t, "helm", args...)
	rendered[set] = out
	return out
}

// The chart passes helm lint --strict (every value a template uses
// exists, no warning) with the default and the production-like values.
func TestHelmChartLintsStrictly(t *testing.T) {
	for set, values := range valueSets {
		t.Run(set, func(t *testing.T) {
			out := runTool(t, "helm", append([]string{"lint", "--strict", chart}, values...)...)
			if !bytes.Contains(out, []byte("0 chart(s) failed")) {
				t.Errorf("helm lint: %s", out)
			}
		})
	}
}

// Every rendered document decodes strictly into its Kubernetes API type
// (no unknown field, no wrong type) and the objects' references hold:
// k8scheck, from the same module as helm.
func TestHelmChartRendersValidKubernetesObjects(t *testing.T) {
	for set := range valueSets {
		t.Run(set, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), set+".yaml")
			if err := os.WriteFile(path, render(t, set), 0o600); err != nil {
				t.Fatal(err)
			}
			// The production values make the chart's Secrets and mount
			// Redis's CA from one of the cluster's.
			external := defaultSecrets
			if set == "production" {
				external = []string{"redis-ca"}
			}
			var args []string
			for _, s := range external {
				args = append(args, "-external-secret", s)
			}
			out := runTool(t, "k8scheck", append(args, path)...)
			if n := bytes.Count(out, []byte("decoded strictly")); n < 15 {
				t.Errorf("k8scheck decoded %d objects, want the four services' and more:\n%s", n, out)
			}
		})
	}
}

// object is the part of a rendered manifest the assertions read.
type object struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		Template struct {
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
		ScaleTargetRef struct {
			Kind string `yaml:"kind"`
			Name string `yaml:"name"`
		} `yaml:"scaleTargetRef"`
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
	} `yaml:"spec"`
	StringData map[string]string `yaml:"stringData"`
	Data       map[string]string `yaml:"data"`
}

type podSpec struct {
	SecurityContext struct {
		RunAsNonRoot *bool `yaml:"runAsNonRoot"`
		RunAsUser    *int  `yaml:"runAsUser"`
	} `yaml:"securityContext"`
	Containers []container `yaml:"containers"`
	Volumes    []volume    `yaml:"volumes"`
}

type container struct {
	Name  string   `yaml:"name"`
	Image string   `yaml:"image"`
	Env   []envVar `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	StartupProbe   *probe `yaml:"startupProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	VolumeMounts   []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
	SecurityContext struct {
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
}

type envVar struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	ValueFrom *struct {
		SecretKeyRef *struct {
			Name string `yaml:"name"`
			Key  string `yaml:"key"`
		} `yaml:"secretKeyRef"`
	} `yaml:"valueFrom"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

type volume struct {
	Name   string `yaml:"name"`
	Secret *struct {
		SecretName string `yaml:"secretName"`
		Items      []struct {
			Key  string `yaml:"key"`
			Path string `yaml:"path"`
		} `yaml:"items"`
	} `yaml:"secret"`
	ConfigMap *struct {
		Name string `yaml:"name"`
	} `yaml:"configMap"`
}

// objects decodes a rendering, keyed "Kind/name".
func objects(t *testing.T, set string) map[string]object {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(render(t, set)))
	out := map[string]object{}
	for {
		var o object
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("helm template (%s): %v", set, err)
		}
		if o.Kind != "" {
			out[o.Kind+"/"+o.Metadata.Name] = o
		}
	}
}

// env is a container's plain variables.
func (c container) env() map[string]string {
	out := map[string]string{}
	for _, e := range c.Env {
		out[e.Name] = e.Value
	}
	return out
}

func (c container) port(name string) int {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

// services are the four Deployments and, for each, the variable naming
// the listener its probes must reach (docs/configuration.md): the
// gateway's admin listener serves /healthz and /readyz like its public
// one, and keeps the probes off the shoppers' port.
var services = map[string]string{
	"gateway":     "USHER_ADMIN_ADDR",
	"admitter":    "USHER_ADMITTER_ADDR",
	"notifier":    "USHER_NOTIFIER_ADDR",
	"orderworker": "USHER_ORDERWORKER_ADDR",
}

func deployment(t *testing.T, objs map[string]object, service string) container {
	t.Helper()
	d, ok := objs["Deployment/usher-"+service]
	if !ok || len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("no Deployment usher-%s with one container", service)
	}
	return d.Spec.Template.Spec.Containers[0]
}

// A misspelt or out-of-range value stops the install, naming it
// (values.schema.json), instead of being ignored.
func TestHelmChartRefusesMisspeltValues(t *testing.T) {
	for set, want := range map[string]string{
		"gateway.trustedProxy=10.0.0.0/8": "additional properties 'trustedProxy' not allowed",
		"nats.streamReplicas=7":           "/nats/streamReplicas",
		"logLevel=verbose":                "/logLevel",
	} {
		out, err := tool(t, "helm", "template", "usher", chart, "--set", set).CombinedOutput()
		if err == nil || !strings.Contains(string(out), want) {
			t.Errorf("helm template --set %s: %v, want a refusal naming %q:\n%s", set, err, want, out)
		}
	}
}
