#!/usr/bin/env bash
# End-to-end check of `tinyscale train --memory` and `train.memory_cap_mib` (label app): the table
# has one row per rank with the formulas beside the counts, the --metrics file gains the rows as
# JSON (pp 2: the first stage holds the embeddings, so more at rest than the second, and each
# holds less than one rank); a cap below one rank's state stops the run with exit status 1,
# naming the key, when it stopped and the layouts predicted to fit; the same cap lets pp 4 train;
# --memory on another device is refused. Usage: train_memory.sh TINYSCALE SRC
set -euo pipefail
bin=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "train_memory: $*" >&2; exit 1; }
run() {
  "$bin" train --config "$src/configs/tiny.toml" --set model.n_layer=4 --set model.n_embd=128 \
    --set train.seq_len=16 --set train.micro_batches=4 --set train.steps=2 \
    --set optim.warmup_steps=1 --set train.eval_batches=1 "$@"
}

run --memory --metrics "$work/one.jsonl" > "$work/one.txt" || fail "one rank: exit status $?"
run --pp 2 --memory --metrics "$work/pp.jsonl" > "$work/pp.txt" || fail "pp 2: exit status $?"
grep -q "^memory per rank, KiB" "$work/pp.txt" || fail "no memory table"
[ "$(grep -c '^| [01] | 0 | 0 | [01] | 0 | 0 | ' "$work/pp.txt")" = 2 ] || fail "not 2 rows"
/usr/bin/python3 - "$work/one.jsonl" "$work/pp.jsonl" <<'PY' || fail "JSON check failed"
import json, sys
def rows(path):
    lines = [json.loads(l) for l in open(path)]
    return next(l["memory"] for l in lines if "memory" in l)
one, (first, second) = rows(sys.argv[1]), rows(sys.argv[2])
assert first["pp"] == 0 and second["pp"] == 1, (first, second)
assert first["at_rest"] > second["at_rest"], (first, second)
assert max(first["at_rest"], second["at_rest"]) < one[0]["at_rest"], (first, second, one)
for r in one + [first, second]:
    assert abs(r["at_rest"] - r["formula_at_rest"]) <= 0.05 * r["formula_at_rest"], r
PY

status=0
run --set train.memory_cap_mib=9 > "$work/cap.txt" 2>&1 || status=$?
[ "$status" = 1 ] || fail "a capped one-rank run: expected exit status 1, found $status"
grep -q "train.memory_cap_mib = 9: rank 0 could not allocate a buffer of .* bytes while building the run" \
  "$work/cap.txt" || fail "the cap message: $(cat "$work/cap.txt")"
grep -q "predicted to fit with a tenth of the cap to spare: .*--pp 4" "$work/cap.txt" ||
  fail "the cap message names no layout: $(cat "$work/cap.txt")"
run --set train.memory_cap_mib=9 --pp 4 > "$work/cap_pp.txt" || fail "pp 4 under the cap"
grep -q "^final val loss" "$work/cap_pp.txt" || fail "pp 4 under the cap did not finish"

status=0
run --set train.device=emu --memory > "$work/emu.txt" 2>&1 || status=$?
[ "$status" = 1 ] && grep -q 'train --memory: expected train.device = "cpu"' "$work/emu.txt" ||
  fail "--memory on emu: $(cat "$work/emu.txt")"
echo "train_memory: ok"
