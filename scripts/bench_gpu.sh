#!/usr/bin/env bash
# scripts/bench_gpu.sh: the GPU benchmark of chapter 11, one command on a machine with an NVIDIA
# GPU. It builds the `cuda` preset, runs the tests labelled cuda, trains GPT-2 124M
# (configs/gpt2-124m.toml) with flash and with composed attention, runs the same batch in PyTorch
# (scripts/torch_gpt2.py, eager and torch.compile), and prints one markdown table: tokens/s, step
# time, MFU and the ratio to PyTorch eager, with the machine and the exact commands behind it.
# Easy to get wrong: every row is the median over the steps after the first 10 (warm-up: the
# allocator's growth, GEMM heuristics, torch.compile's compilation), all rows count the same
# FLOPs per token against the same peak, and the ratio is to PyTorch eager measured in this run.
#
# Usage: scripts/bench_gpu.sh [--steps N] [--batch-size B] [--seq-len T] [--out DIR]
#                             [--skip-build] [--skip-tests] [--keep-going] [--run-timeout S]
#   --steps N        optimizer steps per run, the 10 warm-up steps included (default 50)
#   --batch-size B   sequences per step (default 16); --seq-len T tokens each (default 1024)
#   --out DIR        results, raw JSON and logs (default: bench-gpu-results/ in the repository)
#   --skip-build     use build/cuda as it is; --skip-tests: do not run ctest -L cuda
#   --tinyscale PATH with --skip-build: the tinyscale binary to run (default
#                    build/cuda/apps/tinyscale; scripts/gpu_check passes the one it carried)
#   --keep-going     a failed test or run is reported loudly (and the exit status is 1), but
#                    the remaining runs and the table still happen
#   --run-timeout S  stop any one training run after S seconds (default 300)
#   PYTHON=/path/to/python3 picks the Python that has PyTorch (default: python3);
#   TINYSCALE_WERROR=OFF builds with warnings allowed (default ON, as CI).
set -euo pipefail
printf -v invocation '%q ' "$0" "$@"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

steps=50 batch=16 seq_len=1024 out='' run_timeout=300 tinyscale=build/cuda/apps/tinyscale
skip_build=0 skip_tests=0 keep_going=0
warmup=10 # steps left out of every median
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=${2:?--steps needs a number}; shift 2 ;;
    --batch-size) batch=${2:?--batch-size needs a number}; shift 2 ;;
    --seq-len) seq_len=${2:?--seq-len needs a number}; shift 2 ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --run-timeout) run_timeout=${2:?--run-timeout needs seconds}; shift 2 ;;
    --skip-build) skip_build=1; shift ;;
    --tinyscale) tinyscale=${2:?--tinyscale needs a path}; shift 2 ;;
    --skip-tests) skip_tests=1; shift ;;
    --keep-going) keep_going=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bench_gpu.sh: unknown option '$1'; see --help" >&2; exit 2 ;;
  esac
