// Package image builds the sample apiserver's OCI image without a Docker
// daemon: FROM scratch, one layer with the static binary, an /etc/passwd
// and /etc/group naming the non-root user 65532 (distroless's "nonroot"),
// its home and a writable /tmp (the deployment's --cert-dir). No shell, no
// libc: the binary must be static (CGO_ENABLED=0). sample-apiserver/Dockerfile
// builds the same image with Docker.
package image

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// Ref is the image's name, as sample-apiserver/deploy/deployment.yaml
	// names it.
	Ref = "watchkeeper/sample-apiserver:dev"
	// BinaryPath is where the binary is in the image, the entrypoint.
	BinaryPath = "/usr/local/bin/sample-apiserver"
	// User is the non-root user and group the server runs as.
	User = "65532:65532"
	uid  = 65532
)

// Build returns the image of the static binary at binary.
func Build(binary string) (v1.Image, error) {
	if err := checkStatic(binary); err != nil {
		return nil, err
	}
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	layerTar, err := rootfs(bin)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()} // reproducible
	cf.Config.Entrypoint = []string{BinaryPath}
	cf.Config.User = User
	cf.Config.WorkingDir = "/home/nonroot"
	cf.Config.Env = []string{"HOME=/home/nonroot"}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":       "watchkeeper sample-apiserver",
		"org.opencontainers.image.description": "An aggregated apiserver for demo.watchkeeper.io whose watch cache is watchkeeper",
	}
	cf.Config.ExposedPorts = map[string]struct{}{"8443/tcp": {}}
	return mutate.ConfigFile(img, cf)
}

// Write writes img as a tarball `docker load` and `ctr images import` read,
// tagged Ref.
func Write(path string, img v1.Image) error {
	tag, err := name.NewTag(Ref)
	if err != nil {
		return err
	}
	return tarball.WriteToFile(path, tag, img)
}

// checkStatic refuses a dynamically linked binary: FROM scratch there is
// no loader to run it.
func checkStatic(binary string) error {
	f, err := elf.Open(binary)
	if err != nil {
		return fmt.Errorf("%s: %w", binary, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (has an ELF interpreter); build it with CGO_ENABLED=0", binary)
		}
	}
	return nil
}

// rootfs is the layer: directories, passwd, group, the binary. Every entry
// has mtime 0, so the same binary makes the same layer digest.
func rootfs(bin []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	dirs := []struct {
		name     string
		mode     int64
		uid, gid int
	}{
		{"etc/", 0o755, 0, 0},
		{"home/", 0o755, 0, 0},
		{"home/nonroot/", 0o700, uid, uid},
		{"tmp/", 0o1777, 0, 0},
		{"usr/", 0o755, 0, 0},
		{"usr/local/", 0o755, 0, 0},
		{"usr/local/bin/", 0o755, 0, 0},
	}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d.name, Mode: d.mode, Uid: d.uid, Gid: d.gid, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	files := []struct {
		name string
		mode int64
		data []byte
	}{
		{"etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{"etc/group", 0o644, []byte("root:x:0:\nnonroot:x:65532:\n")},
		{BinaryPath[1:], 0o755, bin},
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: epoch}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
