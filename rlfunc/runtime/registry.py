"""Names of the algorithms the runtime can train, and how to train each.

Adding an algorithm: write ``rlfunc/algos/<name>.py`` (Config, init, update,
act), pick or write a learner in :mod:`rlfunc.runtime.learners`, and add an
entry here with the algorithm's ``train.learning_starts`` and
``train.replay_size`` defaults (in its learner's units: ``learning_starts_unit``
and ``replay_size_unit`` of :mod:`rlfunc.runtime.learners`). Nothing else in
the runtime names algorithms.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

__all__ = ["AlgoEntry", "ALGOS", "get_algo"]


@dataclasses.dataclass(frozen=True)
class AlgoEntry:
    name: str
    module: str  # import path of the pure algorithm module
    config_cls_name: str = "Config"
    config_defaults: dict = dataclasses.field(default_factory=dict)
    train_defaults: dict = dataclasses.field(default_factory=dict)
    """``train.learning_starts`` and ``train.replay_size`` when a config leaves them out (the paper's)."""
    learner: str = "rlfunc.runtime.learners:TransitionLearner"
    description: str = ""
    uses_data: bool = False  # learns from prior data (the run config's ``data`` section)

    @property
    def algo(self):
        return importlib.import_module(self.module)

    @property
    def config_cls(self):
        return getattr(self.algo, self.config_cls_name)

    @property
    def learner_cls(self):
        """The learner class (:mod:`rlfunc.runtime.learners`); its ``learning_starts_unit`` and
        ``replay_size_unit`` name what those ``train`` keys count, and its ``check_run_config`` is
        what :func:`rlfunc.runtime.config.build_config` checks across sections."""
        mod, _, cls = self.learner.partition(":")
        return getattr(importlib.import_module(mod), cls)

    def make_learner(self, *args: Any, **kwargs: Any):
        return self.learner_cls(self, *args, **kwargs)


# train.learning_starts / train.replay_size defaults, in each learner's units (learning_starts_unit, replay_size_unit).
_REDQ_REPLAY = {"learning_starts": 5_000, "replay_size": 1_000_000}  # REDQ's official start_steps and replay_size
_DRQN_REPLAY = {"learning_starts": 1_000, "replay_size": 50_000}  # env steps, windows (small-scale: rlfunc.algos.drqn)

ALGOS: dict[str, AlgoEntry] = {
    "redq": AlgoEntry(
        "redq",
        "rlfunc.algos.redq",
        train_defaults=_REDQ_REPLAY,
        description="REDQ (Chen et al. 2021): N=10 critics, M=2 target subset, UTD 20",
    ),
    "sac": AlgoEntry(
        "sac",
        "rlfunc.algos.redq",
        config_defaults={"num_critics": 2, "subset_size": 2, "updates_per_step": 1, "target_entropy": "auto"},
        train_defaults=_REDQ_REPLAY,
        description="SAC (Haarnoja et al. 2018) as REDQ with N=2, M=2, G=1, target entropy -|A|",
    ),
    "rlpd": AlgoEntry(
        "rlpd",
        "rlfunc.algos.rlpd",
        learner="rlfunc.runtime.learners:PriorDataLearner",
        train_defaults={"learning_starts": 5_000, "replay_size": 1_000_000},  # the official locomotion --start_training
        uses_data=True,
        description=(
            "RLPD (Ball et al. 2023): SAC with 10 LayerNorm critics, M=2 target subset, UTD 20, "
            "every mini-batch half prior data"
        ),
    ),
    "drqn": AlgoEntry(
        "drqn",
        "rlfunc.algos.drqn",
        learner="rlfunc.runtime.learners:SequenceLearner",
        train_defaults=_DRQN_REPLAY,
        description="DRQN (Hausknecht & Stone 2015): LSTM Q-network, zero-state 10-step windows, plain max target",
    ),
    "r2d2": AlgoEntry(
        "r2d2",
        "rlfunc.algos.r2d2",
        learner="rlfunc.runtime.learners:R2D2Learner",
        train_defaults={"learning_starts": 50_000, "replay_size": 100_000},  # windows: Acme's min/max_replay_size
        description=(
            "R2D2 (Kapturowski et al. 2019): prioritized sequence replay with stored state and burn-in, "
            "n-step double Q with value rescaling, one epsilon per actor"
        ),
    ),
    "dqn": AlgoEntry(
        "dqn",
        "rlfunc.algos.drqn",
        config_defaults={"core": "mlp", "sequence_length": 1},
        learner="rlfunc.runtime.learners:SequenceLearner",
        train_defaults=_DRQN_REPLAY,
        description=(
            "feed-forward DQN (Mnih et al. 2015) as DRQN's memory-less control: the LSTM replaced by a "
            "ReLU layer of the same width, one-step windows (uniform transitions)"
        ),
    ),
    "drqv2": AlgoEntry(
        "drqv2",
        "rlfunc.algos.drqv2",
        learner="rlfunc.runtime.learners:PixelLearner",
        # agent steps (official num_seed_frames 4000 at action repeat 2), frames (official replay_buffer_size)
        train_defaults={"learning_starts": 2_000, "replay_size": 1_000_000},
        description=(
            "DrQ-v2 (Yarats et al. 2021): pixels, conv encoder trained by the critic, random shifts, "
            "DDPG with twin critics, 3-step returns, scheduled exploration noise"
        ),
    ),
}


def get_algo(name: str) -> AlgoEntry:
    try:
        return ALGOS[name]
    except KeyError:
        raise ValueError(f"Unknown algo {name!r}; choose one of {', '.join(sorted(ALGOS))}.") from None
