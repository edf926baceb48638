"""DrQ-v2: continuous control from pixels (Yarats et al., "Mastering Visual
Continuous Control: Improved Data-Augmented Reinforcement Learning", 2021).

Pure functions over one TensorDict state; the defaults of :class:`Config`
are those of the official code (facebookresearch/drqv2, ``drqv2.py`` and
``cfgs/config.yaml`` with ``cfgs/task/easy.yaml``):

* observations: ``[3 * frames, 84, 84]`` uint8 (3 stacked RGB frames);
* encoder ``x / 255 - 0.5`` -> conv 32 3x3 stride 2 -> three conv 32 3x3
  stride 1, ReLU after each, flattened (35x35x32 = 39200 features at 84x84);
* actor: own trunk ``Linear(repr, 50) -> LayerNorm -> Tanh``, then MLP
  1024-1024 (ReLU) -> ``tanh`` mean; policy ``Normal(mean, sigma(step))``
  clamped to (-1, 1) with a straight-through gradient
  (:func:`rlfunc.core.dists.clipped_normal_sample`);
* critic: own trunk of the same shape, twin Q heads 1024-1024 on
  ``concat(trunk(h), action)``; one target critic (trunk and heads),
  polyak ``tau = 0.01``; **no target encoder and no target actor**;
* augmentation: replicate-pad 4 and a random integer shift per sample
  (:func:`rlfunc.core.augment.random_shift`), drawn *independently* for
  ``obs`` and ``next_obs``;
* critic update: ``next_obs`` is encoded by the *online* encoder without
  gradient; ``y = r_n + discount_n * min(Q'_1, Q'_2)(h', a')`` with ``a' =
  clamp(mu(h') + clip(sigma eps, -0.3, 0.3))``; the ``n = 3``-step reward
  ``r_n`` and ``discount_n = gamma^n`` (0 after a termination) come from the
  replay (:class:`rlfunc.replay.pixels.PixelReplay`); loss ``MSE(Q1, y) +
  MSE(Q2, y)``; one Adam step for the encoder and one for the critic (the
  encoder learns from the critic only);
* actor update (after the critic step, with the *updated* critic): the
  actor sees the *detached* features of the augmented ``obs``; ``a =
  clamp(mu(h) + clip(sigma eps, -0.3, 0.3))`` (the official
  ``dist.sample(clip=stddev_clip)``), loss ``-min(Q1, Q2)(h, a)`` (DDPG, no
  entropy term); Adam 1e-4 for encoder, critic and actor;
* exploration sigma ``linear(1.0, 0.1, 100_000)`` over *agent* steps
  (:func:`stddev`; 500k for the paper's medium tasks); acting noise is
  unclipped (:func:`act`); the first 2000 agent steps act uniformly at
  random and one update runs every 2 agent steps (runtime:
  :class:`rlfunc.runtime.learners.PixelLearner`);
* init: orthogonal (Linear, gain 1; conv, ReLU gain), zero bias.

Named deviations of the replay (:class:`rlfunc.replay.pixels.PixelReplay`)
from the official ``replay_buffer.py``: after a *termination* the episode's
last ``n - 1`` steps start windows too, cut at the termination (discount 0),
where the official ``ReplayBuffer._sample`` draws ``idx`` only up to ``len -
n + 1`` in every episode, so those steps never start a window there
(DeepMind Control's tasks, all but ``lqr``, end by time limit only, and there
both draw the same starts); the windows of the running episode are sampled too (official: only
finished episodes, fetched every 1000 samples); ``train.replay_size`` counts
frames (official ``replay_buffer_size``: transitions).

The agent step that the sigma schedule reads is ``state["agent_step"]``: the
caller (the learner) writes it before each update; :func:`update` never
advances it (``state["step"]`` counts updates). Frames and agent steps are
distinct: one agent step is ``action_repeat`` env frames.

Randomness is explicit: ``update(state, batch, noise)`` takes the shifts and
the standard-normal draws it needs (:func:`draw_noise`, drawn on the device).
Without ``noise`` it draws them from torch's global generator, which is fine
eagerly but differs between eager and compiled code (and is refused under
``torch.vmap(..., randomness="error")``: a population passes each member's noise).

Settings as data (:data:`HPARAMS`): ``lr`` (all three optimizers) and ``tau``
are read from ``state["hparams", name]`` (0-dim tensors) when present, else
from :class:`Config`, so the members of a population
(:mod:`rlfunc.core.population`: ``torch.vmap(update)`` over stacked states)
may differ in them; a state without ``hparams`` (what :func:`init` returns)
runs the float path, unchanged. The discount is already data: the replay's
``discount`` (``gamma^n``), so a per-member ``gamma`` is the replay's
setting, not the update's. The whole update vmaps (tested against
single-member updates).

Options beyond the paper (sizes of the encoder, trunk and heads) exist so
that tests and CPU benchmarks can run small versions; every default is the
paper's. Learning-rate schedules are an option too (the official rate is a
constant 1e-4): ``lr_schedule`` (:class:`rlfunc.core.optim.LRSchedule`, e.g.
``{kind: cosine, warmup_updates: 1000, decay_updates: 200000, end_factor:
0.1}``) applies to both optimizers, ``actor_lr_schedule`` replaces it for the
actor and ``critic_lr_schedule`` for the critic and the encoder (their Adam
steps go together); counts are updates (one per ``update_every`` agent
steps), and the metrics then include ``actor_lr`` and ``critic_lr``.

Usage, one update by hand on tiny images (a whole training script:
``rlfunc.examples.drqv2_dmc``)::

    >>> import gymnasium as gym, numpy as np, torch
    >>> from tensordict import TensorDict
    >>> from rlfunc.algos import drqv2
    >>> config = drqv2.Config(encoder_channels=(4,), encoder_strides=(2,), feature_dim=8, hidden_dim=16,
    ...                       pad=1, frame_stack=2)
    >>> obs_space = gym.spaces.Box(0, 255, (6, 12, 12), np.uint8)   # 2 stacked RGB frames
    >>> state = drqv2.init(config, obs_space, gym.spaces.Box(-1, 1, (1,)), seed=0)
    >>> B = 4                                                  # rows from PixelReplay.sample
    >>> batch = TensorDict({"obs": torch.randint(256, (B, 6, 12, 12), dtype=torch.uint8),
    ...                     "action": torch.rand(B, 1) * 2 - 1, "reward": torch.randn(B),
    ...                     "discount": torch.full((B,), 0.99 ** 3),
    ...                     "next_obs": torch.randint(256, (B, 6, 12, 12), dtype=torch.uint8)}, batch_size=[B])
    >>> noise = drqv2.draw_noise(config, B, 1, generator=torch.Generator().manual_seed(0))
    >>> state, metrics = drqv2.update(state, batch, noise)
    >>> drqv2.act(state["params"], batch["obs"][:1], deterministic=True, config=config).shape
    torch.Size([1, 1])
"""

