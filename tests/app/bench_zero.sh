#!/usr/bin/env bash
# End-to-end check of `tinyscale bench zero` (label app) on a small tiny.toml: the table has a row
# per stage at dp 2; in the JSON every stage's parameters, gradients and optimizer state per rank
# are within 5% of Rajbhandari et al.'s formulas (the allocator's counts for stages 1-3), the
# bytes sent within 1% of (N-1)/N x {2, 2, 3} psi x 4 B, and each stage holds less than the last.
# Times are not checked: one step on a shared CPU is noise. Usage: bench_zero.sh TINYSCALE SRC
set -euo pipefail
bin=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "bench_zero: $*" >&2; exit 1; }

"$bin" bench zero --config "$src/configs/tiny.toml" --set model.n_layer=3 --set train.batch_size=4 \
  --set train.seq_len=32 --ranks 2 --steps 1 --warmup 0 --json "$work/zero.json" \
  > "$work/out.txt" || fail "exit status $?"
for stage in 0 1 2 3; do
  grep -q "^| 2 | $stage | " "$work/out.txt" || fail "no row for dp 2, stage $stage"
done
grep -q "worst memory deviation from the formulas" "$work/out.txt" || fail "no check line"
/usr/bin/python3 - "$work/zero.json" <<'PY' || fail "JSON check failed"
import json, sys
out = json.load(open(sys.argv[1]))
assert out["command"].startswith("tinyscale bench zero"), out["command"]
rows = sorted(out["rows"], key=lambda r: r["stage"])
assert [r["stage"] for r in rows] == [0, 1, 2, 3], rows
for r in rows:
    for kind in ("parameter", "gradient", "optimizer"):
        got, want = r[kind + "_bytes"], r[kind + "_bytes_formula"]
        assert abs(got - want) <= 0.05 * want, (r["stage"], kind, got, want)
    assert abs(r["sent_bytes"] - r["sent_bytes_formula"]) <= 0.01 * r["sent_bytes_formula"], r
state = [r["parameter_bytes"] + r["gradient_bytes"] + r["optimizer_bytes"] for r in rows]
assert all(a > b for a, b in zip(state, state[1:])), state
assert rows[3]["gathered_peak_bytes"] > 0 and rows[1]["activation_peak_bytes"] > 0, rows
PY
