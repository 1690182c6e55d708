"""The tune options the tuning tests share, sized for the tiny corpus of `corpus.py`."""

from __future__ import annotations

from recalld.tune import train
from recalld.tune.run import TuneOptions

# Small enough for a few seconds a step on two cores, large enough for the gate to judge.
OPTIONS = TuneOptions(
    queries=200,
    eval_share=0.25,
    distractors=200,
    train=train.TrainSettings(
        learning_rate=5e-5,
        batch_size=8,
        max_steps=6,
        max_seconds=300,
        max_epochs=6,  # a handful of triples: several passes, or a step or two is all
        checkpoint_every=2,
        threads=1,
    ),
)
