// The reference side of tests/tokenizer/check_tokenizer_json: @huggingface/tokenizers (pinned in
// package.json; the tokenizers of transformers.js) built, as transformers.js's
// AutoTokenizer.from_pretrained builds it, from a folder's tokenizer.json and
// tokenizer_config.json. For each text of a JSON array it prints one JSON line: the ids of
// encode (special tokens written in the text become their ids; GPT-2 adds no token around the
// text) and the text that decode makes of those ids.
// Usage: node tests/tokenizer/tokenizer_json.mjs TOKENIZER_JSON TOKENIZER_CONFIG_JSON TEXTS_JSON
import { readFileSync } from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";

const read = (file) => JSON.parse(readFileSync(file, "utf8"));
const [tokenizerJson, configJson, textsJson] = process.argv.slice(2);
const tokenizer = new Tokenizer(read(tokenizerJson), read(configJson));
for (const text of read(textsJson)) {
  const ids = tokenizer.encode(text).ids;
  const decoded = ids.length > 0 ? tokenizer.decode(ids) : "";
  process.stdout.write(JSON.stringify({ ids, decoded }) + "\n");
}
