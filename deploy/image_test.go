package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// builder is the image tool `make image` uses (scripts/image.sh), with a
// private storage so the test leaves nothing in the system's.
type builder struct {
	tool    string
	storage []string
}

func (b builder) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, b.tool, append(append([]string{}, b.storage...), args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// imageBuilder finds buildah or podman and checks it can work here. Without
// either, the test fails under SLUICE_REQUIRE_SERVERS=1 (make test installs
// buildah) and is skipped otherwise; a tool that cannot run on this machine
// (no permission for container storage) skips it, saying so plainly.
func imageBuilder(t *testing.T, storageRoot string) builder {
	t.Helper()
	var b builder
	for _, tool := range []string{"buildah", "podman"} {
		if p, err := exec.LookPath(tool); err == nil {
			b.tool = p
			break
		}
	}
	if b.tool == "" {
		msg := "this machine cannot build container images: neither buildah nor podman is installed (make test-deps installs buildah)"
		if testenv.Required() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	b.storage = []string{"--storage-driver", "vfs", "--root", filepath.Join(storageRoot, "root"), "--runroot", filepath.Join(storageRoot, "run")}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := b.run(ctx, "info"); err != nil {
		t.Skipf("this machine cannot run containers: %s info failed: %v\n%s", filepath.Base(b.tool), err, out)
	}
	return b
}

// TestImage builds the image with `make image`, checks its configuration
// (non-root user, ports, health check, entrypoint) and runs the binary
// inside it: its health check against a sluice on this machine.
func TestImage(t *testing.T) {
	storage := t.TempDir()
	b := imageBuilder(t, storage)
	image := fmt.Sprintf("localhost/sluice-test:%d", os.Getpid())
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	mk := exec.CommandContext(ctx, "make", "-C", "..", "--no-print-directory", "image", "IMAGE="+image)
	mk.Env = append(os.Environ(), "IMAGE_STORAGE_ROOT="+storage)
	out, err := mk.CombinedOutput()
	if err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	t.Logf("make image: %s", lastLine(string(out)))

	raw, err := b.run(ctx, "inspect", "--type", "image", image)
	if err != nil {
		t.Fatalf("inspect: %v\n%s", err, raw)
	}
	var inspect struct {
		Docker struct {
			Config struct {
				User         string
				ExposedPorts map[string]struct{}
				Entrypoint   []string
				Cmd          []string
				Healthcheck  *struct{ Test []string }
			} `json:"config"`
		}
	}
	if err := json.Unmarshal([]byte(raw), &inspect); err != nil {
		t.Fatalf("inspect output: %v", err)
	}
	cfg := inspect.Docker.Config
	if u, _, _ := strings.Cut(cfg.User, ":"); u == "" || u == "0" || u == "root" {
		t.Errorf("image user %q, want a non-root user", cfg.User)
	}
	var ports []string
	for p := range cfg.ExposedPorts {
		ports = append(ports, p)
	}
	sort.Strings(ports)
	if got := strings.Join(ports, " "); got != "6070/tcp 8080/tcp 8081/tcp 9090/tcp" {
		t.Errorf("exposed ports %s", got)
	}
	if cfg.Healthcheck == nil || strings.Join(cfg.Healthcheck.Test, " ") != "CMD /sluice healthcheck" {
		t.Errorf("health check %+v, want CMD /sluice healthcheck", cfg.Healthcheck)
	}
	if strings.Join(cfg.Entrypoint, " ") != "/sluice" || strings.Join(cfg.Cmd, " ") != "ratelimit" {
		t.Errorf("entrypoint %v, command %v", cfg.Entrypoint, cfg.Cmd)
	}
	if fi, err := os.Stat("../bin/image/sluice-image.tar"); err != nil || fi.Size() == 0 {
		t.Errorf("no docker-archive for docker load: %v", err)
	}

	// The static binary runs in the empty image, as the image's user: its
	// health check reaches a sluice on this machine (chroot isolation shares
	// the host's network).
	s := startComposeSluice(t)
	url := "http://" + s.srv.Addrs().HTTP.String() + "/healthcheck"
	var ctr string // buildah's working container
	inImage := func(args ...string) (string, error) {
		if filepath.Base(b.tool) == "podman" {
			return b.run(ctx, append([]string{"run", "--rm", "--network", "host", image}, args...)...)
		}
		return b.run(ctx, append([]string{"run", "--isolation", "chroot", ctr, "--", "/sluice"}, args...)...)
	}
	if filepath.Base(b.tool) == "buildah" {
		out, err := b.run(ctx, "from", "--pull-never", image)
		if err != nil {
			t.Fatalf("buildah from: %v\n%s", err, out)
		}
		ctr = lastLine(out)
		defer b.run(context.Background(), "rm", ctr)
	}
	if out, err := inImage("healthcheck", "-url", url); err != nil {
		t.Errorf("the image's health check against a healthy sluice: %v\n%s", err, out)
	}
	if out, err := inImage("healthcheck", "-url", "http://127.0.0.1:1/healthcheck"); err == nil {
		t.Errorf("the image's health check passed with nothing listening:\n%s", out)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
