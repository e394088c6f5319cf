"""Batched fastText prediction in numpy for supervised hierarchical-softmax models (``lid.176``).

fastText's ``predict`` spends most of its time on each token's character n-grams: it builds and
hashes every n-gram of every out-of-vocabulary token, in every line, again and again. Text
repeats its tokens, so :class:`BatchPredictor` does that work once per distinct token instead:

* tokens: the line split on fastText's whitespace (Arrow ``ascii_split_whitespace``: space,
  ``\\t \\n \\v \\f \\r``), each distinct token of a batch once (Arrow ``dictionary_encode``);
* per distinct token, cached across batches: the sum of its input-matrix rows and their number.
  The ids are what fastText's ``getSubwords`` gives (the word's id if it is in the vocabulary,
  then its character n-grams that survived the model's pruning), computed for a whole batch of
  new tokens at once by :mod:`ops.language_id.fasttext_subwords`; the rows come from fastText
  (``get_input_vector``, which also decodes a quantized ``.ftz`` matrix);
* the hidden vector of a line is the mean of the rows of all its tokens' ids plus the
  end-of-sentence token, as in fastText's ``computeHidden``;
* the output layer is fastText's Huffman tree over the labels (``buildTree``, rebuilt here from
  the label counts), walked from the root by always taking the more probable child.

**Exactness.** The hidden vector is summed in another order than fastText's (float rounding,
about 1e-7 relative), so a probability can differ from fastText's by about 1e-6. The answer
given here is fastText's own, line for line, because:

* the greedy walk finds the most probable label whenever that label has probability above
  one half (every other label then has less, so at each node the branch holding it is the
  more probable one), and fastText's depth-first search returns that same label: fastText
  scores with ``log(p + 1e-5)``, which makes the leaves' total slightly above 1, and
  :attr:`BatchPredictor.sure` (0.5 plus that excess plus 1e-3) keeps well clear of it;
* every line whose greedy probability is below :attr:`BatchPredictor.sure`, or within 1e-4 of
  one of the caller's ``thresholds``, is predicted again by fastText itself, as are the rare
  lines that fastText reads differently from a plain whitespace split: a token ``</s>`` (fastText
  ends the line there) or a NUL character (a separator for fastText, not for Arrow).

Lines with a token longer than ``MAX_TOKEN_BYTES`` (Chinese and Japanese text, which has no
spaces; URLs) also go to fastText: such a token hardly ever comes back, so caching it gains
nothing.

So labels, and decisions against the thresholds, are fastText's; probabilities of the lines
not sent back to fastText agree with it to about 1e-6.

:meth:`BatchPredictor.label_probability` gives the probability of one given label (not only
the top one) from the same hidden vectors: the product of the branch probabilities on the path
from the root to that label's leaf, which is what fastText's ``predict(k=-1, threshold=0)``
reports for it, with the same hand-back to fastText for the lines it cannot vouch for and those
near the caller's thresholds.

Models this does not cover (another loss, word n-grams, a quantized output matrix) are
refused by :func:`batch_predictor`, which then returns None, and the caller uses fastText's
``predict`` for every line.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ops.language_id.fasttext_subwords import SubwordIndex, subword_index, utf8_view
from ops.pairs.uint64_table import KeyIndex, splitmix64

log = logging.getLogger(__name__)

EOS = "</s>"
LABEL_PREFIX = "__label__"
# how close a probability may come to one of the caller's thresholds before fastText decides
THRESHOLD_GUARD = 1e-4
# longer tokens are not cached: their lines go to fastText
MAX_TOKEN_BYTES = 64
# distinct tokens cached per predictor; when full the cache starts again (frequent tokens come
# straight back): 16 floats + a count + ~20 bytes of table per token, about 90 MB
MAX_CACHED_TOKENS = 1 << 20
# new tokens whose subword rows are computed together
NEW_TOKEN_SLICE = 8192


def batch_predictor(model, path: str | Path | None = None) -> BatchPredictor | None:
    """A :class:`BatchPredictor` for the loaded fastText ``model`` (read from ``path``, whose
    n-gram pruning map it reads), or None (with the reason logged at debug level) when the
    model is not one it reproduces exactly."""
    args = model.f.getArgs()
    reasons = []
    if args.model.name != "supervised":
        reasons.append(f"model {args.model.name}")
    if args.loss.name != "hs":
        reasons.append(f"loss {args.loss.name} (only hierarchical softmax)")
    if args.wordNgrams != 1:
        reasons.append(f"wordNgrams {args.wordNgrams}")
    if model.f.isQuant() and args.qout:
        reasons.append("a quantized output matrix")
    if model.get_word_id(EOS) < 0:
        reasons.append(f"no {EOS} word")
    if reasons:
        log.debug("fastText's own predict is used: the model has %s", ", ".join(reasons))
        return None
    return BatchPredictor(model, subwords=subword_index(model, path) if path else None)


class BatchPredictor:
    """Most likely label (its index in ``model.labels``) and probability for each line.

    Args:
        model: a loaded fastText supervised model with a hierarchical-softmax output, word
            n-grams 1 and a dense output matrix (see :func:`batch_predictor`).
        subwords: computes the subword ids of new tokens a batch at a time; None asks
            fastText's ``getSubwords`` one token at a time (slower).
        max_cached_tokens: distinct tokens kept between batches.
    """

    def __init__(
        self,
        model,
        *,
        subwords: SubwordIndex | None = None,
        max_cached_tokens: int = MAX_CACHED_TOKENS,
    ) -> None:
        self._model = model
        self._subwords = subwords
        self._output = np.array(model.f.getOutputMatrix(), dtype=np.float64)
        _, counts = model.get_labels(include_freq=True)
        self.n_labels = len(counts)
        self._label_index = {label: i for i, label in enumerate(model.labels)}
        self._left, self._right, depth = huffman_tree(np.asarray(counts, dtype=np.int64))
        self._root = 2 * self.n_labels - 2
        self._paths = label_paths(self._left, self._right, self.n_labels)
        # fastText's std_log(p) = log(p + 1e-5): the two branches of a node sum to 1 + 2e-5, so
        # all leaves together to at most (1 + 2e-5)^depth
        excess = (1 + 2e-5) ** depth - 1
        self.sure = 0.5 * (1 + excess) + 1e-3
        self.dim = self._output.shape[1]
        self._max_cached = max_cached_tokens
        self._tokens = KeyIndex(capacity=1 << 16)
        self._sums = np.zeros((1 << 16, self.dim), dtype=np.float32)
        self._counts = np.zeros(1 << 16, dtype=np.int64)
        self._unusual = np.zeros(1 << 16, dtype=bool)  # "</s>" or holds a NUL
        self._rows = np.zeros((0, self.dim), dtype=np.float32)
        self._have_row = np.zeros(0, dtype=bool)
        eos = np.array([model.get_word_id(EOS)], dtype=np.int64)
        self._eos_row = self._input_rows(eos)[0].astype(np.float64)

    def predict(
        self, lines: pa.Array, thresholds: Sequence[float] = ()
    ) -> tuple[np.ndarray, np.ndarray]:
        """Label index (int64, into ``model.labels``) and probability (float32) per line.

        ``lines`` is an Arrow string array without nulls or newlines inside a line (fastText
        reads one line at a time). Lines whose probability lands within
        1e-4 of one of ``thresholds`` are decided by fastText itself.
        """
        hidden, redo = self._hidden(lines)
        labels, probs = self._walk(hidden)
        redo |= ~(probs >= self.sure)  # NaN too: fastText then raises on it, as it does
        for threshold in thresholds:
            redo |= np.abs(probs - threshold) < THRESHOLD_GUARD
        probs = probs.astype(np.float32)
        if redo.any():
            rows = np.flatnonzero(redo)
            labels[rows], probs[rows] = self._fasttext(lines.take(pa.array(rows)))
        return labels, probs

    def label_probability(
        self, lines: pa.Array, label: int, thresholds: Sequence[float] = ()
    ) -> np.ndarray:
        """The probability (float32) fastText gives label ``label`` (its index in
        ``model.labels``) on each line, whether or not it is the top label: the product of
        the branch probabilities on the path from the root to that label's leaf, scored as
        fastText does (``log(p + 1e-5)`` per branch). What ``predict(k=-1, threshold=0)``
        reports for it, 0 where fastText leaves it out (below about 1e-5).

        The lines :meth:`predict` hands to fastText, and those within 1e-4 of one of
        ``thresholds``, get fastText's own figure.
        """
        hidden, redo = self._hidden(lines)
        nodes, right = self._paths[label]
        with np.errstate(over="ignore"):
            branch = 1.0 / (1.0 + np.exp(-(hidden @ self._output[nodes - self.n_labels].T)))
        branch = np.where(right, branch, 1.0 - branch)
        probs = np.exp(np.log(branch + 1e-5).sum(axis=1))
        redo |= np.isnan(probs)
        for threshold in thresholds:
            redo |= np.abs(probs - threshold) < THRESHOLD_GUARD
        probs = probs.astype(np.float32)
        if redo.any():
            rows = np.flatnonzero(redo)
            subset = lines.take(pa.array(rows)).to_pylist()
            probs[rows] = fasttext_label_probability(self._model, subset, label)
        return probs

    def _hidden(self, lines: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """fastText's hidden vector of each line (float64, from the token cache) and the lines
        it must predict itself: a token too long to cache, ``</s>`` or a NUL character."""
        n = len(lines)
        tokens = pc.ascii_split_whitespace(lines)
        per_line = tokens.value_lengths().to_numpy(zero_copy_only=False)
        line_of_token = np.repeat(np.arange(n), per_line)
        flat = tokens.flatten()
        size = pc.binary_length(flat).to_numpy(zero_copy_only=False)
        # a long token (a line of Chinese, a URL) hardly ever comes back: fastText does its line
        too_long = size > MAX_TOKEN_BYTES
        cached = (size > 0) & ~too_long
        flat, line_of = flat.filter(pa.array(cached)), line_of_token[cached]
        encoded = pc.dictionary_encode(flat)
        token_ids = self._token_ids(encoded.dictionary)[encoded.indices.to_numpy()]

        n_ids = np.bincount(line_of, weights=self._counts[token_ids], minlength=n) + 1
        sums = np.zeros((n, self.dim), dtype=np.float64)
        if len(line_of):
            starts = np.flatnonzero(np.r_[True, line_of[1:] != line_of[:-1]])
            sums[line_of[starts]] = np.add.reduceat(
                self._sums[token_ids], starts, axis=0, dtype=np.float64
            )
        hidden = (sums + self._eos_row) / n_ids[:, None]
        redo = np.zeros(n, dtype=bool)
        redo[line_of_token[too_long]] = True
        unusual = self._unusual[token_ids]
        if unusual.any():
            redo[line_of[unusual]] = True
        return hidden, redo

    def _walk(self, hidden: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """From the root to a leaf, always into the more probable child; the leaf's score is
        fastText's sum of log(p + 1e-5) along the path."""
        n, n_labels = len(hidden), self.n_labels
        node = np.full(n, self._root, dtype=np.int64)
        score = np.zeros(n, dtype=np.float64)
        active = np.arange(n)
        while len(active):
            here = node[active]
            logit = np.einsum("ij,ij->i", hidden[active], self._output[here - n_labels])
            with np.errstate(over="ignore"):  # exp(-logit) = inf: right = 0, as in fastText
                right = 1.0 / (1.0 + np.exp(-logit))
            go_right = right > 0.5
            score[active] += np.log(np.where(go_right, right, 1.0 - right) + 1e-5)
            here = np.where(go_right, self._right[here], self._left[here])
            node[active] = here
            active = active[here >= n_labels]
        return node, np.exp(score)

    def _fasttext(self, lines: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """fastText's own prediction, for the lines the greedy walk cannot vouch for."""
        labels, probs = self._model.f.multilinePredict(
            [line + "\n" for line in lines.to_pylist()], 1, 0.0, "strict"
        )
        index = self._label_index
        return (
            np.fromiter((index[label[0]] for label in labels), np.int64, len(labels)),
            np.concatenate(probs).astype(np.float32),
        )

    # ---- the token cache

    def _token_ids(self, words: pa.Array) -> np.ndarray:
        """Cache rows of the distinct tokens ``words``, computing the unseen ones."""
        if not len(words):
            return np.zeros(0, dtype=np.int64)
        keys = token_hashes(words)
        if len(self._tokens) + len(keys) > self._max_cached:
            self._tokens.clear()
        ids, new = self._tokens.ids(keys)
        if new.any():
            new_ids, new_words = ids[new], words.filter(pa.array(new))
            # a slice at a time: the n-gram arrays of a slice stay in the CPU caches, and a
            # worker's first batches (most of their tokens new) need a small working memory
            for start in range(0, len(new_ids), NEW_TOKEN_SLICE):
                stop = start + NEW_TOKEN_SLICE
                self._add_tokens(new_ids[start:stop], new_words[start:stop])
        return ids

    def _add_tokens(self, ids: np.ndarray, words: pa.Array) -> None:
        needed = int(ids.max()) + 1
        if needed > len(self._counts):
            size = max(needed, 2 * len(self._counts))
            self._sums = _resized(self._sums, size)
            self._counts = _resized(self._counts, size)
            self._unusual = _resized(self._unusual, size)
        flat, lengths = self._subword_ids(words)
        # a label-like token adds nothing to fastText's line
        label_like = pc.starts_with(words, LABEL_PREFIX).to_numpy(zero_copy_only=False)
        if label_like.any():
            flat = flat[~np.repeat(label_like, lengths)]
            lengths = np.where(label_like, 0, lengths)
        sums = np.zeros((len(words), self.dim), dtype=np.float32)
        if len(flat):
            has = np.flatnonzero(lengths)
            starts = np.r_[0, np.cumsum(lengths[has])[:-1]]
            sums[has] = np.add.reduceat(self._input_rows(flat), starts, axis=0)
        self._sums[ids] = sums
        self._counts[ids] = lengths
        unusual = pc.or_(pc.equal(words, EOS), pc.match_substring(words, "\0"))
        self._unusual[ids] = unusual.to_numpy(zero_copy_only=False)

    def _subword_ids(self, words: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """fastText's subword ids of each token: ``(flat ids, per-token counts)``."""
        if self._subwords is not None:
            return self._subwords.ids(words)
        get_subwords = self._model.f.getSubwords
        id_lists = [get_subwords(word, "strict")[1] for word in words.to_pylist()]
        lengths = np.fromiter(map(len, id_lists), np.int64, len(id_lists))
        flat = np.concatenate([np.asarray(ids_, dtype=np.int64) for ids_ in id_lists])
        return flat, lengths

    def _input_rows(self, ids: np.ndarray) -> np.ndarray:
        """Rows of the input matrix (decoded by fastText, cached as float32)."""
        if len(ids) and int(ids.max()) >= len(self._have_row):
            size = max(int(ids.max()) + 1, 2 * len(self._have_row))
            self._rows = _resized(self._rows, size)
            self._have_row = _resized(self._have_row, size)
        missing = np.unique(ids[~self._have_row[ids]])
        for row in missing.tolist():
            self._rows[row] = self._model.get_input_vector(row)
        self._have_row[missing] = True
        return self._rows[ids]


def fasttext_label_probability(model, lines: Sequence[str], label: int) -> np.ndarray:
    """fastText's own probability (float32) of label ``label`` (its index in ``model.labels``)
    on each of ``lines`` (free of newlines): ``predict(k=-1, threshold=0)``, which leaves out
    labels below about 1e-5 (0 for those)."""
    name = model.labels[label]
    labels, probs = model.f.multilinePredict([line + "\n" for line in lines], -1, 0.0, "strict")
    return np.fromiter(
        (
            float(p[names.index(name)]) if name in names else 0.0
            for names, p in zip(map(list, labels), probs, strict=True)
        ),
        np.float32,
        len(labels),
    )


def _resized(array: np.ndarray, size: int) -> np.ndarray:
    grown = np.zeros((size, *array.shape[1:]), dtype=array.dtype)
    grown[: len(array)] = array
    return grown


def huffman_tree(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """fastText's ``HierarchicalSoftmaxLoss::buildTree``: the left and right child of every
    node (leaves ``0..n-1`` are the labels, sorted by decreasing count; internal nodes
    ``n..2n-2``, the root last) and the depth of the deepest leaf."""
    n = len(counts)
    count = np.full(2 * n - 1, 10**15, dtype=np.int64)
    count[:n] = counts
    left = np.full(2 * n - 1, -1, dtype=np.int64)
    right = np.full(2 * n - 1, -1, dtype=np.int64)
    leaf, node = n - 1, n
    for i in range(n, 2 * n - 1):
        smallest = []
        for _ in range(2):
            if leaf >= 0 and count[leaf] < count[node]:
                smallest.append(leaf)
                leaf -= 1
            else:
                smallest.append(node)
                node += 1
        left[i], right[i] = smallest
        count[i] = count[smallest[0]] + count[smallest[1]]
    depth = np.zeros(2 * n - 1, dtype=np.int64)
    for i in range(2 * n - 2, n - 1, -1):  # parents come after their children
        depth[left[i]] = depth[right[i]] = depth[i] + 1
    return left, right, int(depth[:n].max(initial=0))


def label_paths(
    left: np.ndarray, right: np.ndarray, n_labels: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """For each label (leaf ``i``), the internal nodes from the root down to it and whether
    the path takes each one's right child (fastText's ``binary`` code)."""
    parent = np.full(len(left), -1, dtype=np.int64)
    is_right = np.zeros(len(left), dtype=bool)
    internal = np.arange(n_labels, len(left))
    parent[left[internal]] = internal
    parent[right[internal]] = internal
    is_right[right[internal]] = True
    paths = []
    for leaf in range(n_labels):
        nodes, turns, node = [], [], leaf
        while parent[node] >= 0:
            nodes.append(parent[node])
            turns.append(is_right[node])
            node = parent[node]
        paths.append((np.array(nodes[::-1], dtype=np.int64), np.array(turns[::-1], dtype=bool)))
    return paths


def token_hashes(words: pa.Array) -> np.ndarray:
    """A 64-bit hash of each (non-empty) string of ``words``, vectorized over its UTF-8 bytes:
    the mixed sum of one mixed value per (byte, position) plus the length. Two different
    tokens share a hash with probability about 2^-64."""
    starts, lengths, data = utf8_view(words)
    position = np.arange(len(data), dtype=np.int64) - np.repeat(starts, lengths)
    per_byte = splitmix64((data.astype(np.uint64) << np.uint64(32)) | position.astype(np.uint64))
    with np.errstate(over="ignore"):
        summed = np.add.reduceat(per_byte, starts) if len(data) else per_byte
        return splitmix64(summed ^ (lengths.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)))