from __future__ import annotations

import dataclasses
import math

import torch
from tensordict import TensorDict
from torch.func import grad_and_value

from rlfunc.algos import _checks, _hparams, _inputs
from rlfunc.core import nets
from rlfunc.core.augment import draw_shift, random_shift
from rlfunc.core.dists import clipped_normal_sample
from rlfunc.core.optim import Adam, LRSchedule, last_lr, scheduled_lr
from rlfunc.core.targets import polyak

__all__ = [
    "Config",
    "HPARAMS",
    "init",
    "draw_noise",
    "stddev",
    "encode",
    "actor_apply",
    "critic_apply",
    "compute_target",
    "critic_loss",
    "actor_loss",
    "update",
    "act",
]

_LOG_2PI = math.log(2.0 * math.pi)

HPARAMS = ("lr", "tau")
"""The :class:`Config` fields :func:`update` reads from ``state["hparams", name]`` when
present (settings as data, module doc): ``lr`` for the encoder, critic and actor
optimizers, ``tau`` for the target critic."""


@dataclasses.dataclass(frozen=True)
class Config:
    """DrQ-v2 hyperparameters; defaults are the official code's (easy DMC tasks)."""

    lr: float = 1e-4
    lr_schedule: LRSchedule | None = None  # option, both optimizers; null: constant (the official rate)
    actor_lr_schedule: LRSchedule | None = None  # replaces lr_schedule for the actor
    critic_lr_schedule: LRSchedule | None = None  # ... for the critic and the encoder
    batch_size: int = 256
    gamma: float = 0.99
    nstep: int = 3
    tau: float = 0.01
    update_every: int = 2  # agent steps per update
    feature_dim: int = 50
    hidden_dim: int = 1024
    encoder_channels: tuple[int, ...] = (32, 32, 32, 32)
    encoder_strides: tuple[int, ...] = (2, 1, 1, 1)
    pad: int = 4
    stddev_init: float = 1.0
    stddev_final: float = 0.1
    stddev_duration: int = 100_000  # agent steps; 500_000 for medium tasks
    stddev_clip: float = 0.3
    frame_stack: int = 3

    def __post_init__(self) -> None:
        _checks.check_finite(self)
        _checks.positive_int(self, "nstep", "update_every", "batch_size", "feature_dim", "hidden_dim")
        _checks.positive_int(self, "stddev_duration", "frame_stack")
        _checks.nonnegative_int(self, "pad")
        _checks.discount(self, "gamma")
        _checks.fraction(self, "tau")
        _checks.positive_float(self, "lr", "stddev_clip")
        _checks.lr_schedules(self, "lr_schedule", "actor_lr_schedule", "critic_lr_schedule")
        _checks.nonnegative_float(self, "stddev_init", "stddev_final")
        if self.stddev_final > self.stddev_init:
            raise ValueError(
                f"stddev_final must not exceed stddev_init ({self.stddev_init}): the schedule decays; "
                f"got {self.stddev_final}."
            )
        _checks.layer_sizes(self, "encoder_channels")
        _checks.layer_sizes(self, "encoder_strides")
        if len(self.encoder_channels) != len(self.encoder_strides):
            raise ValueError(
                f"encoder_channels and encoder_strides need one entry per conv layer, got "
                f"{list(self.encoder_channels)} and {list(self.encoder_strides)}."
            )


