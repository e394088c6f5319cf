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


# --- a loopback world: the OPUS server's corpora, a ParaNMT zip, an evaluation directory ---

#: Pairs per corpus of the registry's de mixture, and noise mixed into OpenSubtitles.
DE_CORPORA = {
    "OpenSubtitles": ("v2018", 240),
    "Tanzil": ("v1", 120),
    "GlobalVoices": ("v2017q3", 80),
}
NOT_GERMAN = 12  # pairs whose "German" side is English (language ID drops them)
TOO_SHORT = 6  # pairs whose English side has two words (the length filter drops them)


def de_corpus_lines(corpus: str, seed: int) -> tuple[list[str], list[str]]:
    """One corpus's English/German lines; OpenSubtitles carries the noise."""
    _, size = DE_CORPORA[corpus]
    english, german = english_german(size, seed=seed)
    if corpus == "OpenSubtitles":
        noise_en, _ = english_german(NOT_GERMAN, seed=seed + 100)
        english += noise_en
        german += [line.replace(".", "!") for line in noise_en]
        english += ["Yes sir."] * TOO_SHORT
        german += ["Jawohl, mein Herr."] * TOO_SHORT
    return english, german


#: A registry of the languages a loopback world serves: de (publish_de's corpora) and en
#: (the served ParaNMT zip); tests append their own tables.
DE_EN_REGISTRY = """
[languages.de]
source = "opus"
corpora = [
    { name = "OpenSubtitles", version = "v2018" },
    { name = "Tanzil", version = "v1" },
    { name = "GlobalVoices", version = "v2017q3" },
]
[languages.en]
source = "paranmt"
"""


def publish_de(server, build_moses_zip) -> int:
    """Serve the registry's de corpora from ``server``; return the number of line pairs."""
    total = 0
    for seed, (corpus, (version, _)) in enumerate(DE_CORPORA.items()):
        english, german = de_corpus_lines(corpus, seed)
        server.add_corpus(
            corpus, version, "en", "de", build_moses_zip(corpus, "en", "de", english, german)
        )
        total += len(english)
    return total


def paranmt_zip(n: int, seed: int = 0) -> bytes:
    """``para-nmt-50m.zip`` holding ``n`` generated lines."""
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("para-nmt-50m/para-nmt-50m.txt", "\n".join(paranmt_lines(n, seed)) + "\n")
    return buffer.getvalue()


def write_eval_dir(directory) -> None:
    """A tiny evaluation directory in the layout of shared/data/eval: STS 2012, STS 2017 en-en,
    STS Benchmark dev and Tatoeba deu-eng, from the same generated sentences."""
    from pathlib import Path

    directory = Path(directory)
    rng = random.Random(5)
    rows = []
    for line in paranmt_lines(30, seed=11):
        reference, paraphrase, _ = line.split("\t")
        rows.append(f"{rng.uniform(3.5, 5):.2f}\t{reference}\t{paraphrase}")
    references = [line.split("\t")[0] for line in paranmt_lines(60, seed=12)]
    for first, second in zip(references[::2], references[1::2], strict=True):
        rows.append(f"{rng.uniform(0, 2.5):.2f}\t{first}\t{second}")
    sts = "\n".join(rows) + "\n"
    for relative in ("sts17/en-en.tsv", "sts/2012/MSRvid.tsv", "stsb/dev.tsv"):
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(sts, encoding="utf-8")
    english, german = english_german(40, seed=13)
    tatoeba = directory / "tatoeba"
    tatoeba.mkdir(parents=True, exist_ok=True)
    (tatoeba / "deu-eng.deu").write_text("\n".join(german) + "\n", encoding="utf-8")
    (tatoeba / "deu-eng.eng").write_text("\n".join(english) + "\n", encoding="utf-8")


ZH_SUBJECTS = ["老人", "我的姐姐", "年轻的老师", "我们的邻居", "小女孩", "他的哥哥", "医生", "农民"]
ZH_VERBS = ["读", "买", "找到", "看见", "拿着", "喜欢", "写", "带来"]
ZH_OBJECTS = ["一封长信", "那本红色的书", "新鲜的面包", "一座小房子", "那只黑狗", "一幅漂亮的画"]
ZH_PLACES = ["在花园里", "在火车站", "在城市里", "放学以后", "每天早上", "在厨房里"]


def english_chinese(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """``n`` aligned English / Chinese (simplified, unsegmented) sentences."""
    rng = random.Random(seed)
    english, chinese = [], []
    for _ in range(n):
        i, j, k, m = (
            rng.randrange(len(words)) for words in (ZH_SUBJECTS, ZH_VERBS, ZH_OBJECTS, ZH_PLACES)
        )
        english.append(
            f"{SUBJECTS[i][0]} {VERBS[j][0]} {OBJECTS[k][0]} {PLACES[m][0]}.".capitalize()
        )
        chinese.append(f"{ZH_SUBJECTS[i]}{ZH_PLACES[m]}{ZH_VERBS[j]}{ZH_OBJECTS[k]}。")
    return english, chinese
