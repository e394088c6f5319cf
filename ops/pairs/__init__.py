"""Pair files (the Parquet format between the corpus stages) and what is done to them as a
whole: lowercased exact deduplication, the reference's per-corpus caps, the out-of-core
shuffle, the pairs held back for development, the multilingual union, and which pairs a
model's lineage trained on; the seeded pair keys these share."""
