"""The speed machinery behind :meth:`PSPModel.embed <psp_core.inference.model.PSPModel.embed>`:
sentence means from cached words' sums (``word_vectors``), the sums themselves (``pooling``: the
compiled loop ``_sums.c``, torch, scipy or numpy), forked workers for large inputs
(``multiprocess_embed``) and output arrays mapped up front (``prefaulted_arrays``). What they
compute is defined, plainly, by :mod:`psp_core.inference.reference`; the tests hold every path
equal to it. (The word cache they build on is the tokenizer's:
:mod:`psp_core.tokenization.word_piece_cache`.)"""
