#!/usr/bin/env bash
# End-to-end check of chapter 02's real-text path (label app): `data prepare` of two books of the
# King James Bible with GPT-2's tokenizer (the same shards whether cut into 1 KiB chunks on 2
# threads or not; refusals for an existing folder, invalid UTF-8 and empty input), a short
# training run on the shards, `sample`, `export-hf --tokenizer` (every file and field of the GPT-2
# convention, tokenizer.json's by tests/tokenizer/check_tokenizer_json; into an existing folder
# only with --force, replacing it whole) and `train --init-from`
# the exported folder, which starts from exactly the exported
# model: its validation loss after one step at lr 1e-12 equals the exporting run's, on one rank
# and on dp 2. Usage: text_pipeline.sh TINYSCALE SRC
set -euo pipefail
bin=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "text_pipeline: $*" >&2; exit 1; }
tok="$src/tokenizers/gpt2"
[ -f "$tok/vocab.json" ] || fail "no GPT-2 tokenizer in $tok: run scripts/fetch_gpt2_tokenizer (scripts/setup runs it)"
command -v bible >/dev/null || fail "no \`bible\` reader (Debian package bible-kjv): run scripts/setup"

mkdir -p "$work/kjv"
bible -f gen1:1-50:26 </dev/null | sed 's/^[^ ]* //' > "$work/kjv/1-genesis.txt"
bible -f exo1:1-40:38 </dev/null | sed 's/^[^ ]* //' > "$work/kjv/2-exodus.txt"
"$bin" data prepare "$work/kjv" --tokenizer "$tok" --out "$work/shards" --name kjv \
  --val-fraction 0.05 > "$work/prepare.txt" || fail "data prepare: exit $?"
grep -q "^prepared 2 document(s)" "$work/prepare.txt" || fail "prepare: $(cat "$work/prepare.txt")"
"$bin" data prepare "$work/kjv" --tokenizer "$tok" --out "$work/chunked" --name kjv \
  --val-fraction 0.05 --chunk-kb 1 --threads 2 > /dev/null || fail "chunked prepare: exit $?"
for f in kjv_train_000000.bin kjv_val_000000.bin; do
  cmp -s "$work/shards/$f" "$work/chunked/$f" || fail "$f differs when cut into 1 KiB chunks"
done
if "$bin" data prepare "$work/kjv" --tokenizer "$tok" --out "$work/shards" > "$work/again.txt" 2>&1; then
  fail "prepare overwrote an existing folder without --force"
fi
grep -q "pass --force to replace it" "$work/again.txt" || fail "no clear refusal: $(cat "$work/again.txt")"
printf 'ok \xff bad' > "$work/bad.txt"
if "$bin" data prepare "$work/bad.txt" --tokenizer "$tok" --out "$work/bad" > "$work/bad.log" 2>&1; then
  fail "prepare accepted invalid UTF-8"
fi
grep -q "bad.txt' is not valid UTF-8: an invalid byte sequence at byte 3" "$work/bad.log" ||
  fail "invalid UTF-8: $(cat "$work/bad.log")"
[ ! -e "$work/bad" ] || fail "a failed prepare left an output folder"
"$bin" data prepare "$work/bad.txt" "$work/kjv" --tokenizer "$tok" --out "$work/bad" \
  --invalid-utf8 replace > "$work/replaced.txt" || fail "prepare --invalid-utf8 replace: exit $?"
grep -q "^replaced 1 invalid UTF-8 sequence" "$work/replaced.txt" || fail "no replacement reported"

common=(--config "$src/configs/kjv.toml" --set "data.path=\"$work/shards/kjv_train_*.bin\""
        --set "data.val_path=\"$work/shards/kjv_val_*.bin\"" --set train.eval_batches=4)
"$bin" train "${common[@]}" --set train.steps=20 --set optim.warmup_steps=5 --set train.eval_every=20 \
  --set train.checkpoint_every=20 --set "train.checkpoint_dir=\"$work/ckpt\"" \
  --metrics "$work/a.jsonl" > "$work/train.txt" || fail "train: exit $?"
"$bin" sample --checkpoint "$work/ckpt" --tokenizer "$tok" --prompt "And God said" --tokens 12 \
  --top-k 40 --temperature 0.8 --seed 3 > "$work/sample.txt" 2> "$work/sample.err" ||
  fail "sample: exit $?"
head -c 12 "$work/sample.txt" | grep -q "^And God said" || fail "sample: $(cat "$work/sample.txt")"
[ "$(wc -c < "$work/sample.txt")" -gt 20 ] || fail "sample wrote nothing after the prompt"
"$bin" sample --checkpoint "$work/ckpt" --tokenizer "$tok" --prompt "And God said" --tokens 12 \
  --top-k 40 --temperature 0.8 --seed 3 2>/dev/null | cmp -s - "$work/sample.txt" ||
  fail "sample: the same seed wrote different text"

