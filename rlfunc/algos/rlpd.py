"""RLPD: Reinforcement Learning with Prior Data (Ball, Smith, Kostrikov & Levine, ICML 2023).

RLPD is SAC with a REDQ-style critic ensemble, LayerNorm critics and
"symmetric sampling": every mini-batch is half prior (offline) data and half
online replay. The learning rule is REDQ's, so this module holds no second
copy of the SAC/REDQ math: :class:`Config` carries RLPD's defaults and
:func:`init`, :func:`update`, :func:`act` and :func:`draw_noise` delegate to
:mod:`rlfunc.algos.redq` with the REDQ config :meth:`Config.redq_config`
builds (``state["config"]`` is that REDQ config).

Defaults are the official code's (ikostrikov/rlpd: ``configs/rlpd_config.py``
on top of ``configs/sac_config.py``, ``rlpd/agents/sac/sac_learner.py``,
``train_finetuning.py`` with the README's locomotion flags):

* N = 10 critics, target = min over a random subset of M = 2 *target* critics,
  redrawn every critic step (``subsample_ensemble``);
* critics: ``Linear -> LayerNorm -> ReLU`` in every hidden layer, none on the
  output layer, none in the actor (``MLP(use_layer_norm=True,
  activate_final=True)`` + ``Dense(1)``); flax's LayerNorm epsilon 1e-6;
  xavier-uniform weights, zero biases; hidden 256-256;
* G = 20 critic steps per env step (``utd_ratio``), polyak ``tau = 0.005``
  after every critic step, then ONE actor step and ONE temperature step on
  the last mini-batch;
* actor loss ``mean(alpha log pi - mean over all N critics)``; temperature
  loss ``alpha * (entropy - target)`` (``alpha_loss="alpha"``) with the
  entropy of that actor step; target entropy ``-|A|/2``; initial temperature 1;
* backup entropy on (``backup_entropy=False`` for sparse-reward tasks);
* Adam 3e-4 everywhere, constant, batch 256, gamma 0.99 (``lr_schedule`` and
  ``actor_lr_schedule``/``critic_lr_schedule``/``alpha_lr_schedule`` are
  REDQ's schedule options, off by default; :mod:`rlfunc.algos.redq`);
* the offline ratio (0.5), offline pre-training (0 steps by default) and the
  dataset are run settings, not :class:`Config` fields: the ``data`` section
  of a run config (:mod:`rlfunc.runtime.config`) and
  :class:`rlfunc.replay.offline.MixedSampler`.

Where RLPD differs from this library's REDQ (:mod:`rlfunc.algos.redq`), each
a REDQ option that :meth:`Config.redq_config` switches on:

* **actor/temperature order** (``actor_after_critics=True``): the official
  RLPD ``update`` runs all G ``update_critic`` calls and only then
  ``update_actor`` on the last mini-batch, so the policy gradient uses the
  critics *after* the G-th critic step. The official REDQ code computes the
  policy loss before the last critic optimizer step (the critics as they were
  before it). The temperature step uses the same actor step's entropy in both;
* **critic loss reduction** (``critic_loss_reduction="mean"``): RLPD's loss is
  ``((qs - target_q) ** 2).mean()``, the mean over critics and rows; REDQ's
  is the sum over critics (N times larger; with Adam this changes only how
  the epsilon of the update compares with the gradient scale);
* **tanh log-probability** (``tanh_epsilon=None``): RLPD's policy is a TFP
  ``TransformedDistribution`` with the ``Tanh`` bijector, whose log-det is
  exact; REDQ's is ``log(1 - a^2 + 1e-6)``;
* **temperature loss** ``alpha * (H - target)`` (``alpha_loss="alpha"``) instead
  of ``-log_alpha * (log pi + target)``; **target entropy** ``-|A|/2`` instead
  of ``-|A|``; **LayerNorm** critics with ``eps = 1e-6``.

The target entropy term, subset and polyak rules, the discount mask
(``1 - terminated``; time-limit truncation bootstraps) and the initial
temperature are the same in both.

Where the official code does something else that no option here reproduces:

* prior data: the official ``D4RLDataset`` (``rlpd/data/d4rl_datasets.py``)
  reads ``d4rl.qlearning_dataset``, which drops every row whose ``timeouts``
  flag is set (and the file's last row) and takes each ``next_observations``
  from the next row; :mod:`rlfunc.replay.offline` keeps the timeout rows and
  bootstraps them from the file's own ``next_observations``. Only
  ``terminals`` stop the bootstrap in both;
* the warm-up: ``train_finetuning.py`` acts uniformly while ``i <
  start_training`` and first updates after storing transition ``i =
  start_training``, a policy step; the runtime first updates after the
  ``train.learning_starts``-th (uniform) transition;
* the README's AntMaze and Adroit runs: ``backup_entropy=False``, hidden
  256-256-256 and, for AntMaze, ``num_min_qs=1`` are this config's
  ``backup_entropy``, ``hidden_sizes`` and ``subset_size``; AntMaze's reward
  shift (``batch["rewards"] -= 1`` on every prior and online batch) is not
  offered.

Usage: exactly :mod:`rlfunc.algos.redq`'s calls with :class:`Config`; each
``[G, B]`` batch mixes prior and online rows
(:class:`rlfunc.replay.offline.MixedSampler`; a whole training script:
``rlfunc.examples.rlpd_pendulum``)::

    >>> import gymnasium as gym, torch
    >>> from tensordict import TensorDict
    >>> from rlfunc.algos import rlpd
    >>> config = rlpd.Config(hidden_sizes=(32, 32), updates_per_step=2, batch_size=8)
    >>> state = rlpd.init(config, gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (2,)), seed=0)
    >>> float(state["target_entropy"])                      # -|A| / 2
    -1.0
    >>> G, B = 2, 8
    >>> batch = TensorDict({"obs": torch.randn(G, B, 3), "action": torch.rand(G, B, 2) * 2 - 1,
    ...                     "reward": torch.randn(G, B), "next_obs": torch.randn(G, B, 3),
    ...                     "terminated": torch.zeros(G, B)}, batch_size=[G, B])
    >>> noise = rlpd.draw_noise(config, G, B, 2, generator=torch.Generator().manual_seed(0))
    >>> state, metrics = rlpd.update(state, batch, noise)
    >>> rlpd.act(state["params"], torch.zeros(4, 3), deterministic=True).shape
    torch.Size([4, 2])
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from tensordict import TensorDict

from rlfunc.algos import _checks, _inputs, redq
from rlfunc.core.optim import LRSchedule

__all__ = [
    "Config",
    "HPARAMS",
    "INIT_SETTINGS",
    "init",
    "update",
    "make_update",
    "make_population_update",
    "draw_noise",
    "act",
    "actor_apply",
]

HPARAMS = redq.HPARAMS
"""Settings as data (:mod:`rlfunc.core.population`): REDQ's (:data:`rlfunc.algos.redq.HPARAMS`:
``actor_lr``, ``critic_lr``, ``alpha_lr``, ``gamma``, ``tau``, ``init_alpha``), since :func:`update`
*is* :func:`rlfunc.algos.redq.update` and reads them from ``state["hparams"]``; each :class:`Config`
field of that name is passed unchanged to the REDQ config (:meth:`Config.redq_config`), so a
member holding one as data computes what its own config computes."""

INIT_SETTINGS = redq.INIT_SETTINGS
"""The fields :func:`init` turns into state tensors (:data:`rlfunc.algos.redq.INIT_SETTINGS`):
``target_entropy`` (a number, or ``None``: ``-|A|/2``, resolved per member at init) and
``init_alpha`` (``params["log_alpha"]`` with ``auto_alpha``)."""


@dataclasses.dataclass(frozen=True)
class Config:
    """RLPD hyperparameters; defaults are the official code's (module doc)."""

    num_critics: int = 10
    subset_size: int = 2
    updates_per_step: int = 20
    hidden_sizes: tuple[int, ...] = (256, 256)
    batch_size: int = 256
    gamma: float = 0.99
    tau: float = 0.005
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    alpha_lr: float = 3e-4
    lr_schedule: LRSchedule | None = None  # option, every optimizer; null: constant (the official rates)
    actor_lr_schedule: LRSchedule | None = None  # replaces lr_schedule for the actor
    critic_lr_schedule: LRSchedule | None = None  # ... for the critic ensemble
    alpha_lr_schedule: LRSchedule | None = None  # ... for the temperature
    init_alpha: float = 1.0
    auto_alpha: bool = True
    target_entropy: float | None = None  # None: -|A|/2 (RLPD)
    alpha_loss: str = "alpha"
    backup_entropy: bool = True
    log_std_min: float = -20.0
    log_std_max: float = 2.0
    critic_layer_norm: bool = True
    layer_norm_eps: float = 1e-6  # flax's nn.LayerNorm default
    init: str = "xavier_uniform"
    ensemble_mode: str = "bmm"  # as REDQ: fastest eager mode in update_rlpd.json
    actor_after_critics: bool = True
    critic_loss_reduction: str = "mean"
    tanh_epsilon: float | None = None  # None: exact tanh log-det (TFP Tanh bijector)

    def __post_init__(self) -> None:
        _checks.lr_schedules(self, "lr_schedule", "actor_lr_schedule", "critic_lr_schedule", "alpha_lr_schedule")
        te = self.target_entropy
        if te is not None and (not isinstance(te, (int, float)) or isinstance(te, bool)):
            raise ValueError(f"target_entropy must be a number or null (-|A|/2, RLPD's), got {te!r}.")
        self.redq_config()  # validates every shared field with REDQ's checks

    def redq_config(self, act_dim: int | None = None) -> redq.Config:
        """The :class:`rlfunc.algos.redq.Config` that computes this RLPD config.

        With ``act_dim`` a ``None`` target entropy becomes ``-act_dim / 2``.
        """
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(redq.Config)}
        if act_dim is not None and self.target_entropy is None:
            values["target_entropy"] = -act_dim / 2.0
        return redq.Config(**values)


