"""Bitext mining with ratio-margin scoring over exact (blocked) or faiss k-NN search.

    from psp_core import load_model
    from psp_core.bitext_mining import mine, mine_files

    model = load_model("models/de")
    pairs = mine(model.embed(english), model.embed(german), mode="intersection", threshold=1.05)
    mine_files(model, "news.en", "news.de", "mined.tsv")   # score<TAB>en<TAB>de, best first

Not to be confused with :mod:`psp_core.training.negative_mining`, the hard-negative mining of training.
"""

from psp_core.bitext_mining.files import MiningReport, mine_files
from psp_core.bitext_mining.margin import (
    MODES,
    MinedPairs,
    Neighbourhoods,
    margin_best,
    mine,
    neighbourhoods,
    retrieve,
)
from psp_core.bitext_mining.search import BACKENDS, nearest_neighbours, resolve_backend

__all__ = [
    "BACKENDS",
    "MODES",
    "MinedPairs",
    "MiningReport",
    "Neighbourhoods",
    "margin_best",
    "mine",
    "mine_files",
    "nearest_neighbours",
    "neighbourhoods",
    "resolve_backend",
    "retrieve",
]
