#!/usr/bin/env bash
# End-to-end check of the `tinyscale` program (label app): a short training run with metrics and
# checkpoints, a resume that continues where it stopped, the same run on 1 and 3 intra-op threads
# (bit for bit), a data-parallel run (--dp 2 --trace) whose
# losses equal the single-rank run's and whose trace `tinyscale trace` draws,
# tensor, expert-parallel and ZeRO runs that equal their references, a --dp 2 --pp 2 run on the
# emulated device equal to the CPU run, --backend nccl refused, an export to the
# Hugging Face layout, and a config typo that is refused with a suggestion.
# Usage: train_smoke.sh TINYSCALE SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "train_smoke: $*" >&2; exit 1; }

common=(--config "$src/configs/tiny.toml" --set train.steps=6 --set train.eval_every=3
        --set train.eval_batches=2 --set train.log_every=3 --set train.checkpoint_every=3
        --set "train.checkpoint_dir=\"$work/ckpt\"" --set optim.warmup_steps=2)
"$bin" train "${common[@]}" --metrics "$work/full.jsonl" > "$work/full.txt"
grep -q "final val loss" "$work/full.txt" || fail "no final val loss line"
[ "$(grep -c '"step"' "$work/full.jsonl")" -eq 6 ] || fail "expected 6 step lines in the metrics"
for key in loss lr grad_norm tokens_per_s mfu val_loss; do
  grep -q "\"$key\"" "$work/full.jsonl" || fail "metrics lack $key"
done
grep -q '"summary":true' "$work/full.jsonl" || fail "metrics lack the summary line"
grep -q '"entropy_rate":1\.' "$work/full.jsonl" || fail "summary lacks the entropy rate"

# resume from step 3 and compare the last three losses with the uninterrupted run
"$bin" train "${common[@]}" --resume "$work/ckpt/step_00000003" --metrics "$work/resumed.jsonl" \
  > "$work/resumed.txt"
grep -q "resumed from" "$work/resumed.txt" || fail "resume did not say so"
tail_losses() { grep '"step"' "$1" | tail -3 | sed 's/.*"loss":\([^,]*\).*/\1/'; }
[ "$(tail_losses "$work/full.jsonl")" = "$(tail_losses "$work/resumed.jsonl")" ] ||
  fail "resumed losses differ from the uninterrupted run"

# intra-op threads: --threads 1 and TINYSCALE_THREADS=3 train bit for bit what the default did
all_losses() { grep '"step"' "$1" | sed 's/.*"grad_norm":\([^,]*\),.*"loss":\([^,]*\),.*/\2 \1/'; }
"$bin" train "${common[@]}" --set "train.checkpoint_dir=\"$work/ckpt_t1\"" --threads 1 \
  --metrics "$work/t1.jsonl" > "$work/t1.txt"
grep -q "^threads: 1 per rank" "$work/t1.txt" || fail "--threads 1 did not say so"
TINYSCALE_THREADS=3 "$bin" train "${common[@]}" --set "train.checkpoint_dir=\"$work/ckpt_t3\"" \
  --metrics "$work/t3.jsonl" > "$work/t3.txt"
grep -q "^threads: 3 per rank" "$work/t3.txt" || fail "TINYSCALE_THREADS=3 did not say so"
[ "$(all_losses "$work/full.jsonl")" = "$(all_losses "$work/t1.jsonl")" ] &&
  [ "$(all_losses "$work/full.jsonl")" = "$(all_losses "$work/t3.jsonl")" ] ||
  fail "losses or norms depend on the thread count"

# data parallel on 2 thread ranks: same losses (rel 1e-5: the ranks sum in another order), a trace
"$bin" train "${common[@]}" --set "train.checkpoint_dir=\"$work/ckpt_dp\"" --dp 2 \
  --trace "$work/trace.json" --metrics "$work/dp.jsonl" > "$work/dp.txt"
grep -q "data parallel: 2 ranks (threads)" "$work/dp.txt" || fail "--dp 2 did not say so"
grep -q "^overlap: .* hidden behind compute" "$work/dp.txt" || fail "--trace reported no overlap"
losses() { grep '"step"' "$1" | sed 's/.*"loss":\([^,]*\).*/\1/' | tr '\n' ' '; }
awk -v a="$(losses "$work/full.jsonl")" -v b="$(losses "$work/dp.jsonl")" 'BEGIN {
  n = split(a, x, " "); m = split(b, y, " "); if (n != 6 || m != 6) exit 1
  for (i = 1; i <= n; ++i) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1e-5 * x[i]) exit 1 } }' ||
  fail "data-parallel losses ($(losses "$work/dp.jsonl")) differ from one rank's ($(losses "$work/full.jsonl"))"
