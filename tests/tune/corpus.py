"""A tiny synthetic corpus the packaged model is poor at: every note uses the same sentence
shapes, and only two invented names tell the notes apart. BM25 sees the names; MiniLM mostly
sees the shared shape, so the routes disagree and tuning has something to learn."""

from __future__ import annotations

import random

TEMPLATES = [
    "The {a} valve on the {b} rig was replaced after the spring inspection.",
    "Operators of the {b} rig report that the {a} valve drifts when the pressure rises.",
    "A spare {a} valve for the {b} rig is kept in the north storage room.",
    "The {b} rig logs every adjustment of the {a} valve in its maintenance book.",
    "Training for the {a} valve on the {b} rig takes two afternoons with a supervisor.",
    "Nobody may open the {a} valve of the {b} rig without a signed permit.",
]
_SYLLABLES = [
    "zor",
    "vex",
    "quil",
    "mab",
    "trin",
    "oph",
    "dral",
    "kesh",
    "yun",
    "plo",
    "gar",
    "sef",
]


def _name(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(3))


def notes(count: int, seed: int = 7) -> dict[str, str]:
    """`count` notes of four sentences each, keyed by a file name."""
    rng = random.Random(seed)
    out = {}
    for i in range(count):
        a, b = _name(rng), _name(rng)
        sentences = rng.sample(TEMPLATES, 4)
        body = " ".join(s.format(a=a, b=b) for s in sentences)
        out[f"note{i:03d}.txt"] = body + "\n"
    return out
