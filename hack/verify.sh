#!/usr/bin/env bash
# Checks that must stay green: formatting, go vet, the linters (hack/lint.sh),
# a tidy go.mod, fresh generated code.
set -euo pipefail
# Kubernetes 1.38 needs Go 1.27; the go command fetches it (see the Makefile).
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"
cd "$(dirname "$0")/.."

fail=0
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change these files (run gofmt -w):"
  echo "$unformatted"
  fail=1
fi

echo "go vet ./..."
go vet ./... || fail=1
echo "go -C hack vet ./..."
go -C hack vet ./... || fail=1

# staticcheck, unparam and go-errorlint at the versions of hack/tools/go.mod.
hack/lint.sh || fail=1

# go.mod and go.sum must already be what go mod tidy makes of them.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp go.mod go.sum "$tmp/"
go mod tidy
if ! diff -q "$tmp/go.mod" go.mod >/dev/null || ! diff -q "$tmp/go.sum" go.sum >/dev/null; then
  echo "go.mod/go.sum are not tidy (run go mod tidy):"
  diff -u "$tmp/go.mod" go.mod || true
  cp "$tmp/go.mod" "$tmp/go.sum" .
  fail=1
fi
# So must the linters' module.
if ! go -C hack mod tidy -diff; then
  echo "hack/go.mod/go.sum are not tidy (run go -C hack mod tidy)"
  fail=1
fi
if ! go -C hack/tools mod tidy -diff; then
  echo "hack/tools/go.mod/go.sum are not tidy (run go -C hack/tools mod tidy)"
  fail=1
fi

# Generated code (deepcopy, conversions, defaults, OpenAPI, clientset) must be
# what hack/update-codegen.sh makes of the API types.
echo "hack/verify-codegen.sh"
hack/verify-codegen.sh || fail=1

if [ "$fail" -ne 0 ]; then
  echo "verify: FAILED"
  exit 1
fi
echo "verify: OK"
