#!/usr/bin/env bash
# `tinyscale eval` end to end (label app): its loss equals the validation loss `train` printed for
# the same checkpoint and batches, bit for bit on one rank and to 1e-6 under dp, tp, pp, ZeRO-3
# and cp; by default every validation window once (never wrapping round, in train too); a Hugging
# Face folder evaluates as its checkpoint does; --text and --shards; --per-token's losses average
# to the model's loss of that window; refusals name the fix. Usage: eval.sh TINYSCALE SRC
set -euo pipefail
bin=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "eval: $*" >&2; exit 1; }
py=/usr/bin/python3
json() { $py -c "import json,sys; print(repr(json.loads(open(sys.argv[1]).readlines()[-1])[sys.argv[2]]))" "$@"; }
close() { $py -c "import sys; a,b,t=map(float,sys.argv[1:]); sys.exit(0 if abs(a-b)<=t else 1)" "$@"; }

cfg="$src/configs/tiny.toml"
"$bin" train --config "$cfg" --set train.steps=12 --set train.eval_batches=4 \
  --set train.checkpoint_every=12 --set train.checkpoint_dir=\""$work/ckpt"\" \
  --set optim.warmup_steps=2 --metrics "$work/train.jsonl" > "$work/train.txt" ||
  fail "train: exit $?"
want=$(json "$work/train.jsonl" final_val_loss)

# one rank: the same code as train's validation, so the same double
"$bin" eval --checkpoint "$work/ckpt" --batches 4 --metrics "$work/one.json" > "$work/one.txt" ||
  fail "eval: exit $?"
[ "$(json "$work/one.json" loss)" = "$want" ] ||
  fail "eval's loss $(json "$work/one.json" loss) differs from train's validation loss $want"
grep -q "^eval: 64 of the 1023 validation windows of 64 tokens (the first ones, each once) in 4 batches" \
  "$work/one.txt" || fail "no window count: $(cat "$work/one.txt")"

# every layout train accepts: the same loss to 1e-6
for layout in "--dp 2" "--tp 2 --sp" "--pp 2" "--dp 2 --zero 3" "--cp 2" "--dp 2 --pp 2"; do
  # shellcheck disable=SC2086
  "$bin" eval --checkpoint "$work/ckpt" --batches 4 --metrics "$work/l.json" $layout \
    > "$work/l.txt" || fail "eval $layout: exit $?"
  close "$(json "$work/l.json" loss)" "$want" 1e-6 ||
    fail "eval $layout: loss $(json "$work/l.json" loss), one rank's $want"
done

# by default every window once: 1023 windows in 64 batches (the last of 15 rows)
"$bin" eval --checkpoint "$work/ckpt" --metrics "$work/all.json" > "$work/all.txt" ||
  fail "eval (all): exit $?"
[ "$(json "$work/all.json" windows)" = 1023 ] && [ "$(json "$work/all.json" batches)" = 64 ] ||
  fail "expected 1023 windows in 64 batches: $(cat "$work/all.json")"
# ... in every layout too, with its last batch of 15 rows (a partial batch through the stages,
# the tp shards and the cp ring)
for layout in "--dp 2" "--tp 2 --sp" "--pp 2" "--dp 2 --zero 3" "--cp 2" "--tp 2 --pp 2"; do
  # shellcheck disable=SC2086
  "$bin" eval --checkpoint "$work/ckpt" --metrics "$work/l.json" $layout > /dev/null ||
    fail "eval $layout (all windows): exit $?"
  close "$(json "$work/l.json" loss)" "$(json "$work/all.json" loss)" 1e-6 ||
    fail "eval $layout over every window: $(json "$work/l.json" loss), one rank's $(json "$work/all.json" loss)"
done
# ... the same as batches of one window each (a different cut of the same rows)
"$bin" eval --checkpoint "$work/ckpt" --set train.batch_size=1 --set train.micro_batches=1 \
  --metrics "$work/ones.json" > /dev/null || fail "eval (batch 1): exit $?"
close "$(json "$work/ones.json" loss)" "$(json "$work/all.json" loss)" 1e-7 ||
  fail "all windows in batches of 16 ($(json "$work/all.json" loss)) and of 1 ($(json "$work/ones.json" loss)) differ"

# train never counts a window twice: a validation split of 15 windows, asked for 4 x 16 rows
"$bin" train --config "$cfg" --set train.steps=12 --set train.eval_batches=4 \
  --set data.markov_val_tokens=1000 --set optim.warmup_steps=2 \
  --set train.checkpoint_every=12 --set train.checkpoint_dir=\""$work/small"\" \
  --metrics "$work/small.jsonl" > "$work/small.txt" || fail "train (small val): exit $?"
grep -q "^validation: every one of the split's 15 windows of 64 tokens once, in 1 batches" \
  "$work/small.txt" || fail "train said nothing of the 15 windows: $(cat "$work/small.txt")"
"$bin" eval --checkpoint "$work/small" --metrics "$work/small.json" > /dev/null ||
  fail "eval (small val): exit $?"
[ "$(json "$work/small.json" loss)" = "$(json "$work/small.jsonl" final_val_loss)" ] ||
  fail "15 windows: eval $(json "$work/small.json" loss), train $(json "$work/small.jsonl" final_val_loss)"

