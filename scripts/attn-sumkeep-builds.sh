#!/bin/sh
# The builds that `scripts/device-next.sh sumkeep` compares (issue 8: rungs rowsum-mma and
# fast-keep of the sm_90a forward): main's sm_90a build, then the same library with its
# attention_sm90.fatbin compiled with one rung's macro (KILN_ATTN_MMA_ROWSUM=1, KILN_ATTN_FAST_KEEP=1),
# each slimmed with its tests into build-ladder/slim/{main,RS,FK} and packed into
# build-ladder/carry-sumkeep.tgz (~40 MB). Then, on the device (carry ["build-ladder/carry-sumkeep.tgz"]):
#   tar xzf build-ladder/carry-sumkeep.tgz -C /tmp &&
#     STOP_AT=520 bash scripts/device-next.sh sumkeep /tmp/slim/main /tmp/slim/RS /tmp/slim/FK
# Usage: scripts/attn-sumkeep-builds.sh [BUILD_DIR]   (default build-90; ~4 minutes from clean)
set -e
cd "$(dirname "$0")/.."
b=${1:-build-90}
nvcc=${KILN_NVCC:-/usr/local/cuda/bin/nvcc}
cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA_ARCHS=90a -DKILN_PTX_ARCH= >/dev/null
cmake --build "$b" -j2 >/dev/null
sh scripts/slim-build.sh "$b" build-ladder/slim/main
for rung in "RS KILN_ATTN_MMA_ROWSUM=1" "FK KILN_ATTN_FAST_KEEP=1"; do
  set -- $rung
  "$nvcc" -fatbin -std=c++17 -O3 --threads 0 -gencode=arch=compute_90a,code=sm_90a -Ikernels -Xptxas -warn-spills \
    -D"$2" -o "$b/kernels/attention_sm90.fatbin" kernels/attention_sm90.cu
  cmake --build "$b" --target kiln >/dev/null # the library embeds the rung's fatbin
  sh scripts/slim-build.sh "$b" "build-ladder/slim/$1"
done
touch kernels/attention_sm90.cu # the next build of $b compiles main's fatbin again
(cd build-ladder && tar czf carry-sumkeep.tgz slim/main slim/RS slim/FK && ls -la carry-sumkeep.tgz)
