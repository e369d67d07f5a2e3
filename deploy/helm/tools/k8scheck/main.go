// Command k8scheck validates rendered Kubernetes manifests (helm template's
// output) against the Kubernetes API types: every document decodes
// strictly into its k8s.io/api type (an unknown field, a wrong type, a
// duplicate key or an unknown kind is an error), and the objects agree
// with each other (selectors select the pods, probes and Services name
// ports the containers declare, mounts name volumes, and the Secrets and
// Deployments they refer to exist).
//
// It lives in the Helm tools module, not in usher/tools, so that the
// race-instrumented test binaries never compile Kubernetes: the test in
// tools/deploycheck runs it as a program.
//
//	k8scheck [-external-secret NAME]... FILE...
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

type names []string

func (n *names) String() string     { return strings.Join(*n, ",") }
func (n *names) Set(v string) error { *n = append(*n, v); return nil }

func main() {
	var external names
	flag.Var(&external, "external-secret", "a Secret the chart refers to but does not render (repeatable)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: k8scheck [-external-secret NAME]... FILE...")
		os.Exit(2)
	}
	failed := false
	for _, path := range flag.Args() {
		problems, err := checkFile(path, external)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			failed = true
			continue
		}
		for _, p := range problems {
			fmt.Fprintf(os.Stderr, "%s: %s\n", path, p)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

func checkFile(path string, external []string) ([]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	objs, problems, err := decodeAll(raw)
	if err != nil {
		return nil, err
	}
	if len(objs) == 0 {
		return nil, errors.New("no Kubernetes object in the file")
	}
	for _, o := range objs {
		fmt.Printf("%s: %s/%s decoded strictly\n", path, o.kind, o.name)
	}
	return append(problems, crossCheck(objs, external)...), nil
}

// object is one decoded document with the name and kind it declared.
type object struct {
	kind, name string
	obj        runtime.Object
}

// decodeAll decodes every document of a YAML stream strictly into its
// registered Go type.
func decodeAll(raw []byte) ([]object, []string, error) {
	strict := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
		json.SerializerOptions{Strict: true})
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	var objs []object
	var problems []string
	for i := 0; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, problems, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("document %d: %w", i, err)
		}
		if isBlank(doc) {
			continue
		}
		js, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			problems = append(problems, fmt.Sprintf("document %d: %v", i, err))
			continue
		}
		obj, gvk, err := strict.Decode(js, nil, nil)
		if err != nil {
			problems = append(problems, fmt.Sprintf("document %d (%s): %v", i, firstLines(doc), err))
			continue
		}
		name := metaName(obj)
		for _, msg := range validation.IsDNS1123Subdomain(name) {
			problems = append(problems, fmt.Sprintf("%s %q: name: %s", gvk.Kind, name, msg))
		}
		objs = append(objs, object{kind: gvk.Kind, name: name, obj: obj})
	}
}

func isBlank(doc []byte) bool {
	for _, line := range strings.Split(string(doc), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && line != "---" && !strings.HasPrefix(line, "#") {
			return false
		}
	}
	return true
}

func firstLines(doc []byte) string {
	lines := strings.SplitN(strings.TrimSpace(string(doc)), "\n", 4)
	return strings.Join(lines[:min(3, len(lines))], " | ")
}
