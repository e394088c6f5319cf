"""Sentences to sentencepiece ids, exactly as the encoder sees them: the tokenizer and its
pre-tokenizers, the cache of each distinct word's pieces and when it pays, what a serialized
sentencepiece model says, and id lists as flat CSR arrays."""
