package image

import (
	"archive/tar"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

var tarballPath = flag.String("tarball", "", "the image tarball to check (make image passes bin/sample-apiserver-image.tar); empty: build one from ./sample-apiserver")

// TestImageConfig opens the tarball as `docker load` would and checks what
// the deployment relies on: the tag deployment.yaml names, the entrypoint,
// a non-root user, and no shell anywhere in the layers (nothing to exec
// into but the server).
func TestImageConfig(t *testing.T) {
	path := *tarballPath
	if path == "" {
		path = buildTarball(t)
	}
	tag, err := name.NewTag(Ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		t.Fatalf("opening %s as %s: %v", path, Ref, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{BinaryPath}) {
		t.Errorf("entrypoint %q, want [%s]", cf.Config.Entrypoint, BinaryPath)
	}
	if len(cf.Config.Cmd) != 0 {
		t.Errorf("cmd %q, want none (the deployment's args are the flags)", cf.Config.Cmd)
	}
	if u := cf.Config.User; u == "" || u == "0" || u == "root" || strings.HasPrefix(u, "0:") || strings.HasPrefix(u, "root:") {
		t.Errorf("user %q, want a non-root uid", u)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("platform %s/%s, want linux/amd64", cf.OS, cf.Architecture)
	}

	files := layerFiles(t, img)
	for _, sh := range []string{"bin/sh", "bin/bash", "bin/ash", "usr/bin/sh", "bin/busybox"} {
		if _, ok := files[sh]; ok {
			t.Errorf("the image has %s; want no shell", sh)
		}
	}
	if h, ok := files[BinaryPath[1:]]; !ok {
		t.Errorf("no %s in the layers", BinaryPath)
	} else if h.Mode&0o111 == 0 {
		t.Errorf("%s mode %o, not executable", BinaryPath, h.Mode)
	}
	if h, ok := files["tmp"]; !ok || h.Mode&0o1777 != 0o1777 {
		t.Errorf("/tmp missing or not 1777 (the deployment's --cert-dir is under it)")
	}
	passwd, ok := files["etc/passwd"]
	if !ok || !strings.Contains(passwd.content, ":65532:65532:") {
		t.Errorf("/etc/passwd does not name uid 65532")
	}
	for p := range files {
		if strings.HasSuffix(p, "/sh") {
			t.Errorf("shell-like file %s", p)
		}
	}
}

// TestBuildRefusesDynamicBinary: FROM scratch a binary needing ld.so
// would not start; Build says so instead.
func TestBuildRefusesDynamicBinary(t *testing.T) {
	if _, err := os.Stat("/bin/true"); err != nil {
		t.Skip("no /bin/true")
	}
	_, err := Build("/bin/true")
	if err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Fatalf("Build(/bin/true) = %v, want the dynamically linked error", err)
	}
}

type file struct {
	Mode    int64
	content string
}

func layerFiles(t *testing.T, img v1.Image) map[string]file {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]file{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			f := file{Mode: h.Mode}
			if h.Typeflag == tar.TypeSymlink || h.Typeflag == tar.TypeLink {
				f.content = h.Linkname
			} else if h.Size < 1<<16 {
				data, _ := io.ReadAll(tr)
				f.content = string(data)
			}
			files[strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")] = f
		}
		rc.Close()
	}
	return files
}

// buildTarball builds the sample apiserver statically and its image, as
// make image does.
func buildTarball(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "sample-apiserver")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./sample-apiserver")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the sample apiserver: %v\n%s", err, out)
	}
	img, err := Build(bin)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "image.tar")
	if err := Write(path, img); err != nil {
		t.Fatal(err)
	}
	return path
}
