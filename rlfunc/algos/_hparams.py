"""Settings as data: numeric hyperparameters an ``update`` reads from ``state["hparams"]``.

DESIGN.md ("Populations and scale-out", settings as data): a numeric setting
that does not change shapes may live in the training state as a 0-dim tensor,
``state["hparams", name]``, where ``name`` is the :class:`Config` field it
replaces (``critic_lr``, ``gamma``, ``tau``, ...). ``torch.vmap`` then batches
it like any other input, so the members of a population
(:mod:`rlfunc.core.population`) can differ in it while sharing one static
``Config``. Each algorithm module lists the fields its ``update`` reads this
way in ``HPARAMS``. An absent entry (or no ``hparams`` at all, what ``init``
returns) is the Config's Python float, on exactly the code path a single run
takes without this mechanism, so default runs stay bit-identical.

Learning rates go through :meth:`rlfunc.core.optim.Adam.learning_rate` with the
state's rate as ``base`` (a config's schedule is rescaled to start from it).
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from rlfunc.core.optim import Adam


def of(state: TensorDict) -> TensorDict | None:
    """``state["hparams"]``, or ``None`` when the state holds no settings as data."""
    return state["hparams"] if "hparams" in state.keys() else None


def setting(hparams: TensorDict | None, config, name: str) -> float | torch.Tensor:
    """``hparams[name]`` when present, else the Config's ``name`` (a Python number)."""
    if hparams is not None and name in hparams.keys():
        return hparams[name]
    return getattr(config, name)


def entry(hparams: TensorDict | None, name: str) -> torch.Tensor | None:
    """``hparams[name]`` (a tensor) when present, else ``None`` (the Config's value applies)."""
    if hparams is not None and name in hparams.keys():
        return hparams[name]
    return None


def rate(opt: Adam, opt_state: TensorDict, hparams: TensorDict | None, name: str) -> float | torch.Tensor | None:
    """The ``lr=`` to pass to ``opt.step``: ``None`` (the optimizer's own, float or scheduled)
    without ``hparams[name]``; with it, that rate (its schedule rescaled to start from it)."""
    base = entry(hparams, name)
    return None if base is None else opt.learning_rate(opt_state, base)


def carry(new_state: TensorDict, hparams: TensorDict | None) -> TensorDict:
    """``new_state`` with the settings carried over unchanged (no entry added when there are none)."""
    if hparams is not None:
        new_state["hparams"] = hparams
    return new_state
