// Writes, from npm's reference tokenizers (js-tiktoken, tiktoken, llama3-tokenizer-js), the tokenizer files weft reads and the ids the
// references give for the corpus: node export.cjs <corpus> <out dir>
//   <name>.tiktoken         js-tiktoken's ranks for cl100k_base, o200k_base, r50k_base
//   llama3/tokenizer.json   llama3-tokenizer-js's vocabulary and merges in Hugging Face's form
//   llama3.tiktoken         the same vocabulary as a rank file (Meta's tokenizer.model form)
//   <case>.ids              the references' ids for the corpus, separated by spaces
//   <name>-wasm.ids         tiktoken's own (Rust, compiled to WebAssembly: npm's tiktoken)
//   timing.json             each reference's encoding seconds (for docs/PERFORMANCE.md)
const fs = require("fs");
const path = require("path");
const { Tiktoken } = require("js-tiktoken/lite");

const [corpusPath, out] = process.argv.slice(2);
const text = fs.readFileSync(corpusPath, "utf8");
fs.mkdirSync(path.join(out, "llama3"), { recursive: true });
const timing = {};

function timed(name, encode) {
  const start = process.hrtime.bigint();
  const ids = encode();
  timing[name] = Number(process.hrtime.bigint() - start) / 1e9;
  fs.writeFileSync(path.join(out, name + ".ids"), ids.join(" ") + "\n");
}

for (const name of ["cl100k_base", "o200k_base", "r50k_base"]) {
  const ranks = require(`js-tiktoken/ranks/${name}`);
  const enc = new Tiktoken(ranks);
  const lines = [];
  for (const [rank, bytes] of [...enc.textMap.entries()].sort((a, b) => a[0] - b[0])) {
    lines.push(Buffer.from(bytes).toString("base64") + " " + rank);
  }
  fs.writeFileSync(path.join(out, name + ".tiktoken"), lines.join("\n") + "\n");
  timed(name + "-text", () => enc.encode(text, [], []));
  if (name === "cl100k_base") timed(name + "-specials", () => enc.encode(text, "all", []));
  const wasm = require("tiktoken").get_encoding(name);
  timed(name + "-wasm", () => Array.from(wasm.encode_ordinary(text)));
  wasm.free();
}

const llama3 = require("llama3-tokenizer-js/bundle/commonjs-llama3-tokenizer-with-baked-data.cjs");
const tok = llama3.llama3Tokenizer;
const ordinary = 128000;
const vocab = {};
tok.vocabById.forEach((t, id) => { if (id < ordinary) vocab[t] = id; });
const merges = [...tok.merges.entries()].sort((a, b) => a[1] - b[1]).map(([pair]) => pair);
const added = tok.vocabById.slice(ordinary).map((content, i) => ({
  id: ordinary + i, content, single_word: false, lstrip: false, rstrip: false,
  normalized: false, special: true,
}));
const pattern = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
fs.writeFileSync(path.join(out, "llama3", "tokenizer.json"), JSON.stringify({
  version: "1.0", truncation: null, padding: null, added_tokens: added, normalizer: null,
  pre_tokenizer: { type: "Sequence", pretokenizers: [
    { type: "Split", pattern: { Regex: pattern }, behavior: "Isolated", invert: false },
    { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
  ] },
  post_processor: null,
  decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
  model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null,
           end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: true,
           vocab, merges },
}));
// The rank file: each token's bytes (ByteLevel's code points back to bytes) and its id.
const byteOf = {};
{
  let next = 256;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    byteOf[String.fromCodePoint(printable ? b : next++)] = b;
  }
}
const rankLines = [];
tok.vocabById.slice(0, ordinary).forEach((t, id) => {
  const bytes = Buffer.from(Array.from(t, (c) => byteOf[c]));
  rankLines.push(bytes.toString("base64") + " " + id);
});
fs.writeFileSync(path.join(out, "llama3.tiktoken"), rankLines.join("\n") + "\n");
timed("llama3-text", () => tok.encode(text, { bos: false, eos: false, specialTokenRegex: /(?!)/g }));
timed("llama3-specials", () => tok.encode(text, { bos: false, eos: false }));
fs.writeFileSync(path.join(out, "timing.json"), JSON.stringify(timing, null, 1) + "\n");