"$bin" trace "$work/trace.json" > "$work/trace.txt"
grep -q "rank 1" "$work/trace.txt" || fail "tinyscale trace drew no row for rank 1"
grep -q "^overlap:" "$work/trace.txt" || fail "tinyscale trace printed no overlap line"

# tensor parallel on 2 thread ranks with sequence parallelism: same losses (rel 1e-4: tp changes
# the order of the sums inside every matmul), and its checkpoint resumes on one rank
"$bin" train "${common[@]}" --set "train.checkpoint_dir=\"$work/ckpt_tp\"" --tp 2 --sp \
  --metrics "$work/tp.jsonl" > "$work/tp.txt"
grep -q "tensor parallel: tp 2 with sequence parallelism x dp 1 (threads)" "$work/tp.txt" ||
  fail "--tp 2 --sp did not say so"
awk -v a="$(losses "$work/full.jsonl")" -v b="$(losses "$work/tp.jsonl")" 'BEGIN {
  n = split(a, x, " "); m = split(b, y, " "); if (n != 6 || m != 6) exit 1
  for (i = 1; i <= n; ++i) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1e-4 * x[i]) exit 1 } }' ||
  fail "tensor-parallel losses ($(losses "$work/tp.jsonl")) differ from one rank's ($(losses "$work/full.jsonl"))"
"$bin" train "${common[@]}" --set "train.checkpoint_dir=\"$work/ckpt_tp\"" \
  --resume "$work/ckpt_tp/step_00000003" > "$work/tp_resumed.txt" ||
  fail "one rank could not resume the tp = 2 checkpoint"
if "$bin" train "${common[@]}" --tp 3 2> "$work/tp_err.txt"; then fail "--tp 3 was accepted"; fi
grep -q "model.n_head (.*) divisible by tp = 3" "$work/tp_err.txt" || fail "--tp 3: no clear error"

# expert parallel on 2 thread ranks (moe-tiny): the same losses as plain data parallelism (rel
# 1e-5), the placement in the header, every rank's load in the metrics, a checkpoint that
# plain data parallelism resumes with the same losses, and ep not dividing dp refused
moe=(--config "$src/configs/moe-tiny.toml" --set train.steps=4 --set train.eval_batches=1
     --set train.log_every=2 --set train.checkpoint_every=2 --set optim.warmup_steps=2)
"$bin" train "${moe[@]}" --dp 2 --set "train.checkpoint_dir=\"$work/ckpt_moe_dp\"" \
  --metrics "$work/moe_dp.jsonl" > /dev/null
"$bin" train "${moe[@]}" --dp 2 --set "train.checkpoint_dir=\"$work/ckpt_ep\"" --ep 2 \
  --ep-placement round-robin --metrics "$work/ep.jsonl" > "$work/ep.txt"
grep -q "expert parallel: ep 2 inside dp 2" "$work/ep.txt" || fail "--ep 2 did not say so"
grep -q "round-robin: rank 0 holds experts 0,2, rank 1 holds experts 1,3" "$work/ep.txt" ||
  fail "--ep 2 printed no placement"
grep -q "| imbalance .* | a2a .* KiB/rank" "$work/ep.txt" || fail "--ep 2 printed no load per step"
grep -q "^| 1 | 1,3 | " "$work/ep.txt" || fail "--ep 2 printed no per-rank load table"
awk -v a="$(losses "$work/moe_dp.jsonl")" -v b="$(losses "$work/ep.jsonl")" 'BEGIN {
  n = split(a, x, " "); m = split(b, y, " "); if (n != 4 || m != 4) exit 1
  for (i = 1; i <= n; ++i) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1e-5 * x[i]) exit 1 } }' ||
  fail "expert-parallel losses ($(losses "$work/ep.jsonl")) differ from data parallel's ($(losses "$work/moe_dp.jsonl"))"
/usr/bin/python3 - "$work/ep.jsonl" <<'PY' || fail "the metrics' ep section is wrong"
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"summary"' not in l]
assert len(steps) == 4, len(steps)
for s in steps:
    ranks = s["ep"]["ranks"]
    assert s["ep"]["ep"] == 2 and len(ranks) == 2, s["ep"]
    assert [r[0]["experts"] for r in ranks] == [[0, 2], [1, 3]], ranks
    # the rows one rank sends to the other are the rows the other receives from it
    assert ranks[0][0]["rows_sent"][1] == ranks[1][0]["rows_received"][0], ranks
    # every expert's rows: the global step's tokens per expert
    tpe = s["moe"][0]["tokens_per_expert"]
    assert [tpe[0], tpe[2], tpe[1], tpe[3]] == ranks[0][0]["expert_rows"] + ranks[1][0]["expert_rows"]
    # each rank's own routing: its kept tokens per expert and its drops add up to the step's
    mine = [r[0] for r in ranks]
    assert [a + b for a, b in zip(mine[0]["tokens_per_expert"], mine[1]["tokens_per_expert"])] == tpe
    dropped = sum(m["dropped"] for m in mine) / sum(m["assignments"] for m in mine)
    assert abs(dropped - s["moe"][0]["dropped_fraction"]) < 1e-12, (dropped, s["moe"][0])
    assert all(m["imbalance"] >= 1 for m in mine), mine