def stddev(config: Config, step: torch.Tensor | int) -> torch.Tensor:
    """Exploration sigma at agent step ``step``: the official ``utils.schedule``
    ``linear(init, final, duration)``: ``(1 - mix) init + mix final`` with
    ``mix = clip(step / duration, 0, 1)``. A pure function of a (tensor) step.
    """
    step = torch.as_tensor(step)
    mix = torch.clamp(step.to(torch.float32) / float(config.stddev_duration), 0.0, 1.0)
    return (1.0 - mix) * config.stddev_init + mix * config.stddev_final


def _check_spaces(obs_space, act_space) -> tuple[tuple[int, int, int], int]:
    import gymnasium as gym

    if not isinstance(act_space, gym.spaces.Box) or len(act_space.shape) != 1:
        raise ValueError(f"DrQ-v2 needs a continuous 1-D Box action space, got {act_space}.")
    _inputs.check_finite_bounds("DrQ-v2", act_space, "squashes")
    if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 3:
        raise ValueError(
            f"DrQ-v2 needs image observations [C, H, W] (e.g. 9x84x84 stacked RGB frames), got {obs_space}; "
            "use a pixel env (dmc/... ids, or the 'pixels' wrapper) or REDQ for vector observations."
        )
    return tuple(int(s) for s in obs_space.shape), int(act_space.shape[0])


