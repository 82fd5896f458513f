// Command image writes the sample apiserver's OCI image as a tarball, without
// a Docker daemon: `make image`. See package image.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/watchkeeper/watchkeeper/e2e/image"
)

func main() {
	binary := flag.String("binary", "", "the sample apiserver, statically linked (CGO_ENABLED=0)")
	out := flag.String("o", "sample-apiserver-image.tar", "the tarball to write")
	flag.Parse()
	if err := run(*binary, *out); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(binary, out string) error {
	img, err := image.Build(binary)
	if err != nil {
		return err
	}
	if err := image.Write(out, img); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s: %s %s\n", out, image.Ref, digest)
	return nil
}
