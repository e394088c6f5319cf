"""Small generated corpora that look like real English, German and English paraphrases.

Sentences are built from templates over real words (subject, verb, object, place), so
fastText's language ID recognises them and the paper's filters see realistic lengths. Every
generator is seeded; the same arguments give the same lines.
"""

from __future__ import annotations

import random

SUBJECTS = [
    ("the old man", "der alte Mann"),
    ("my sister", "meine Schwester"),
    ("the young teacher", "der junge Lehrer"),
    ("our neighbour", "unser Nachbar"),
    ("the little girl", "das kleine Mädchen"),
    ("his brother", "sein Bruder"),
    ("the doctor", "der Arzt"),
    ("every child", "jedes Kind"),
    ("the farmer", "der Bauer"),
    ("her friend", "ihre Freundin"),
]
VERBS = [
    ("reads", "liest"),
    ("buys", "kauft"),
    ("finds", "findet"),
    ("sees", "sieht"),
    ("carries", "trägt"),
    ("loves", "liebt"),
    ("writes", "schreibt"),
    ("brings", "bringt"),
]
OBJECTS = [
    ("a long letter", "einen langen Brief"),
    ("the red book", "das rote Buch"),
    ("fresh bread", "frisches Brot"),
    ("a small house", "ein kleines Haus"),
    ("the black dog", "den schwarzen Hund"),
    ("a beautiful picture", "ein schönes Bild"),
    ("the new car", "das neue Auto"),
    ("warm milk", "warme Milch"),
    ("an old newspaper", "eine alte Zeitung"),
]
PLACES = [
    ("in the garden", "im Garten"),
    ("at the station", "am Bahnhof"),
    ("in the city", "in der Stadt"),
    ("after school", "nach der Schule"),
    ("every morning", "jeden Morgen"),
    ("in the kitchen", "in der Küche"),
    ("on sunday", "am Sonntag"),
    ("near the river", "in der Nähe des Flusses"),
]
PARAPHRASE_VERBS = {
    "reads": "is reading",
    "buys": "purchases",
    "finds": "discovers",
    "sees": "notices",
    "carries": "is carrying",
    "loves": "really likes",
    "writes": "is writing",
    "brings": "is bringing",
}


def english_german(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """``n`` aligned English / German sentences (repeats are possible, as in real corpora)."""
    rng = random.Random(seed)
    english, german = [], []
    for _ in range(n):
        s, v, o, p = (rng.choice(words) for words in (SUBJECTS, VERBS, OBJECTS, PLACES))
        english.append(f"{s[0]} {v[0]} {o[0]} {p[0]}.".capitalize())
        german.append(f"{s[1]} {v[1]} {o[1]} {p[1]}.".capitalize())
    return english, german


def paranmt_lines(n: int, seed: int = 0) -> list[str]:
    """``n`` ParaNMT-format lines ``reference<TAB>paraphrase<TAB>score`` in English."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        s, v, o, p = (rng.choice(words)[0] for words in (SUBJECTS, VERBS, OBJECTS, PLACES))
        s2 = rng.choice(SUBJECTS)[0] if rng.random() < 0.2 else s
        reference = f"{s} {v} {o} {p}.".capitalize()
        paraphrase = f"{p}, {s2} {PARAPHRASE_VERBS[v]} {o}.".capitalize()
        lines.append(f"{reference}\t{paraphrase}\t{rng.uniform(0.3, 0.95):.3f}")
    return lines