def _act_dim(act_space) -> int:
    shape = getattr(act_space, "shape", None)
    if not shape or len(shape) != 1:
        # let redq.init raise its clear error for non-Box / non-1-D spaces
        return 1
    return int(shape[0])


def init(config: Config, obs_space, act_space, seed: int = 0, device: torch.device | str = "cpu") -> TensorDict:
    """Initial training state (:func:`rlfunc.algos.redq.init` with RLPD's settings).

    ``state["target_entropy"]`` is ``-|A|/2`` unless ``config.target_entropy``
    is set; ``state["config"]`` is the REDQ config that :func:`update` runs.
    """
    if not isinstance(config, Config):  # a redq.Config has no redq_config (an AttributeError before)
        raise ValueError(f"rlpd.init: config must be an rlpd.Config (redq.init takes a redq.Config), got a {type(config).__name__}.")
    seed = _inputs.check_seed(seed, "rlpd.init")  # named rlpd.init, not the redq.init it calls
    return redq.init(config.redq_config(_act_dim(act_space)), obs_space, act_space, seed=seed, device=device)


def update(state: TensorDict, batch: TensorDict, noise: TensorDict | None = None) -> tuple[TensorDict, TensorDict]:
    """One env step of RLPD learning; pure and compilable with ``fullgraph=True``.

    ``batch`` ``[G, B]`` (the runtime mixes prior and online rows into every
    mini-batch), ``noise`` from :func:`draw_noise`. G critic steps (each with
    its own target subset and polyak step), then one actor and one temperature
    step on mini-batch ``G - 1`` with the updated critics. This *is*
    :func:`rlfunc.algos.redq.update`; RLPD's settings live in ``state["config"]``.
    """
    return redq.update(state, batch, noise)


