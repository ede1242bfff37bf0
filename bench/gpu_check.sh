#!/usr/bin/env bash
# The one prepared script for a (briefly lent) GPU machine (docs/design.md §6): install, GPU tests, GPU
# microbenchmarks.
# Writes into $OUT (default ./gpu_out): gpu_check.log, tests.xml, tests_rest.xml, gpu_bench.json, bench_ops.json,
# triton_compile.log, round_gpu.json, projection.txt, projection.json, projection_measured.png, sglang_check.json
# (only where SGLang with its CUDA kernels is installed), summary.json. Finishes within about 8 minutes (about 10 with the SGLang
# step): every step has a deadline.
#
#   OUT=/some/dir bash bench/gpu_check.sh            # from the repository root
#
# Environment: PYTHON (default python3), SPOT_CUDA_ARCH_LIST (default 9.0), TOTAL_S (default 470 seconds).
# No network is needed: the package installs with --no-deps --no-build-isolation into the machine's python.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
TOTAL_S=${TOTAL_S:-470}
START=$(date +%s)
# The SGLang plug-in step (last) runs only where SGLang and its CUDA kernel package are installed; it then gets its
# own SGLANG_S seconds beyond TOTAL_S, reserved from the start, so the steps before it keep their budgets.
SGLANG_S=0
if $PY -c "import importlib.util as u, sys; sys.exit(not (u.find_spec('sglang') and u.find_spec('sgl_kernel')))" \
    2>/dev/null; then SGLANG_S=${SGLANG_S_MAX:-180}; fi
DEADLINE=$((START + TOTAL_S + SGLANG_S))
exec > >(tee -a "$OUT/gpu_check.log") 2>&1

left() { echo $((DEADLINE - $(date +%s))); }
# budget NAME MAX: the seconds a step may take: MAX, or what is left minus a reserve for the later steps
budget() { local l; l=$(( $(left) - $2 )); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 5 ] && l=5; echo "$l"; }
step() { echo; echo "=== $1 ($(left) s left) $(date -u +%H:%M:%S)"; }
declare -A STATUS

step "environment"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | head -3
$PY -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, 'gpu', torch.cuda.get_device_name())"
git log --oneline -1 2>/dev/null || true

step "install (pip install --no-build-isolation --no-deps -e .)"
export MAX_JOBS=${MAX_JOBS:-16}
export SPOT_CUDA_ARCH_LIST=${SPOT_CUDA_ARCH_LIST:-9.0}
T=$(budget 200 280)
if timeout "$T" $PY -m pip install --no-build-isolation --no-deps --no-input -e . > "$OUT/install.log" 2>&1; then
  STATUS[install]=ok
else
  STATUS[install]="failed or timed out after ${T}s (see install.log); running from the source tree, Python schemas"
  export PYTHONPATH="$PWD:$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
  export SPOT_NO_EXTENSION=1
fi
tail -3 "$OUT/install.log"
grep -E "spot-kernels: building" "$OUT/install.log" || true
echo "install: ${STATUS[install]}"
$PY -c "import spot_kernels as s, torch; print('extension', s.HAS_C_EXTENSION, 'cuda kernels', bool(s.HAS_C_EXTENSION and s._C.WITH_CUDA)); print({op: s.available_backends(op, 'cuda') for op in ('score', 'verify_tree', 'tree_attention', 'expand_frontier', 'order_logits', 'commit_rule', 'verify_steps', 'expand_steps')})"

HAVE_PYTEST=1
$PY -c "import pytest" 2>/dev/null || { HAVE_PYTEST=0; echo "pytest is not installed here: no tests can run"; }

