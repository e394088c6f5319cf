"""What each pair's text goes through on its way to the vocabulary: the paper's filters
(length, score, trigram overlap) and Chinese word segmentation."""
