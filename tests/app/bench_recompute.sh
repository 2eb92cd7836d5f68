#!/usr/bin/env bash
# End-to-end check of `tinyscale bench recompute` (label app) on a shrunken tiny model: one row per
# mode; in the JSON one layer keeps exactly its output (s b h values) with full recompute and one
# softmax (a s^2 b values) less with selective than without; a whole step's peak falls from none
# to selective to full; and the last step's loss is the same bits in every mode. Step times are
# not checked: a few steps on a shared CPU are noise. Usage: bench_recompute.sh TINYSCALE SRC
set -euo pipefail
bin=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "bench_recompute: $*" >&2; exit 1; }

"$bin" bench recompute --config "$src/configs/tiny.toml" --set model.n_embd=32 \
  --set train.batch_size=4 --set train.seq_len=32 --steps 2 --warmup 1 --json "$work/r.json" \
  > "$work/out.txt" || fail "exit status $?"
for mode in none selective full; do
  grep -q "^| $mode | " "$work/out.txt" || fail "no row for $mode"
done
grep -q "full keeps the layer's output alone .*: yes" "$work/out.txt" || fail "full's check line"
grep -q "selective keeps one softmax .* less than none: yes" "$work/out.txt" || fail "selective's"
grep -q "last step's loss the same bits in every mode: yes" "$work/out.txt" || fail "loss line"
/usr/bin/python3 - "$work/r.json" <<'PY' || fail "JSON check failed"
import json, sys
out = json.load(open(sys.argv[1]))
b, s, h, a, e = out["b"], out["s"], out["h"], out["heads"], out["element_bytes"]
rows = {r["recompute"]: r for r in out["rows"]}
assert sorted(rows) == ["full", "none", "selective"], rows.keys()
# the formulas, written out again here
assert rows["full"]["layer_bytes"] == s * b * h * e, rows["full"]
assert rows["none"]["layer_bytes"] - rows["selective"]["layer_bytes"] == a * s * s * b * e, rows
assert rows["none"]["step_peak_bytes"] > rows["selective"]["step_peak_bytes"] > rows["full"]["step_peak_bytes"], rows
assert rows["none"]["last_loss"] == rows["selective"]["last_loss"] == rows["full"]["last_loss"], rows
assert all(r["step_s"] > 0 for r in rows.values()), rows
PY
echo "bench_recompute: ok"
