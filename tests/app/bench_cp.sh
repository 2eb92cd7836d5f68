#!/usr/bin/env bash
# End-to-end check of `tinyscale bench cp` (label app) on a shrunken tiny model: the table has the
# rows cp = 1, and cp = 2 and 4 each load-balanced and contiguous; in the JSON every rank's ring
# bytes equal docs/theory.md sec. 10's formula, every rank's counted attention pairs equal
# cp::causal_pairs, the balanced split gives every rank the same work and the contiguous one does
# not, and one layer's activation bytes per rank are the cp = 1 row's over N (the ring keeps no
# s x s scores), fewer than chapter 02's block keeps. Step times are not checked: one step on a
# shared CPU is noise. Usage: bench_cp.sh TINYSCALE SRC
set -euo pipefail
bin=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "bench_cp: $*" >&2; exit 1; }

"$bin" bench cp --config "$src/configs/tiny.toml" --set model.n_embd=32 --set train.batch_size=2 \
  --set train.seq_len=32 --ranks 1,2,4 --steps 1 --warmup 0 --json "$work/cp.json" \
  > "$work/out.txt" || fail "exit status $?"
for row in "1 | -" "2 | load-balanced" "2 | contiguous" "4 | load-balanced" "4 | contiguous"; do
  grep -q "^| $row | " "$work/out.txt" || fail "no row for cp $row"
done
[ "$(grep -c '^| [0-9]' "$work/out.txt")" -eq 5 ] || fail "expected 5 rows in the table"
grep -q "ring bytes equal the formula" "$work/out.txt" || fail "ring bytes check line"
grep -q "attention work equals cp::causal_pairs" "$work/out.txt" || fail "work check line"
/usr/bin/python3 - "$work/cp.json" <<'PY' || fail "JSON check failed"
import json, sys
out = json.load(open(sys.argv[1]))
rows = out["rows"]
assert len(rows) == 5, f"expected 5 JSON rows, found {len(rows)}"
b, s, h, layers = out["b"], out["s"], out["h"], out["n_layer"]
for r in rows:
    n = r["cp"]
    assert r["step_s"] > 0, r
    assert len(r["sent_bytes_per_step"]) == n and len(r["pairs"]) == n, r
    # the formula, written out again here: (6N-4) b h s/N float32 elements per layer, 0 at N = 1
    expected = 0 if n == 1 else (6 * n - 4) * b * h * (s // n) * 4 * layers
    assert r["sent_formula"] == expected, r
    assert all(x == expected for x in r["sent_bytes_per_step"]), r
    assert r["pairs"] == r["pairs_formula"], r
    # every query sees every key before it, once: the ranks' pairs add up to s(s+1)/2
    assert sum(r["pairs"]) == s * (s + 1) // 2, r
    if r["split"] == "load-balanced":
        assert len(set(r["pairs"])) == 1, r
    if r["split"] == "contiguous" and n > 1:
        assert r["pairs"] == sorted(r["pairs"]) and r["pairs"][0] < r["pairs"][-1], r
    assert r["activation_ratio"] is not None and abs(r["activation_ratio"] - 1 / n) < 1e-9, r
one = [r for r in rows if r["cp"] == 1][0]
assert 0 < max(one["activation_bytes"]) < one["plain_activation_bytes"], one
PY
echo "bench_cp: 5 rows; ring bytes and attention work equal the formulas; activation 1/N"