PY
"$bin" train "${moe[@]}" --dp 2 --set "train.checkpoint_dir=\"$work/ckpt_ep\"" \
  --resume "$work/ckpt_ep/step_00000002" --metrics "$work/ep_resumed.jsonl" > /dev/null ||
  fail "plain data parallelism could not resume the ep = 2 checkpoint"
awk -v a="$(tail_losses "$work/ep.jsonl" | tail -2 | tr '\n' ' ')" \
    -v b="$(tail_losses "$work/ep_resumed.jsonl" | tail -2 | tr '\n' ' ')" 'BEGIN {
  n = split(a, x, " "); m = split(b, y, " "); if (n != 2 || m != 2) exit 1
  for (i = 1; i <= n; ++i) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1e-5 * x[i]) exit 1 } }' ||
  fail "data parallel resumed from the ep = 2 checkpoint with other losses than the ep run's"
# global capacity pools the ep ranks' micro-batches: --dp 2 --ep 2 then trains and evaluates
# exactly like one rank with one micro-batch of the whole batch
"$bin" train "${moe[@]}" --set "train.checkpoint_dir=\"$work/ckpt_moe_one\"" \
  --metrics "$work/moe_one.jsonl" > /dev/null
"$bin" train "${moe[@]}" --dp 2 --ep 2 --ep-capacity global \
  --set "train.checkpoint_dir=\"$work/ckpt_ep_global\"" --metrics "$work/ep_global.jsonl" > /dev/null
val_losses() { grep '"val_loss"' "$1" | grep -v summary | sed 's/.*"val_loss":\([^,}]*\).*/\1/' | tr '\n' ' '; }
awk -v a="$(losses "$work/moe_one.jsonl") $(val_losses "$work/moe_one.jsonl")" \
    -v b="$(losses "$work/ep_global.jsonl") $(val_losses "$work/ep_global.jsonl")" 'BEGIN {
  n = split(a, x, " "); m = split(b, y, " "); if (n < 5 || n != m) exit 1
  for (i = 1; i <= n; ++i) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1e-5 * x[i]) exit 1 } }' ||
  fail "global-capacity losses ($(losses "$work/ep_global.jsonl")$(val_losses "$work/ep_global.jsonl")) differ from one rank's ($(losses "$work/moe_one.jsonl")$(val_losses "$work/moe_one.jsonl"))"
if "$bin" train "${moe[@]}" --dp 2 --ep 4 2> "$work/ep_err.txt"; then fail "--dp 2 --ep 4 was accepted"; fi
grep -q "expected ep (4) to divide the data-parallel size (2)" "$work/ep_err.txt" ||
  fail "--ep 4 on 2 ranks: no clear error"
if "$bin" train "${moe[@]}" --dp 3 --ep 3 --set train.batch_size=18 2> "$work/ep_err.txt"; then
  fail "4 experts over ep = 3 was accepted"
fi
grep -q "model.moe.n_experts (4) to divide by ep (3)" "$work/ep_err.txt" ||
  fail "4 experts over ep = 3: no clear error"
# (--ep with --tp composes since chapter 10: tests/app/fourd.sh; ZeRO 2 does not compose with it)
if "$bin" train "${moe[@]}" --tp 2 --ep 2 --zero 2 2> "$work/ep_err.txt"; then fail "--ep --tp --zero 2 was accepted"; fi
grep -q "composes ZeRO stage 1 only" "$work/ep_err.txt" || fail "--ep --tp --zero 2: no clear error"

# ZeRO-3 on 2 thread ranks: the same losses as one rank (rel 1e-5), the state per rank in the
# metrics, the memory table against the formulas, and a checkpoint one rank resumes
"$bin" train "${common[@]}" --set "train.checkpoint_dir=\"$work/ckpt_zero\"" --dp 2 --zero 3 \
  --metrics "$work/zero.jsonl" > "$work/zero.txt"
grep -q "ZeRO stage 3: dp 2 (threads)" "$work/zero.txt" || fail "--zero 3 did not say so"
grep -q "| state .* KiB/rank | sent .* KiB" "$work/zero.txt" || fail "--zero 3 printed no state per step"
grep -q "^| 1 | .* | .* |" "$work/zero.txt" && grep -q "^| formula | " "$work/zero.txt" ||
  fail "--zero 3 printed no memory table per rank"
