#!/usr/bin/env bash
# End-to-end check of the `tinyscale` program (label app): a short training run with metrics and
# checkpoints, a resume that continues where it stopped, a data-parallel run (--dp 2 --trace) whose
# losses equal the single-rank run's and whose trace `tinyscale trace` draws, an export to the
# Hugging Face layout, and a config typo that is refused with a suggestion. Usage: train_smoke.sh TINYSCALE SOURCE_DIR
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

"$bin" export-hf "$work/hf" --checkpoint "$work/ckpt" > /dev/null
[ -s "$work/hf/config.json" ] && [ -s "$work/hf/model.safetensors" ] || fail "export-hf wrote nothing"
grep -q '"model_type": *"gpt2"' "$work/hf/config.json" || fail "config.json is not GPT-2's"

if "$bin" train --config "$src/configs/tiny.toml" --set model.n_embed=32 2> "$work/err.txt"; then
  fail "a misspelt key was accepted"
fi
grep -q "did you mean 'model.n_embd'" "$work/err.txt" || fail "no suggestion for a misspelt key"
echo "train_smoke: train, metrics, resume, data parallel with a trace, tensor parallel, export-hf and config errors behave"
