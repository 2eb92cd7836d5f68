#!/usr/bin/env bash
# Retention and automatic resume, end to end (label app; chapter 12): the same command, with
# --auto-resume, starts a run in an empty folder (and says so), is killed with SIGKILL in the
# middle of training, is started again unchanged, resumes from the newest checkpoint, and ends with
# the uninterrupted run's final validation loss, bit for bit. Retention (checkpoint_keep_last 2,
# keep_every 5) leaves exactly the steps it should, and `latest` always names a loadable one.
# Usage: auto_resume.sh TINYSCALE SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "auto_resume: $*" >&2; exit 1; }

run=(--config "$src/configs/tiny.toml" --set train.steps=40 --set train.eval_batches=2
     --set train.log_every=10 --set train.checkpoint_every=1 --set train.checkpoint_keep_last=2
     --set train.checkpoint_keep_every=5 --set optim.warmup_steps=5)

# The reference: uninterrupted, in its own folder.
"$bin" train "${run[@]}" --set "train.checkpoint_dir=\"$work/ref\"" > "$work/ref.txt"
want=$(grep '^final val loss' "$work/ref.txt") || fail "the reference printed no final val loss"
steps=$(cd "$work/ref" && ls -d step_* | tr '\n' ' ')
[ "$steps" = "step_00000005 step_00000010 step_00000015 step_00000020 step_00000025 step_00000030 step_00000035 step_00000039 step_00000040 " ] ||
  fail "keep_last 2 and keep_every 5 over 40 steps should leave every 5th step and 39, 40; found $steps"
[ "$(cat "$work/ref/latest")" = "step_00000040" ] || fail "latest should name step_00000040"

# The same command three times: fresh start, SIGKILL mid-run, then to the end.
cmd=("$bin" train "${run[@]}" --set "train.checkpoint_dir=\"$work/ckpt\"" --auto-resume)
"${cmd[@]}" > "$work/first.txt" &
pid=$!
for _ in $(seq 1 600); do # until a checkpoint past step 3 exists (at most 60 s)
  if [ -f "$work/ckpt/latest" ] && [ "$(sed 's/step_0*//' "$work/ckpt/latest")" -ge 3 ]; then break; fi
  sleep 0.1
done
kill -9 "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
grep -q "^auto-resume: no checkpoint in $work/ckpt yet, so this run starts at step 0" \
  "$work/first.txt" || fail "the first start did not say it starts fresh: $(head -3 "$work/first.txt")"
grep -q "^checkpoints: every step into $work/ckpt, keeping the newest 2 and every step divisible by 5; if this run stops, run the same command with --auto-resume" \
  "$work/first.txt" || fail "the run did not say where its checkpoints go and how to resume"
if grep -q '^done:' "$work/first.txt"; then fail "the run ended before the kill; make it longer"; fi
killed_at=$(sed 's/step_0*//' "$work/ckpt/latest")

"${cmd[@]}" > "$work/second.txt"
grep -q "^resumed from $work/ckpt at step $killed_at$" "$work/second.txt" ||
  fail "expected 'resumed from $work/ckpt at step $killed_at', found: $(grep resumed "$work/second.txt")"
grep -q "^done: $((40 - killed_at)) steps ($((killed_at + 1)) to 40, resumed at step $killed_at) in " \
  "$work/second.txt" || fail "the done line should count the steps this run made: $(grep '^done' "$work/second.txt")"
got=$(grep '^final val loss' "$work/second.txt")
[ "$got" = "$want" ] || fail "resumed run ended with '$got', the uninterrupted one with '$want'"
[ "$(cat "$work/ckpt/latest")" = "step_00000040" ] || fail "latest should name step_00000040"
echo "auto_resume: killed at step $killed_at, resumed, ended equal to the uninterrupted run: $got"
