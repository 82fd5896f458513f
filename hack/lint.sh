#!/usr/bin/env bash
# The linters of make verify, run over the whole module (tests included):
#   staticcheck   its default checks: bugs, deprecated APIs, simplifications,
#                 and unused code (U1000)
#   unparam       parameters and results of unexported functions that are
#                 never used or always receive the same value
#   go-errorlint  error comparisons, type assertions and type switches that
#                 break on wrapped errors. Its -errorf check (fmt.Errorf
#                 formatting an error with %v rather than %w) is off: most
#                 such errors here are a "last error" in a diagnostic that
#                 may be nil, where %w prints "%!w(<nil>)"; wrap with %w
#                 where a caller may want to unwrap.
# Their versions are pinned in hack/tools/go.mod and go.sum (a module of its
# own, so they never move the versions watchkeeper builds with); they are
# built from the Go module proxy into _output/bin. About 20s of building on
# a fresh clone, then under a minute on two cores with a warm build cache
# (staticcheck's first run over k8s.io/apiserver takes about 90s).
#
# Generated files (the "// Code generated ... DO NOT EDIT." header) are not
# linted: hack/update-codegen.sh writes them, and what the linters say of
# them (client-gen's deprecated ListFunc, conversion-gen's unused scopes) is
# for the generators to fix.
set -euo pipefail
# Kubernetes 1.38 needs Go 1.27; the go command fetches it (see the Makefile).
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"

BIN="$ROOT/_output/bin"
mkdir -p "$BIN"
go build -C hack/tools -o "$BIN/" \
  honnef.co/go/tools/cmd/staticcheck \
  mvdan.cc/unparam \
  github.com/polyfloyd/go-errorlint

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# Every generated Go file, as a path relative to the module root.
git ls-files '*.go' 2>/dev/null | xargs grep -lE '^// Code generated .* DO NOT EDIT\.$' >"$tmp/generated" || true

fail=0
# lint NAME COMMAND...: runs one linter and prints its findings outside
# generated files. A linter that fails without a finding (a crash, a
# package that does not build) fails too.
lint() {
  local name=$1 rc=0
  shift
  echo "$name"
  "$@" >"$tmp/out" 2>&1 || rc=$?
  # Paths relative to the module root, whichever way the linter prints them.
  sed -i "s|^$ROOT/||" "$tmp/out"
  awk -F: 'NR == FNR { gen[$0] = 1; next } !($1 in gen)' "$tmp/generated" "$tmp/out" >"$tmp/findings"
  if [ -s "$tmp/findings" ]; then
    cat "$tmp/findings"
    fail=1
  elif [ "$rc" -ne 0 ] && [ ! -s "$tmp/out" ]; then
    echo "$name failed (exit $rc) without output"
    fail=1
  fi
}

# The library's module, then the tools' (hack/, a module of its own).
for dir in . hack; do
  lint "staticcheck ./... in $dir" sh -c "cd $dir && '$BIN/staticcheck' ./..."
  lint "unparam -tests ./... in $dir" sh -c "cd $dir && '$BIN/unparam' -tests ./..."
  lint "go-errorlint ./... in $dir" sh -c "cd $dir && '$BIN/go-errorlint' ./..."
done

if [ "$fail" -ne 0 ]; then
  echo "lint: FAILED"
  exit 1
fi
echo "lint: OK"