def draw_noise(
    config: Config,
    updates: int,
    batch_size: int,
    act_dim: int,
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> TensorDict:
    """Random draws for one :func:`update` (:func:`rlfunc.algos.redq.draw_noise`).

    ``next_action [G, B, A]`` and ``action [B, A]`` standard normal, ``subset
    [G, N]`` uniform (its ``M`` largest entries pick each step's target critics).
    """
    return redq.draw_noise(
        _as_redq(config), updates, batch_size, act_dim, generator=generator, device=device
    )


def act(
    params: TensorDict,
    obs: torch.Tensor,
    noise: torch.Tensor | None = None,
    *,
    deterministic: bool = False,
    config: Any = None,
) -> torch.Tensor:
    """Action ``[..., A]`` in ``[-1, 1]`` for ``obs [..., O]`` (:func:`rlfunc.algos.redq.act`).

    ``deterministic=True``: ``tanh(mean)`` (evaluation); otherwise a policy
    sample from standard-normal ``noise [..., A]``.
    """
    return redq._act("rlpd.act", params, obs, noise, deterministic, _as_redq(config or Config()))


actor_apply = redq.actor_apply


def make_update(compile: str = "none"):
    """:func:`update` eager or compiled (:func:`rlfunc.algos.redq.make_update`: ``"none"``, ``"step"``, ``"full"``)."""
    return redq.make_update(compile)


def make_population_update(compile: str = "none"):
    """A population's update, its steps vmapped over members
    (:func:`rlfunc.algos.redq.make_population_update`)."""
    return redq.make_population_update(compile)


def _as_redq(config: Any) -> redq.Config:
    return config.redq_config() if isinstance(config, Config) else config
