#!/usr/bin/env bash
# Chapter 12 (label app): elastic restart. A data-parallel run on 4 ranks is killed with SIGKILL
# once it has written a checkpoint; `tinyscale train --dp 2 --resume` restarts it from the latest
# checkpoint on 2 ranks. Every loss it reports equals the loss of the same step in a 4-rank run
# that was never interrupted (relative error <= 1e-6: the global batch is the same, only the order
# in which the ranks' gradients are summed differs), and the killed save left nothing behind.
# Usage: elastic_restart.sh TINYSCALE SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "elastic_restart: $*" >&2; exit 1; }

common=(--config "$src/configs/tiny.toml" --set train.steps=40 --set train.checkpoint_every=3
        --set train.log_every=10 --set train.eval_batches=1 --set optim.warmup_steps=2)
"$bin" train "${common[@]}" --set "train.checkpoint_dir=\"$work/reference\"" --dp 4 \
  --metrics "$work/reference.jsonl" > "$work/reference.txt"

# The same run, killed (-9) as soon as its first checkpoint is in place.
"$bin" train "${common[@]}" --set "train.checkpoint_dir=\"$work/ckpt\"" --dp 4 \
  > "$work/killed.txt" 2>&1 &
pid=$!
for _ in $(seq 1 6000); do [ -f "$work/ckpt/latest" ] && break; sleep 0.01; done
kill -9 "$pid" 2> /dev/null || true
status=0
wait "$pid" 2> /dev/null || status=$? # (the shell would report "Killed")
[ "$status" -eq 137 ] || fail "expected the 4-rank run to die of SIGKILL (exit 137), found exit $status"
latest=$(cat "$work/ckpt/latest")
echo "killed the dp 4 run; its latest checkpoint: $latest"
[ "$latest" != "step_00000040" ] || fail "the run finished before the kill; nothing to restart"

# Restart on 2 ranks from the latest checkpoint.
"$bin" train "${common[@]}" --set "train.checkpoint_dir=\"$work/ckpt\"" --dp 2 --resume \
  --metrics "$work/elastic.jsonl" > "$work/elastic.txt"
grep -q "data parallel: 2 ranks" "$work/elastic.txt" || fail "--dp 2 did not say so"
resumed=$(sed -n 's/^resumed from .* at step \([0-9]*\)$/\1/p' "$work/elastic.txt")
[ -n "$resumed" ] || fail "the restart did not say where it resumed"
echo "restarted on dp 2 at step $resumed"
[ "$latest" = "$(printf 'step_%08d' "$resumed")" ] || fail "resumed at $resumed, latest was $latest"

losses() { grep '"step"' "$1" | sed 's/.*"loss":\([^,]*\),.*"step":\([0-9]*\).*/\2 \1/'; }
awk -v first="$((resumed + 1))" 'NR == FNR { want[$1] = $2; next }
  { d = $2 - want[$1]; if (d < 0) d = -d; r = d / want[$1]; if (r > worst) worst = r; ++n
    if (r > 1e-6) { printf "step %d: loss %s on dp 2, %s on dp 4\n", $1, $2, want[$1]; bad = 1 } }
  END { printf "%d steps after the restart, worst relative loss difference %.1e\n", n, worst
        exit (bad || n != 40 - first + 1) }' \
  <(losses "$work/reference.jsonl") <(losses "$work/elastic.jsonl") ||
  fail "the restarted losses differ from the uninterrupted run's"
leftovers=$(find "$work/ckpt" -maxdepth 1 -name '.*' ! -name . | wc -l)
[ "$leftovers" -eq 0 ] || fail "hidden leftovers of the killed save remain: $(ls -A "$work/ckpt")"
echo "elastic_restart: dp 4 -> dp 2 continued with the uninterrupted run's losses"
