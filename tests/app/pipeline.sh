#!/usr/bin/env bash
# End-to-end check of chapter 06's commands (label app): `tinyscale schedule` prints every
# schedule's simulated bubble equal to the formula with unit costs, draws a timeline and refuses
# all but GPipe under a batch-global auxiliary loss; `tinyscale train --pp 2` with each schedule
# (and with --dp 2) gives the same losses as one rank (the schedule changes the order of work, not
# the arithmetic), writes its bubble to the metrics and a trace, and refuses a layout it cannot
# run; `tinyscale bench pp` writes its rows. Times are not checked. Usage: pipeline.sh TINYSCALE SRC
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
"$bin" schedule --pp 4 --micro-batches 8 --global-aux > "$work/global.txt" || fail "--global-aux: exit $?"
grep -qF "| gpipe | 1 | 164 | 33 | 0.2727 |" "$work/global.txt" || fail "--global-aux: no gpipe row"
[ "$(grep -c "refused: a stage's backward would run before all its forwards" "$work/global.txt")" = 3 ] ||
  fail "--global-aux: expected 1f1b, interleaved and zb-h1 refused"

common=(--config "$src/configs/tiny.toml" --set train.steps=3 --set train.micro_batches=4
        --set optim.warmup_steps=1 --set train.eval_batches=1 --set model.n_layer=4)
"$bin" train "${common[@]}" --metrics "$work/one.jsonl" > "$work/one.txt" || fail "one rank: exit $?"
for s in gpipe 1f1b zb-h1 interleaved dp; do
  extra=(--schedule "$s")
  [ "$s" = interleaved ] && extra+=(--chunks 2)
  [ "$s" = dp ] && extra=(--dp 2 --schedule zb-h1 --trace "$work/trace.json")
  "$bin" train "${common[@]}" --pp 2 "${extra[@]}" --metrics "$work/$s.jsonl" \
    > "$work/$s.txt" || fail "--pp 2 ${extra[*]}: exit $?"
  grep -q "^pipeline: .* | pp 2" "$work/$s.txt" || fail "$s: no pipeline line"
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

"$bin" trace "$work/trace.json" > "$work/trace.txt" || fail "trace: exit $?"
grep -q "rank 3 compute" "$work/trace.txt" || fail "the --dp 2 --pp 2 trace has no rank 3"

"$bin" bench pp --config "$src/configs/bench-pp.toml" --set model.n_layer=4 --set model.n_embd=32 \
  --ranks 2 --micro-batches 4 --schedules 1f1b,zb-h1 --steps 1 --warmup 0 --json "$work/pp.json" \
  > "$work/bench.txt" || fail "bench pp: exit $?"
/usr/bin/python3 - "$work/pp.json" <<'PY' || fail "bench pp: JSON check failed"
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
assert [(r["p"], r["m"], r["schedule"]) for r in rows] == [(2, 4, "1f1b"), (2, 4, "zb-h1")], rows
for r in rows:
    assert len(r["bubble_measured"]) == len(r["bubble_simulated"]) == 2, r
    assert abs(r["bubble_unit_costs"] - r["bubble_formula"]) < 1e-12, r
    assert r["activation_peak_bytes"] > 0 and r["step_ms"] > 0, r
PY

if "$bin" train "${common[@]}" --pp 8 > "$work/bad.txt" 2>&1; then fail "--pp 8 on 4 layers ran"; fi
grep -q "need at least one block each" "$work/bad.txt" || fail "--pp 8: unclear error: $(cat "$work/bad.txt")"
echo "pipeline: schedule table, timeline, global aux, four schedules and PP x DP equal to one" \
  "rank, trace, bench pp, bad layout refused"
