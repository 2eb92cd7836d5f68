#!/usr/bin/env bash
# End-to-end check of `tinyscale bench plan` (label app, chapter 09 section 12) on tiny.toml with
# four layouts of one and two ranks: the header names the command, the machine and where the
# kernel rate comes from (measured now: the cache is an empty folder), the table has one row of
# eight cells per layout, the agreement line prints Kendall's tau-b and Spearman's rho, the JSON
# holds the same rows, and a layout that cannot run is refused before any work. Times and the
# agreement itself are not checked: a few steps on a shared CPU are noise. Then `tinyscale plan`
# itself: --top 0 prints every layout, and impossible filters and sequence lengths are refused.
# Usage: bench_plan.sh TINYSCALE SRC
set -euo pipefail
bin=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "bench_plan: $*" >&2; exit 1; }

TINYSCALE_CACHE_DIR="$work/cache" "$bin" bench plan --config "$src/configs/tiny.toml" \
  --cluster "$src/configs/topologies/laptop.toml" --layouts 1,dp2,pp2:m2:1f1b,pp2:m4:gpipe \
  --steps 2 --warmup 1 --json "$work/plan.json" > "$work/out.txt" || fail "exit status $?"
cat "$work/out.txt"
grep -q "^command: tinyscale bench plan .*--layouts 1,dp2,pp2:m2:1f1b,pp2:m4:gpipe" \
  "$work/out.txt" || fail "no command line"
grep -q "^machine: .*hardware threads" "$work/out.txt" || fail "no machine line"
grep -q "^predicted: .*the GEMM peak measured now" "$work/out.txt" || fail "no kernel rate source"
grep -q "^| layout | ranks | predicted ms | compute / comm / bubble ms | measured ms | measured / predicted | predicted rank | measured rank |$" \
  "$work/out.txt" || fail "no table header"
for layout in 1 dp2 pp2:m2:1f1b pp2:m4:gpipe; do
  row=$(grep "^| $layout | " "$work/out.txt") || fail "no row for $layout"
  cells=$(awk -F'|' '{print NF - 2}' <<< "$row")
  [ "$cells" -eq 8 ] || fail "row $layout has $cells cells, expected 8: $row"
done
[ "$(grep -c '^| [^-l]' "$work/out.txt")" -eq 4 ] || fail "expected 4 rows"
grep -Eq "^agreement of the 4 layouts: Kendall tau-b -?[0-9]+\.[0-9]+ .*Spearman rho -?[0-9]+\.[0-9]+$" \
  "$work/out.txt" || fail "no Kendall tau / Spearman rho line"
/usr/bin/python3 - "$work/plan.json" <<'PY' || fail "JSON check failed"
import json, sys
out = json.load(open(sys.argv[1]))
assert out["command"].startswith("tinyscale bench plan"), out["command"]
rows = out["rows"]
assert [r["layout"] for r in rows] == ["1", "dp2", "pp2:m2:1f1b", "pp2:m4:gpipe"], rows
assert [r["ranks"] for r in rows] == [1, 2, 2, 2], rows
for r in rows:
    assert r["predicted_ms"] > 0 and r["measured_ms"] > 0, r
assert -1 <= out["kendall_tau"] <= 1 and -1 <= out["spearman_rho"] <= 1, out
PY

# A layout the model cannot take (tp 3 does not divide 4 heads) fails before any work.
if "$bin" bench plan --config "$src/configs/tiny.toml" --cluster \
  "$src/configs/topologies/laptop.toml" --layouts 1,tp3 > "$work/bad.txt" 2>&1; then
  fail "tp3 on 4 heads was accepted"
fi
grep -q "expected layout 'tp3' to run" "$work/bad.txt" || fail "unclear error: $(cat "$work/bad.txt")"

# `tinyscale plan`: --top 0 prints every ranked layout, as the JSON does.
plan() {
  "$bin" plan --model megatron-1.7b --cluster "$src/configs/topologies/dgx-h100-ib.toml" "$@"
}
plan --gpus 8 --batch 64 --top 0 > "$work/all.txt" || fail "plan --top 0: exit status $?"
grep -q "no layout fits" "$work/all.txt" && fail "plan --top 0 says no layout fits"
rows=$(grep -c '^| [0-9]' "$work/all.txt")
ranked=$(plan --gpus 8 --batch 64 --top 0 --json | /usr/bin/python3 -c \
  'import json, sys; print(len(json.load(sys.stdin)["layouts"]))')
[ "$rows" -eq "$ranked" ] || fail "plan --top 0 printed $rows rows, the JSON ranks $ranked"
# Values no layout can have are refused by the flag; a filter that empties the search is named.
refused() { # expected-text, plan arguments...
  local want=$1
  shift
  if plan "$@" > "$work/bad.txt" 2>&1; then fail "plan $* was accepted"; fi
  grep -q -- "$want" "$work/bad.txt" || fail "plan $*: unclear error: $(cat "$work/bad.txt")"
}
refused "--zero: Value 7 not in range" --batch 512 --zero 7
refused "--micro-batch: expected an integer >= 1, found '0'" --batch 512 --micro-batch 0
refused "--tp: expected an integer >= 1, found '0'" --batch 512 --tp 0
refused "on 32 devices with a batch of 512 and the filters tp 5, found none" --batch 512 --tp 5
refused "tp 5 alone leaves none" --batch 512 --tp 5
# A run config's learned positions bound --seq.
if "$bin" plan --model "$src/configs/tiny.toml" --cluster "$src/configs/topologies/laptop.toml" \
  --gpus 2 --device cpu --kernel-tflops 0.1 --seq 4096 > "$work/bad.txt" 2>&1; then
  fail "--seq 4096 beyond n_positions was accepted"
fi
grep -q "n_positions = 64" "$work/bad.txt" || fail "unclear error: $(cat "$work/bad.txt")"
echo "bench_plan: ok"
