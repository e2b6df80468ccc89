#!/usr/bin/env bash
# Runs each training script of benchmarks/cuda plain and under `ampdoctor trace` (the nanoGPT one
# also with --compare float32) and writes $OUT/summary.txt, the JSON reports and logs.tar.gz.
#
#   OUT=/tmp/cuda-check bash benchmarks/cuda/run.sh                    # on a CUDA machine
#   DEVICE=cpu SIZE=tiny BUDGET=1200 OUT=/tmp/smoke bash benchmarks/cuda/run.sh   # smoke test
#
# Every step runs under `timeout`, a failed step does not stop the others, and no step starts
# once BUDGET seconds (default 420) have passed; a step's limit is cut to what is left of it.
# ONLY='nanogpt_plain|nanogpt_compare' runs just the steps whose names match.
set -u

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
OUT=${OUT:-$(mktemp -d)}
DEVICE=${DEVICE:-cuda}
SIZE=${SIZE:-gpu}
PYTHON=${PYTHON:-python3}
BUDGET=${BUDGET:-420}
# A regular expression of the step names to run (all when empty), e.g. ONLY='nanogpt_.*|hf_.*'.
ONLY=${ONLY:-}
NANOGPT_STEPS=${NANOGPT_STEPS:-20}
STEPS=${STEPS:-10}
mkdir -p "$OUT"
LOGS=$(mktemp -d)
export PYTHONUNBUFFERED=1
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
# cuBLAS needs a fixed workspace for deterministic results (torch.use_deterministic_algorithms).
export CUBLAS_WORKSPACE_CONFIG=:4096:8
export TOKENIZERS_PARALLELISM=false
cd "$REPO" || exit 2
START=$SECONDS

{
    echo "ampdoctor CUDA check: DEVICE=$DEVICE SIZE=$SIZE BUDGET=${BUDGET}s started $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
    echo "repository: $REPO ($(git rev-parse --short HEAD 2>/dev/null || echo 'no git'))"
    timeout 20 nvidia-smi -L 2>&1 || echo "nvidia-smi: not available"
    timeout 120 "$PYTHON" -c '
import sys, torch
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda available", torch.cuda.is_available())
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0))
for name in ("ampdoctor", "transformers", "lightning", "accelerate"):
    try:
        module = __import__(name)
        print(name, getattr(module, "__version__", "?"), getattr(module, "__file__", ""))
    except Exception as error:
        print(name, "not importable:", error)
' 2>&1
} | tee "$LOGS/env.txt"

summarize() {
    timeout 60 "$PYTHON" "$HERE/summarize.py" "$LOGS" "$OUT/summary.txt" || echo "summarize.py failed"
}

