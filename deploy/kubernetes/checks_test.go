package kubernetes

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// checkScaling: the PodDisruptionBudget and the HorizontalPodAutoscaler,
// where present, act on sluice's Deployment and leave room for a voluntary
// disruption.
func checkScaling(t *testing.T, m manifests, c corev1.Container) {
	t.Helper()
	podLabels := m.deploy.Spec.Template.Labels
	replicas := int32(0)
	if r := m.deploy.Spec.Replicas; r != nil {
		replicas = *r
	}
	if m.hpa != nil {
		if ref := m.hpa.Spec.ScaleTargetRef; ref.Kind != "Deployment" || ref.Name != m.deploy.Name || ref.APIVersion != "apps/v1" {
			t.Errorf("the HPA scales %+v, not the Deployment", ref)
		}
		if m.hpa.Spec.MinReplicas == nil || *m.hpa.Spec.MinReplicas < 2 || c.Resources.Requests.Cpu().IsZero() {
			t.Error("the HPA needs minReplicas >= 2 and a CPU request to scale on")
		} else if replicas == 0 {
			replicas = *m.hpa.Spec.MinReplicas
		}
	}
	if replicas == 0 {
		t.Error("no replica count: neither the Deployment nor an HPA sets one")
	}
	if m.pdb == nil {
		return
	}
	if !matches(m.pdb.Spec.Selector.MatchLabels, podLabels) || m.pdb.Spec.MinAvailable == nil {
		t.Error("the PodDisruptionBudget does not protect sluice's pods")
	} else if m.pdb.Spec.MinAvailable.IntValue() >= int(replicas) {
		t.Errorf("the PodDisruptionBudget (minAvailable %v) allows no voluntary disruption at %d replicas", m.pdb.Spec.MinAvailable, replicas)
	}
}

// checkDebugPrivate: the debug server (pprof, /rlconfig, no
// authentication) listens on loopback only and is no container port.
func checkDebugPrivate(t *testing.T, c corev1.Container, e map[string]string) {
	t.Helper()
	if h := e["DEBUG_HOST"]; h != "127.0.0.1" && h != "::1" && h != "localhost" {
		t.Errorf("DEBUG_HOST=%q: the debug server is reachable from the cluster's network", h)
	}
	debugPort := envPort(t, e, "DEBUG_PORT", 6070)
	for _, p := range c.Ports {
		if p.Name == "debug" || p.ContainerPort == debugPort {
			t.Errorf("container port %+v exposes the debug server", p)
		}
	}
}

// checkRulesMount: the rules ConfigMap is mounted whole (a subPath mount
// never sees updates), every item is one of its keys, and RUNTIME_ROOT is
// inside the mount.
func checkRulesMount(t *testing.T, m manifests, c corev1.Container) {
	t.Helper()
	e := env(c)
	for _, v := range m.deploy.Spec.Template.Spec.Volumes {
		if v.ConfigMap == nil || v.ConfigMap.Name != m.rules.Name {
			continue
		}
		if len(v.ConfigMap.Items) == 0 {
			t.Error("the rules volume has no items")
		}
		for _, it := range v.ConfigMap.Items {
			if _, ok := m.rules.Data[it.Key]; !ok {
				t.Errorf("volume item %s is not a key of ConfigMap %s", it.Key, m.rules.Name)
			}
			if !strings.HasPrefix(it.Path, e["RUNTIME_SUBDIRECTORY"]+"/config/") {
				t.Errorf("rule file %s is not under %s/config/", it.Path, e["RUNTIME_SUBDIRECTORY"])
			}
		}
		for _, vm := range c.VolumeMounts {
			if vm.Name != v.Name {
				continue
			}
			if vm.SubPath != "" {
				t.Error("the rules are mounted with subPath, which never sees ConfigMap updates")
			}
			if !strings.HasPrefix(e["RUNTIME_ROOT"], vm.MountPath+"/") {
				t.Errorf("RUNTIME_ROOT %s is not inside the rules mount %s", e["RUNTIME_ROOT"], vm.MountPath)
			}
			return
		}
	}
	t.Errorf("ConfigMap %s is not mounted in the sluice container", m.rules.Name)
}
