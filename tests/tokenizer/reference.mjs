// The reference encoder of tests/tokenizer/check_reference: js-tiktoken (pinned in package.json)
// with GPT-2's ranks. Reads a UTF-8 file, prints its ids separated by spaces on one line.
// Special tokens written in the text are ordinary text here, as in `tinyscale data encode`.
// Usage: node tests/tokenizer/reference.mjs FILE
import { readFileSync } from "node:fs";
import { Tiktoken } from "js-tiktoken/lite";
import gpt2 from "js-tiktoken/ranks/gpt2";

const text = readFileSync(process.argv[2], "utf8");
const encoder = new Tiktoken(gpt2);
process.stdout.write(encoder.encode(text, [], []).join(" ") + "\n");
