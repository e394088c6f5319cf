"""Trained models on disk: the bundle format and its checksums, the model card, exports to
sentence-transformers and model2vec, a language's versions and the promotion gate between them."""
