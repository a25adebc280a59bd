#!/usr/bin/env bash
# Build .gpu-site.tar.xz: what bench/gpu_check.sh needs on a lent GPU host besides the image
# (Python 3.12, torch, numpy, opencv-python-headless, nvidia-ml-py... see
# bench/gpu_image_packages.txt). Run here, where pip reaches the package registry:
#
#   bash bench/gpu_bundle.sh          # -> .gpu-site.tar.xz (git-ignored through .git/info/exclude)
#
# Steps: the missing packages at this venv's versions (bench/gpu_bundle.py), downloaded as
# CPython 3.12 manylinux x86-64 wheels, plus the project's own wheel (its entry points register
# the yolo-gpu worker type); installed into one folder with --target; pruned of caches, tests,
# MLflow's and Prefect's web UIs (the API works without them; gpu_check.sh sets
# PREFECT_UI_ENABLED=false) and botocore's models of services other than S3/STS/SSO; packed
# with xz. Built in session 14: 57 MiB. The run tool
# carries at most 64 MiB with the working tree: the script fails when the archive is larger.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
LIMIT_MIB="${GPU_BUNDLE_LIMIT_MIB:-60}"
work="$(mktemp -d /tmp/yoloq-bundle.XXXXXX)"
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
           --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
           --platform manylinux1_x86_64 --platform any)
target=(--only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}")
"$PY" bench/gpu_bundle.py > "$work/requirements.txt"
echo "gpu_bundle: $(wc -l < "$work/requirements.txt") packages to fetch"
"$PY" -m pip download -q --no-deps "${target[@]}" -d "$work/wheels" -r "$work/requirements.txt"
"$PY" -m pip wheel -q --no-deps -w "$work/wheels" .
"$PY" -m pip install -q --no-deps --no-index --no-compile --target "$work/site" "${target[@]}" \
    "$work"/wheels/*.whl
find "$work/site" -name __pycache__ -type d -prune -exec rm -rf {} +
find "$work/site" -path '*/tests' -type d -prune -exec rm -rf {} +
rm -rf "$work/site/mlflow/server/js" "$work/site/prefect/server/ui" "$work/site/prefect/server/ui-v2"
# botocore's API models: yoloq talks to S3 only (27 MiB of already-gzipped data for 449 services)
find "$work/site/botocore/data" -mindepth 1 -maxdepth 1 -type d \
    ! -name s3 ! -name sts ! -name sso ! -name sso-oidc -exec rm -rf {} +
tar -cJf .gpu-site.tar.xz -C "$work/site" .
size_mib=$(( $(stat -c %s .gpu-site.tar.xz) / 1048576 ))
grep -qx '/.gpu-site.tar.xz' .git/info/exclude 2>/dev/null || echo '/.gpu-site.tar.xz' >> .git/info/exclude
rm -rf "$work"
echo "gpu_bundle: .gpu-site.tar.xz is ${size_mib} MiB (limit ${LIMIT_MIB} MiB, with the working tree 64 MiB)"
if [ "$size_mib" -gt "$LIMIT_MIB" ]; then
    echo "gpu_bundle: too large for the run tool; drop packages the check does not import" >&2
    exit 1
fi
