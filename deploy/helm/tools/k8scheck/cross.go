package main

import (
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func metaName(obj runtime.Object) string {
	if m, ok := obj.(metav1.Object); ok {
		return m.GetName()
	}
	return ""
}

// rendering indexes the decoded objects by kind for the cross checks.
type rendering struct {
	deployments []*appsv1.Deployment
	services    []*corev1.Service
	pdbs        []*policyv1.PodDisruptionBudget
	hpas        []*autoscalingv2.HorizontalPodAutoscaler
	secrets     map[string]bool
	accounts    map[string]bool
}

func index(objs []object, external []string) rendering {
	r := rendering{secrets: map[string]bool{}, accounts: map[string]bool{"default": true}}
	for _, name := range external {
		r.secrets[name] = true
	}
	for _, o := range objs {
		switch v := o.obj.(type) {
		case *appsv1.Deployment:
			r.deployments = append(r.deployments, v)
		case *corev1.Service:
			r.services = append(r.services, v)
		case *policyv1.PodDisruptionBudget:
			r.pdbs = append(r.pdbs, v)
		case *autoscalingv2.HorizontalPodAutoscaler:
			r.hpas = append(r.hpas, v)
		case *corev1.Secret:
			r.secrets[v.Name] = true
		case *corev1.ServiceAccount:
			r.accounts[v.Name] = true
		}
	}
	return r
}

// crossCheck finds what a strict decode cannot: references between
// objects and inside a pod that point at nothing.
func crossCheck(objs []object, external []string) []string {
	r := index(objs, external)
	var problems []string
	for _, d := range r.deployments {
		problems = append(problems, checkDeployment(d, r)...)
	}
	for _, s := range r.services {
		d := r.selecting(s.Spec.Selector)
		if d == nil {
			problems = append(problems, fmt.Sprintf("Service %s selects no Deployment's pods", s.Name))
			continue
		}
		for _, p := range s.Spec.Ports {
			if !declaresPort(d.Spec.Template.Spec.Containers, p.TargetPort) {
				problems = append(problems, fmt.Sprintf("Service %s targets port %s that Deployment %s does not declare", s.Name, p.TargetPort.String(), d.Name))
			}
		}
	}
	for _, p := range r.pdbs {
		if p.Spec.Selector == nil || r.selecting(p.Spec.Selector.MatchLabels) == nil {
			problems = append(problems, fmt.Sprintf("PodDisruptionBudget %s selects no Deployment's pods", p.Name))
		}
	}
	for _, h := range r.hpas {
		ref := h.Spec.ScaleTargetRef
		if ref.Kind != "Deployment" || r.deployment(ref.Name) == nil {
			problems = append(problems, fmt.Sprintf("HorizontalPodAutoscaler %s scales %s %s, not a rendered Deployment", h.Name, ref.Kind, ref.Name))
		}
	}
	return problems
}

func (r rendering) selecting(selector map[string]string) *appsv1.Deployment {
	if len(selector) == 0 {
		return nil
	}
	for _, d := range r.deployments {
		if labels.SelectorFromSet(selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			return d
		}
	}
	return nil
}

func (r rendering) deployment(name string) *appsv1.Deployment {
	for _, d := range r.deployments {
		if d.Name == name {
			return d
		}
	}
	return nil
}

func checkDeployment(d *appsv1.Deployment, r rendering) []string {
	var problems []string
	add := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf("Deployment %s: ", d.Name)+fmt.Sprintf(format, args...))
	}
	pod := d.Spec.Template.Spec
	if d.Spec.Selector == nil || !labels.SelectorFromSet(d.Spec.Selector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)) {
		add("selector does not match the pod template's labels")
	}
	if !r.accounts[serviceAccount(pod)] {
		add("service account %q is not rendered", serviceAccount(pod))
	}
	volumes := map[string]bool{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = true
		if v.Secret != nil && !r.secrets[v.Secret.SecretName] {
			add("volume %s mounts Secret %q that is neither rendered nor external", v.Name, v.Secret.SecretName)
		}
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.Secret != nil && !r.secrets[src.Secret.Name] {
					add("volume %s projects Secret %q that is neither rendered nor external", v.Name, src.Secret.Name)
				}
			}
		}
	}
	for _, c := range pod.Containers {
		problems = append(problems, checkContainer(d.Name, c, pod.Containers, volumes, r)...)
	}
	return problems
}

func serviceAccount(pod corev1.PodSpec) string {
	if pod.ServiceAccountName == "" {
		return "default"
	}
	return pod.ServiceAccountName
}

func checkContainer(deployment string, c corev1.Container, all []corev1.Container, volumes map[string]bool, r rendering) []string {
	var problems []string
	add := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf("Deployment %s container %s: ", deployment, c.Name)+fmt.Sprintf(format, args...))
	}
	if c.Image == "" {
		add("no image")
	}
	for _, m := range c.VolumeMounts {
		if !volumes[m.Name] {
			add("mounts volume %s that the pod does not declare", m.Name)
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && !r.secrets[e.ValueFrom.SecretKeyRef.Name] {
			add("env %s reads Secret %q that is neither rendered nor external", e.Name, e.ValueFrom.SecretKeyRef.Name)
		}
	}
	for name, probe := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil {
			add("no HTTP %s probe", name)
			continue
		}
		if !declaresPort(all, probe.HTTPGet.Port) {
			add("%s probe names port %s that no container declares", name, probe.HTTPGet.Port.String())
		}
	}
	return problems
}

func declaresPort(containers []corev1.Container, port intstr.IntOrString) bool {
	return slices.ContainsFunc(containers, func(c corev1.Container) bool {
		return slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool {
			if port.Type == intstr.String {
				return p.Name == port.StrVal
			}
			return p.ContainerPort == port.IntVal
		})
	})
}
