"""The invented-names domain of the encoder bench: made-up names that split into many pieces, in sentences about them.

Names are `common.make_words` (seeded), kept where the checkpoint's tokenizer splits them into 3 to 6
pieces. Each name is a person, a place or a software project (in turn) and its sentences are frames of
its kind with the name in them: the fit corpus uses FIT frames, the held-out text HELD frames, two
disjoint sets written apart (no held-out sentence is in the fit corpus, nor its frame); the held-out
frames also hold a known name of their kind (sentences without new words, which must embed as before). Some frames hold
the name twice or beside another name, some are short (where one word weighs most in a mean pooling).
Everything is seeded: the same names and sentences on every machine.
"""

from __future__ import annotations

import random
from pathlib import Path

from bench import common

SEED = 31
PIECES = (3, 6)  # the names kept split into this many pieces, inclusive
FIT_PER_NAME = 8  # fit-corpus sentences per name (the fit reads `--fit-contexts` 8 per word by default)
HELD_PER_NAME = 5

KINDS = ("person", "place", "project")
# kind -> frames; "{}" the name, "{other}" another name of the same kind
FIT = {
    "person": (
        "{} was born in a small village near the coast.", "Everyone in the office knew {} as a careful reader.",
        "{} wrote three books about the history of the railway.", "The committee asked {} to lead the new survey.",
        "Last winter {} moved to the city to study medicine.", "{} and {other} founded the chess club together.",
        "According to {}, the results were published too early.", "The letter from {} arrived two weeks late.",
        "{} spent most of the summer repairing the old boat.", "Nobody expected {} to win the election.",
        "In her speech, {} thanked the volunteers.", "{} is a nurse at the regional hospital.",
        "The painting was sold by {} in 1987.", "Ask {}.", "{} laughed.", "{} taught {other} how to sail.",
    ),
    "place": (
        "{} is a quiet town on the northern bank of the river.", "The train to {} leaves every hour.",
        "Most people in {} work in fishing or farming.", "We spent a week in {} last spring.",
        "The road from {} to {other} was closed by snow.", "{} has a famous market every Saturday.",
        "The population of {} doubled in twenty years.", "Her family left {} during the war.",
        "A new bridge connects {} with the island.", "The mayor of {} opened the library.",
        "{} lies at the foot of a volcano.", "Welcome to {}.", "Flights to {} were cancelled.",
        "Tourists come to {} for the beaches.", "The museum in {} holds old maps of {}.",
        "{} is colder than {other} in winter.",
    ),
    "project": (
        "{} is an open source library for parsing log files.", "Install {} with pip before running the tests.",
        "The latest release of {} fixes a memory leak.", "{} reads the configuration from a YAML file.",
        "We replaced {other} with {} in our build pipeline.", "The documentation of {} explains every option.",
        "{} supports Python 3.9 and later.", "A bug in {} corrupted the cache on Windows.",
        "The maintainers of {} review pull requests every week.", "Run {} with the verbose flag to see the errors.",
        "{} exports the results as CSV or JSON.", "Try {}.", "{} crashed again.",
        "The {} plugin adds syntax highlighting.", "{} is faster than {other} on large inputs.",
        "Version 2 of {} dropped the old API.",
    ),
}
HELD = {
    "person": (
        "{} has lived next to the bakery for forty years.", "My cousin met {} at a conference in the spring.",
        "The award went to {} for her work on bridges.", "{} smiled and closed the door.",
        "I have never spoken to {}.", "{} and {other} argued about the budget.", "Thanks, {}!",
        "The police questioned {} about the missing car.",
    ),
    "place": (
        "The old castle of {} attracts many visitors.", "It rained every day we were in {}.",
        "{} is known for its cheese and its wine.", "The bus stops in {} and then in {other}.",
        "I grew up in {}.", "A storm hit {} on Tuesday night.", "{} has two schools and one hospital.",
        "Where is {}?",
    ),
    "project": (
        "{} can convert images between several formats.", "The tests of {} fail on older compilers.",
        "I started using {} last month.", "{} depends on {other} for networking.",
        "Please update {} to the newest version.", "{} handles errors in a clear way.",
        "Read the {} tutorial first.", "Is {} still maintained?",
    ),
}


KNOWN = ("Anna", "Paris", "Python")  # a known name per kind: held-out sentences without new words, checked unchanged


def pieces(tok, name: str) -> int:
    return len(tok(name, add_special_tokens=False)["input_ids"])


def choose_names(ckpt: Path, n: int) -> list[str]:
    """`n` made-up names (seeded) that `ckpt`'s tokenizer splits into PIECES pieces, none a word of its vocabulary."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ckpt)
    vocab = {w.lower() for w in tok.get_vocab()}
    out: list[str] = []
    for w in common.make_words(20 * n, SEED):
        if w.lower() not in vocab and PIECES[0] <= pieces(tok, w) <= PIECES[1]:
            out.append(w)
            if len(out) == n:
                return out
    raise RuntimeError(f"only {len(out)} made-up names split into {PIECES[0]}-{PIECES[1]} pieces")


def _sentences(names: list[str], frames: dict, per_name: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i, name in enumerate(names):
        kind = KINDS[i % len(KINDS)]
        peers = [m for j, m in enumerate(names) if j % len(KINDS) == i % len(KINDS) and m != name]
        for f in rng.sample(frames[kind], per_name):
            out.append(f.replace("{other}", rng.choice(peers)).replace("{}", name))
    rng.shuffle(out)
    return out


def build(work: Path, ckpt: Path, n: int) -> tuple[Path, Path, Path]:
    """(fit corpus, held-out text, tokens file) under `work` for `n` names: one sentence a paragraph."""
    work.mkdir(parents=True, exist_ok=True)
    names = choose_names(ckpt, n)
    fit, held, tokens = work / f"names-fit-{n}.txt", work / f"names-held-{n}.txt", work / f"names-{ckpt.name}-{n}.txt"
    fit.write_text("\n\n".join(_sentences(names, FIT, FIT_PER_NAME, SEED)) + "\n", encoding="utf-8")
    known = [f.replace("{other}", k).replace("{}", k) for kind, k in zip(KINDS, KNOWN) for f in HELD[kind]]
    held.write_text("\n\n".join(_sentences(names, HELD, HELD_PER_NAME, SEED + 1) + known) + "\n", encoding="utf-8")
    tokens.write_text("\n".join(names) + "\n", encoding="utf-8")
    return fit, held, tokens


def recipe(n: int) -> str:
    return (f"{n} made-up names (bench/names.py, seed {SEED}) split into {PIECES[0]}-{PIECES[1]} pieces, each a person, "
            f"place or project; fit corpus {FIT_PER_NAME} sentences a name, held-out {HELD_PER_NAME} from other frames")