def _trunk_init(in_dim: int, feature_dim: int, gen: torch.Generator) -> TensorDict:
    """``Linear(in, feature) -> LayerNorm -> Tanh`` as an MLP with one layer and ``norm0``."""
    trunk = nets.mlp_init((in_dim, feature_dim), init="orthogonal", generator=gen)
    trunk["norm0"] = TensorDict(
        {"weight": torch.ones(feature_dim), "bias": torch.zeros(feature_dim)}, batch_size=[]
    )
    return trunk


def _trunk_apply(trunk: TensorDict, h: torch.Tensor) -> torch.Tensor:
    return nets.mlp_apply(trunk, h, activation="tanh", activate_last=True)


def init(
    config: Config,
    obs_space,
    act_space,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> TensorDict:
    """Initial training state for an image observation space and a Box action space.

    ``params``: ``encoder`` (conv layers), ``actor`` (``trunk``, ``policy``),
    ``critic`` (``trunk``, ``q`` stacked ``[2]``); ``target``: ``critic``;
    ``opt``: one Adam state each for encoder, critic and actor; ``step``
    (updates done) and ``agent_step`` (what the sigma schedule reads).
    """
    if not isinstance(config, Config):
        raise ValueError(f"drqv2.init: config must be a drqv2.Config, got a {type(config).__name__}.")
    obs_shape, act_dim = _check_spaces(obs_space, act_space)
    seed = _inputs.check_seed(seed, "drqv2.init")
    device = _inputs.check_device_arg(device, "drqv2.init")
    if config.pad >= min(obs_shape[1:]):  # the shift would move the whole image out of its frame
        raise ValueError(
            f"pad={config.pad} is not smaller than the {obs_shape[1]}x{obs_shape[2]} images; the random shift "
            "moves an image by up to pad pixels (DrQ-v2: 4 on 84x84), so set pad below the image size."
        )
    gen = torch.Generator(device="cpu").manual_seed(seed)
    encoder = nets.conv_encoder_init(obs_shape[0], config.encoder_channels, generator=gen)
    c, h, w = nets.conv_encoder_output_shape(obs_shape, config.encoder_channels, config.encoder_strides)
    repr_dim = c * h * w
    f, hd = config.feature_dim, config.hidden_dim
    actor = TensorDict(
        {
            "trunk": _trunk_init(repr_dim, f, gen),
            "policy": nets.mlp_init((f, hd, hd, act_dim), init="orthogonal", generator=gen),
        },
        batch_size=[],
    )
    critic = TensorDict(
        {
            "trunk": _trunk_init(repr_dim, f, gen),
            "q": nets.ensemble_init(2, lambda: nets.mlp_init((f + act_dim, hd, hd, 1), init="orthogonal", generator=gen)),
        },
        batch_size=[],
    )
    opt = Adam(lr=config.lr)
    state = TensorDict(
        {
            "params": TensorDict({"encoder": encoder, "actor": actor, "critic": critic}, batch_size=[]),
            "target": TensorDict({"critic": critic.clone()}, batch_size=[]),
            "opt": TensorDict(
                {"encoder": opt.init(encoder), "critic": opt.init(critic), "actor": opt.init(actor)}, batch_size=[]
            ),
            "step": torch.zeros((), dtype=torch.int64),
            "agent_step": torch.zeros((), dtype=torch.int64),
        },
        batch_size=[],
    ).to(device)
    state.set_non_tensor("config", config)
    return state


def draw_noise(
    config: Config,
    batch_size: int,
    act_dim: int,
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> TensorDict:
    """Every random draw one :func:`update` needs: ``shift_obs [B, 2]`` and
    ``shift_next_obs [B, 2]`` (independent integer offsets in ``[0, 2 pad]``),
    ``next_action [B, A]`` and ``action [B, A]`` (standard normal)."""
    return TensorDict(
        {
            "shift_obs": draw_shift(batch_size, config.pad, generator=generator, device=device),
            "shift_next_obs": draw_shift(batch_size, config.pad, generator=generator, device=device),
            "next_action": torch.randn((batch_size, act_dim), generator=generator, device=device),
            "action": torch.randn((batch_size, act_dim), generator=generator, device=device),
        },
        batch_size=[],
        device=device,
    )


def encode(config: Config, encoder: TensorDict, obs: torch.Tensor) -> torch.Tensor:
    """Conv features ``[B, repr]`` of images ``obs [B, C, H, W]`` (0..255)."""
    return nets.conv_encoder_apply(encoder, obs, strides=config.encoder_strides)


def actor_apply(actor: TensorDict, h: torch.Tensor) -> torch.Tensor:
    """Policy mean ``tanh(policy(trunk(h)))`` in (-1, 1), ``[B, A]``."""
    return torch.tanh(nets.mlp_apply(actor["policy"], _trunk_apply(actor["trunk"], h)))


def critic_apply(critic: TensorDict, h: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """Twin Q-values ``[2, B]`` of features ``h [B, repr]`` and ``action [B, A]``."""
    x = torch.cat([_trunk_apply(critic["trunk"], h), action], dim=-1)
    return nets.ensemble_apply(critic["q"], x, mode="loop").squeeze(-1)


def compute_target(
    config: Config,
    actor: TensorDict,
    target_critic: TensorDict,
    next_h: torch.Tensor,
    reward: torch.Tensor,
    discount: torch.Tensor,
    std: torch.Tensor,
    noise: torch.Tensor,
) -> torch.Tensor:
    """``y [B] = reward + discount * min(Q'_1, Q'_2)(next_h, a')`` without gradient.

    ``a'`` is the online actor's mean plus ``clip(std * noise, -stddev_clip,
    stddev_clip)``, clamped to (-1, 1). ``discount`` is ``gamma^n`` (0 where
    the window ended in a termination), as the replay returns it.
    """
    with torch.no_grad():
        mean = actor_apply(actor, next_h)
        next_action = clipped_normal_sample(mean, std, noise, clip=config.stddev_clip)
        q = critic_apply(target_critic, next_h, next_action).min(dim=0).values
        return reward + discount * q


def critic_loss(
    params: TensorDict, config: Config, obs: torch.Tensor, action: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, TensorDict]:
    """``MSE(Q1, y) + MSE(Q2, y)``; ``params`` holds ``encoder`` and ``critic``.

    ``obs`` are augmented images: the gradient reaches the encoder through
    this loss only. ``aux["h"]`` are the (detached) features the actor uses.
    """
    h = encode(config, params["encoder"], obs)
    q = critic_apply(params["critic"], h, action)  # [2, B]
    loss = (q - y.unsqueeze(0)).pow(2).mean(dim=1).sum()
    aux = TensorDict({"h": h.detach(), "q1": q[0].mean().detach(), "q2": q[1].mean().detach()}, batch_size=[])
    return loss, aux


def actor_loss(
    actor: TensorDict,
    config: Config,
    critic: TensorDict,
    h: torch.Tensor,
    std: torch.Tensor,
    noise: torch.Tensor,
) -> tuple[torch.Tensor, TensorDict]:
    """``-mean_b min(Q1, Q2)(h, a)`` with ``a = clamp(mu(h) + clip(std * noise, 0.3))``.

    ``h`` are detached features (the encoder gets no actor gradient) and
    ``critic`` is passed as data (no critic gradient is used). ``aux``:
    the Normal log-probability of the action and the policy entropy (the
    official metrics ``actor_logprob`` and ``actor_ent``).
    """
    mean = actor_apply(actor, h)
    action = clipped_normal_sample(mean, std, noise, clip=config.stddev_clip)
    q = critic_apply(critic, h, action).min(dim=0).values
    loss = -q.mean()
    with torch.no_grad():
        log_std = torch.log(std) * torch.ones_like(mean)
        log_prob = (-0.5 * ((action - mean) / std).pow(2) - log_std - 0.5 * _LOG_2PI).sum(-1)
        entropy = (0.5 + 0.5 * _LOG_2PI + log_std).sum(-1)
    return loss, TensorDict({"log_prob": log_prob.mean(), "entropy": entropy.mean()}, batch_size=[])


def _check_images(config: Config, params: TensorDict, images: torch.Tensor, where: str, name: str, lead: int) -> None:
    """``images [*lead, C, H, W]`` fit the encoder and the trunks ``init`` built (shapes only; skipped
    under ``torch.compile``, as :mod:`rlfunc.algos._inputs`)."""
    if torch.compiler.is_compiling():
        return
    if not isinstance(images, torch.Tensor) or images.dim() != lead + 3 or images.is_complex():
        got = list(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
        raise ValueError(f"{where}: {name} must be images [{'B, ' * lead}C, H, W], got {got}.")
    channels = params["encoder", "0", "weight"].shape[1]
    c, h, w = images.shape[lead:]
    in_dim = params["actor", "trunk", "0", "weight"].shape[1]
    try:
        out = nets.conv_encoder_output_shape((c, h, w), config.encoder_channels, config.encoder_strides)
        fits = c == channels and out[0] * out[1] * out[2] == in_dim
    except ValueError:
        fits = False
    if not fits:
        hint = " (channels first: permute [H, W, C] frames)" if images.shape[-1] == channels and c != channels else ""
        raise ValueError(
            f"{where}: {name} has shape {list(images.shape)} but the networks were built for {channels}-channel "
            f"images of the observation space given to init{hint}; pass [{'B, ' * lead}C, H, W] frames of that size."
        )


def _check_update_inputs(config: Config, state: TensorDict, batch: TensorDict, noise: TensorDict | None) -> None:
    """One sentence for a batch or noise :func:`update` cannot use (shapes, dtypes, keys, devices
    only, no host sync; skipped under ``torch.compile``: :mod:`rlfunc.algos._inputs`)."""
    if torch.compiler.is_compiling():
        return
    where = "drqv2.update"
    b = batch.batch_size[0]
    if b < 1:
        raise ValueError(f"{where}: the batch is empty (batch_size [0]); B must be at least 1.")
    params = state["params"]
    for key in ("obs", "next_obs"):
        _check_images(config, params, batch[key], where, f"batch[{key!r}]", 1)
    policy = params["actor", "policy"]
    policy_w = policy[str(nets.num_linear_layers(policy) - 1), "weight"]
    act_dim = policy_w.shape[0]
    _inputs.check_tensor(where, "batch['action']", batch["action"], [(b, act_dim)], dtype="float", labels=["B", "A"])
    for key in ("reward", "discount"):
        _inputs.check_tensor(where, f"batch[{key!r}]", batch[key], [(b,)], dtype="real", labels=["B"])
    if noise is not None:
        _inputs.check_noise(
            where, noise,
            {"shift_obs": (b, 2), "shift_next_obs": (b, 2), "next_action": (b, act_dim), "action": (b, act_dim)},
            "drqv2.draw_noise(config, B, A)",
            dtypes={"shift_obs": "integer", "shift_next_obs": "integer", "next_action": policy_w.dtype, "action": policy_w.dtype},
        )
    _inputs.check_device(where, params["encoder", "0", "weight"], {"batch": batch, "noise": noise})


def _check_batch(batch: TensorDict) -> None:
    if not isinstance(batch, TensorDict):
        raise ValueError(f"batch must be a TensorDict of batch_size [B], got a {type(batch).__name__}.")
    if batch.batch_dims != 1:
        raise ValueError(f"batch must have batch_size [B], got {list(batch.batch_size)}.")
    for key in ("obs", "action", "reward", "discount", "next_obs"):
        if key not in batch.keys():
            raise ValueError(
                f"batch is missing {key!r}; DrQ-v2 needs obs, action, reward, discount (gamma^n, 0 after a "
                "termination) and next_obs, as PixelReplay.sample returns them."
            )
    if batch["obs"].dim() != 4:
        raise ValueError(f"batch['obs'] must be images [B, C, H, W], got shape {tuple(batch['obs'].shape)}.")


def update(state: TensorDict, batch: TensorDict, noise: TensorDict | None = None) -> tuple[TensorDict, TensorDict]:
    """One DrQ-v2 update (the official ``DrQV2Agent.update``). Pure.

    ``batch`` (batch size ``[B]``): ``obs [B, C, H, W]`` and ``next_obs``
    (uint8 or float, 0..255), ``action [B, A]``, ``reward [B]`` (n-step
    discounted sum), ``discount [B]`` (``gamma^n``, 0 after a termination).
    Order: augment obs and next_obs (independent shifts); encode next_obs with
    the online encoder (no gradient); target; critic + encoder step; actor
    step on the detached obs features against the updated critic; polyak
    target critic. Returns ``(new_state, metrics)`` with 0-dim tensor metrics.
    A ``state["hparams"]`` entry (``lr``, ``tau``) replaces its :class:`Config`
    field and is carried to the new state.
    """
    config: Config = _inputs.state_config(state, Config, "drqv2.update", "drqv2.init")
    _check_batch(batch)
    _check_update_inputs(config, state, batch, noise)
    b = batch.batch_size[0]
    act_dim = batch["action"].shape[-1]
    if noise is None:
        if _inputs.under_vmap(batch["action"]):
            raise _inputs.NoiseUnderVmapError(
                "drqv2.update under torch.vmap needs each member's noise (with randomness='error' it cannot draw); "
                "pass population.draw_per_member(lambda g: drqv2.draw_noise(config, B, A, generator=g), generators)."
            )
        noise = draw_noise(config, b, act_dim, device=batch["obs"].device)
    params = state["params"]
    encoder, actor, critic = params["encoder"], params["actor"], params["critic"]
    std = stddev(config, state["agent_step"])
    critic_opt_fn, actor_opt_fn = _critic_opt(config), _actor_opt(config)
    hparams = _hparams.of(state)

    obs = random_shift(batch["obs"].float(), config.pad, noise["shift_obs"])
    next_obs = random_shift(batch["next_obs"].float(), config.pad, noise["shift_next_obs"])
    with torch.no_grad():
        next_h = encode(config, encoder, next_obs)
    y = compute_target(
        config,
        actor,
        state["target", "critic"],
        next_h,
        batch["reward"].float(),
        batch["discount"].float(),
        std,
        noise["next_action"],
    )

    ec = TensorDict({"encoder": encoder, "critic": critic}, batch_size=[])
    grads, (c_loss, c_aux) = grad_and_value(critic_loss, has_aux=True)(ec, config, obs, batch["action"].float(), y)
    critic, critic_opt = critic_opt_fn.step(
        grads["critic"], state["opt", "critic"], critic,
        lr=_hparams.rate(critic_opt_fn, state["opt", "critic"], hparams, "lr"),
    )
    encoder, encoder_opt = critic_opt_fn.step(
        grads["encoder"], state["opt", "encoder"], encoder,
        lr=_hparams.rate(critic_opt_fn, state["opt", "encoder"], hparams, "lr"),
    )

    a_grads, (a_loss, a_aux) = grad_and_value(actor_loss, has_aux=True)(
        actor, config, critic.detach(), c_aux["h"], std, noise["action"]
    )
    actor, actor_opt = actor_opt_fn.step(
        a_grads, state["opt", "actor"], actor, lr=_hparams.rate(actor_opt_fn, state["opt", "actor"], hparams, "lr")
    )
    target_critic = polyak(state["target", "critic"], critic, _hparams.setting(hparams, config, "tau"))

    new_state = TensorDict(
        {
            "params": TensorDict({"encoder": encoder, "actor": actor, "critic": critic}, batch_size=[]),
            "target": TensorDict({"critic": target_critic}, batch_size=[]),
            "opt": TensorDict({"encoder": encoder_opt, "critic": critic_opt, "actor": actor_opt}, batch_size=[]),
            "step": state["step"] + 1,
            "agent_step": state["agent_step"],
        },
        batch_size=[],
    )
    _hparams.carry(new_state, hparams)
    new_state.set_non_tensor("config", config)
    metrics = TensorDict(
        {
            "critic_loss": c_loss.detach(),
            "critic_q1": c_aux["q1"],
            "critic_q2": c_aux["q2"],
            "critic_target_q": y.mean(),
            "actor_loss": a_loss.detach(),
            "actor_logprob": a_aux["log_prob"],
            "actor_ent": a_aux["entropy"],
            "stddev": std,
        },
        batch_size=[],
    )
    scheduled = config.lr_schedule is not None or config.actor_lr_schedule is not None
    if scheduled or config.critic_lr_schedule is not None or _hparams.entry(hparams, "lr") is not None:
        base = _hparams.entry(hparams, "lr")
        metrics["actor_lr"] = last_lr(actor_opt_fn, actor_opt, std, base)
        metrics["critic_lr"] = last_lr(critic_opt_fn, critic_opt, std, base)
    return new_state, metrics


def _critic_opt(config: Config) -> Adam:
    """Adam for the critic and the encoder: ``lr``, scheduled by ``critic_lr_schedule`` or ``lr_schedule``."""
    return Adam(lr=scheduled_lr(config.lr, config.critic_lr_schedule, config.lr_schedule))


def _actor_opt(config: Config) -> Adam:
    """Adam for the actor: ``lr``, scheduled by ``actor_lr_schedule`` or ``lr_schedule``."""
    return Adam(lr=scheduled_lr(config.lr, config.actor_lr_schedule, config.lr_schedule))


def act(
    params: TensorDict,
    obs: torch.Tensor,
    noise: torch.Tensor | None = None,
    *,
    deterministic: bool = False,
    config: Config | None = None,
    step: torch.Tensor | int = 0,
) -> torch.Tensor:
    """Action in ``[-1, 1]`` for images ``obs [B, C, H, W]`` (0..255).

    ``deterministic=True``: the policy mean (evaluation, the official
    ``dist.mean``). Otherwise ``clamp(mean + sigma(step) * noise)`` with
    *unclipped* noise (the official ``dist.sample(clip=None)``), ``noise``
    standard normal ``[B, A]`` in the parameters' dtype (drawn from the global generator if omitted).
    """
    config = config or Config()
    if not isinstance(params, TensorDict) or "encoder" not in params.keys() or "actor" not in params.keys():
        raise ValueError("drqv2.act: params must be the state's parameters, state['params'] (encoder, actor, critic).")
    with torch.no_grad():
        if isinstance(obs, torch.Tensor) and obs.dim() == 3:
            return act(params, obs.unsqueeze(0), None if noise is None else noise.unsqueeze(0),
                       deterministic=deterministic, config=config, step=step)[0]
        if nets.num_linear_layers(params["encoder"]) != len(config.encoder_strides):
            raise ValueError(
                f"drqv2.act: the encoder has {nets.num_linear_layers(params['encoder'])} conv layers but the config "
                f"{len(config.encoder_strides)}; pass config=state['config'] (act uses drqv2.Config() without one)."
            )
        _check_images(config, params, obs, "drqv2.act", "obs", 1)
        mean = actor_apply(params["actor"], encode(config, params["encoder"], obs))
        if deterministic:
            return mean
        if noise is None:
            noise = torch.randn_like(mean)
        else:  # noise drawn for another batch would broadcast silently (one env's draw for all)
            # and noise of another dtype would promote the action (float64 noise, float64 actions)
            _inputs.check_tensor("drqv2.act", "noise", noise, [tuple(mean.shape)], dtype=mean.dtype, labels=["B", "A"])
        return clipped_normal_sample(mean, stddev(config, step), noise, clip=None)
