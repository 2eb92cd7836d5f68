#!/usr/bin/env bash
# End-to-end check of `tinyscale bench tp` (label app) on a shrunken tiny model: the table has the
# rows tp = 1 and tp = 2 with sequence parallelism off and on; in the JSON the measured block
# traffic equals docs/theory.md's formula exactly (payload and wire bytes), activation memory was
# measured, and sequence parallelism holds fewer activation bytes per rank than plain TP.
# Step times are not checked: one step on a shared CPU is noise. Usage: bench_tp.sh TINYSCALE SRC
set -euo pipefail
bin=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "bench_tp: $*" >&2; exit 1; }

"$bin" bench tp --config "$src/configs/tiny.toml" --set model.n_embd=32 --set train.batch_size=4 \
  --set train.seq_len=32 --ranks 1,2 --steps 1 --warmup 0 --json "$work/tp.json" \
  > "$work/out.txt" || fail "exit status $?"
for row in "1 | off" "2 | off" "2 | on"; do
  grep -q "^| $row | " "$work/out.txt" || fail "no row for tp $row"
done
[ "$(grep -c '^| [0-9]' "$work/out.txt")" -eq 3 ] || fail "expected 3 rows in the table"
grep -q "hardware threads" "$work/out.txt" || fail "no core count line"
grep -q "block traffic equals the formula" "$work/out.txt" || fail "block traffic check line"
/usr/bin/python3 - "$work/tp.json" <<'PY' || fail "JSON check failed"
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
assert len(rows) == 3, f"expected 3 JSON rows, found {len(rows)}"
for r in rows:
    assert r["step_s"] > 0, r
    assert r["block_payload_bytes_per_layer"] == r["block_payload_formula"], r
    assert abs(r["block_wire_bytes_per_layer"] - r["block_wire_formula"]) <= 1e-9 * max(
        1.0, r["block_wire_formula"]), r
    assert r["activation_bytes"] > 0, r
    assert r["activation_ratio"] is not None, r  # the tp = 1 row was measured
by = {(r["tp"], r["sp"]): r for r in rows}
assert by[(2, True)]["activation_bytes"] < by[(2, False)]["activation_bytes"], by
assert by[(2, False)]["activation_bytes"] < by[(1, False)]["activation_bytes"], by
# measured, not formula against formula: SP moves twice the payload on the same wire bytes
assert by[(2, True)]["block_payload_bytes_per_layer"] == 2 * by[(2, False)]["block_payload_bytes_per_layer"], by
assert by[(2, True)]["block_wire_bytes_per_layer"] == by[(2, False)]["block_wire_bytes_per_layer"], by
assert by[(1, False)]["block_wire_bytes_per_layer"] == 0, by
PY
echo "bench_tp: 3 rows; block traffic equals the formula; SP holds fewer activation bytes"
