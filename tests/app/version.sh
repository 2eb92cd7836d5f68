#!/usr/bin/env bash
# `tinyscale --version` names the version, the commit the binary was built from, the build type
# and what was compiled in; `info` starts with the same version line.
# Usage: tests/app/version.sh TINYSCALE_BINARY SOURCE_DIR
set -euo pipefail
bin=$1 src=$2
out=$("$bin" --version)
echo "$out"
version=$(sed -n 's/^project(tinyscale VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
for want in "tinyscale $version" "  git commit: " "  build type: " "  CUDA kernels: " "  NCCL: " \
            "  Open MPI: "; do
  grep -qF -- "$want" <<<"$out" || { echo "version.sh: expected a line with '$want'" >&2; exit 1; }
done
if git -C "$src" rev-parse --short=12 HEAD >/dev/null 2>&1; then
  head=$(git -C "$src" rev-parse --short=12 HEAD)
  grep -q "git commit: $head" <<<"$out" ||
    { echo "version.sh: expected the commit $head (rebuild after committing)" >&2; exit 1; }
fi
[ "$("$bin" info | head -n 1)" = "tinyscale $version" ] ||
  { echo "version.sh: expected info's first line to be 'tinyscale $version'" >&2; exit 1; }
echo "version.sh: ok"
