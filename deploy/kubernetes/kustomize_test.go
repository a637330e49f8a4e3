package kubernetes

import (
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// kustomize builds a kustomization directory as `kubectl apply -k` would.
func kustomize(t *testing.T, dir string) []byte {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The base (this folder) and the overlay for clusters older than 1.30
// build, decode strictly, fit together, and carry the image kustomization
// sets, not a placeholder.
func TestKustomizeBuilds(t *testing.T) {
	for _, tc := range []struct {
		dir     string
		preStop bool
	}{{".", true}, {"../kustomize/pre-1.30", false}} {
		t.Run(tc.dir, func(t *testing.T) {
			objs, err := decodeAll(kustomize(t, tc.dir))
			if err != nil {
				t.Fatal(err)
			}
			m := classify(t, objs)
			if m.pdb == nil || m.hpa == nil || m.redis == nil || m.redisSv == nil {
				t.Fatalf("missing objects: %+v", m)
			}
			checkFit(t, m, tc.preStop)
			img := container(t, m.deploy).Image
			if img != "registry.example.com/sluice:0.1.0" {
				t.Errorf("image %q: want kustomization.yaml's images: entry", img)
			}
		})
	}
}

// The image is kustomization's to set: in sluice.yaml it is the bare name
// that images: replaces, never a registry of its own.
func TestManifestImageIsAPlaceholder(t *testing.T) {
	m := load(t)
	if img := container(t, m.deploy).Image; img != "sluice" || strings.Contains(img, "localhost") {
		t.Errorf("sluice.yaml's image %q: want the placeholder kustomization.yaml replaces", img)
	}
}