# step NAME REFERENCE EXPECTED_RC LIMIT_S JSON -- COMMAND...
# REFERENCE: the plain step whose printed losses this one's must equal ("-": none). In COMMAND,
# @T@ becomes the seconds left for ampdoctor's own --timeout, @T2@ half of them (--compare's
# two runs each get that).
step() {
    local name=$1 reference=$2 expected=$3 limit=$4 json=$5
    shift 6
    local left=$((BUDGET - (SECONDS - START)))
    local shown="$*"
    if [[ -n "$ONLY" && ! "$name" =~ ^($ONLY)$ ]]; then
        echo "[$((SECONDS - START))s] $name: not selected (ONLY=$ONLY)"
        return
    fi
    if ((left < 30)); then
        printf '%s\t%s\t%s\tskipped\t0\t0\t%s\t%s\n' "$name" "$reference" "$expected" "$json" "$shown" >>"$LOGS/steps.tsv"
        echo "[$((SECONDS - START))s] $name: skipped, the time budget is spent"
        summarize
        return
    fi
    ((limit > left - 5)) && limit=$((left - 5))
    local args=() arg
    for arg in "$@"; do
        arg=${arg//@T2@/$(((limit - 20) / 2))}
        args+=("${arg//@T@/$((limit - 15))}")
    done
    shown="${args[*]}"
    echo "[$((SECONDS - START))s] $name (limit ${limit}s): $shown"
    local began=${EPOCHREALTIME:-$(date +%s.%N)}
    timeout -k 10 "$limit" "${args[@]}" >"$LOGS/$name.out" 2>"$LOGS/$name.err"
    local rc=$?
    local wall
    wall=$(awk -v a="$began" -v b="${EPOCHREALTIME:-$(date +%s.%N)}" 'BEGIN { printf "%.2f", b - a }')
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$reference" "$expected" "$rc" "$wall" "$limit" "$json" "$shown" >>"$LOGS/steps.tsv"
    echo "[$((SECONDS - START))s] $name: exit $rc (expected $expected) in ${wall}s"
    summarize
}

PY=("$PYTHON")
TRACE=("$PYTHON" -m ampdoctor trace)
COMMON=(--device "$DEVICE" --size "$SIZE" --deterministic)
B="benchmarks/cuda"
# On a CPU without fast float16 the comparison ends in AMP514 (a warning: exit 1).
COMPARE_RC=0
[[ $DEVICE == cpu ]] && COMPARE_RC=1
NANO_ARGS=("${COMMON[@]}" --max-steps $((NANOGPT_STEPS + 1)))
ARGS=("${COMMON[@]}" --max-steps $((STEPS + 1)))

# Most telling first: if the budget runs out, what is left out matters least.
step nanogpt_plain - 0 90 - -- "${PY[@]}" $B/nanogpt_train.py "${NANO_ARGS[@]}"
step nanogpt_trace nanogpt_plain 0 120 "$OUT/nanogpt.json" -- "${TRACE[@]}" $B/nanogpt_train.py \
    --steps "$NANOGPT_STEPS" --timeout @T@ --json "$OUT/nanogpt.json" -- "${NANO_ARGS[@]}"
step nanogpt_compare nanogpt_plain "$COMPARE_RC" 200 "$OUT/nanogpt_compare.json" -- "${TRACE[@]}" $B/nanogpt_train.py \
    --steps "$NANOGPT_STEPS" --compare float32 --timeout @T2@ --json "$OUT/nanogpt_compare.json" -- "${NANO_ARGS[@]}"
step buggy_clip_plain - 0 60 - -- "${PY[@]}" $B/buggy_fp16.py --bug clip "${ARGS[@]}"
step buggy_clip_trace buggy_clip_plain 1 90 "$OUT/buggy_clip.json" -- "${TRACE[@]}" $B/buggy_fp16.py \
    --steps "$STEPS" --timeout @T@ --json "$OUT/buggy_clip.json" -- --bug clip "${ARGS[@]}"
step hf_plain - 0 90 - -- "${PY[@]}" $B/hf_gpt2_trainer.py "${ARGS[@]}"
step hf_trace hf_plain 0 120 "$OUT/hf_trainer.json" -- "${TRACE[@]}" $B/hf_gpt2_trainer.py \
    --steps "$STEPS" --timeout @T@ --json "$OUT/hf_trainer.json" -- "${ARGS[@]}"
step lightning_plain - 0 90 - -- "${PY[@]}" $B/lightning_fp16.py "${ARGS[@]}"
step lightning_trace lightning_plain 0 120 "$OUT/lightning.json" -- "${TRACE[@]}" $B/lightning_fp16.py \
    --steps "$STEPS" --timeout @T@ --json "$OUT/lightning.json" -- "${ARGS[@]}"
step accelerate_plain - 0 90 - -- "${PY[@]}" $B/accelerate_fp16.py "${ARGS[@]}"
step accelerate_trace accelerate_plain 0 120 "$OUT/accelerate.json" -- "${TRACE[@]}" $B/accelerate_fp16.py \
    --steps "$STEPS" --timeout @T@ --json "$OUT/accelerate.json" -- "${ARGS[@]}"
step buggy_mask_plain - 1 60 - -- "${PY[@]}" $B/buggy_fp16.py --bug mask "${ARGS[@]}"
step buggy_mask_trace - 1 60 - -- "${TRACE[@]}" $B/buggy_fp16.py \
    --steps "$STEPS" --timeout @T@ -- --bug mask "${ARGS[@]}"
# Untraced float32 against the plain float16 run: the speed-up without the tracer's hooks.
step nanogpt_plain_float32 - 0 90 - -- "${PY[@]}" $B/nanogpt_train.py --dtype float32 "${NANO_ARGS[@]}"
# The plain run again: are two untraced runs on this device bit-identical at all?
step nanogpt_plain_again nanogpt_plain 0 90 - -- "${PY[@]}" $B/nanogpt_train.py "${NANO_ARGS[@]}"

echo "[$((SECONDS - START))s] done"
tar -czf "$OUT/logs.tar.gz" -C "$LOGS" . 2>/dev/null || echo "logs.tar.gz: not written"
summarize
echo "summary: $OUT/summary.txt"
cat "$OUT/summary.txt"