"$bin" export-hf "$work/hf" --checkpoint "$work/ckpt" --tokenizer "$tok" > /dev/null ||
  fail "export-hf: exit $?"
/usr/bin/python3 - "$work/hf" "$tok" <<'PY' || fail "the exported folder breaks the GPT-2 convention"
import json, sys
from pathlib import Path
d, tok = Path(sys.argv[1]), Path(sys.argv[2])
for f in ["config.json", "model.safetensors", "generation_config.json", "vocab.json", "merges.txt",
          "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]:
    assert (d / f).is_file(), f"missing {f}"
c = json.loads((d / "config.json").read_text())
assert c["model_type"] == "gpt2" and c["architectures"] == ["GPT2LMHeadModel"], c
assert c["bos_token_id"] == 50256 and c["eos_token_id"] == 50256, c
g = json.loads((d / "generation_config.json").read_text())
assert g == {"bos_token_id": 50256, "eos_token_id": 50256}, g
t = json.loads((d / "tokenizer_config.json").read_text())
assert t["tokenizer_class"] == "GPT2Tokenizer" and t["model_max_length"] == c["n_positions"], t
for key in ["bos_token", "eos_token", "unk_token"]:
    assert t[key] == "<|endoftext|>", t
assert t["add_prefix_space"] is False and t["clean_up_tokenization_spaces"] is False, t
s = json.loads((d / "special_tokens_map.json").read_text())
assert s == {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}, s
assert json.loads((d / "vocab.json").read_text()) == json.loads((tok / "vocab.json").read_text())
assert (d / "merges.txt").read_text() == (tok / "merges.txt").read_text()
PY

# sample --hf reads the folder's own tokenizer when --tokenizer is not given
"$bin" sample --hf "$work/hf" --prompt "And God said" --tokens 8 --seed 3 > "$work/own.txt" \
  2> "$work/own.err" || fail "sample --hf (the folder's tokenizer): exit $?"
grep -q "(the folder's tokenizer)" "$work/own.err" || fail "sample --hf: $(cat "$work/own.err")"
"$bin" sample --hf "$work/hf" --tokenizer "$tok" --prompt "And God said" --tokens 8 --seed 3 \
  2>/dev/null | cmp -s - "$work/own.txt" ||
  fail "sample --hf wrote other text with the folder's tokenizer than with --tokenizer"

# export-hf writes a whole folder: into an existing one only with --force, and then no file of
# the earlier export stays (a re-export without --tokenizer leaves no tokenizer files behind)
if "$bin" export-hf "$work/hf" --checkpoint "$work/ckpt" > "$work/again.txt" 2>&1; then
  fail "export-hf into an earlier export's folder was not refused"
fi
grep -q "found one with files in it" "$work/again.txt" || fail "export-hf's refusal: $(cat "$work/again.txt")"
cp -r "$work/hf" "$work/hf-kept"
"$bin" export-hf "$work/hf-kept" --checkpoint "$work/ckpt" --force > /dev/null ||
  fail "export-hf --force: exit $?"
[ "$(ls "$work/hf-kept" | tr '\n' ' ')" = "config.json model.safetensors " ] ||
  fail "export-hf --force left an earlier export's files: $(ls "$work/hf-kept" | tr '\n' ' ')"
ls "$work" | grep -q '\.tmp-\|\.old-' && fail "export-hf --force left a temporary folder: $(ls "$work")"
cmp -s "$work/hf/model.safetensors" "$work/hf-kept/model.safetensors" ||
  fail "export-hf --force wrote other weights than the first export"

want=$(/usr/bin/python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-2]["val_loss"])' "$work/a.jsonl")
init() { # name, then layout flags
  local name=$1
  shift
  "$bin" train "${common[@]}" --init-from "$work/hf" --set train.steps=1 --set optim.lr=1e-12 \
    --set optim.min_lr=1e-12 --set optim.warmup_steps=0 --set train.eval_every=1 \
    --set train.checkpoint_every=0 --metrics "$work/$name.jsonl" "$@" > "$work/$name.txt" ||
    fail "train --init-from ($name): exit $?"
  grep -q "^init: weights from the GPT-2 folder" "$work/$name.txt" || fail "$name: no init line"
  /usr/bin/python3 - "$work/$name.jsonl" "$want" "$name" <<'PY' || fail "--init-from ($name) did not start from the exported model"
import json, sys
got = [json.loads(l) for l in open(sys.argv[1])][0]["val_loss"]
want = float(sys.argv[2])
assert abs(got - want) <= 1e-6 * abs(want), f"{sys.argv[3]}: val loss {got}, exported model's {want}"
PY
}
init one
init dp2 --dp 2
echo "text_pipeline: prepare (chunked = whole), train, sample, export-hf with tokenizer and --init-from (one rank, dp 2) all ok"
