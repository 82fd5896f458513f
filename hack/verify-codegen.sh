#!/usr/bin/env bash
# Fails when the generated code of the sample apiserver is stale: it copies
# the working tree (tracked and untracked files, minus git-ignored ones) to a
# temporary directory twice, runs hack/update-codegen.sh in one copy and
# diffs the two. The working tree itself is never written to.
set -euo pipefail
# Kubernetes 1.38 needs Go 1.27; the go command fetches it (see the Makefile).
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/before" "$tmp/after"

# copy_tree DEST: the files of the working tree, as git would see them.
copy_tree() {
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard |
      while IFS= read -r -d '' f; do
        # Tracked files deleted in the working tree are gone for codegen too.
        if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi
      done |
      tar --null -T - -cf - | tar -C "$1" -xf -
  else
    tar --exclude=./.git --exclude=./_output --exclude=./.watchkeeper --exclude=./bin -cf - . | tar -C "$1" -xf -
  fi
}
copy_tree "$tmp/before"
cp -a "$tmp/before/." "$tmp/after/"

# The generators already built for this tree are reused (CODEGEN_BIN).
echo "verify-codegen: regenerating in a copy of the tree"
if ! CODEGEN_BIN="${CODEGEN_BIN:-$ROOT/_output/bin}" "$tmp/after/hack/update-codegen.sh" >"$tmp/update.log" 2>&1; then
  cat "$tmp/update.log"
  echo "verify-codegen: hack/update-codegen.sh failed (output above)."
  exit 1
fi

if ! diff -Nur "$tmp/before" "$tmp/after" >"$tmp/diff"; then
  cat "$tmp/diff"
  echo
  echo "verify-codegen: generated code is stale (diff above: - committed, + regenerated)."
  echo "Run hack/update-codegen.sh (make update-codegen) and include the result."
  exit 1
fi
echo "verify-codegen: generated code is up to date"
