#!/usr/bin/env bash
# Every place a command writes is checked before any work (label app): a checkpoint folder, a
# --metrics or --trace file of `train`, `eval`'s --metrics and --per-token, `export-hf`'s and
# `data prepare`'s output folder. Each unwritable path (under a regular file, so that even root
# cannot write it) is refused before the first step, naming the key or flag; the same command with
# a writable path then runs (the fix the message asks for works). Usage: write_probes.sh TINYSCALE SRC
set -euo pipefail
bin=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "write_probes: $*" >&2; exit 1; }
touch "$work/file"
bad="$work/file/sub" # a path inside a regular file: no one can create it
cfg="$src/configs/tiny.toml"
run=(--config "$cfg" --set train.steps=4 --set optim.warmup_steps=1 --set train.eval_batches=1)

refused() { # message, then the command
  local message=$1
  shift
  if "$bin" "$@" > "$work/out.txt" 2>&1; then fail "accepted: $*"; fi
  grep -qF -- "$message" "$work/out.txt" || fail "$*: $(cat "$work/out.txt")"
  if grep -q "^step " "$work/out.txt"; then fail "trained before refusing: $*"; fi
}

refused "train.checkpoint_dir: expected a folder that can be created and written, found that '$bad/ckpt' cannot be created" \
  train "${run[@]}" --set train.checkpoint_every=2 --set train.checkpoint_dir=\""$bad/ckpt"\"
"$bin" train "${run[@]}" --set train.checkpoint_every=2 \
  --set train.checkpoint_dir=\""$work/ckpt"\" > /dev/null || fail "a writable checkpoint folder was refused"
refused "train --metrics: expected the folder of '$bad/m.jsonl' to exist" \
  train "${run[@]}" --metrics "$bad/m.jsonl"
"$bin" train "${run[@]}" --metrics "$work/m.jsonl" > /dev/null || fail "a writable --metrics was refused"
refused "train --trace: expected the folder of '$bad/t.json' to exist" \
  train "${run[@]}" --dp 2 --trace "$bad/t.json"
"$bin" train "${run[@]}" --dp 2 --trace "$work/t.json" > /dev/null || fail "a writable --trace was refused"
refused "train --trace: expected a file path, found the folder" \
  train "${run[@]}" --dp 2 --trace "$work"
refused "eval --metrics: expected the folder of '$bad/e.json' to exist" \
  eval --checkpoint "$work/ckpt" --metrics "$bad/e.json"
refused "eval --per-token: expected the folder of '$bad/p.json' to exist" \
  eval --checkpoint "$work/ckpt" --per-token "$bad/p.json"
"$bin" eval --checkpoint "$work/ckpt" --batches 1 --metrics "$work/e.json" \
  --per-token "$work/p.json" > /dev/null || fail "writable eval outputs were refused"
refused "export-hf (the folder the output goes in): expected a folder that can be created and written" \
  export-hf "$bad/hf" --checkpoint "$work/ckpt"
"$bin" export-hf "$work/hf" --checkpoint "$work/ckpt" > /dev/null || fail "a writable export was refused"
echo "some text to prepare" > "$work/text.txt"
if [ -f "$src/tokenizers/gpt2/vocab.json" ]; then
  refused "data prepare (the folder the output goes in): expected a folder that can be created" \
    data prepare "$work/text.txt" --tokenizer "$src/tokenizers/gpt2" --out "$bad/shards"
fi
echo "write_probes: ok"
