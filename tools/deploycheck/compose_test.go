package deploycheck

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"testing"

	"go.yaml.in/yaml/v3"
)

type compose struct {
	Services map[string]composeService `yaml:"services"`
}

type composeService struct {
	Image       string                            `yaml:"image"`
	Build       *struct{ Args map[string]string } `yaml:"build"`
	Environment map[string]string                 `yaml:"environment"`
	Command     yaml.Node                         `yaml:"command"`
	Volumes     []mount                           `yaml:"volumes"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
}

// varRE finds the names of variables the code reads.
var varRE = regexp.MustCompile(`"((?:USHER|PGSIM)_[A-Z0-9_]+)"`)

// readVars lists the variables named in the non-test Go files under dirs.
func readVars(t *testing.T, dirs ...string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || filepath.Ext(path) != ".go" || regexp.MustCompile(`_test\.go$`).MatchString(path) {
				return err
			}
			b, err := os.ReadFile(path)
			for _, m := range varRE.FindAllSubmatch(b, -1) {
				out[string(m[1])] = true
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// Every environment variable compose.yaml sets on a usher service is one
// that service reads.
func TestComposeSetsOnlyVariablesTheServicesRead(t *testing.T) {
	c := readCompose(t)
	built := 0
	for name, svc := range c.Services {
		if svc.Build == nil {
			continue
		}
		built++
		dir := svc.Build.Args["SERVICE"]
		if dir == "" {
			t.Errorf("service %s: build has no SERVICE argument", name)
			continue
		}
		reads := readVars(t, "../../"+dir, "../../internal")
		var unknown []string
		for v := range svc.Environment {
			if !reads[v] {
				unknown = append(unknown, v)
			}
		}
		sort.Strings(unknown)
		if len(unknown) > 0 {
			t.Errorf("service %s sets %v, which %s/ does not read", name, unknown, dir)
		}
	}
	if built < 5 {
		t.Errorf("compose.yaml builds %d usher services, want gateway, admitter, notifier, orderworker and pgsim", built)
	}
}

func readCompose(t *testing.T) compose {
	t.Helper()
	b, err := os.ReadFile("../../compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	return c
}
