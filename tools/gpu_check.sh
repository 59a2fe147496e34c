#!/usr/bin/env bash
# GPU verification, on a machine with a CUDA GPU where torch and numpy are installed (under 5 min):
# the package's tree, with its compiled paths where they build; the CUDA-marked tests, the CPU tests
# of the CUDA paths, then a short benchmark whose table is printed last. The project's other
# dependencies come from .whl/ when present (`make gpu-wheels` fills it with CPython 3.12 x86-64
# wheels); results also go to $OUT/gpu_bench.json when $OUT is set.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
# The package as it installs: codec/ is tensorwire, transports/ is tensorwire.transports, schemas/ is
# tensorwire.builtins.schemas.
tree=/tmp/tw-tree
rm -rf "$tree" && mkdir -p "$tree"
cp -r codec "$tree/tensorwire" && cp -r transports "$tree/tensorwire/transports"
cp -r schemas "$tree/tensorwire/builtins/schemas"
rm -f "$tree"/tensorwire/_speedups*.so  # built here for this machine's Python, not carried
# The compiled shorter paths (tensorwire._speedups) where this Python's headers and a compiler are
# found, as the package's own build makes them; else the Python paths, which give the same results.
include=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
suffix=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
if [ -f "$include/Python.h" ] && command -v "${CC:-gcc}" >/dev/null 2>&1 &&
    "${CC:-gcc}" -O2 -shared -fPIC -I"$include" codec/_speedups.c -o "$tree/tensorwire/_speedups$suffix"; then
    echo "tensorwire._speedups built for $(python3 -V)"
else
    rm -f "$tree/tensorwire/_speedups$suffix"
    echo "tensorwire._speedups not built (no Python.h or compiler): the Python paths run"
fi
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/tw-site .whl/*.whl
    export PYTHONPATH="/tmp/tw-site:$tree:$PWD"
else
    export PYTHONPATH="$tree:$PWD"
fi
python3 - <<'PY'
import torch
assert torch.cuda.is_available(), "gpu_check.sh needs a CUDA device"
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)}")
from tensorwire._native import SPEEDUPS
print("per-message paths:", "compiled" if SPEEDUPS is not None else "Python")
PY
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
df -h /dev/shm || true
status=0  # a failing test does not skip the benchmark: one GPU run should report everything
python3 -m pytest -q -p no:cacheprovider -o addopts="" -ra \
    tests/test_cuda_gpu.py tests/test_cuda_shm.py tests/test_placement.py tests/test_queue.py || status=$?
python3 -m tools.bench.cuda --mib "${GPU_CHECK_MIB:-1024}" --reps "${GPU_CHECK_REPS:-5}" \
    ${OUT:+--json "$OUT/gpu_bench.json"} || status=$?
exit $status
