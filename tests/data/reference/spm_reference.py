#!/usr/bin/env python3
"""SentencePiece's own Python module as the reference: trains a BPE and a unigram model on the
corpus with the settings weft-tokenizer train uses, and writes its ids for the corpus, one
line of the corpus at a time (as documents are encoded) and whole.
Usage: spm_reference.py <corpus> <out dir>"""
import json
import os
import sys
import time

import sentencepiece as spm


def main():
    corpus, out = sys.argv[1], sys.argv[2]
    with open(corpus, encoding="utf-8", newline="") as f:
        text = f.read()
    timing = {}
    for kind in ("bpe", "unigram"):
        prefix = os.path.join(out, "spm_" + kind)
        spm.SentencePieceTrainer.train(
            input=corpus, model_prefix=prefix, vocab_size=4000, model_type=kind,
            character_coverage=0.9995, byte_fallback=True, input_sentence_size=2000000,
            shuffle_input_sentence=True, num_threads=2, unk_id=0, bos_id=1, eos_id=2,
            pad_id=-1, normalization_rule_name="identity", remove_extra_whitespaces=False,
            allow_whitespace_only_pieces=True, split_digits=True, minloglevel=1)
        sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
        start = time.perf_counter()
        ids = sp.encode(text)
        timing["spm_" + kind] = time.perf_counter() - start
        with open(os.path.join(out, "spm_" + kind + ".ids"), "w") as f:
            f.write(" ".join(map(str, ids)) + "\n")
    with open(os.path.join(out, "timing_spm.json"), "w") as f:
        json.dump(timing, f, indent=1)


if __name__ == "__main__":
    main()
