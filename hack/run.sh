#!/usr/bin/env bash
# The main job: the sample apiserver, standalone on an embedded etcd whose
# data stays under .watchkeeper/ across restarts. Extra arguments go to the
# server: hack/run.sh --watch-cache-bookmark-frequency=5s
set -euo pipefail
# Kubernetes 1.38 needs Go 1.27; the go command fetches it (see the Makefile).
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"
cd "$(dirname "$0")/.."
mkdir -p _output/bin
go build -o _output/bin/sample-apiserver ./sample-apiserver
exec _output/bin/sample-apiserver "$@"
