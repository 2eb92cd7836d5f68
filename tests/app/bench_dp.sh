#!/usr/bin/env bash
# End-to-end check of `tinyscale bench dp` (label app) on a shrunken tiny model: the table has one
# row per rank count and strategy (2 x 3), the JSON parses with the same 6 rows and the Chrome
# trace has traceEvents. The numbers themselves are not checked: one step on a shared CPU is
# noise. Usage: bench_dp.sh TINYSCALE SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "bench_dp: $*" >&2; exit 1; }

"$bin" bench dp --config "$src/configs/tiny.toml" --set model.n_embd=32 --set train.batch_size=4 \
  --set train.seq_len=32 --ranks 1,2 --steps 1 --warmup 0 --json "$work/dp.json" \
  --trace "$work/trace.json" > "$work/out.txt" || fail "exit status $?"
for n in 1 2; do
  for strategy in "after backward" "per parameter" "bucketed + overlap"; do
    grep -q "^| $n | $strategy | " "$work/out.txt" || fail "no row for $n ranks, $strategy"
  done
done
[ "$(grep -c '^| [0-9]' "$work/out.txt")" -eq 6 ] || fail "expected 6 rows in the table"
grep -q "hardware threads" "$work/out.txt" || fail "no core count line"
/usr/bin/python3 - "$work/dp.json" "$work/trace.json" <<'PY' || fail "JSON or trace check failed"
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
assert len(rows) == 6, f"expected 6 JSON rows, found {len(rows)}"
for r in rows:
    assert r["step_s"] > 0 and r["tokens_per_s"] > 0, r
    assert r["efficiency"] is not None, r  # the 1-rank rows were measured
    assert r["ranks"] != 1 or abs(r["efficiency"] - 1) < 1e-12, r
    assert 0 <= r["overlap"] <= 1 + 1e-9, r  # hidden and total time are sums of doubles
trace = json.load(open(sys.argv[2]))
assert trace["traceEvents"], "the trace has no traceEvents"
PY
echo "bench_dp: 6 rows in the table and the JSON, trace written"
