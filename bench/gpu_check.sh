#!/usr/bin/env bash
# One command for a lent GPU host (no network, torch present): NVML inventory through the
# worker, exact resume on the GPU, checkpoint write time, decide timing, the overhead against
# plain ultralytics (yolov8n, 640 px, 300 images, 3 epochs) and a real preemption through the
# stack; figures in $OUT (or /tmp/yoloq-gpu-check): gpu_check.md, gpu_check.json, gpu_check.log.
#
#   bash bench/gpu_check.sh              # on the GPU host, under 10 minutes
#   bash bench/gpu_check.sh --cpu-smoke  # here, tiny sizes on the CPU: the script end to end
#
# The project's other packages travel as one archive, .gpu-site.tar.xz in the repo root
# (built here by `bash bench/gpu_bundle.sh`, ignored by git, at most 64 MiB); when it is present
# it is unpacked to /tmp/yoloq-site and put on PYTHONPATH after the working tree. Determinism on CUDA:
# CUBLAS_WORKSPACE_CONFIG=:4096:8 (cuBLAS's fixed workspace) and ultralytics' deterministic=True
# (torch.use_deterministic_algorithms(True, warn_only=True), cudnn.deterministic=True,
# cudnn.benchmark=False); PYTHONHASHSEED=0.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
    if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
if [ -f .gpu-site.tar.xz ]; then
    mkdir -p /tmp/yoloq-site
    tar -xJf .gpu-site.tar.xz -C /tmp/yoloq-site || { echo "gpu_check: could not unpack .gpu-site.tar.xz" >&2; exit 1; }
    export PYTHONPATH="$PWD:/tmp/yoloq-site${PYTHONPATH:+:$PYTHONPATH}"  # the tree's code first
    export PATH="/tmp/yoloq-site/bin:$PATH"
    export PREFECT_UI_ENABLED=false  # the bundle leaves Prefect's web UI out
else
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export CUBLAS_WORKSPACE_CONFIG=:4096:8 PYTHONHASHSEED=0 PYTHONUNBUFFERED=1
out="${OUT:-/tmp/yoloq-gpu-check}"
exec "$PY" bench/gpu_check.py --out "$out" "$@"
