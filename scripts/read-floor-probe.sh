#!/bin/sh
# Builds scripts/probes/read_floor.cu (issues 5 and 6: the fastest read of B bytes of weights,
# timed as kiln-bench times a decode call) into a slim build's tools: scripts/read-floor-probe.sh
# SLIM (e.g. build-ladder/slim/main). On the device: SLIM/tools/read_floor [MB ...], or
# scripts/device-next.sh readfloor SLIM beside kiln's decode rows.
set -e
slim=${1:?usage: read-floor-probe.sh SLIM}
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
mkdir -p "$slim/tools"
"$nvcc" -std=c++17 -arch=sm_90a -O3 -Xcompiler -Wall scripts/probes/read_floor.cu -o "$slim/tools/read_floor"
echo "built $slim/tools/read_floor"
