#!/usr/bin/env bash
# Regenerates the sample apiserver's generated code with k8s.io/code-generator's
# kube_codegen.sh:
#   - deepcopy, conversion and defaulting functions next to the API types
#     (sample-apiserver/pkg/apis/demo/...: zz_generated.*.go),
#   - OpenAPI definitions (sample-apiserver/pkg/generated/openapi) and the
#     types' OpenAPI model names (zz_generated.model_name.go),
#   - a typed clientset with apply configurations, listers and informers
#     (sample-apiserver/pkg/generated/{clientset,applyconfiguration,listers,informers}).
# Idempotent: a second run changes nothing. The generator binaries are built
# from the pinned versions into _output/bin (git-ignored); CODEGEN_BIN
# overrides that directory.
#
# New OpenAPI API rule violations fail the run; to accept them, rerun with
# UPDATE_API_KNOWN_VIOLATIONS=true, which rewrites
# sample-apiserver/pkg/generated/openapi/violation_exceptions.list.
set -euo pipefail
# Kubernetes 1.38 needs Go 1.27; the go command fetches it (see the Makefile).
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"

# The generators' version. openapi-gen comes from the kube-openapi version
# that code-generator requires, which must be the one go.mod builds against:
# the generated definitions call into k8s.io/kube-openapi at run time.
CODEGEN_VERSION=v0.38.0-beta.0
MODULE=github.com/watchkeeper/watchkeeper
APIS_DIR=sample-apiserver/pkg/apis
GEN_DIR=sample-apiserver/pkg/generated
BOILERPLATE="$ROOT/hack/boilerplate.go.txt"
VIOLATIONS="$GEN_DIR/openapi/violation_exceptions.list"

# kube_codegen.sh installs its binaries with `go install` into GOBIN.
GOBIN="${CODEGEN_BIN:-$ROOT/_output/bin}"
mkdir -p "$GOBIN"
GOBIN="$(cd "$GOBIN" && pwd -P)"
export GOBIN

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

CODEGEN_PKG="$(go env GOMODCACHE)/k8s.io/code-generator@${CODEGEN_VERSION}"
if [ ! -f "$CODEGEN_PKG/kube_codegen.sh" ]; then
  # Outside this module, so go.mod and go.sum stay as they are.
  (cd "$tmp" && GO111MODULE=on GOWORK=off GOFLAGS= go mod download "k8s.io/code-generator@${CODEGEN_VERSION}")
fi

want_openapi="$(awk '$1 == "k8s.io/kube-openapi" { print $2 }' "$CODEGEN_PKG/go.mod")"
have_openapi="$(go list -m -f '{{.Version}}' k8s.io/kube-openapi)"
if [ "$want_openapi" != "$have_openapi" ]; then
  echo "update-codegen: k8s.io/code-generator@${CODEGEN_VERSION} generates OpenAPI with k8s.io/kube-openapi ${want_openapi}," >&2
  echo "but go.mod builds against ${have_openapi}; align them (go get k8s.io/kube-openapi@${want_openapi})." >&2
  exit 1
fi

# shellcheck source=/dev/null
source "$CODEGEN_PKG/kube_codegen.sh"

kube::codegen::gen_helpers \
  --boilerplate "$BOILERPLATE" \
  "$APIS_DIR"

update_report=()
if [ "${UPDATE_API_KNOWN_VIOLATIONS:-}" = "true" ]; then
  update_report=(--update-report)
fi
kube::codegen::gen_openapi \
  --output-dir "$GEN_DIR/openapi" \
  --output-pkg "$MODULE/$GEN_DIR/openapi" \
  --report-filename "$VIOLATIONS" \
  --output-model-name-file zz_generated.model_name.go \
  "${update_report[@]+"${update_report[@]}"}" \
  --boilerplate "$BOILERPLATE" \
  "$APIS_DIR"

# applyconfiguration-gen embeds the types' schemas, read from the OpenAPI
# definitions just generated. A file, not a process substitution, so a
# failure stops the run.
go run ./"$GEN_DIR"/openapi/cmd/models-schema >"$tmp/models-schema.json"

kube::codegen::gen_client \
  --with-watch \
  --with-applyconfig \
  --applyconfig-openapi-schema "$tmp/models-schema.json" \
  --output-dir "$GEN_DIR" \
  --output-pkg "$MODULE/$GEN_DIR" \
  --boilerplate "$BOILERPLATE" \
  "$APIS_DIR"
