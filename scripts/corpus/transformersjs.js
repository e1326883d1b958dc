// transformersjs.js encodes the tokenizer corpus with transformers.js (the
// @lenml/tokenizers build), a second reference besides Hugging Face
// tokenizers, and times it.
//
//   node scripts/corpus/transformersjs.js LENML_DIST_MAIN_JS TOKENIZER_JSON TOKENIZER_CONFIG_JSON CORPUS_JSONL OUT_JSONL
//
// LENML_DIST_MAIN_JS is dist/main.js of the @lenml/tokenizers package;
// CORPUS_JSONL is uncompressed (go run ./scripts/corpus -unpack DIR).
// OUT_JSONL gets one {"ids": [...]} line per corpus line.
"use strict";
const fs = require("fs");

const [lib, tokPath, cfgPath, corpusPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error("usage: transformersjs.js LENML_DIST_MAIN_JS TOKENIZER_JSON TOKENIZER_CONFIG_JSON CORPUS_JSONL OUT_JSONL");
  process.exit(2);
}
const { TokenizerLoader } = require(lib);
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(tokPath, "utf8")),
  tokenizerConfig: JSON.parse(fs.readFileSync(cfgPath, "utf8")),
});
const texts = fs.readFileSync(corpusPath, "utf8").split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l).text);

const out = [];
let tokens = 0;
let t0 = process.hrtime.bigint();
for (const text of texts) {
  const ids = tok.encode(text, { add_special_tokens: false });
  tokens += ids.length;
  out.push(JSON.stringify({ ids }));
}
let secs = Number(process.hrtime.bigint() - t0) / 1e9;
console.log(`first pass: ${texts.length} chunks, ${tokens} tokens in ${secs.toFixed(3)} s: ${Math.round(tokens / secs)} tokens/s`);
// A second pass, with every cache warm.
t0 = process.hrtime.bigint();
for (const text of texts) tok.encode(text, { add_special_tokens: false });
secs = Number(process.hrtime.bigint() - t0) / 1e9;
console.log(`second pass: ${Math.round(tokens / secs)} tokens/s`);
fs.writeFileSync(outPath, out.join("\n") + "\n");
