#!/usr/bin/env bash
# End-to-end check of chapter 06's commands (label app): `tinyscale schedule` prints every
# schedule's simulated bubble equal to the formula with unit costs and draws a timeline;
# `tinyscale train --pp 2` with each schedule gives the same losses as one rank (the schedule
# changes the order of work, not the arithmetic), writes its bubble to the metrics, and refuses
# a layout it cannot run. Usage: pipeline.sh TINYSCALE SRC
set -euo pipefail
bin=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "pipeline: $*" >&2; exit 1; }

"$bin" schedule --pp 4 --micro-batches 8 --timeline > "$work/schedule.txt" || fail "schedule: exit $?"
for row in "| gpipe | 1 | 164 | 33 | 0.2727 |" "| 1f1b | 1 | 164 | 33 | 0.2727 |" \
           "| interleaved | 2 | 356 | 57 | 0.1579 |" "| zb-h1 | 1 | 196 | 27 | 0.1111 |"; do
  grep -qF "$row" "$work/schedule.txt" || fail "no row '$row' in the schedule table"
done
grep -q "rank 3 |. . . F0I0F1I1" "$work/schedule.txt" || fail "the ZB-H1 timeline is not drawn"

common=(--config "$src/configs/tiny.toml" --set train.steps=3 --set train.micro_batches=4
        --set optim.warmup_steps=1 --set train.eval_batches=1 --set model.n_layer=4)
"$bin" train "${common[@]}" --metrics "$work/one.jsonl" > "$work/one.txt" || fail "one rank: exit $?"
for s in gpipe 1f1b zb-h1 interleaved; do
  extra=()
  [ "$s" = interleaved ] && extra=(--chunks 2)
  "$bin" train "${common[@]}" --pp 2 --schedule "$s" "${extra[@]}" --metrics "$work/$s.jsonl" \
    > "$work/$s.txt" || fail "--pp 2 --schedule $s: exit $?"
  grep -q "^pipeline: $s | pp 2" "$work/$s.txt" || fail "$s: no pipeline line"
  grep -q "^| 1 | " "$work/$s.txt" || fail "$s: no bubble row for rank 1"
  /usr/bin/python3 - "$work/one.jsonl" "$work/$s.jsonl" <<'PY' || fail "$s: metrics differ from one rank"
import json, sys
one = [json.loads(l) for l in open(sys.argv[1]) if '"step"' in l and "loss" in l]
pp = [json.loads(l) for l in open(sys.argv[2]) if '"step"' in l and "loss" in l]
one = [l for l in one if "lr" in l]
pp = [l for l in pp if "lr" in l]
assert len(one) == len(pp) == 3, (len(one), len(pp))
for a, b in zip(one, pp):
    assert abs(a["loss"] - b["loss"]) <= 1e-5 * abs(a["loss"]), (a["loss"], b["loss"])
    assert 0 <= min(b["pp"]["bubble_measured"]) and max(b["pp"]["bubble_measured"]) < 1, b["pp"]
    assert len(b["pp"]["bubble_simulated"]) == 2, b["pp"]
PY
done

if "$bin" train "${common[@]}" --pp 8 > "$work/bad.txt" 2>&1; then fail "--pp 8 on 4 layers ran"; fi
grep -q "need at least one block each" "$work/bad.txt" || fail "--pp 8: unclear error: $(cat "$work/bad.txt")"
echo "pipeline: schedule table, timeline, four schedules equal to one rank, bad layout refused"