# --per-token: window 0's losses average to its loss as a batch of one
"$bin" eval --checkpoint "$work/ckpt" --per-token "$work/pt.json" --top 3 --batches 1 \
  --set train.batch_size=1 --set train.micro_batches=1 --metrics "$work/w0.json" > /dev/null ||
  fail "eval --per-token: exit $?"
$py - "$work/pt.json" "$work/w0.json" <<'PY' || fail "per-token JSON"
import json, sys
d = json.load(open(sys.argv[1]))
w0 = json.loads(open(sys.argv[2]).read())["loss"]
assert len(d["ids"]) == len(d["losses"]) == len(d["targets"]) == len(d["top"]) == 64, d.keys()
assert d["ids"][1:] == d["targets"][:-1], "targets are the ids shifted by one"
mean = sum(d["losses"]) / 64
assert abs(mean - d["model_loss"]) < 1e-5 and abs(mean - w0) < 1e-5, (mean, d["model_loss"], w0)
assert all(len(t) == 3 and t[0]["logit"] >= t[1]["logit"] >= t[2]["logit"] for t in d["top"])
PY

# a Hugging Face folder evaluates as its checkpoint; --text as bytes and --shards of the same
printf 'In the beginning God created the heaven and the earth.\n%.0s' $(seq 60) > "$work/text.txt"
"$bin" export-hf "$work/hf" --checkpoint "$work/ckpt" > /dev/null || fail "export-hf: exit $?"
"$bin" eval --checkpoint "$work/ckpt" --text "$work/text.txt" --metrics "$work/t1.json" \
  > "$work/t1.txt" || fail "eval --text: exit $?"
grep -q "through bytes (no --tokenizer), 3300 tokens" "$work/t1.txt" || fail "--text: $(cat "$work/t1.txt")"
"$bin" eval --hf "$work/hf" --config "$cfg" --text "$work/text.txt" --metrics "$work/t2.json" \
  > /dev/null || fail "eval --hf --text: exit $?"
close "$(json "$work/t1.json" loss)" "$(json "$work/t2.json" loss)" 1e-6 ||
  fail "the folder ($(json "$work/t2.json" loss)) and its checkpoint ($(json "$work/t1.json" loss)) differ"
$py - "$work/text.txt" "$work/text.bin" <<'PY' # the same bytes as an llm.c shard, by hand
import struct, sys
data = open(sys.argv[1], "rb").read()
header = [20240520, 1, len(data)] + [0] * 253
open(sys.argv[2], "wb").write(struct.pack("<256i", *header) + struct.pack("<%dH" % len(data), *data))
PY
"$bin" eval --checkpoint "$work/ckpt" --shards "$work/text.bin" --metrics "$work/t3.json" \
  > /dev/null || fail "eval --shards: exit $?"
[ "$(json "$work/t3.json" loss)" = "$(json "$work/t1.json" loss)" ] ||
  fail "--shards ($(json "$work/t3.json" loss)) and --text ($(json "$work/t1.json" loss)) of the same bytes differ"

# a validation split shorter than one window is refused, not averaged into NaN
if "$bin" train --config "$cfg" --set train.steps=2 --set optim.warmup_steps=1 \
  --set data.markov_val_tokens=30 > "$work/r.txt" 2>&1; then
  fail "train with a 30-token validation split was accepted"
fi
grep -qF "evaluation: expected at least seq_len + 1 = 65 tokens in the validation split" "$work/r.txt" ||
  fail "30 validation tokens: $(cat "$work/r.txt")"

# text through bytes only for a 256-token model; a larger vocabulary needs its tokenizer
"$bin" train --config "$cfg" --set train.steps=1 --set optim.warmup_steps=1 --set train.eval_batches=1 \
  --set model.vocab_size=320 --set train.checkpoint_every=1 \
  --set train.checkpoint_dir=\""$work/v320"\" > /dev/null || fail "train (vocab 320): exit $?"

# refusals that say what to do
expect_refusal() { # message, then the command's arguments
  local message=$1
  shift
  if "$bin" eval "$@" > "$work/r.txt" 2>&1; then fail "eval $* was accepted"; fi
  grep -qF -- "$message" "$work/r.txt" || fail "eval $*: $(cat "$work/r.txt")"
}
expect_refusal "the model is the checkpoint's" --checkpoint "$work/ckpt" --set model.n_layer=3
expect_refusal "expected one of --checkpoint DIR" --batches 1
expect_refusal "found both" --checkpoint "$work/ckpt" --hf "$work/hf"
expect_refusal "--tokenizer goes with --text" --checkpoint "$work/ckpt" --tokenizer "$work"
expect_refusal "the model's vocabulary has 320 tokens, so its text goes through the tokenizer" \
  --checkpoint "$work/v320" --text "$work/text.txt"
# an unknown command is named, with the commands there are
if "$bin" evaluate > "$work/r.txt" 2>&1; then fail "tinyscale evaluate was accepted"; fi
grep -qF "expected a command, found 'evaluate', which is none; the commands are bench, train, eval," \
  "$work/r.txt" || fail "tinyscale evaluate: $(cat "$work/r.txt")"
if "$bin" bench tarin > "$work/r.txt" 2>&1; then fail "tinyscale bench tarin was accepted"; fi
grep -qF "tinyscale bench: expected a command, found 'tarin'" "$work/r.txt" ||
  fail "tinyscale bench tarin: $(cat "$work/r.txt")"
echo "eval: ok"
