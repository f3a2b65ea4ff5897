#!/usr/bin/env bash
# The one prepared GPU check, one call:
#
#     bash bench/gpu_check.sh            # device tool: timeout_s 580; results under $OUT
#
# Steps, each under its own `timeout` and a shared budget (GPU_CHECK_BUDGET s, default 530),
# continuing after a failed step: versions, carried wheels (if any), the cuda tests
# (pytest -m cuda), the GPU diff benchmark (2 x ~3.9 GB safetensors, cold and warm, raw-read
# baseline in the same run), fit's memory figures against torch.cuda.max_memory_allocated,
# the staging alone (mmap -> pinned -> device, 1 vs 4 threads) and, where colossalai imports,
# a `convert --engine colossalai --plugin lowlevelzero` job. Without CUDA every GPU step says
# "skipped: no CUDA" (GPU_CHECK_FORCE=1 runs their commands anyway: a dry run of the commands,
# which then skip inside). Writes at most 7 files to $OUT (default ./gpu-out): gpu_check.log,
# summary.txt, summary.json, cuda_tests.xml, bench_diff.json, fit_memory.json,
# bench_stage.json. Colossalai wheels (SETUP.md) are installed from $CKPT_WHEELS (default
# .whl) when that folder holds *.whl; nothing else is needed.
set -u

cd "$(dirname "$0")/.." || exit 2
ROOT=$(pwd)
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
LOG=$OUT/gpu_check.log
: >"$LOG"
: >"$OUT/summary.txt"
BUDGET=${GPU_CHECK_BUDGET:-530}
FORCE=${GPU_CHECK_FORCE:-0}
WHEELS=${CKPT_WHEELS:-$ROOT/.whl}
if [ -z "${PY:-}" ]; then
    if [ -x "$ROOT/.venv/bin/python" ]; then PY=$ROOT/.venv/bin/python; else PY=python3; fi
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 PY WHEELS ROOT
START=$SECONDS
RESULTS=()

say() { echo "$*" | tee -a "$LOG"; }

record() { # NAME STATUS SECONDS DETAIL
    RESULTS+=("$1|$2|$3|$4")
    printf '%-12s %-22s %5ss  %s\n' "$1" "$2" "$3" "$4" >>"$OUT/summary.txt"
    say "== $1: $2 (${3}s) $4"
}

# step NAME LIMIT_S GPU(0/1) CMD...: runs CMD under timeout, output to the log and stdout
step() {
    local name=$1 limit=$2 gpu=$3
    shift 3
    local left=$((BUDGET - (SECONDS - START)))
    say ""
    say "== $name: $* (limit ${limit}s, budget left ${left}s)"
    if [ "$gpu" = 1 ] && [ "$HAVE_CUDA" != 1 ] && [ "$FORCE" != 1 ]; then
        record "$name" "skipped: no CUDA" 0 ""
        return 0
    fi
    if [ "$left" -lt 15 ]; then
        record "$name" "skipped: out of time" 0 "budget ${BUDGET}s spent"
        return 0
    fi
    [ "$limit" -gt $((left - 5)) ] && limit=$((left - 5))
    # a shell function runs in a child bash (timeout runs programs only)
    [ "$(type -t "$1")" = function ] && set -- bash -c "$(declare -f "$1"); $1"
    local t0=$SECONDS rc
    timeout -k 10 "$limit" "$@" 2>&1 | tee -a "$LOG"
    rc=${PIPESTATUS[0]}
    local dt=$((SECONDS - t0))
    if [ "$rc" = 0 ]; then
        record "$name" "ok" "$dt" ""
    elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        record "$name" "FAILED: timeout" "$dt" "limit ${limit}s"
    else
        record "$name" "FAILED: exit $rc" "$dt" ""
    fi
}

