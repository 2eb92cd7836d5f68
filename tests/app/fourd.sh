#!/usr/bin/env bash
# End-to-end check of chapter 10's commands (label app): `tinyscale train` composes dp x tp x pp x
# ep (with --zero 1, another --order, sequence parallelism, global capacity) on 8 thread ranks and
# gives the losses, dropped fractions and validation loss of one rank with dp x m micro-batches
# (dp / ep x m of ep x b rows for global capacity); --trace writes every rank's actions; --topology
# prints the placement
# report; the per-rank table shows ZeRO-1 halving stage 0's AdamW state; layouts it cannot run
# are refused with a message. Times are not checked. Usage: fourd.sh TINYSCALE SRC
set -euo pipefail
bin=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "fourd: $*" >&2; exit 1; }

common=(--config "$src/configs/moe-tiny.toml" --set train.steps=3 --set optim.warmup_steps=1
        --set train.eval_batches=2 --set train.eval_every=0)
"$bin" train "${common[@]}" --set train.micro_batches=4 --metrics "$work/one.jsonl" \
  > "$work/one.txt" || fail "one rank: exit $?"
"$bin" train "${common[@]}" --set train.micro_batches=2 --set train.batch_size=16 \
  --metrics "$work/pooled.jsonl" > "$work/pooled.txt" || fail "one rank, pooled: exit $?"
run() { # reference, name, then the layout flags
  local reference=$1 name=$2
  shift 2
  "$bin" train "${common[@]}" --set train.micro_batches=2 "$@" --metrics "$work/$name.jsonl" \
    > "$work/$name.txt" || fail "$name ($*): exit $?"
  grep -q "^composed: 8 ranks" "$work/$name.txt" || fail "$name: no composed line"
  /usr/bin/python3 - "$work/$reference.jsonl" "$work/$name.jsonl" <<'PY' || fail "$name: metrics differ from one rank"
import json, sys
def steps(path):
    return [l for l in map(json.loads, open(path)) if "lr" in l and "loss" in l]
one, got = steps(sys.argv[1]), steps(sys.argv[2])
assert len(one) == len(got) == 3, (len(one), len(got))
for a, b in zip(one, got):
    assert abs(a["loss"] - b["loss"]) <= 1e-5 * abs(a["loss"]), (a["loss"], b["loss"])
    assert [m["tokens_per_expert"] for m in a["moe"]] == [m["tokens_per_expert"] for m in b["moe"]], (a["moe"], b["moe"])
    assert [m["dropped_fraction"] for m in a["moe"]] == [m["dropped_fraction"] for m in b["moe"]], (a["moe"], b["moe"])
    assert b["mesh"]["dp"] * b["mesh"]["tp"] * b["mesh"]["pp"] == 8, b["mesh"]
a, b = one[-1], got[-1]  # the validation loss, run through the stages
assert abs(a["val_loss"] - b["val_loss"]) <= 1e-5 * a["val_loss"], (a["val_loss"], b["val_loss"])
PY
}
run one moe --dp 2 --ep 2 --tp 2 --pp 2 --trace "$work/trace.json"
run one zero --dp 2 --ep 2 --tp 2 --pp 2 --zero 1
run one order --dp 2 --ep 2 --tp 2 --pp 2 --sp --order pp-tp-ep-dp --schedule gpipe
run one dense --dp 2 --tp 2 --pp 2 --zero 1 --topology "$src/configs/topologies/dgx-h100-ib.toml"
# global capacity: dp 4 with ep 2 (one micro-batch of 4 rows each) against one rank with 2
# micro-batches of 8 rows (ep x b rows pooled, dp / ep x m of them)
run pooled global --dp 4 --ep 2 --tp 2 --ep-capacity global --set train.micro_batches=1
"$bin" trace "$work/trace.json" > "$work/trace.txt" || fail "trace: exit $?"
grep -q "rank 7 compute" "$work/trace.txt" || fail "the composed trace has no rank 7"
grep -q "^| tp  *| 4 x 2 *| 0-1 *| nvlink" "$work/dense.txt" || fail "--topology: no tp row on nvlink"

# ZeRO-1 halves stage 0's AdamW state (all dense, sliced over dp x ep = 2)
plain=$(grep "^| 0 | " "$work/moe.txt" | awk -F'|' '{print $8}')
sharded=$(grep "^| 0 | " "$work/zero.txt" | awk -F'|' '{print $8}')
/usr/bin/python3 -c "import sys; p, s = float('$plain'), float('$sharded'); sys.exit(0 if abs(s - p / 2) < 0.2 else 1)" ||
  fail "ZeRO-1: rank 0's AdamW state $sharded KiB is not half of $plain KiB"

expect_error() { # the message, then the flags
  local message=$1
  shift
  if "$bin" train "${common[@]}" "$@" > "$work/err.txt" 2>&1; then fail "$* was not refused"; fi
  grep -qF "$message" "$work/err.txt" || fail "$*: expected '$message', found: $(cat "$work/err.txt")"
}
expect_error "use --zero 1" --dp 2 --tp 2 --pp 2 --zero 2
expect_error "must divide the data-parallel ranks" --dp 2 --ep 4 --tp 2
expect_error "add pp to the order" --tp 2 --pp 2 --order tp-dp
echo "fourd: 5 composed layouts equal one rank; validation loss, trace, placement, ZeRO-1 state and 3 refusals checked"
