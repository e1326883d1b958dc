// transformersjs.js encodes the tokenizer corpus with transformers.js (the
// @lenml/tokenizers build), a second reference besides Hugging Face
// tokenizers, and times it.
//
//   node scripts/corpus/transformersjs.js LENML_DIST_MAIN_JS TOKENIZER_JSON TOKENIZER_CONFIG_JSON CORPUS_JSONL OUT_JSONL [qwen35]
//
// With "qwen35" the Qwen2/Qwen3 split pattern is replaced by Qwen3.5's
// (combining marks join letters) before loading.
//
// LENML_DIST_MAIN_JS is dist/main.js of the @lenml/tokenizers package;
// CORPUS_JSONL is uncompressed (go run ./scripts/corpus -unpack DIR).
// OUT_JSONL gets one {"ids": [...]} line per corpus line.
"use strict";
const fs = require("fs");

const [lib, tokPath, cfgPath, corpusPath, outPath, variant] = process.argv.slice(2);
const QWEN2 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN35 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
if (!outPath) {
  console.error("usage: transformersjs.js LENML_DIST_MAIN_JS TOKENIZER_JSON TOKENIZER_CONFIG_JSON CORPUS_JSONL OUT_JSONL");
  process.exit(2);
}
const { TokenizerLoader } = require(lib);
const tokJSON = JSON.parse(fs.readFileSync(tokPath, "utf8"));
if (variant === "qwen35") {
  const split = tokJSON.pre_tokenizer.pretokenizers.find((p) => p.type === "Split" && p.pattern.Regex === QWEN2);
  if (!split) throw new Error("no Qwen2/Qwen3 split pattern");
  split.pattern.Regex = QWEN35;
}
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: tokJSON,
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
