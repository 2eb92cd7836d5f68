#!/usr/bin/env bash
# End-to-end check of chapter 12's resharding (label app): a dp 2 x tp 2 x pp 2 run with ZeRO-1
# saves at step 3; `tinyscale reshard` checks it against tp 4 x dp 2 (and writes each rank's
# pieces) and refuses tp 3; resuming it on tp 4 x dp 2, on pp 2 x dp 4 and on one rank continues with the losses of the run that never moved (relative 1e-6), and
# resuming in the same layout gives them bit for bit. Usage: reshard.sh TINYSCALE SRC
set -euo pipefail
bin=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "reshard: $*" >&2; exit 1; }

common=(--config "$src/configs/tiny.toml" --set train.steps=5 --set train.checkpoint_every=3
        --set train.eval_every=0 --set optim.warmup_steps=2)
"$bin" train "${common[@]}" --dp 2 --tp 2 --pp 2 --zero 1 --set train.checkpoint_dir="$work/a" \
  --metrics "$work/a.jsonl" > "$work/a.txt" || fail "the composed run: exit $?"
[ -f "$work/a/step_00000003/manifest.json" ] || fail "no checkpoint at step 3"

"$bin" reshard --checkpoint "$work/a/step_00000003" --tp 4 --dp 2 --out "$work/shards" \
  > "$work/reshard.txt" || fail "reshard: exit $?"
grep -q "^| 7 | 1 | 0 | 3 | 0 | " "$work/reshard.txt" || fail "reshard: no row for rank 7"
[ "$(ls "$work/shards" | grep -c '^rank_0000[0-7].safetensors$')" = 8 ] || fail "reshard --out: not 8 files"
if "$bin" reshard --checkpoint "$work/a/step_00000003" --tp 3 > "$work/bad.txt" 2>&1; then
  fail "reshard accepted tp 3 for 4 heads"
fi
grep -q "model.n_head (4) divisible by tp = 3" "$work/bad.txt" || fail "reshard --tp 3: no clear error"

resume() { # name, then the layout flags
  local name=$1
  shift
  "$bin" train "${common[@]}" "$@" --resume "$work/a/step_00000003" \
    --set train.checkpoint_dir="$work/$name" --metrics "$work/$name.jsonl" > "$work/$name.txt" ||
    fail "resume on $name ($*): exit $?"
  grep -q "^resumed from .*step_00000003 at step 3" "$work/$name.txt" || fail "$name: did not resume"
}
resume same --dp 2 --tp 2 --pp 2 --zero 1
resume tp4 --tp 4 --dp 2
resume pp2dp4 --pp 2 --dp 4
resume one
/usr/bin/python3 - "$work" <<'PY' || fail "the resumed losses differ from the run that never moved"
import json, sys
def steps(name):
    return {l["step"]: l["loss"] for l in map(json.loads, open(f"{sys.argv[1]}/{name}.jsonl"))
            if "lr" in l and "loss" in l}
a = steps("a")
for name in ["same", "tp4", "pp2dp4", "one"]:
    b = steps(name)
    assert sorted(b) == [4, 5], (name, sorted(b))
    for s in b:
        if name == "same":
            assert b[s] == a[s], (name, s, a[s], b[s])  # bit for bit
        else:
            assert abs(b[s] - a[s]) <= 1e-6 * abs(a[s]), (name, s, a[s], b[s])
PY
echo "reshard: one checkpoint resumed bit for bit in its layout and within 1e-6 in 3 others"