awk -v a="$(losses "$work/full.jsonl")" -v b="$(losses "$work/zero.jsonl")" 'BEGIN {
  n = split(a, x, " "); m = split(b, y, " "); if (n != 6 || m != 6) exit 1
  for (i = 1; i <= n; ++i) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1e-5 * x[i]) exit 1 } }' ||
  fail "ZeRO-3 losses ($(losses "$work/zero.jsonl")) differ from one rank's ($(losses "$work/full.jsonl"))"
/usr/bin/python3 - "$work/zero.jsonl" <<'PY' || fail "the metrics' zero section is wrong"
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"summary"' not in l]
for s in steps:
    z = s["zero"]
    assert z["stage"] == 3 and z["dp"] == 2, z
    # stage 3 holds half of everything at dp 2: parameters and gradients 4 B, moments 8 B per
    # parameter, over 2 ranks (plus at most a few elements of padding)
    assert abs(z["optimizer_bytes"] - 2 * z["parameter_bytes"]) <= 64, z
    assert z["gradient_bytes"] == z["parameter_bytes"], z
    assert z["sent_bytes"] > 0 and z["gathered_peak_bytes"] > 0, z
PY
"$bin" train "${common[@]}" --set "train.checkpoint_dir=\"$work/ckpt_zero\"" \
  --resume "$work/ckpt_zero/step_00000003" --metrics "$work/zero_resumed.jsonl" > /dev/null ||
  fail "one rank could not resume the ZeRO-3 checkpoint"
awk -v a="$(tail_losses "$work/zero.jsonl" | tr '\n' ' ')" \
    -v b="$(tail_losses "$work/zero_resumed.jsonl" | tr '\n' ' ')" 'BEGIN {
  n = split(a, x, " "); m = split(b, y, " "); if (n != 3 || m != 3) exit 1
  for (i = 1; i <= n; ++i) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1e-5 * x[i]) exit 1 } }' ||
  fail "one rank resumed from the ZeRO-3 checkpoint with other losses than the ZeRO run's"
if "$bin" train "${common[@]}" --tp 2 --zero 3 2> "$work/zero_err.txt"; then fail "--zero 3 with --tp was accepted"; fi
grep -q "use --zero 1" "$work/zero_err.txt" || fail "--zero 3 --tp: no clear error"
if "$bin" train "${common[@]}" --dp 3 --zero 1 2> "$work/zero_err.txt"; then fail "--dp 3 was accepted"; fi
grep -q "to divide by dp (3)" "$work/zero_err.txt" || fail "--dp 3 --zero 1: no clear error"

# the emulated device (chapter 11): --dp 2 --pp 2 on emu, with the threads backend reading only
# emu's memory as nccl reads only a GPU's, trains the CPU run's losses (rel 1e-5); --backend nccl
# without a GPU model is refused with the reason
TINYSCALE_COMM_DEVICE_ONLY=emu "$bin" train "${common[@]}" \
  --set "train.checkpoint_dir=\"$work/ckpt_emu\"" --set train.device=emu \
  --dp 2 --pp 2 --metrics "$work/emu.jsonl" > "$work/emu.txt"
awk -v a="$(losses "$work/full.jsonl")" -v b="$(losses "$work/emu.jsonl")" 'BEGIN {
  n = split(a, x, " "); m = split(b, y, " "); if (n != 6 || m != 6) exit 1
  for (i = 1; i <= n; ++i) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1e-5 * x[i]) exit 1 } }' ||
  fail "emu losses ($(losses "$work/emu.jsonl")) differ from the CPU's ($(losses "$work/full.jsonl"))"
if "$bin" train "${common[@]}" --backend nccl 2> "$work/nccl_err.txt"; then
  fail "--backend nccl was accepted"
fi
grep -Eq "expected train.device = \"cuda\"|nccl backend is not in this build" "$work/nccl_err.txt" ||
  fail "--backend nccl on cpu: no clear error ($(cat "$work/nccl_err.txt"))"

"$bin" export-hf "$work/hf" --checkpoint "$work/ckpt" > /dev/null
[ -s "$work/hf/config.json" ] && [ -s "$work/hf/model.safetensors" ] || fail "export-hf wrote nothing"
grep -q '"model_type": *"gpt2"' "$work/hf/config.json" || fail "config.json is not GPT-2's"

if "$bin" train --config "$src/configs/tiny.toml" --set model.n_embed=32 2> "$work/err.txt"; then
  fail "a misspelt key was accepted"
fi
grep -q "did you mean 'model.n_embd'" "$work/err.txt" || fail "no suggestion for a misspelt key"
echo "train_smoke: train, metrics, resume, data parallel with a trace, tensor parallel, expert parallel, ZeRO, the emulated device, export-hf and config errors behave"