# ---- 0. versions first ---------------------------------------------------------------------
say "gpu_check: $(date -u +%FT%TZ) on ${HOSTNAME:-?}, python $PY, out $OUT"
HAVE_CUDA=$("$PY" -c 'import torch; print(int(torch.cuda.is_available()))' 2>/dev/null || echo 0)
versions() {
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 ||
        echo "nvidia-smi: not available"
    "$PY" - <<'EOF'
import importlib, platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda)
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("gpu", p.name, f"{p.total_memory / 2**30:.0f} GiB", "capability", f"{p.major}.{p.minor}")
else:
    print("gpu: none (torch.cuda.is_available() is False)")
for m in ("transformers", "safetensors", "numpy", "numba", "pandas", "pytest", "colossalai"):
    try:
        print(m, getattr(importlib.import_module(m), "__version__", "?"))
    except Exception as e:
        print(m, "absent:", type(e).__name__)
EOF
    echo "cpus $(nproc)"
    free -g | head -2
    df -h "$ROOT" /tmp | cat
}
step versions 60 0 versions

# ---- 1. carried colossalai wheels (optional) -------------------------------------------------
if compgen -G "$WHEELS/*.whl" >/dev/null; then
    SITE=$(mktemp -d /tmp/gpu-check-site.XXXX)
    step wheels 90 0 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --target "$SITE" "$WHEELS"/*.whl
    export PYTHONPATH="$PYTHONPATH:$SITE"
else
    record wheels "skipped: none carried" 0 "no $WHEELS/*.whl"
fi

# ---- 2. the cuda tests -----------------------------------------------------------------------
# only test files that need neither colossalai, deepspeed nor playwright to import
step cuda_tests 120 1 "$PY" -m pytest -q -m cuda -p no:cacheprovider -o addopts="" \
    --junitxml="$OUT/cuda_tests.xml" tests/diff/test_diff_cuda.py tests/diff/test_diff.py

# ---- 3. the GPU diff benchmark: cold and warm, raw-read baseline in the same run ------------------
step bench_diff 270 1 "$PY" bench/bench_diff.py --device cuda --layers 36 --changed all \
    --formats safetensors --cases raw,diff --rounds 2 --json-out "$OUT/bench_diff.json"

# ---- 4. fit's memory figures against CUDA's allocations ---------------------------------------
step fit_memory 200 1 "$PY" bench/gpu_fit_memory.py --json-out "$OUT/fit_memory.json"

# ---- 5. the staging alone (1 vs 4 threads filling pinned slots), if time is left --------------
step bench_stage 100 1 "$PY" bench/bench_diff.py --device cuda --layers 36 --changed all \
    --formats safetensors --cases raw,stage1,stage4 --rounds 1 --json-out "$OUT/bench_stage.json"

# ---- 6. optional: the ColossalAI engine job with LowLevelZero ----------------------------------
engine_job() {
    if ! "$PY" -c 'import colossalai' >/dev/null 2>&1; then
        echo "skipped: colossalai does not import (carry its wheels in $WHEELS)"
        return 0
    fi
    local tmp
    tmp=$(mktemp -d /tmp/gpu-check-engine.XXXX)
    "$PY" - "$tmp/src" <<'EOF' || return 1
import sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
torch.manual_seed(0)
cfg = LlamaConfig(hidden_size=256, intermediate_size=704, num_hidden_layers=2,
                  num_attention_heads=8, num_key_value_heads=2, vocab_size=1024)
LlamaForCausalLM(cfg).save_pretrained(sys.argv[1])
EOF
    "$PY" -m ckpt_explorer convert "$tmp/src" "$tmp/out" --to hf --engine colossalai \
        --plugin lowlevelzero --device cuda
}
step engine_job 150 1 engine_job

# ---- summary ---------------------------------------------------------------------------------
say ""
say "== summary ($((SECONDS - START))s in all)"
tee -a "$LOG" <"$OUT/summary.txt"
"$PY" - "$OUT/summary.json" "${RESULTS[@]}" <<'EOF'
import json, sys
rows = [dict(zip(("step", "status", "seconds", "detail"), r.split("|", 3))) for r in sys.argv[2:]]
json.dump(rows, open(sys.argv[1], "w"), indent=2)
EOF
exit 0
