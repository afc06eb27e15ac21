#!/bin/bash
# Proves a kernel refactor changes nothing the GPU runs, without a GPU: compiles kernels/NAME.cu
# at REV and in the working tree with the build's nvcc command (CMakeLists.txt: sm_80, sm_89 and
# sm_90a cubins plus compute_80 PTX, -O3) and compares the two fatbins byte for byte.
#   scripts/kernels-identical.sh [REV] [NAME...]   (REV default HEAD; NAMEs default: every
#                                                   kernels/*.cu whose file or headers differ)
# Exit 0 when every pair is identical, 1 when one differs (then the change needs a GPU run).
set -eu
cd "$(dirname "$0")/.."
rev=${1:-HEAD}
[ $# -gt 0 ] && shift
names="$*"
if [ -z "$names" ]; then
  if git diff --quiet "$rev" -- kernels; then echo "kernels-identical: kernels/ is as at $rev"; exit 0; fi
  if git diff --name-only "$rev" -- kernels | grep -qvE '\.cu$'; then
    names=$(cd kernels && ls *.cu | sed 's/\.cu$//') # a header changed: every kernel file
  else
    names=$(git diff --name-only "$rev" -- kernels | sed 's|kernels/||; s/\.cu$//')
  fi
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/old/kernels" "$tmp/new"
git archive "$rev" kernels | tar x -C "$tmp/old"
nvcc=${KILN_NVCC:-nvcc}
build() { # build SRC_DIR NAME OUT
  "$nvcc" -fatbin -std=c++17 -O3 --threads 0 -gencode=arch=compute_80,code=sm_80 \
    -gencode=arch=compute_89,code=sm_89 -gencode=arch=compute_90a,code=sm_90a \
    -gencode=arch=compute_80,code=compute_80 -I"$1" -Xptxas -warn-spills -o "$3" "$1/$2.cu"
}
status=0
for n in $names; do
  build "$tmp/old/kernels" "$n" "$tmp/old/$n.fatbin"
  build "$PWD/kernels" "$n" "$tmp/new/$n.fatbin"
  if cmp -s "$tmp/old/$n.fatbin" "$tmp/new/$n.fatbin"; then
    echo "kernels-identical: $n.cu: fatbin identical to $rev's ($(stat -c %s "$tmp/new/$n.fatbin") bytes)"
  else
    echo "kernels-identical: $n.cu: fatbin DIFFERS from $rev's"
    status=1
  fi
done
exit $status
