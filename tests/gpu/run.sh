#!/usr/bin/env bash
# Run the GPU tests on a machine with an NVIDIA GPU (the device tool's H200): installs fatbinkit's
# pure-Python dependencies from carried wheels when pip cannot reach an index, runs tests/gpu, and
# writes the log and a JSON report under ${OUT:-out}/.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-out}; mkdir -p "$out"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export FATBINKIT_GPU_REPORT=$out/gpu-report.json CUDA_CACHE_DISABLE=1
# Triton kernels compiled on the CPU machine (python -m tests.gpu.triton_artifacts .artifacts/triton sm_90)
[ -d .artifacts/triton ] && export FATBINKIT_TRITON_DIR=$PWD/.artifacts/triton
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 --version; } | tee "$out/env.txt"
python3 -m pytest -q -p no:cacheprovider tests/gpu "$@" 2>&1 | tee "$out/gpu-tests.log"
exit "${PIPESTATUS[0]}"
