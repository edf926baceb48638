"""REDQ: Randomized Ensembled Double Q-learning (Chen et al., ICLR 2021).

Pure functions over one TensorDict state; the defaults of :class:`Config` are
those of the official code (watchernyu/REDQ, ``redq/algos/redq_sac.py``):

* N = 10 critics, MLP 256-256 ReLU, xavier-uniform weights, zero bias, input
  ``concat(obs, action)``;
* the target is the min over a random subset of M = 2 distinct *target*
  critics, drawn once per critic update and shared by the whole mini-batch:
  ``y = r + gamma (1 - terminated) (min_subset Q'(s', a') - alpha log pi(a'|s'))``
  with ``a' ~ pi(s')``;
* every critic regresses to the same ``y``; the loss is the sum over critics
  of each critic's MSE (official: ``MSELoss(q_cat, y) * num_Q``);
* G = 20 critic updates per environment step, polyak ``tau = 0.005`` after
  every critic update;
* one actor and one temperature update per environment step, on the last
  mini-batch, with the *mean over all N* online critics, computed with the
  critics as they were before that last critic step (the official code
  back-propagates the policy loss before ``q_optimizer.step()``);
* temperature loss ``-(log_alpha * (log_pi + target_entropy)).mean()``,
  ``log_alpha`` starts at 0;
* target entropy ``"mbpo"``, the official default (``REDQSACAgent(...,
  target_entropy='mbpo')``): the MBPO paper's value per environment
  (Janner et al. 2019), the official ``mbpo_target_entropy_dict`` in
  ``redq/algos/core.py``: Hopper -1, HalfCheetah -3, Walker2d -3, Ant -4,
  Humanoid -2 (:data:`MBPO_TARGET_ENTROPY`); any other environment gets
  ``-|A|``, the official code's ``'auto'`` (which raises a ``KeyError`` there
  instead);
* Adam 3e-4 for everything, constant (no schedule), batch 256, gamma 0.99.

Target entropy and the environment. ``target_entropy`` is ``"mbpo"`` (the
table above, ``-|A|`` off it), ``"auto"`` (``-|A|``, the SAC paper's rule,
Haarnoja et al. 2018b, "Soft Actor-Critic Algorithms and Applications",
Table 1: target entropy ``-dim(A)``), or a number; ``null`` (configs written
before ``"mbpo"`` was the default) means ``"auto"``. The table is keyed by the
environment, which the pure functions never see: :func:`config_for_env`
turns ``"mbpo"`` into the table's number for an env id (the family name, so
gymnasium's ``Hopper-v5`` matches the official ``Hopper-v2``: the action
spaces are the same), and the runtime calls it before :func:`init`. Called
directly, :func:`init` gives an unresolved ``"mbpo"`` the ``-|A|`` of an
environment off the table; pass the config through :func:`config_for_env`
first for a MuJoCo task. SAC (:func:`sac_config`, ``algo: sac``) uses
``"auto"``, the SAC paper's ``-|A|``; the official REDQ code's "naive SAC"
(``num_Q = 2, num_min = 2`` in the same agent) keeps ``'mbpo'``, so set
``target_entropy: mbpo`` to match that baseline.

Learning-rate schedules (an option; the paper's rates are constant):
``lr_schedule`` (:class:`rlfunc.core.optim.LRSchedule`, e.g. ``{kind: cosine,
warmup_updates: 1000, decay_updates: 100000, end_factor: 0.1}``) applies to
every optimizer -- actor, critic ensemble, temperature -- each relative to its
own ``*_lr`` and counted in its own gradient steps (the critic takes
``updates_per_step`` per env step, the actor and temperature one);
``actor_lr_schedule``, ``critic_lr_schedule`` and ``alpha_lr_schedule``
replace it for one optimizer. With any schedule set the metrics include
``actor_lr``, ``critic_lr`` and ``alpha_lr`` (the rates of the last steps).

``G`` is not a config field of :func:`update`: it is the leading dimension of
the batch. The runtime samples ``G * B`` rows once per environment step and
reshapes them to ``[G, B]``; :func:`update` slices them inside one call, so
the whole environment step is one (compilable) function.

Options beyond the paper, each off by default: ``critic_layer_norm`` (RLPD's
LayerNorm critics), ``alpha_loss="alpha"`` (RLPD's ``alpha * (H - target)``),
``backup_entropy=False`` (RLPD on sparse tasks), ``actor_after_critics``
(RLPD's order: the actor and temperature step use the critics after all ``G``
critic steps), ``critic_loss_reduction="mean"`` (RLPD's ``((qs - y)**2).mean()``
over critics and rows instead of REDQ's sum over critics), ``tanh_epsilon=None``
(the exact tanh log-determinant of RLPD's TFP ``Tanh`` bijector instead of
REDQ's ``log(1 - a^2 + 1e-6)``), ``ensemble_mode`` (how the ensemble is
evaluated; all modes compute the same numbers). :mod:`rlfunc.algos.rlpd`
turns the RLPD ones on.

Where the official code (``redq/algos/redq_sac.py`` ``REDQSACAgent``,
``experiments/train_redq_sac.py``) does something else that no option here
reproduces. At the defaults the first two touch every run, for one step
each, and the last touches environments with action bounds other than
``[-1, 1]``:

* the first update's temperature: ``REDQSACAgent.__init__`` sets
  ``self.alpha = exp(log_alpha)`` (1) and then, with the other
  hyperparameters, ``self.alpha = alpha`` (0.2), so the official first
  ``train`` call (its ``G`` targets and its policy loss) uses 0.2; from its
  first temperature step on it is ``exp(log_alpha)``. Here the temperature is
  ``exp(log_alpha)`` from the start (1 = ``init_alpha``);
* the warm-up: the official agent acts uniformly while its buffer holds at
  most ``start_steps`` transitions and first updates after transition
  ``start_steps + 1``; the runtime acts uniformly for ``train.learning_starts``
  steps and first updates after transition ``learning_starts``;
* ``G`` above 20: the official policy update runs when ``(i + 1) %
  policy_update_delay == 0`` (``policy_update_delay = 20``) or at the last of
  the ``G`` critic updates, so ``G = 40`` takes two actor and temperature
  steps; here there is one per environment step for every ``G`` (the same for
  ``G <= 20``);
* a fixed temperature (``auto_alpha`` off) is ``init_alpha``, 1 by default;
  the official fixed ``alpha`` defaults to 0.2;
* actions the critics see on an environment whose action bounds are not
  ``[-1, 1]``: the official policy returns ``tanh(u) * act_limit`` and the
  replay stores that, so its critics take native-scale actions (Humanoid:
  ``[-0.4, 0.4]``); the runtime rescales the environment's actions to
  ``[-1, 1]`` (:func:`init`), and the critics see those. The same on Hopper,
  Walker2d, Ant and HalfCheetah; a constant input scale on Humanoid (and
  Pendulum, ``[-2, 2]``).

Randomness is explicit: ``update(state, batch, noise)`` takes the standard
normal and uniform draws it needs (:func:`draw_noise`). Without ``noise`` it
draws them from torch's global generator, which is fine eagerly but differs
between eager and compiled code (and is refused under ``torch.vmap(...,
randomness="error")``: a population passes each member's noise).

Settings as data (:data:`HPARAMS`): ``actor_lr``, ``critic_lr``,
``alpha_lr``, ``gamma``, ``tau`` and ``init_alpha`` (the fixed temperature
when ``auto_alpha`` is off) are read from ``state["hparams", name]`` (0-dim
tensors) when present, else from :class:`Config`; so the members of a
population (:mod:`rlfunc.core.population`, ``torch.vmap(update)`` over stacked
states) may differ in them. The target entropy is already state
(``state["target_entropy"]``), and so is the initial temperature with
``auto_alpha`` (``params["log_alpha"]``): :data:`INIT_SETTINGS`. A state
without ``hparams`` (what :func:`init` returns) runs the float path,
unchanged. Everything else in :class:`Config` is static (shapes, counts,
switches). The whole update vmaps (tested against single-member updates).

Usage, one environment step of learning by hand (a whole training script:
``rlfunc.examples.redq_pendulum``; SAC: :func:`sac_config`)::

    >>> import gymnasium as gym, torch
    >>> from tensordict import TensorDict
    >>> from rlfunc.algos import redq
    >>> config = redq.Config(hidden_sizes=(32, 32), updates_per_step=2, batch_size=8)
    >>> state = redq.init(config, gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (1,)), seed=0)
    >>> G, B = config.updates_per_step, config.batch_size   # G critic updates of B rows
    >>> batch = TensorDict({"obs": torch.randn(G, B, 3), "action": torch.rand(G, B, 1) * 2 - 1,
    ...                     "reward": torch.randn(G, B), "next_obs": torch.randn(G, B, 3),
    ...                     "terminated": torch.zeros(G, B)}, batch_size=[G, B])
    >>> noise = redq.draw_noise(config, G, B, 1, generator=torch.Generator().manual_seed(0))
    >>> state, metrics = redq.update(state, batch, noise)   # pure: returns a new state
    >>> int(state["opt", "critic", "step"]), metrics["critic_loss"].shape   # G critic steps; 0-dim metrics
    (2, torch.Size([]))
    >>> redq.act(state["params"], torch.zeros(1, 3), deterministic=True).shape
    torch.Size([1, 1])
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from typing import Any, Callable

import torch
from tensordict import TensorDict
from torch.func import grad_and_value

from rlfunc.algos import _checks, _hparams, _inputs
from rlfunc.core import nets
from rlfunc.core.dists import tanh_gaussian, tanh_gaussian_mode
from rlfunc.core.optim import Adam, LRSchedule, last_lr, scheduled_lr
from rlfunc.core.targets import polyak

__all__ = [
    "Config",
    "HPARAMS",
    "INIT_SETTINGS",
    "MBPO_TARGET_ENTROPY",
    "TargetEntropy",
    "config_for_env",
    "target_entropy",
    "sac_config",
    "init",
    "draw_noise",
    "critic_loss",
    "actor_loss",
    "temperature_loss",
    "compute_target",
    "update",
    "critic_step",
    "policy_step",
    "make_update",
    "make_population_update",
    "COMPILE_MODES",
    "act",
    "actor_apply",
]


MBPO_TARGET_ENTROPY: dict[str, float] = {
    "Hopper": -1.0,
    "HalfCheetah": -3.0,
    "Walker2d": -3.0,
    "Ant": -4.0,
    "Humanoid": -2.0,
}
"""REDQ's default target entropies: the official ``mbpo_target_entropy_dict``
(watchernyu/REDQ, ``redq/algos/core.py``, "these numbers are from the MBPO
paper", Janner et al. 2019), keyed there by the MuJoCo ids ``Hopper-v2`` ...
``Humanoid-v2`` and here by the environment family, so every version
(gymnasium's ``-v4``/``-v5``, with the same action spaces) matches."""

HPARAMS = ("actor_lr", "critic_lr", "alpha_lr", "gamma", "tau", "init_alpha")
"""The :class:`Config` fields :func:`update` reads from ``state["hparams", name]`` when
present (settings as data, module doc); ``init_alpha`` is read there only with
``auto_alpha`` off (with it on, the temperature is the state's ``log_alpha``)."""

INIT_SETTINGS = ("target_entropy", "init_alpha")
"""The :class:`Config` fields :func:`init` turns into state tensors (``target_entropy``,
``params["log_alpha"]`` when ``auto_alpha``): states made from configs that differ
only in them (and in :data:`HPARAMS`) are one population."""

TargetEntropy = typing.NewType("TargetEntropy", object)
"""``Config.target_entropy``: a number, ``"mbpo"`` or ``"auto"`` (module doc)."""

_TARGET_ENTROPY_RULES = ("mbpo", "auto")


def _env_family(env_id: str) -> str:
    """``"Hopper-v5"``, ``"gymnasium:Hopper-v5"``, ``"ns/Hopper-v2"`` -> ``"Hopper"``."""
    name = env_id.rsplit(":", 1)[-1].rsplit("/", 1)[-1]
    return re.sub(r"-v\d+$", "", name)


def target_entropy(config: "Config", act_dim: int, env_id: str | None = None) -> float:
    """The target entropy ``config`` asks for with ``act_dim`` actions (on env ``env_id``).

    A number is itself; ``"auto"`` (and ``None``) is ``-act_dim``; ``"mbpo"`` is
    :data:`MBPO_TARGET_ENTROPY` of ``env_id``'s family, or ``-act_dim`` when
    ``env_id`` is not in the table or not given.
    """
    value = config.target_entropy
    if value == "mbpo" and env_id is not None:
        value = MBPO_TARGET_ENTROPY.get(_env_family(env_id), "auto")
    if value is None or value in _TARGET_ENTROPY_RULES:
        return float(-act_dim)
    return float(value)


def config_for_env(config: "Config", env_id: str) -> "Config":
    """``config`` with what depends on the environment resolved: a ``"mbpo"`` target entropy
    becomes :data:`MBPO_TARGET_ENTROPY`'s number for ``env_id`` (unchanged off the table,
    where :func:`init` gives ``-|A|``). Pure; the runtime calls it before :func:`init`."""
    if config.target_entropy == "mbpo":
        value = MBPO_TARGET_ENTROPY.get(_env_family(env_id))
        if value is not None:
            return dataclasses.replace(config, target_entropy=value)
    return config


@dataclasses.dataclass(frozen=True)
class Config:
    """REDQ hyperparameters; defaults are the official code's (see module doc)."""

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
    lr_schedule: LRSchedule | None = None  # option, every optimizer; null: constant (the paper's)
    actor_lr_schedule: LRSchedule | None = None  # replaces lr_schedule for the actor
    critic_lr_schedule: LRSchedule | None = None  # ... for the critic ensemble
    alpha_lr_schedule: LRSchedule | None = None  # ... for the temperature
    init_alpha: float = 1.0
    auto_alpha: bool = True
    target_entropy: TargetEntropy | None = "mbpo"  # official: MBPO table per env, -|A| off it; "auto": -|A|
    alpha_loss: str = "log_alpha"  # "log_alpha" (REDQ/SAC) or "alpha" (RLPD)
    backup_entropy: bool = True
    log_std_min: float = -20.0
    log_std_max: float = 2.0
    critic_layer_norm: bool = False
    layer_norm_eps: float = 1e-5
    init: str = "xavier_uniform"
    ensemble_mode: str = "bmm"  # fastest eager mode in benchmarks/results/update_redq.json (CPU, 1 thread)
    actor_after_critics: bool = False  # True: RLPD's order (actor sees the critics after all G steps)
    critic_loss_reduction: str = "sum"  # "sum" over critics (REDQ) or "mean" (RLPD)
    tanh_epsilon: float | None = 1e-6  # None: exact tanh log-det (RLPD / TFP)

    def __post_init__(self) -> None:
        _checks.check_finite(self)
        _checks.check_booleans(self)
        _checks.positive_int(self, "num_critics")
        if not isinstance(self.subset_size, int) or not 1 <= self.subset_size <= self.num_critics:
            raise ValueError(
                f"subset_size must be between 1 and num_critics ({self.num_critics}), got {self.subset_size}."
            )
        _checks.positive_int(self, "updates_per_step", "batch_size")
        _checks.layer_sizes(self, "hidden_sizes")
        _checks.discount(self, "gamma")
        _checks.fraction(self, "tau")
        _checks.positive_float(self, "actor_lr", "critic_lr", "alpha_lr", "init_alpha", "layer_norm_eps")
        _checks.lr_schedules(self, "lr_schedule", "actor_lr_schedule", "critic_lr_schedule", "alpha_lr_schedule")
        te = self.target_entropy
        is_number = isinstance(te, (int, float)) and not isinstance(te, bool)
        if not (te is None or is_number or (isinstance(te, str) and te in _TARGET_ENTROPY_RULES)):
            raise ValueError(
                f"target_entropy must be a number, 'mbpo' (the official per-environment table, -|A| off it) "
                f"or 'auto' (-|A|), got {te!r}."
            )
        _checks.one_of(self, "alpha_loss", ("log_alpha", "alpha"))
        _checks.one_of(self, "critic_loss_reduction", ("sum", "mean"))
        _checks.one_of(self, "ensemble_mode", nets.ENSEMBLE_MODES)
        _checks.one_of(self, "init", _checks.LINEAR_INITS)
        for name in ("log_std_min", "log_std_max"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise ValueError(f"{name} must be a finite number, got {v!r}.")
        if not self.log_std_min < self.log_std_max:
            raise ValueError(
                f"log_std_min must be below log_std_max ({self.log_std_max}), got {self.log_std_min}."
            )
        te_ = self.tanh_epsilon
        if te_ is not None and (not isinstance(te_, (int, float)) or isinstance(te_, bool) or not 0 < te_ < 1):
            # 0 is refused: log(1 - tanh(u)^2) is log(0) once float32 tanh rounds to +-1 (|u| >= ~9), an
            # infinite log-probability and NaN gradients; the exact formula is what 0 would mean. From 1 on
            # the term no longer approximates the log-determinant it stands for.
            raise ValueError(
                f"tanh_epsilon must be above 0 and below 1 (REDQ's 1e-6) or null for the exact formula, "
                f"got {self.tanh_epsilon!r}."
            )


def sac_config(**overrides: Any) -> Config:
    """SAC (Haarnoja et al. 2018) as REDQ's special case N = 2, M = 2, G = 1, with the
    SAC paper's target entropy ``-|A|`` (``"auto"``; module doc)."""
    values = dict(num_critics=2, subset_size=2, updates_per_step=1, target_entropy="auto")
    values.update(overrides)
    return Config(**values)


def _space_dims(obs_space, act_space) -> tuple[int, int]:
    import gymnasium as gym

    if not isinstance(act_space, gym.spaces.Box) or len(act_space.shape) != 1:
        raise ValueError(
            f"REDQ, SAC and RLPD need a continuous 1-D Box action space, got {act_space}; "
            "use DRQN or R2D2 for discrete actions."
        )
    _inputs.check_finite_bounds("REDQ, SAC and RLPD", act_space)
    if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
        raise ValueError(
            f"REDQ, SAC and RLPD need a flat 1-D Box observation space, got {obs_space}; "
            "flatten the observation or use DrQ-v2 for pixels."
        )
    return int(obs_space.shape[0]), int(act_space.shape[0])


def init(
    config: Config,
    obs_space,
    act_space,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> TensorDict:
    """Initial training state for observation/action spaces (gymnasium ``Box``).

    Returns a TensorDict with ``params`` (``actor``, ``critic`` stacked
    ``[N]``, ``log_alpha``), ``target`` (``critic``), ``opt`` (Adam states),
    ``step`` (number of :func:`update` calls), ``target_entropy``
    (:func:`target_entropy`: ``"mbpo"`` not resolved by :func:`config_for_env`
    gives ``-|A|``) and the static ``config``. Actions are in ``[-1, 1]``: the
    env factory rescales the env's bounds.
    """
    if not isinstance(config, Config):
        raise ValueError(f"redq.init: config must be a redq.Config (rlpd.init takes an rlpd.Config), got a {type(config).__name__}.")
    obs_dim, act_dim = _space_dims(obs_space, act_space)
    seed = _inputs.check_seed(seed, "redq.init")
    device = _inputs.check_device_arg(device, "redq.init")
    gen = torch.Generator(device="cpu").manual_seed(seed)
    hidden = tuple(config.hidden_sizes)

    def critic_member() -> TensorDict:
        return nets.mlp_init(
            (obs_dim + act_dim, *hidden, 1),
            layer_norm=config.critic_layer_norm,
            init=config.init,
            generator=gen,
        )

    critic = nets.ensemble_init(config.num_critics, critic_member)
    actor = TensorDict(
        {
            "trunk": nets.mlp_init((obs_dim, *hidden), init=config.init, generator=gen),
            "mean": nets.linear_init(hidden[-1], act_dim, init=config.init, generator=gen),
            "log_std": nets.linear_init(hidden[-1], act_dim, init=config.init, generator=gen),
        },
        batch_size=[],
    )
    params = TensorDict(
        {
            "actor": actor,
            "critic": critic,
            "log_alpha": torch.tensor(math.log(config.init_alpha)),
        },
        batch_size=[],
    )
    state = TensorDict(
        {
            "params": params,
            "target": TensorDict({"critic": critic.clone()}, batch_size=[]),
            "opt": TensorDict(
                {
                    "actor": _actor_opt(config).init(actor),
                    "critic": _critic_opt(config).init(critic),
                    "alpha": _alpha_opt(config).init(TensorDict({"log_alpha": params["log_alpha"]}, [])),
                },
                batch_size=[],
            ),
            "step": torch.zeros((), dtype=torch.int64),
            "target_entropy": torch.tensor(target_entropy(config, act_dim)),
        },
        batch_size=[],
    ).to(device)
    state.set_non_tensor("config", config)
    return state


def _actor_opt(config: Config) -> Adam:
    """Adam at ``actor_lr``, scheduled by ``actor_lr_schedule`` or ``lr_schedule`` (constant if neither)."""
    return Adam(lr=scheduled_lr(config.actor_lr, config.actor_lr_schedule, config.lr_schedule))


def _critic_opt(config: Config) -> Adam:
    return Adam(lr=scheduled_lr(config.critic_lr, config.critic_lr_schedule, config.lr_schedule))


def _alpha_opt(config: Config) -> Adam:
    return Adam(lr=scheduled_lr(config.alpha_lr, config.alpha_lr_schedule, config.lr_schedule))


_LR_FIELDS = ("actor_lr", "critic_lr", "alpha_lr")


def _scheduled(config: Config) -> bool:
    return any(
        s is not None
        for s in (config.lr_schedule, config.actor_lr_schedule, config.critic_lr_schedule, config.alpha_lr_schedule)
    )


def draw_noise(
    config: Config,
    updates: int,
    batch_size: int,
    act_dim: int,
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> TensorDict:
    """Every random draw one :func:`update` call needs, as a TensorDict.

    ``next_action [G, B, A]`` and ``action [B, A]`` are standard normal
    (policy samples for the target and the actor loss); ``subset [G, N]`` is
    uniform, and the ``M`` largest entries of row ``g`` pick the target subset
    of critic update ``g`` (so the ``M`` members are distinct).
    """
    shape_next = (updates, batch_size, act_dim)
    return TensorDict(
        {
            "next_action": torch.randn(shape_next, generator=generator, device=device),
            "subset": torch.rand((updates, config.num_critics), generator=generator, device=device),
            "action": torch.randn((batch_size, act_dim), generator=generator, device=device),
        },
        batch_size=[],
        device=device,
    )


def actor_apply(actor: TensorDict, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Policy network: ``obs [..., O] -> (mean [..., A], log_std [..., A])`` (unclamped)."""
    h = nets.mlp_apply(actor["trunk"], obs, activate_last=True)
    mean = torch.nn.functional.linear(h, actor["mean", "weight"], actor["mean", "bias"])
    log_std = torch.nn.functional.linear(h, actor["log_std", "weight"], actor["log_std", "bias"])
    return mean, log_std


def _sample(config: Config, actor: TensorDict, obs: torch.Tensor, noise: torch.Tensor):
    mean, log_std = actor_apply(actor, obs)
    return tanh_gaussian(
        mean,
        log_std,
        noise,
        log_std_min=config.log_std_min,
        log_std_max=config.log_std_max,
        epsilon=config.tanh_epsilon,
    )


def _q_values(config: Config, critic: TensorDict, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """``[N, B]`` Q-values of every member of a stacked critic."""
    x = torch.cat([obs, action], dim=-1)
    q = nets.ensemble_apply(critic, x, mode=config.ensemble_mode, ln_eps=config.layer_norm_eps)
    return q.squeeze(-1)


def compute_target(
    config: Config,
    actor: TensorDict,
    target_critic: TensorDict,
    alpha: torch.Tensor,
    batch: TensorDict,
    next_action_noise: torch.Tensor,
    subset_noise: torch.Tensor,
    *,
    gamma: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """REDQ target ``y [B]`` for one mini-batch (no gradient flows through it).

    ``subset_noise [N]``: the ``M`` largest entries select the target critics.
    Terminated transitions do not bootstrap; truncated ones do (the collector
    stores ``terminated`` only). ``gamma`` (e.g. ``state["hparams", "gamma"]``)
    replaces ``config.gamma``.
    """
    with torch.no_grad():
        next_action, next_log_prob = _sample(config, actor, batch["next_obs"], next_action_noise)
        idx = torch.topk(subset_noise, config.subset_size).indices
        subset = target_critic[idx]
        q_next = _q_values(config, subset, batch["next_obs"], next_action).min(dim=0).values
        if config.backup_entropy:
            q_next = q_next - alpha * next_log_prob
        not_done = 1.0 - batch["terminated"].to(q_next.dtype)
        gamma = config.gamma if gamma is None else gamma
        return batch["reward"] + gamma * not_done * q_next


def critic_loss(
    critic: TensorDict, config: Config, obs: torch.Tensor, action: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, TensorDict]:
    """Sum over critics of each critic's MSE to the shared target ``y [B]``.

    With ``config.critic_loss_reduction == "mean"`` the mean over critics
    instead (RLPD: ``((qs - target_q) ** 2).mean()``; ``1/N`` of REDQ's loss).
    Returns ``(loss, aux)`` with ``aux["q"]`` the mean prediction.
    """
    q = _q_values(config, critic, obs, action)  # [N, B]
    per_critic = (q - y.unsqueeze(0)).pow(2).mean(dim=1)
    loss = per_critic.sum() if config.critic_loss_reduction == "sum" else per_critic.mean()
    return loss, TensorDict({"q": q.mean().detach()}, batch_size=[])


def actor_loss(
    actor: TensorDict,
    config: Config,
    critic: TensorDict,
    alpha: torch.Tensor,
    obs: torch.Tensor,
    noise: torch.Tensor,
) -> tuple[torch.Tensor, TensorDict]:
    """``mean_b [alpha log pi(a|s) - mean_{all N} Q_i(s, a)]``, ``a ~ pi(s)`` from ``noise``.

    The mean over *all* critics (not the subset min) is REDQ's policy objective.
    Gradients flow to the actor only (``critic`` is passed as data).
    """
    action, log_prob = _sample(config, actor, obs, noise)
    q = _q_values(config, critic, obs, action).mean(dim=0)
    loss = (alpha * log_prob - q).mean()
    return loss, TensorDict({"log_prob": log_prob.detach()}, batch_size=[])


def temperature_loss(
    log_alpha: TensorDict, config: Config, log_prob: torch.Tensor, target_entropy: torch.Tensor
) -> tuple[torch.Tensor, TensorDict]:
    """Temperature loss; ``log_alpha`` is a TensorDict ``{"log_alpha": []}``.

    ``"log_alpha"`` (REDQ/SAC official): ``-(log_alpha * (log_pi + H_target)).mean()``.
    ``"alpha"`` (RLPD official): ``alpha * (H - H_target)`` with ``H = -mean(log_pi)``.
    """
    la = log_alpha["log_alpha"]
    if config.alpha_loss == "log_alpha":
        loss = -(la * (log_prob + target_entropy)).mean()
    else:
        entropy = -log_prob.mean()
        loss = la.exp() * (entropy - target_entropy)
    return loss, TensorDict({}, batch_size=[])


def critic_step(
    config: Config,
    critic: TensorDict,
    target_critic: TensorDict,
    critic_opt_state: TensorDict,
    actor: TensorDict,
    alpha: torch.Tensor,
    mini: TensorDict,
    next_action_noise: torch.Tensor,
    subset_noise: torch.Tensor,
    hparams: TensorDict | None = None,
) -> tuple[TensorDict, TensorDict, TensorDict, torch.Tensor, torch.Tensor]:
    """One critic update on mini-batch ``mini [B]``: target, loss, Adam, polyak. Pure.

    ``hparams``: ``state["hparams"]`` (``critic_lr``, ``gamma``, ``tau`` replace the
    config's when present; :data:`HPARAMS`). Returns ``(critic, target_critic,
    critic_opt_state, loss, mean_q)``.
    """
    gamma = _hparams.setting(hparams, config, "gamma")
    y = compute_target(config, actor, target_critic, alpha, mini, next_action_noise, subset_noise, gamma=gamma)
    grads, (loss, aux) = grad_and_value(critic_loss, has_aux=True)(critic, config, mini["obs"], mini["action"], y)
    opt = _critic_opt(config)
    lr = _hparams.rate(opt, critic_opt_state, hparams, "critic_lr")
    critic, critic_opt_state = opt.step(grads, critic_opt_state, critic, lr=lr)
    target_critic = polyak(target_critic, critic, _hparams.setting(hparams, config, "tau"))
    return critic, target_critic, critic_opt_state, loss.detach(), aux["q"]


def policy_step(
    config: Config,
    actor: TensorDict,
    actor_opt_state: TensorDict,
    critic: TensorDict,
    log_alpha: torch.Tensor,
    alpha_opt_state: TensorDict,
    alpha: torch.Tensor,
    target_entropy: torch.Tensor,
    obs: torch.Tensor,
    noise: torch.Tensor,
    hparams: TensorDict | None = None,
) -> tuple[TensorDict, TensorDict, torch.Tensor, TensorDict, TensorDict]:
    """One actor update and one temperature update on ``obs [B, O]``. Pure.

    ``critic`` is data here (no gradient reaches it). ``hparams``: ``state["hparams"]``
    (``actor_lr``, ``alpha_lr`` replace the config's when present). Returns ``(actor,
    actor_opt_state, log_alpha, alpha_opt_state, metrics)``.
    """
    actor_grads, (a_loss, a_aux) = grad_and_value(actor_loss, has_aux=True)(
        actor, config, critic.detach(), alpha, obs, noise
    )
    opt = _actor_opt(config)
    lr = _hparams.rate(opt, actor_opt_state, hparams, "actor_lr")
    actor, actor_opt_state = opt.step(actor_grads, actor_opt_state, actor, lr=lr)
    log_prob = a_aux["log_prob"]
    la_td = TensorDict({"log_alpha": log_alpha}, batch_size=[])
    if config.auto_alpha:
        alpha_grads, (t_loss, _) = grad_and_value(temperature_loss, has_aux=True)(
            la_td, config, log_prob, target_entropy
        )
        opt = _alpha_opt(config)
        lr = _hparams.rate(opt, alpha_opt_state, hparams, "alpha_lr")
        la_td, alpha_opt_state = opt.step(alpha_grads, alpha_opt_state, la_td, lr=lr)
    else:
        t_loss = torch.zeros_like(log_alpha)
    metrics = TensorDict(
        {"actor_loss": a_loss.detach(), "alpha_loss": t_loss.detach(), "entropy": -log_prob.mean()},
        batch_size=[],
    )
    return actor, actor_opt_state, la_td["log_alpha"], alpha_opt_state, metrics


_BATCH_KEYS = ("obs", "action", "reward", "next_obs", "terminated")


def _check_update_inputs(
    config: Config, state: TensorDict, batch: TensorDict, noise: TensorDict | None, lead: torch.Size
) -> None:
    """One sentence for a batch or noise :func:`update` cannot use (shapes, dtypes, keys, devices
    only, no host sync; skipped under ``torch.compile``: :mod:`rlfunc.algos._inputs`)."""
    if torch.compiler.is_compiling():
        return
    where = "redq.update"
    _inputs.check_keys(
        where, batch, _BATCH_KEYS,
        "REDQ needs obs [G, B, O], action [G, B, A], reward [G, B], next_obs [G, B, O] and terminated [G, B].",
    )
    updates, rows = batch.batch_size[len(lead):]
    if updates < 1 or rows < 1:
        raise ValueError(f"{where}: batch_size {list(batch.batch_size)} is empty; G and B must both be at least 1.")
    trunk = state["params", "actor", "trunk", "0", "weight"]  # [(P,) H, O]
    obs_dim, act_dim = trunk.shape[-1], state["params", "actor", "mean", "weight"].shape[-2]
    p = ["P"] * len(lead)
    for key, width, label in (("obs", obs_dim, "O"), ("next_obs", obs_dim, "O"), ("action", act_dim, "A")):
        _inputs.check_tensor(
            where, f"batch[{key!r}]", batch[key], [(*lead, updates, rows, width)], dtype=trunk.dtype, labels=[*p, "G", "B", label]
        )
    for key in ("reward", "terminated"):
        _inputs.check_tensor(where, f"batch[{key!r}]", batch[key], [(*lead, updates, rows)], dtype="real", labels=[*p, "G", "B"])
    if noise is not None:
        _inputs.check_noise(
            where, noise,
            {
                "next_action": (*lead, updates, rows, act_dim),
                "subset": (*lead, updates, config.num_critics),
                "action": (*lead, rows, act_dim),
            },
            "redq.draw_noise(config, G, B, A)",
            dtypes={"next_action": trunk.dtype, "subset": "float", "action": trunk.dtype},  # subset: only ranked
        )
    _inputs.check_device(where, trunk, {"batch": batch, "noise": noise})


def update(
    state: TensorDict,
    batch: TensorDict,
    noise: TensorDict | None = None,
    *,
    steps: tuple | None = None,
    members: bool = False,
) -> tuple[TensorDict, TensorDict]:
    """One environment step's worth of REDQ learning. Pure.

    ``batch``: TensorDict of batch size ``[G, B]`` with ``obs [G, B, O]``,
    ``action [G, B, A]``, ``reward [G, B]``, ``next_obs [G, B, O]``,
    ``terminated [G, B]``. Runs ``G`` critic updates (:func:`critic_step`: each
    with its own target subset and a polyak step), then one actor and one
    temperature update (:func:`policy_step`) on mini-batch ``G - 1``: with the
    critics as they were before the last critic optimizer step (REDQ) or, with
    ``config.actor_after_critics``, after it (RLPD). Returns ``(new_state,
    metrics)``; metrics are 0-dim tensors (no host sync). A ``state["hparams"]``
    entry replaces its :class:`Config` field (:data:`HPARAMS`) and is carried to
    the new state; with any rate there, the metrics include the three rates.

    ``steps`` replaces ``(critic_step, policy_step)`` by other implementations
    of the same functions, e.g. compiled ones (:func:`make_update`).

    ``members=True`` runs a whole population's update (:func:`make_population_update`):
    ``state`` is a population state (:func:`rlfunc.core.population.stack`, batch ``[P]``),
    ``batch`` is ``[P, G, B]``, ``noise`` (required) has the leading ``[P]`` too, and
    ``steps`` are the step functions vmapped over members. This loop then runs once for
    all members instead of once inside each member's ``torch.vmap``, so the steps can be
    compiled one at a time (a compiled function cannot be called inside ``vmap``); metrics
    come back ``[P]``, as ``vmap`` of this function gives them.
    """
    config: Config = _inputs.state_config(state, Config, "redq.update", "redq.init or rlpd.init")
    lead = 1 if members else 0  # the member dimension in front of [G, B]
    if not isinstance(batch, TensorDict) or batch.batch_dims != 2 + lead:
        got = list(batch.batch_size) if isinstance(batch, TensorDict) else type(batch).__name__
        raise ValueError(
            f"batch must have batch_size {'[P, G, B]' if members else '[G, B]'} (G critic updates of B rows), "
            f"got {got}."
        )
    if members and (steps is None or noise is None):
        raise ValueError("members=True needs the vmapped steps and the members' noise: use make_population_update.")
    _check_update_inputs(config, state, batch, noise, batch.batch_size[:lead])
    do_critic, do_policy = steps if steps is not None else (critic_step, policy_step)
    updates, batch_size = batch.batch_size[lead:]

    def mini(g: int):  # mini-batch g of every member (or of the one)
        return batch[:, g] if members else batch[g]
    params = state["params"]
    actor = params["actor"]
    critic = params["critic"]
    log_alpha = params["log_alpha"]
    target_critic = state["target", "critic"]
    target_entropy = state["target_entropy"]
    if noise is None:
        if _inputs.under_vmap(batch["obs"]):
            raise _inputs.NoiseUnderVmapError(
                "redq.update under torch.vmap needs each member's noise (with randomness='error' it cannot draw); "
                "pass population.draw_per_member(lambda g: redq.draw_noise(config, G, B, A, generator=g), generators)."
            )
        noise = draw_noise(config, updates, batch_size, batch["action"].shape[-1], device=batch["action"].device)
    critic_opt_state = state["opt", "critic"]
    actor_opt_state = state["opt", "actor"]
    alpha_opt_state = state["opt", "alpha"]
    hparams = _hparams.of(state)
    if config.auto_alpha:
        alpha = log_alpha.exp().detach()
    elif _hparams.entry(hparams, "init_alpha") is not None:
        alpha = hparams["init_alpha"].to(log_alpha.dtype)
    else:
        alpha = torch.full_like(log_alpha, config.init_alpha)

    def run_policy(critic_now: TensorDict):
        return do_policy(
            config, actor, actor_opt_state, critic_now, log_alpha, alpha_opt_state, alpha,
            target_entropy, mini(updates - 1)["obs"], noise["action"], hparams,
        )

    q_losses = []
    q_means = []
    for g in range(updates):
        if g == updates - 1 and not config.actor_after_critics:
            # Policy and temperature on the last mini-batch, with the critics
            # before this step's optimizer update (official REDQ code order).
            new_actor, actor_opt_state, new_log_alpha, alpha_opt_state, p_metrics = run_policy(critic)
        critic, target_critic, critic_opt_state, loss, q_mean = do_critic(
            config, critic, target_critic, critic_opt_state, actor, alpha, mini(g),
            noise["next_action"].select(lead, g), noise["subset"].select(lead, g), hparams,
        )
        q_losses.append(loss)
        q_means.append(q_mean)
    if config.actor_after_critics:
        # RLPD (ikostrikov/rlpd ``SACLearner.update``): after the G critic
        # steps, one actor step on the last mini-batch with the updated critics.
        new_actor, actor_opt_state, new_log_alpha, alpha_opt_state, p_metrics = run_policy(critic)

    new_state = TensorDict(
        {
            "params": TensorDict(
                {"actor": new_actor, "critic": critic, "log_alpha": new_log_alpha}, batch_size=[]
            ),
            "target": TensorDict({"critic": target_critic}, batch_size=[]),
            "opt": TensorDict(
                {"actor": actor_opt_state, "critic": critic_opt_state, "alpha": alpha_opt_state},
                batch_size=[],
            ),
            "step": state["step"] + 1,
            "target_entropy": target_entropy,
        },
        batch_size=[],
    )
    _hparams.carry(new_state, hparams)
    if members:
        new_state.batch_size = state.batch_size
    new_state.set_non_tensor("config", config)
    metrics = TensorDict(
        {
            "critic_loss": torch.stack(q_losses).mean(0),
            "q": torch.stack(q_means).mean(0),
            "actor_loss": p_metrics["actor_loss"],
            "alpha_loss": p_metrics["alpha_loss"],
            "alpha": alpha,
            "entropy": p_metrics["entropy"],
        },
        batch_size=state.batch_size if members else [],
    )
    if _scheduled(config) or any(_hparams.entry(hparams, k) is not None for k in _LR_FIELDS):
        for name, opt_fn, opt_state in (
            ("actor_lr", _actor_opt, actor_opt_state),
            ("critic_lr", _critic_opt, critic_opt_state),
            ("alpha_lr", _alpha_opt, alpha_opt_state),
        ):
            metrics[name] = last_lr(opt_fn(config), opt_state, alpha, _hparams.entry(hparams, name))
    return new_state, metrics


COMPILE_MODES = ("none", "step", "full")


def _over_members(step: Callable) -> Callable:
    """``step(config, *tensors)`` for every member at once: ``torch.vmap`` over the leading
    ``[P]`` of every tensor argument, the static ``config`` shared (no random draws inside)."""

    def population_step(config, *tensors):
        in_dims = tuple(None if t is None else 0 for t in tensors)  # hparams may be None
        return torch.vmap(lambda *t: step(config, *t), in_dims=in_dims, randomness="error")(*tensors)

    population_step.__name__ = f"population_{step.__name__}"
    return population_step


def make_population_update(compile: str = "none"):
    """A whole population's update, ``(state [P], batch [P, G, B], noise [P]) -> (state, metrics)``,
    with the same numbers as ``rlfunc.core.population.vmap_update(update)`` (the same kernels).

    :func:`update` with ``members=True``: its ``G``-step loop runs once for all members, each
    step vmapped over them (``_over_members``). ``compile``: ``"none"``, or ``"step"``, the two
    vmapped steps compiled once each (two small graphs: 28 s for ``P = 4`` at the paper's
    shapes on a 2-core CPU, where compiling the vmapped update whole unrolls all ``G = 20``
    steps: 254 s for ``P = 2``; one-off timings, issue #24). The whole update compiled is
    ``torch.compile(vmap_update(update), fullgraph=True)`` (``train.compile_mode: full``).
    """
    import functools

    if compile not in ("none", "step"):
        raise ValueError(f"compile must be 'none' or 'step', got {compile!r}.")
    steps = (_over_members(critic_step), _over_members(policy_step))
    if compile == "step":
        steps = tuple(torch.compile(s, fullgraph=True) for s in steps)
    return functools.partial(update, steps=steps, members=True)


def make_update(compile: str = "none"):
    """``update`` as eager code or compiled with ``torch.compile(fullgraph=True)``.

    * ``"none"``: :func:`update` itself;
    * ``"step"``: :func:`critic_step` and :func:`policy_step` compiled once
      each and called from the (Python) loop over ``G``: the graphs do not
      depend on ``G``, so compiling takes one critic step's time, not twenty;
    * ``"full"``: the whole ``G``-step update as one graph (``G`` unrolled:
      compile time grows with ``G``; 10+ minutes for ``G = 20`` on a 2-core CPU).

    All modes compute the same numbers up to float rounding (tested).
    """
    import functools

    if compile == "none":
        return update
    if compile == "full":
        return torch.compile(update, fullgraph=True)
    if compile == "step":
        steps = (torch.compile(critic_step, fullgraph=True), torch.compile(policy_step, fullgraph=True))
        return functools.partial(update, steps=steps)
    raise ValueError(f"compile must be one of {COMPILE_MODES}, got {compile!r}.")


def act(
    params: TensorDict,
    obs: torch.Tensor,
    noise: torch.Tensor | None = None,
    *,
    deterministic: bool = False,
    config: Config | None = None,
) -> torch.Tensor:
    """Action in ``[-1, 1]`` for ``obs [..., O]``.

    ``deterministic=True`` gives ``tanh(mean)`` (evaluation); otherwise a
    sample from ``noise`` (standard normal ``[..., A]`` in the parameters' dtype, the
    shape of the action; drawn from the global generator if omitted).
    """
    return _act("redq.act", params, obs, noise, deterministic, config or Config())


def _act(name: str, params: TensorDict, obs: torch.Tensor, noise, deterministic: bool, config: Config) -> torch.Tensor:
    """:func:`act`, its input errors naming ``name`` (the caller's public function: ``rlpd.act`` shares it)."""
    if not isinstance(params, TensorDict) or "actor" not in params.keys():
        raise ValueError(f"{name}: params must be the state's parameters, state['params'] (with an 'actor' entry).")
    trunk = params["actor", "trunk", "0", "weight"]
    if torch.compiler.is_compiling():  # shapes checked eagerly only, as rlfunc.algos._inputs
        pass
    elif not isinstance(obs, torch.Tensor) or obs.dim() < 1 or obs.shape[-1] != trunk.shape[-1] or obs.dtype != trunk.dtype:
        got = f"{type(obs).__name__}" if not isinstance(obs, torch.Tensor) else f"shape {list(obs.shape)} and dtype {obs.dtype}"
        raise ValueError(
            f"{name}: obs must be [..., {trunk.shape[-1]}] with dtype {trunk.dtype} (the parameters'), got {got}."
        )
    with torch.no_grad():
        mean, log_std = actor_apply(params["actor"], obs)
        if deterministic:
            return tanh_gaussian_mode(mean)
        if noise is None:
            noise = torch.randn_like(mean)
        else:  # another dtype would promote the action (float64 noise, float64 actions); another shape broadcast
            _inputs.check_tensor(name, "noise", noise, [tuple(mean.shape)], dtype=mean.dtype, labels=["...", "A"])
        action, _ = tanh_gaussian(
            mean, log_std, noise, log_std_min=config.log_std_min, log_std_max=config.log_std_max
        )
        return action
