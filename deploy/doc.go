// Package deploy holds no code: its tests run the deployment examples in this
// folder, because an example nobody ran is a guess. They load the compose
// file's Envoy configuration into go-control-plane's bootstrap types and
// validate it, send the descriptors that Envoy would send for docs/deploy.md's
// requests to a sluice started with the compose file's settings, check that
// every metric the Grafana dashboard queries is in that sluice's scrape, and
// build the image with `make image` where buildah or podman can run, and
// reload the Kubernetes ConfigMap's rules the way the kubelet updates them.
//
// The Kubernetes manifests, the kustomize builds (the base in
// deploy/kubernetes, the overlay in deploy/kustomize) and the Helm chart's
// renders (deploy/helm/sluice) are decoded into the API types in their own
// module (deploy/kubernetes), so the main module does not depend on
// k8s.io/api, kustomize or helm.
package deploy
