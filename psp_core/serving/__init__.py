"""Serving embeddings over HTTP: the OpenAI embeddings API (:mod:`psp_core.serving.app`) over
models that follow their registry's promoted version (:mod:`psp_core.serving.models`)."""
