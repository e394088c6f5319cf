"""Using a trained model: ``load_model``, ``embed`` and ``score``, the word-cache fast path,
several processes for large inputs, and output arrays mapped up front."""