done
for pair in "steps=$steps" "batch-size=$batch" "seq-len=$seq_len" "run-timeout=$run_timeout"; do
  [[ ${pair#*=} =~ ^[1-9][0-9]*$ ]] || {
    echo "bench_gpu.sh: expected --${pair%%=*} to be a positive integer, found '${pair#*=}'" >&2
    exit 2
  }
done
if [ "$steps" -le "$warmup" ]; then
  echo "bench_gpu.sh: expected --steps > $warmup (the first $warmup are warm-up and not" \
       "measured), found $steps" >&2
  exit 2
fi

repo=$(cd "$(dirname "$0")/.." && pwd)
out=${out:-$repo/bench-gpu-results}
mkdir -p "$out"
out=$(cd "$out" && pwd) # absolute: the runs below start from the repository root
cd "$repo"
PYTHON=${PYTHON:-python3}
export TINYSCALE_WERROR=${TINYSCALE_WERROR:-ON}
failures=()
: > "$out/commands.txt"

announce() { printf '\n==> [%3ds] %s\n' "$SECONDS" "$*"; }
fail() { echo "bench_gpu.sh: $*" >&2; exit 1; }
# A failure that --keep-going turns into a loud warning and a line in the summary.
failed() {
  failures+=("$1")
  if [ "$keep_going" -eq 1 ]; then
    printf '\n!!! FAILED: %s (continuing: --keep-going)\n' "$1" >&2
  else
    fail "$1 (pass --keep-going to continue to the benchmark anyway)"
  fi
}
# Prints a command (on stderr, so stdout stays the command's own), records it, then runs it.
run() {
  local line
  printf -v line '%q ' "$@"
  echo "+ ${line% }" >&2
  echo "+ ${line% }" >> "$out/commands.txt"
  "$@"
}

announce "machine"
command -v nvidia-smi > /dev/null || fail "expected nvidia-smi (an NVIDIA driver), found none"
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader) ||
  fail "nvidia-smi sees no GPU; this benchmark needs one"
gpu=${gpu//$'\n'/; } # one line per GPU; the runs use the first
driver_cuda=$(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -n 1 || true)
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
nvcc_version=$("$nvcc" --version 2> /dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p' || true)
echo "GPU (name, driver): $gpu"
echo "CUDA: nvcc ${nvcc_version:-not found} ($nvcc), driver supports ${driver_cuda:-?}"
if torch_line=$("$PYTHON" -c 'import sys, torch
ok = torch.cuda.is_available()
name = torch.cuda.get_device_name() if ok else "not visible"
print(f"PyTorch {torch.__version__} (CUDA {torch.version.cuda}) via {sys.executable}, GPU {name}")
sys.exit(0 if ok else 3)' 2>&1); then
  echo "$torch_line"
else
  failed "PyTorch with a visible GPU, through PYTHON=$PYTHON: ${torch_line##*$'\n'}"
fi

if [ "$skip_build" -eq 0 ]; then
  announce "configure the cuda preset (TINYSCALE_WERROR=$TINYSCALE_WERROR)"
  run env TINYSCALE_WERROR="$TINYSCALE_WERROR" cmake --preset cuda ||
    fail "cmake --preset cuda failed (see above)"
  announce "build the cuda preset with $(nproc) jobs"
  run cmake --build --preset cuda -j "$(nproc)" || fail "the build failed (see above)"
else
  announce "build skipped (--skip-build): using $tinyscale as it is"
fi
[ -x "$tinyscale" ] || fail "expected $tinyscale, found none; run without --skip-build"
"$tinyscale" info 2>&1 | tee "$out/tinyscale-info.txt" || true

tests="skipped (--skip-tests)"
if [ "$skip_tests" -eq 0 ]; then
  announce "tests labelled cuda"
  if run ctest --preset cuda -L cuda --output-on-failure 2>&1 | tee "$out/ctest-cuda.log"; then
    tests="passed: $(grep -E 'tests passed' "$out/ctest-cuda.log" | tail -n 1 || true)"
    grep -q '(Skipped)' "$out/ctest-cuda.log" && tests+=" (some SKIPPED: see ctest-cuda.log)"
  else
    tests="FAILED: $(grep -E 'tests failed' "$out/ctest-cuda.log" | tail -n 1 || true)"
    failed "ctest --preset cuda -L cuda"
  fi
fi

# One tinyscale run: the config at this script's batch, length and steps, and its metrics file.
train_tinyscale() { # name fused_attention
  announce "tinyscale GPT-2 124M, model.fused_attention=$2 ($steps steps of $batch x $seq_len)"
  rm -f "$out/tinyscale-$1.jsonl"
  if ! run timeout "$run_timeout" "$tinyscale" train --config configs/gpt2-124m.toml \
      --set "train.steps=$steps" --set "train.batch_size=$batch" --set "train.seq_len=$seq_len" \
      --set "model.fused_attention=$2" --metrics "$out/tinyscale-$1.jsonl" 2>&1 |
      tee "$out/tinyscale-$1.log"; then
    failed "tinyscale with model.fused_attention=$2 (log: $out/tinyscale-$1.log)"
    return 0
  fi
  # The median over the steps after the warm-up, from the JSON lines of --metrics.
  if ! "$PYTHON" - "$out/tinyscale-$1.jsonl" "$warmup" "$((batch * seq_len))" \
    > "$out/tinyscale-$1.json" << 'EOF'
import json, statistics, sys
path, warmup, tokens_per_step = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
lines = [json.loads(line) for line in open(path) if line.strip()]
summary = next((line for line in lines if line.get("summary")), {})
timed = [line for line in lines if not line.get("summary") and line["step"] > warmup]
if not timed:
    sys.exit(f"{path}: expected steps after the first {warmup} (the warm-up), found none")
mfu = [line["mfu"] for line in timed]
print(json.dumps({
    "framework": "tinyscale", "metrics": path,
    "tokens_per_s": statistics.median(line["tokens_per_s"] for line in timed),
    "step_ms": statistics.median(1e3 * tokens_per_step / line["tokens_per_s"] for line in timed),
    "mfu": None if None in mfu else statistics.median(mfu),  # null: the device has no known peak
    "flops_per_token": summary.get("flops_per_token"), "peak": summary.get("peak"),
    "timed_steps": len(timed),
    "final_loss": max(timed, key=lambda line: line["step"])["lm_loss"]}))
EOF
  then
    rm -f "$out/tinyscale-$1.json"
    failed "the statistics of $out/tinyscale-$1.jsonl"
    return 0
  fi
  cat "$out/tinyscale-$1.json"
}

# One PyTorch run: its JSON line goes to a file, its progress lines to the terminal and a log.
train_pytorch() { # mode
  announce "PyTorch GPT-2 124M, $1 ($steps steps of $batch x $seq_len)"
  rm -f "$out/pytorch-$1.json"
  if ! run timeout "$run_timeout" "$PYTHON" scripts/torch_gpt2.py --mode "$1" --steps "$steps" \
      --warmup-steps "$warmup" --batch-size "$batch" --seq-len "$seq_len" \
      2>&1 > "$out/pytorch-$1.json" | tee "$out/pytorch-$1.log"; then
    rm -f "$out/pytorch-$1.json"
    failed "PyTorch $1 (log: $out/pytorch-$1.log)"
    return 0
  fi
  cat "$out/pytorch-$1.json"
}

train_tinyscale flash true
train_tinyscale composed false
train_pytorch eager
train_pytorch compile

announce "results"
BENCH_GPU=$gpu
BENCH_CUDA="nvcc ${nvcc_version:-not found}; driver supports CUDA ${driver_cuda:-?}"
BENCH_TESTS=$tests
BENCH_INVOCATION=${invocation% }
BENCH_SETUP="GPT-2 124M, batch $batch x $seq_len tokens, bf16, $steps steps"
BENCH_SETUP+=", median of steps $((warmup + 1))..$steps"
export BENCH_GPU BENCH_CUDA BENCH_TESTS BENCH_SETUP BENCH_INVOCATION
"$PYTHON" - "$out" << 'EOF'
import json, os, sys
out = sys.argv[1]
rows = [("tinyscale (flash attention)", "tinyscale-flash.json"),
        ("tinyscale (composed attention)", "tinyscale-composed.json"),
        ("PyTorch eager", "pytorch-eager.json"), ("PyTorch compile", "pytorch-compile.json")]

def load(name):  # the last JSON line of a result file, or None when the run failed
    try:
        with open(os.path.join(out, name)) as f:
            return json.loads([line for line in f if line.startswith("{")][-1])
    except (OSError, IndexError, ValueError):
        return None

results = {label: load(name) for label, name in rows}
eager = (results["PyTorch eager"] or {}).get("tokens_per_s")
torch_run = results["PyTorch eager"] or results["PyTorch compile"] or {}
table = ["| run | tokens/s | step ms | MFU | ratio to PyTorch eager |", "|---|---:|---:|---:|---:|"]
for label, _ in rows:
    r = results[label]
    if r is None:
        table.append(f"| {label} | failed | | | |")
        continue
    mfu = "n/a" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
    ratio = f"{r['tokens_per_s'] / eager:.2f}x" if eager else "n/a"
    table.append(f"| {label} | {r['tokens_per_s']:,.0f} | {r['step_ms']:.1f} | {mfu} | {ratio} |")
with open(os.path.join(out, "commands.txt")) as f:
    commands = [line.rstrip("\n") for line in f if line.startswith("+ ")]
flops = next((r["flops_per_token"] for r in results.values() if r), None)
peaks = sorted({r.get("peak") if r.get("framework") != "pytorch" else
                (f"{r['peak_flops'] / 1e12:.1f} TF/s" if r.get("peak_flops") else None)
                for r in results.values() if r} - {None})
report = "\n".join([
    f"GPU benchmark: {os.environ['BENCH_SETUP']}", "",
    *table, "",
    f"- machine: {os.environ['BENCH_GPU']}",
    f"- CUDA: {os.environ['BENCH_CUDA']}; PyTorch {torch_run.get('torch', '?')} "
    f"(CUDA {torch_run.get('cuda', '?')})",
    f"- tests labelled cuda: {os.environ['BENCH_TESTS']}",
    f"- MFU: {flops:.4g} model FLOPs per token (6N + 12·l·C·s, docs/theory.md sec. 2) against the "
    f"dense bf16 peak of lib/metrics/peak.cpp's table ({'; '.join(peaks) or 'unknown'})"
    if flops else "- MFU: no run finished",
    f"- run as: `{os.environ['BENCH_INVOCATION']}`, which ran (from the repository root):",
    "", "```bash",
    *[c[2:] for c in commands], "```", ""])
with open(os.path.join(out, "results.md"), "w") as f:
    f.write(report)
with open(os.path.join(out, "results.json"), "w") as f:
    json.dump({"invocation": os.environ["BENCH_INVOCATION"], "setup": os.environ["BENCH_SETUP"],
               "gpu": os.environ["BENCH_GPU"],
               "cuda": os.environ["BENCH_CUDA"], "tests": os.environ["BENCH_TESTS"],
               "commands": [c[2:] for c in commands], "runs": results}, f, indent=2)
print(report)
EOF
echo "written: $out/results.md and results.json (raw JSON and logs beside them);" \
     "${SECONDS}s in all"
if [ ${#failures[@]} -gt 0 ]; then
  printf '!!! FAILED: %s\n' "${failures[@]}" >&2
  exit 1
fi