# The op tests: one tests/ops/test_<family>.py per op family (every backend against the reference; the GPU cases
# run here) and tests/ops/test_registry.py (the build, dispatch, CUDA graphs, end-to-end decoding per backend).
OP_TESTS="tests/ops/test_registry.py"
for f in spot_kernels/ops/*.py; do
  stem=$(basename "$f" .py)
  [ "$stem" != "__init__" ] && [ -f "tests/ops/test_$stem.py" ] && OP_TESTS="$OP_TESTS tests/ops/test_$stem.py"
done
step "GPU tests: $OP_TESTS"
T=$(budget 130 170)
if [ $HAVE_PYTEST = 1 ]; then
  timeout "$T" $PY -m pytest $OP_TESTS -q -rs -p no:cacheprovider --junitxml="$OUT/tests.xml"
  STATUS[gpu_tests]="exit $? (124 = ran out of its ${T}s)"
else
  STATUS[gpu_tests]="not run: pytest missing"
fi

step "GPU microbenchmarks (bench/gpu_bench.py)"
T=$(budget 200 40)
timeout $((T + 20)) $PY bench/gpu_bench.py --json "$OUT/gpu_bench.json" --budget "$T"
STATUS[gpu_bench]="exit $?"

step "CUDA graphs: the static round alone and with the embedded forward inside (replay == eager bit for bit, us per round), generate with compile=cudagraphs, one commit per step and two commit rules (bench/round_gpu.py)"
T=$(budget 150 30)
timeout "$T" $PY bench/round_gpu.py --json "$OUT/round_gpu.json" --rows 1,32 --budgets 4,16 --rules "one;steps:16;threshold:0.9"
STATUS[round_capture]="exit $? (1 = a replay differed from eager; 124 = ran out of its ${T}s)"

step "projection beside the measured pass-time curve (spot project --measured)"
T=$(budget 20 30)
GPU_KEY=$($PY -c "import torch; print('h100' if 'H100' in torch.cuda.get_device_name() else 'h200')" 2>/dev/null || echo h200)
PLOT=""
$PY -c "import matplotlib" 2>/dev/null && PLOT="--plot $OUT/projection_measured.png"
timeout "$T" $PY -m spot project bench/results/default-b32-t0-budgets-1-32.json --gpu "$GPU_KEY" \
  --shapes qwen3-8b --measured "$OUT/gpu_bench.json" $PLOT --json "$OUT/projection.json" > "$OUT/projection.txt" 2>&1
STATUS[projection]="exit $?"
tail -25 "$OUT/projection.txt"

step "rest of the test suite"
T=$(budget 100 25)
if [ $HAVE_PYTEST = 1 ]; then
  timeout "$T" $PY -m pytest tests -q -rs -p no:cacheprovider ${OP_TESTS//tests\//--ignore=tests\/} \
    --junitxml="$OUT/tests_rest.xml"
  STATUS[rest_tests]="exit $? (124 = ran out of its ${T}s)"
else
  STATUS[rest_tests]="not run: pytest missing"
fi

step "pytest-benchmark microbenchmarks (bench/bench_ops.py, real-model shapes)"
T=$(budget 60 10)
if [ $HAVE_PYTEST = 1 ] && $PY -c "import pytest_benchmark" 2>/dev/null; then
  SPOT_BENCH_FULL=1 timeout "$T" $PY -m pytest bench/bench_ops.py -q -p no:cacheprovider --benchmark-only \
    --benchmark-json="$OUT/bench_ops.json" --benchmark-max-time=0.2 --benchmark-min-rounds=3 \
    --benchmark-columns=median,rounds 2>&1 | tail -60
  STATUS[bench_ops]="exit $?"
else
  STATUS[bench_ops]="not run: pytest-benchmark missing (bench/gpu_bench.py covers every op)"
fi

step "Triton compile check (registers / spills, sm_90)"
T=$(budget 60 "$SGLANG_S")
TRITON_INTERPRET= timeout "$T" $PY bench/triton_compile_check.py > "$OUT/triton_compile.log" 2>&1
STATUS[compile_check]="exit $?"
tail -30 "$OUT/triton_compile.log"

step "SGLang plug-in: --dllm-algorithm Spot vs LowConfidence at one commit per step (bench/sglang_check.py)"
if [ "$SGLANG_S" -gt 0 ] && $PY -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
  T=$(budget "$SGLANG_S" 0)
  timeout "$T" $PY bench/sglang_check.py --json "$OUT/sglang_check.json" --budget $((T - 60))
  STATUS[sglang_check]="exit $? (124 = ran out of its ${T}s; 1 = a claim failed or an engine did not run)"
else
  STATUS[sglang_check]="not run: needs sglang with sgl_kernel and a GPU"
  echo "${STATUS[sglang_check]}"
fi

step "summary"
{
  echo "{"
  for k in "${!STATUS[@]}"; do echo "  \"$k\": \"${STATUS[$k]}\","; done
  echo "  \"seconds\": $(( $(date +%s) - START ))"
  echo "}"
} > "$OUT/summary.json"
cat "$OUT/summary.json"
$PY - "$OUT/gpu_bench.json" <<'EOF' || true
import json, sys
try:
    goals = json.load(open(sys.argv[1]))["goals"]
except Exception as err:
    sys.exit(f"no gpu_bench.json goals: {err}")
for name, g in goals.items():
    print(name, json.dumps(g))
EOF
