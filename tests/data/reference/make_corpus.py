#!/usr/bin/env python3
"""Writes the tokenizer test corpus: Tiny Shakespeare's lines interleaved, by a fixed seed,
with text that byte-level BPE and SentencePiece find hard: twelve scripts, emoji (ZWJ
sequences, skin tones, flags), long digit runs, whitespace runs (tabs, CRLF, trailing and
leading spaces, blank lines), contractions in any case, code, URLs, and special tokens' text.

It leaves out the few code points where Unicode regex engines disagree with JavaScript's
(U+0085, U+180E, U+FEFF for \\s; U+017F and U+212A for case folding), since the references
are JavaScript. Usage: make_corpus.py <tinyshakespeare.txt> <out>"""
import random
import sys

SNIPPETS = [
    "Καλημέρα κόσμε· η γλώσσα μου έδωσαν ελληνική.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "我能吞下玻璃而不伤身体。東京都渋谷区で会いましょう。",
    "나는 유리를 먹을 수 있어요. 그래도 아프지 않아요.",
    "أنا قادر على أكل الزجاج و هذا لا يؤلمني.",
    "אני יכול לאכול זכוכית וזה לא מזיק לי.",
    "मैं काँच खा सकता हूँ और मुझे उससे कोई चोट नहीं पहुंचती.",
    "ฉันกินกระจกได้ แต่มันไม่ทำให้ฉันเจ็บ",
    "Tôi có thể ăn thủy tinh mà không hại gì.",
    "Ich kann Glas essen, ohne mir zu schaden. Straße, Größe, Äpfel!",
    "Je peux manger du verre, ça ne me fait pas mal. Où est l'hôtel?",
    "Mogę jeść szkło i mi nie szkodzi. Zażółć gęślą jaźń.",
    "👋🏽 hello 👨‍👩‍👧‍👦 family 🇯🇵🇫🇷 flags 🧑🏿‍💻 coder ❤️‍🔥 ✨✨✨",
    "emoji run: 😀😃😄😁😆😅😂🤣🥲☺️😊😇🙂🙃😉😌😍🥰😘",
    "numbers 1234567890 3.14159265358979 1,000,000 -42 +7e-10 0x1F9A 2026-12-04",
    "DON'T WE'RE THEY'VE I'M SHE'LL HE'D it's You'Re we'Ll",
    "def f(x):\n\treturn x ** 2  # square\n\n\nif __name__ == '__main__':\n    print(f(3))",
    "for (int i = 0; i < n; ++i) { y[i] += a * x[i]; }  // axpy",
    "https://example.org/path?q=weft&lang=en#section-2 mail: someone@example.com",
    "<|endoftext|> <|eot_id|> <|begin_of_text|><|start_header_id|>user<|end_header_id|>",
    "tabs\t\tand\t spaces   mixed \t \t end",
    "line with trailing spaces    \r\nwindows line\r\n\r\nand more",
    "       leading spaces and\u00a0non-breaking\u2009thin\u3000ideographic spaces",
    "zero\u200bwidth joiner\u200d and soft\u00adhyphen, combining é (e\u0301) ñ (n\u0303)",
    "Ünïcödé ÀÉÎÕÜ àéîõü ÇçŒœÆæ ßẞ ĀāĒēĪīŌōŪū",
    "¡¿‽§¶†‡•…‰′″‴※⁂ «quotes» “curly” ‘single’ — dashes – ‐",
    "∀x∈ℝ: ∑ᵢ xᵢ² ≤ ∞ ⇒ ∫₀¹ f(x) dx ≈ π/4",
    "a" * 300 + " " + "ab" * 200,
    " " * 64 + "\n" * 5 + "\t" * 9 + "x",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!!!",
    "9" * 40 + " " + "12" * 30,
]


def main():
    source, out = sys.argv[1], sys.argv[2]
    with open(source, encoding="utf-8") as f:
        lines = f.read().split("\n")
    rng = random.Random(20261204)
    parts = []
    for line in lines:
        parts.append(line)
        if rng.random() < 0.25:
            parts.append(rng.choice(SNIPPETS))
        if rng.random() < 0.05:
            parts.append(" " * rng.randint(1, 12) + "\t" * rng.randint(0, 3))
    text = "\n".join(parts) + "\n" + "\n".join(SNIPPETS) + "\n"
    with open(out, "w", encoding="utf-8", newline="") as f:
        f.write(text)


if __name__ == "__main__":
    main()
