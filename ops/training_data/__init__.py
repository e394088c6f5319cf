"""From pairs to the training HDF5: the sentencepiece model from a bounded sample, then every pair
encoded and packed."""
