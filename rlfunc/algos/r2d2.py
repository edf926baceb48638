"""R2D2: Recurrent Replay Distributed DQN (Kapturowski et al., ICLR 2019).

Pure functions over one TensorDict state, for discrete actions. Reference
code: Acme's ``agents/jax/r2d2`` (learner, actor, config) and rlax
(``transformed_n_step_q_learning``, ``signed_hyperbolic``). Faithful by
default:

* **network**: encoder -> LSTM -> dueling head. The LSTM is fed the encoder
  features concatenated with the one-hot *previous action* and the *previous
  reward*, squashed with ``tanh`` as in Acme's ``OAREmbedding``; the head is
  Acme's ``DuellingMLP`` (value and advantage MLPs with one hidden layer each,
  ``q = v + a - mean_a a``). ``dueling=False`` gives one MLP for Q.
  ``action_input`` / ``reward_input`` switch the extra inputs off.
* **sequences**: replayed windows of ``burn_in + sequence_length`` steps
  (40 + 80) that start every ``sequence_period`` (40) steps inside one
  episode, padded and masked at the episode's end, each with the actor's
  recurrent state *before* its first step
  (:class:`rlfunc.replay.prioritized.PrioritizedSequenceReplay`, built from
  :func:`replay_kwargs`);
* **burn-in**: the online AND the target network are unrolled over the first
  ``burn_in`` steps from the stored state; those steps get no loss, and the
  gradient is stopped at the burned-in state (the paper: burn-in only
  produces a start state). ``burn_in_stop_gradient=False`` is Acme's variant,
  which back-propagates through the burn-in unroll;
* **target**: n-step (n = 5) double Q-learning with value rescaling,
  ``y_t = h(sum_k gamma^k r_{t+k} + gamma^n h^-1(Q'(s_{t+n}, argmax_a Q(s_{t+n}, a))))``,
  ``h(x) = sign(x)(sqrt(|x|+1) - 1) + 1e-3 x``; termination stops the sum,
  truncation bootstraps (:func:`rlfunc.core.returns.transformed_n_step_q_learning`);
* **loss**: ``0.5 * sum_t td_t^2`` over each sequence's valid steps, times
  the sequence's importance weight, averaged over the batch (Acme's learner:
  squared error summed over time, no Huber, rewards not clipped);
* **priorities**: ``0.9 max_t |td_t| + 0.1 mean_t |td_t|`` over valid steps,
  returned by :func:`loss` in ``aux["priorities"]`` and by :func:`update` in
  ``metrics["priorities"]`` (``[B]``; every other metric is 0-dim) for
  :meth:`PrioritizedSequenceReplay.update_priorities`; priority exponent 0.9,
  importance exponent 0.6 (the replay's; Acme's learner weights the loss so,
  max-normalised). The paper's text (Section 2.3) says it found no benefit
  from importance weighting and omitted it: ``importance_exponent=0`` gives
  every sequence weight 1, that reading;
* **optimiser and target**: Adam, lr 1e-4 and eps 1e-3 (the paper; Acme's
  defaults are lr 1e-3 and optax's eps 1e-8), batch 64, gamma 0.997; target network copied every 2,500
  updates;
* **acting**: epsilon-greedy with a fixed epsilon per actor,
  ``eps_i = 0.4^(1 + 7 i / (N - 1))`` (:func:`actor_epsilons`; Ape-X and the
  paper); evaluation greedy (Acme's ``evaluation_epsilon`` 0). Acme's JAX actor
  covers the same range differently: it draws an actor's epsilon again at every
  episode start, uniformly from ``jnp.logspace(1, 8, 256, base=0.4)``
  (``agents/jax/r2d2/actor.py`` ``get_actor_core``, whose ``init`` runs in
  ``GenericActor.observe_first``; ``num_epsilons`` 256);
* **initialisation** (not in the paper; Acme's networks, which are haiku's
  modules with their default initialisers): ``hk.Linear``/``hk.Conv2D``'s
  ``TruncatedNormal(1 / sqrt(fan_in))`` weights (``nets.haiku_normal_``: a unit
  normal cut at +-2, scaled, so variance 0.774 / fan_in) with zero biases in
  every layer, ``hk.LSTM`` as one such linear layer over ``[x, h]``, and its
  +1 on the forget gate (``init`` and ``lstm_init`` ``"haiku"``,
  ``forget_bias=1.0``; at init the cell keeps sigmoid(1) = 0.73 of itself per
  step instead of about 0.5). PyTorch's own (``"torch_default"``,
  ``forget_bias=0``: ``nn.Linear``/``nn.LSTM`` uniform weights and biases) was
  the default in 0.1.0 and stays an option, as does flax's ``"lecun_normal"``
  (variance exactly 1 / fan_in, 1.29x haiku's). Measured in
  ``docs/algorithms/r2d2.md`` (results).

Options beyond the paper, off by default: ``lr_schedule`` (a learning-rate
schedule, :class:`rlfunc.core.optim.LRSchedule`: constant, linear or cosine
with optional warm-up, counted in updates; the paper's rate is constant), e.g.
``{kind: linear, decay_updates: 25000, end_factor: 0.1}``; the older
``lr_decay_updates``/``lr_end`` (linear decay to ``lr_end`` over that many
updates) is kept as its alias and computes the same rates bit for bit
(:func:`rlfunc.algos._qstate.q_lr`).

Encoders (``encoder``, shared with :mod:`rlfunc.algos.drqn`): ``"nature"`` is
the paper's Atari torso (the Nature DQN convolutions; with ``encoder_sizes=()``
their flattened output, with the previous action and reward, feeds the LSTM
directly, as in Acme's TF ``R2D2AtariNetwork``, ``acme/tf/networks/atari.py``; Acme's
newer JAX ``R2D2AtariNetwork`` uses ``DeepAtariTorso`` instead, the IMPALA ResNet with a
256-unit layer, not offered here); ``"minatar"`` is MinAtar's one
3x3 conv (Young & Tian 2019); ``"mlp"`` (default) is for vector observations.

Deviations, each a named option: an MLP encoder (``encoder_sizes=(512,)``,
ReLU) in place of the Atari conv torso, for vector observations (necessary);
replay capacity and warm-up counted in sequences as Acme does (the
runtime's ``train.replay_size``, default 100,000, and
``train.learning_starts``, default 50,000 sequences stored, Acme's
``max_replay_size`` and ``min_replay_size``: :mod:`rlfunc.runtime.registry`);
new sequences enter the replay with the largest priority seen so far (Schaul
et al. 2016; the paper's Ape-X actors compute initial priorities themselves,
Acme's adders insert at a constant 1.0, which is
``PrioritizedSequenceReplay(initial_priority=1.0)``); each trained step's TD
error bootstraps from the next observation stored with it, so all
``sequence_length`` steps are trained (Acme bootstraps from the window's own
observations: its windows are ``burn_in + trace_length + 1`` steps long, so
it trains all ``trace_length`` too). A faithful-size
network (LSTM 512) is slow on a 2-core CPU; runs on small tasks shrink
``encoder_sizes``, ``lstm_size``, ``head_sizes``, ``burn_in``,
``sequence_length``, ``sequence_period`` and ``target_period`` in their
config, each named there.

Episode ends, where Acme's adder and learner differ (DESIGN: terminated is
not truncated): a time-limit truncation bootstraps from the true final
observation through the n-step sum, and the zero-padded steps after an
episode's end are masked out of the loss and the priorities. Acme's
``SequenceAdder`` closes every episode with a zero-filled step whose discount
is 0 (``adders/reverb/utils.py`` ``final_step_like``), so its n > 1 returns
that reach that step stop there even after a time limit, and its learner puts
the TD errors of the zero-padded steps in the loss and the priorities.

Known consequence of the reference layout: a window that starts at an
episode's first step spends its burn-in on that episode's first ``burn_in``
steps, so those steps are never trained on (as in Acme).

Acting and the recurrent state: the agent's carry (:class:`Carry`) is
``(h, c, prev_action, prev_reward)``, everything it brings from one step to
the next. :func:`act` takes the previous action and reward explicitly (or
from the carry when ``None``) and ``reset`` flags for envs whose episode
starts at this observation; :func:`prepare_carry` applies the same three and
returns the state *before* the step -- what the replay stores
(``carry_to_td(prepare_carry(...))``). :func:`greedy_action` threads the
carry for :class:`rlfunc.runtime.policy.Policy`, which writes each reward
into the carry with :func:`prepare_carry` when told it
(``Policy.observe_reward``; :func:`rlfunc.runtime.evaluate.run_episodes`
does after every step, so evaluation feeds the network the inputs training
fed it). A caller that never reports rewards leaves ``prev_reward`` at its
reset value 0 (or turn ``reward_input`` off in the config).

In the runtime (:class:`rlfunc.runtime.learners.R2D2Learner`) each member of
a gymnasium vector env is one actor with its own fixed epsilon, and the
Q-values of all actors are computed in one batched call per vector step
(central inference, SEED-RL style) with the learner's current parameters.

``update(state, batch)`` takes a ``[burn_in + sequence_length, B]`` batch
from the replay with keys ``obs``, ``action``, ``reward``, ``next_obs``,
``terminated``, ``mask``, ``init_carry`` (``h``, ``c``, ``prev_action``,
``prev_reward``) and optionally ``weight`` (importance weights, constant
along time). It is pure, has no host syncs and compiles with
``torch.compile(fullgraph=True)``.

Settings as data (:data:`HPARAMS`): ``lr`` and ``gamma`` are read from
``state["hparams", name]`` (0-dim tensors) when present, else from
:class:`Config`, so the members of a population (:mod:`rlfunc.core.population`:
``torch.vmap(update)`` over stacked states) may differ in them; a state
without ``hparams`` (what :func:`init` returns) runs the float path,
unchanged. ``update`` draws no noise, so it vmaps with ``randomness="error"``
(tested against single-member updates). A learning-rate schedule is relative
to the rate (a member's rate rescales it); the older ``lr_decay_updates`` /
``lr_end`` spelling's end rate is absolute, so a member decays from its own rate
to the same ``lr_end``, as its single run does (``_qstate.DecayToRate``).

Usage, acting and one update by hand (a whole training script:
``rlfunc.examples.r2d2_cartpole``)::

    >>> import gymnasium as gym, torch
    >>> from tensordict import TensorDict
    >>> from rlfunc.algos import r2d2
    >>> config = r2d2.Config(encoder_sizes=(16,), lstm_size=16, head_sizes=(16,), burn_in=2,
    ...                      sequence_length=4, sequence_period=2)
    >>> state = r2d2.init(config, gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), seed=0)
    >>> carry = r2d2.initial_carry(config, 3)               # 3 actors
    >>> before = r2d2.prepare_carry(carry, reset=torch.ones(3, dtype=torch.bool))  # stored with the step
    >>> noise = r2d2.draw_act_noise(3, generator=torch.Generator().manual_seed(0))
    >>> action, carry = r2d2.act(state["params"], torch.zeros(3, 4), None, None, before,
    ...                          r2d2.actor_epsilons(3), noise)
    >>> T, B = config.burn_in + config.sequence_length, 5   # windows from PrioritizedSequenceReplay
    >>> batch = TensorDict({"obs": torch.randn(T, B, 4), "action": torch.randint(2, (T, B)),
    ...                     "reward": torch.randn(T, B), "next_obs": torch.randn(T, B, 4),
    ...                     "terminated": torch.zeros(T, B, dtype=torch.bool),
    ...                     "mask": torch.ones(T, B, dtype=torch.bool),
    ...                     "init_carry": r2d2.carry_to_td(r2d2.initial_carry(config, B)).expand(T, B)},
    ...                    batch_size=[T, B])
    >>> state, metrics = r2d2.update(state, batch)
    >>> metrics["priorities"].shape                          # for replay.update_priorities
    torch.Size([5])
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch
from tensordict import TensorDict
from torch.func import grad_and_value

from rlfunc.algos import _checks, _hparams, _inputs, drqn
from rlfunc.algos._qstate import check_lr_decay, lr_metric, q_learning_state, q_optimizer
from rlfunc.core import nets
from rlfunc.core import returns
from rlfunc.core.exploration import actor_epsilons
from rlfunc.core.optim import LRSchedule, global_norm
from rlfunc.core.targets import periodic_copy

__all__ = [
    "Config",
    "HPARAMS",
    "Carry",
    "init",
    "initial_carry",
    "prepare_carry",
    "carry_to_td",
    "carry_from_td",
    "q_unroll",
    "q_step",
    "loss",
    "update",
    "act",
    "greedy_action",
    "draw_act_noise",
    "actor_epsilons",
    "replay_kwargs",
]


HPARAMS = ("lr", "gamma")
"""The :class:`Config` fields :func:`update` reads from ``state["hparams", name]`` when
present (settings as data, module doc)."""


@dataclasses.dataclass(frozen=True)
class Config:
    """R2D2 hyperparameters; defaults are the paper's / Acme's (module docstring)."""

    # network
    encoder: str = "mlp"  # "mlp" (vector obs), "nature" (the paper's Atari conv torso) or "minatar"
    encoder_sizes: tuple[int, ...] = (512,)  # MLP torso (after the conv torso when encoder is not "mlp")
    lstm_size: int = 512
    head_sizes: tuple[int, ...] = (512,)  # hidden layers of each dueling stream (Acme DuellingMLP)
    dueling: bool = True
    action_input: bool = True  # one-hot previous action into the LSTM
    reward_input: bool = True  # tanh(previous reward) into the LSTM (Acme OAREmbedding)
    # sequences
    burn_in: int = 40
    sequence_length: int = 80  # trained steps after the burn-in
    sequence_period: int = 40
    initial_state: str = "stored"  # "stored" (R2D2) or "zeros" (carry all 0; Acme use_core_state=False: LSTM state only)
    burn_in_stop_gradient: bool = True  # False: Acme's gradient through the burn-in unroll
    # learning
    batch_size: int = 64
    gamma: float = 0.997
    n_step: int = 5
    value_rescaling: bool = True
    rescale_eps: float = 1e-3
    lr: float = 1e-4
    lr_schedule: LRSchedule | None = None  # option, e.g. {kind: linear, decay_updates: 74000, end_factor: 0.1}
    lr_decay_updates: int | None = None  # old spelling of lr_schedule {kind: linear, decay_updates: N}, with lr_end
    lr_end: float = 0.0
    adam_eps: float = 1e-3
    max_grad_norm: float | None = None
    target_period: int = 2_500
    priority_eta: float = 0.9  # 0.9 max + 0.1 mean |td|
    priority_exponent: float = 0.9
    importance_exponent: float = 0.6
    # acting
    epsilon_base: float = 0.4
    epsilon_alpha: float = 7.0
    eval_epsilon: float = 0.0
    # Read by the training runtime, not by update() (replay size and warm-up: train.replay_size, train.learning_starts):
    samples_per_insert: float = 4.0  # Acme's rate limiter; the paper's ~0.8 replays per observation would be ~0.4
    lstm_init: str = "haiku"  # hk.LSTM's (Acme's); "torch_default" (0.1.0's), "orthogonal", "lecun_normal" (flax's)
    forget_bias: float = 1.0  # added to the LSTM's forget-gate bias at init (hk.LSTM's constant; 0 with PyTorch's init)
    init: str = "haiku"  # linear and conv layers: haiku's (Acme's); "torch_default" (0.1.0's), "lecun_normal", ...

    def __post_init__(self) -> None:
        _checks.check_finite(self)
        _checks.check_booleans(self)
        _checks.positive_float(self, "lr", "adam_eps", "samples_per_insert")
        check_lr_decay(self)
        _checks.positive_int(self, "lstm_size", "sequence_length", "batch_size", "n_step", "target_period")
        _checks.nonnegative_int(self, "burn_in")
        _checks.layer_sizes(self, "encoder_sizes", allow_empty=True)
        _checks.layer_sizes(self, "head_sizes", allow_empty=True)
        total = self.burn_in + self.sequence_length
        if not isinstance(self.sequence_period, int) or not 1 <= self.sequence_period <= total:
            raise ValueError(
                f"sequence_period must be between 1 and burn_in + sequence_length ({total}), got {self.sequence_period}."
            )
        _checks.one_of(self, "initial_state", ("stored", "zeros"))
        _checks.one_of(self, "encoder", drqn.ENCODERS)
        _checks.discount(self, "gamma")
        _checks.nonnegative_float(self, "rescale_eps", "priority_exponent", "epsilon_alpha")
        _checks.optional_positive_float(self, "max_grad_norm", off="no clipping")
        _checks.probability(self, "priority_eta", "importance_exponent", "eval_epsilon")
        _checks.fraction(self, "epsilon_base")
        _checks.one_of(self, "init", _checks.LINEAR_INITS)
        _checks.one_of(self, "lstm_init", _checks.LSTM_INITS)


class Carry(NamedTuple):
    """What the recurrent agent carries between steps, one row per env.

    ``h``, ``c``: LSTM state ``[B, lstm_size]``; ``prev_action``: the action
    taken at the previous step ``[B]`` (int64; 0 at an episode start, as
    Acme's ``ObservationActionRewardWrapper``); ``prev_reward``: the reward
    received for it ``[B]`` (float; 0 at an episode start).
    """

    h: torch.Tensor
    c: torch.Tensor
    prev_action: torch.Tensor
    prev_reward: torch.Tensor


# ---------------------------------------------------------------- networks
def _space_dims(obs_space, act_space, encoder: str = "mlp") -> tuple[tuple[int, ...], int]:
    import gymnasium as gym

    if not isinstance(act_space, gym.spaces.Discrete):
        raise ValueError(
            f"R2D2 needs a Discrete action space, got {act_space}; use REDQ or DrQ-v2 for continuous actions."
        )
    if int(act_space.n) < 2:
        raise ValueError(f"R2D2 needs at least 2 actions, got {act_space}.")
    return drqn.check_obs_space(encoder, obs_space, "R2D2"), int(act_space.n)


def _network_init(config: Config, obs_shape: tuple[int, ...], num_actions: int, gen: torch.Generator) -> TensorDict:
    torso, torso_features = drqn.torso_init(config, obs_shape, gen)
    enc = tuple(config.encoder_sizes)
    features = enc[-1] if enc else torso_features
    lstm_in = features + num_actions * int(config.action_input) + int(config.reward_input)
    H, hidden = config.lstm_size, tuple(config.head_sizes)
    if config.dueling:
        head = nets.dueling_init(H, hidden, num_actions, init=config.init, generator=gen)
    else:
        head = TensorDict({"q": nets.mlp_init((H, *hidden, num_actions), init=config.init, generator=gen)}, [])
    return TensorDict(
        {
            **torso,
            "encoder": drqn.encoder_mlp_init(config, torso_features, gen),  # after the head: the generator order of before
            "lstm": nets.lstm_init(lstm_in, H, init=config.lstm_init, forget_bias=config.forget_bias, generator=gen),
            "head": head,
        },
        batch_size=[],
    )


def _last_layer(mlp: TensorDict) -> TensorDict:
    return mlp[str(nets.num_linear_layers(mlp) - 1)]


def _num_actions(params: TensorDict) -> int:
    head = params["head"]
    out = head["advantage"] if "advantage" in head.keys() else head["q"]
    return _last_layer(out)["weight"].shape[0]


def _embed(
    params: TensorDict, obs: torch.Tensor, prev_action: torch.Tensor, prev_reward: torch.Tensor, lead: int
) -> torch.Tensor:
    """LSTM input: ``concat(encoder(obs), one_hot(prev_action), tanh(prev_reward))`` (Acme ``OAREmbedding``).

    Which extras the network takes is read from the LSTM's input width (static
    shapes; ``init`` guarantees at least 2 actions, so the widths differ).
    """
    x = drqn.encode(params, obs, lead)
    num_actions = _num_actions(params)
    extra = params["lstm", "weight_ih"].shape[1] - x.shape[-1]
    if extra not in (0, 1, num_actions, num_actions + 1):
        raise ValueError(
            f"R2D2: the LSTM takes {params['lstm', 'weight_ih'].shape[1]} inputs but the encoder gives "
            f"{x.shape[-1]} features and there are {num_actions} actions; check the observation size."
        )
    parts = [x]
    if extra in (num_actions, num_actions + 1):
        # A comparison, not F.one_hot: torch < 2.13 checks one_hot's class range with a host read
        # (.item()), which breaks sync-free CUDA updates and graph capture.
        classes = torch.arange(num_actions, device=prev_action.device)
        parts.append((prev_action.long().unsqueeze(-1) == classes).to(x.dtype))
    if extra in (1, num_actions + 1):
        parts.append(torch.tanh(prev_reward.to(x.dtype)).unsqueeze(-1))
    return torch.cat(parts, dim=-1) if len(parts) > 1 else x


def _head(params: TensorDict, h: torch.Tensor) -> torch.Tensor:
    head = params["head"]
    if "advantage" in head.keys():
        return nets.dueling_apply(head, h)
    return nets.mlp_apply(head["q"], h)


def q_unroll(
    params: TensorDict,
    obs: torch.Tensor,
    prev_action: torch.Tensor,
    prev_reward: torch.Tensor,
    lstm_carry: tuple[torch.Tensor, torch.Tensor],
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Q-values over a sequence: ``obs [T, B, O]``, ``prev_action, prev_reward [T, B]``.

    ``prev_*[t]`` are the action and reward *before* ``obs[t]``. Returns
    ``(q [T, B, A], final (h, c))``. No resets inside: replayed windows never
    cross an episode boundary.
    """
    if obs.dim() != 3 and "torso" not in params.keys():
        raise ValueError(f"q_unroll expects time-major obs [T, B, O], got shape {tuple(obs.shape)}.")
    if tuple(prev_action.shape) != tuple(obs.shape[:2]) or tuple(prev_reward.shape) != tuple(obs.shape[:2]):
        raise ValueError(
            f"q_unroll: prev_action and prev_reward must be [T, B] = {list(obs.shape[:2])}, "
            f"got {list(prev_action.shape)} and {list(prev_reward.shape)}."
        )
    hs, lstm_carry = nets.lstm_unroll(params["lstm"], _embed(params, obs, prev_action, prev_reward, 2), lstm_carry)
    return _head(params, hs), lstm_carry


def _check_params(where: str, params) -> None:
    if not isinstance(params, TensorDict) or "lstm" not in params.keys():
        raise ValueError(f"{where}: params must be the state's parameters, state['params'] (with an 'lstm' entry).")


def _check_carry(where: str, carry) -> None:
    """A :class:`Carry` (``drqn``'s ``(h, c)`` or a stored TensorDict failed at unpacking)."""
    if not isinstance(carry, tuple) or len(carry) != 4 or not isinstance(carry[0], torch.Tensor) or carry[0].dim() < 1:
        raise ValueError(
            f"{where}: carry must be an r2d2.Carry (h, c, prev_action, prev_reward) as r2d2.initial_carry or "
            f"r2d2.carry_from_td gives it, got a {type(carry).__name__}."
        )


def q_step(params: TensorDict, obs: torch.Tensor, carry: Carry) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """One step: ``obs [B, O]`` and the carry before it -> ``(q [B, A], new (h, c))``."""
    _check_params("q_step", params)
    if obs.dim() != 2 and "torso" not in params.keys():
        raise ValueError(f"q_step expects obs [B, O], got shape {tuple(obs.shape)}.")
    width = drqn.obs_width(params)
    if width is not None:
        _inputs.check_tensor("q_step", "obs", obs, [(obs.shape[0], width)], dtype=drqn.obs_like(params).dtype, labels=["B", "O"])
    for name in ("prev_action", "prev_reward"):  # a carry for another number of envs
        _inputs.check_tensor("q_step", f"carry.{name}", getattr(carry, name), [(obs.shape[0],)], labels=["B"])
    x = _embed(params, obs, carry.prev_action, carry.prev_reward, 1)
    h, lstm_carry = nets.lstm_apply(params["lstm"], x, (carry.h, carry.c))
    return _head(params, h), lstm_carry


# ------------------------------------------------------------------- state
def init(
    config: Config,
    obs_space,
    act_space,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> TensorDict:
    """Initial training state: ``params``, ``target`` (a copy), ``opt`` (Adam), ``step``.

    ``params`` holds ``torso`` (the conv layers, for a pixel ``encoder``),
    ``encoder`` (MLP, ReLU after every layer), ``lstm``
    (``torch.nn.LSTM`` layout, input = features + one-hot action + reward),
    and ``head`` (``value`` and ``advantage`` MLPs, or ``q``). The static
    ``config`` is stored as a non-tensor entry.
    """
    if not isinstance(config, Config):
        raise ValueError(f"r2d2.init: config must be an r2d2.Config, got a {type(config).__name__}.")
    obs_shape, num_actions = _space_dims(obs_space, act_space, config.encoder)
    gen = torch.Generator(device="cpu").manual_seed(_inputs.check_seed(seed, "r2d2.init"))
    device = _inputs.check_device_arg(device, "r2d2.init")
    return q_learning_state(config, _network_init(config, obs_shape, num_actions, gen), device)


def initial_carry(config: Config, num_envs: int, device: torch.device | str | None = None) -> Carry:
    """Zero :class:`Carry` (start of every episode) for ``num_envs`` envs.

    ``h``, ``c`` ``[num_envs, lstm_size]`` float32, ``prev_action [num_envs]``
    int64 and ``prev_reward [num_envs]`` float32, all zeros.
    """
    h, c = nets.lstm_zero_carry(num_envs, config.lstm_size, device=device)
    return Carry(
        h,
        c,
        torch.zeros(num_envs, dtype=torch.int64, device=device),
        torch.zeros(num_envs, dtype=torch.float32, device=device),
    )


def prepare_carry(
    carry: Carry,
    prev_action: torch.Tensor | None = None,
    prev_reward: torch.Tensor | None = None,
    reset: torch.Tensor | None = None,
) -> Carry:
    """The carry *before* this step: the given previous action / reward written in,
    then everything zeroed for envs whose episode starts now (``reset [B]``).

    This is the recurrent state :func:`act` uses and the one the replay stores
    with a window's first step (``carry_to_td(prepare_carry(...))``). Each of
    ``prev_action`` (integer), ``prev_reward`` and ``reset`` holds one entry per
    env (``[B]``); another number of entries or a float action index is one
    ``ValueError`` sentence (:func:`act` also checks the indices' range).
    """
    return _prepare_carry("r2d2.prepare_carry", carry, prev_action, prev_reward, reset)


def _prepare_carry(where: str, carry: Carry, prev_action, prev_reward, reset, num_actions: int | None = None) -> Carry:
    """:func:`prepare_carry`, its input errors naming ``where``; with ``num_actions``, ``prev_action``'s
    range is checked too (a host read, eager and outside ``torch.vmap`` only: :func:`act` does it, the
    update does not -- a stored carry's indices are the replay's)."""
    _check_carry(where, carry)
    h, c, a, r = carry
    n = h.shape[0]
    if prev_action is not None:
        prev_action = _inputs.check_per_env(where, "prev_action", prev_action, n, "integer", h.device)
        if num_actions is not None and not torch.compiler.is_compiling() and not _inputs.under_vmap(prev_action):
            bad = prev_action[(prev_action < 0) | (prev_action >= num_actions)]
            if bad.numel():  # an index out of range was an all-zero one-hot input
                raise ValueError(
                    f"{where}: prev_action must hold action indices from 0 to {num_actions - 1}, got {bad[0].item()}."
                )
        a = prev_action.reshape(a.shape).to(a.dtype)
    if prev_reward is not None:
        r = _inputs.check_per_env(where, "prev_reward", prev_reward, n, "real", h.device).reshape(r.shape).to(r.dtype)
    if reset is not None:
        start = _inputs.check_per_env(where, "reset", reset, n, "real", h.device).bool().reshape(-1)
        h = torch.where(start.unsqueeze(-1), 0.0, h)
        c = torch.where(start.unsqueeze(-1), 0.0, c)
        a = torch.where(start, torch.zeros_like(a), a)
        r = torch.where(start, torch.zeros_like(r), r)
    return Carry(h, c, a, r)


def carry_to_td(carry: Carry) -> TensorDict:
    """:class:`Carry` -> ``TensorDict({"h", "c", "prev_action", "prev_reward"}, [B])`` (replay storage)."""
    return TensorDict(carry._asdict(), batch_size=carry.h.shape[:1])


def carry_from_td(td: TensorDict) -> Carry:
    """Inverse of :func:`carry_to_td`."""
    return Carry(td["h"], td["c"], td["prev_action"], td["prev_reward"])


# -------------------------------------------------------------------- loss
_CARRY_KEYS = ("h", "c", "prev_action", "prev_reward")


def _check_batch(config: Config, batch: TensorDict, where: str) -> tuple[int, int]:
    if not isinstance(batch, TensorDict):
        raise ValueError(f"R2D2 batches are TensorDicts of time-major sequences [T, B], got a {type(batch).__name__}.")
    if batch.batch_dims != 2:
        raise ValueError(
            f"R2D2 batches are time-major sequences with batch_size [T, B], got {list(batch.batch_size)}."
        )
    drqn.check_window_keys(
        config, batch, where, "PrioritizedSequenceReplay", _CARRY_KEYS,
        ": add r2d2.carry_to_td(r2d2.prepare_carry(...)) to the replay with each step",
    )
    steps = batch.batch_size[0]
    if steps != config.burn_in + config.sequence_length:
        raise ValueError(
            f"R2D2 batch has {steps} steps but burn_in + sequence_length = {config.burn_in} + "
            f"{config.sequence_length}; build the replay with sequence_length={config.burn_in + config.sequence_length}."
        )
    return steps, batch.batch_size[1]


def _start_carry(config: Config, batch: TensorDict, batch_size: int, like: torch.Tensor) -> Carry:
    if config.initial_state == "stored":
        ic = batch["init_carry"]
        return Carry(ic["h"][0], ic["c"][0], ic["prev_action"][0], ic["prev_reward"][0])
    h, c = nets.lstm_zero_carry(batch_size, config.lstm_size, device=like.device, dtype=like.dtype)
    zeros = torch.zeros(batch_size, device=like.device)
    return Carry(h, c, zeros.long(), zeros)


def loss(
    params: TensorDict,
    target: TensorDict,
    config: Config,
    batch: TensorDict,
    *,
    gamma: float | torch.Tensor | None = None,
) -> tuple[torch.Tensor, TensorDict]:
    """R2D2 loss on a ``[burn_in + sequence_length, B]`` batch. Returns ``(loss, aux)``.

    Both networks are unrolled from the stored state over the burn-in steps
    (online without gradient unless ``burn_in_stop_gradient=False``), then
    over the trained steps' inputs ``o_t`` and the next observations, so
    ``q_t`` is available after every trained step (the true final observation
    after a truncation). TD errors are transformed n-step double-Q errors on
    the trained steps; the loss is ``mean_b w_b 0.5 sum_t mask td^2``.
    ``aux``: ``priorities [B]`` (0.9 max + 0.1 mean |td| over valid trained
    steps), ``td_error [sequence_length, B]`` (0 on padding), and 0-dim
    ``q``, ``td_abs``, ``valid_fraction``, ``weight_mean``. ``gamma`` (e.g.
    ``state["hparams", "gamma"]``) replaces ``config.gamma``.
    """
    steps, batch_size = _check_batch(config, batch, "r2d2.loss")
    drqn.check_window_inputs(params, config, batch, "r2d2.loss", _CARRY_KEYS)
    if "weight" in batch.keys():
        _inputs.check_tensor("r2d2.loss", "batch['weight']", batch["weight"], [(steps, batch_size)], dtype="float", labels=["T", "B"])
    burn = config.burn_in
    obs, next_obs = batch["obs"], batch["next_obs"]
    fdt = obs.dtype if obs.is_floating_point() else torch.float32  # pixel batches hold uint8 frames
    action = batch["action"].reshape(steps, batch_size).long()
    reward = batch["reward"].reshape(steps, batch_size).to(fdt)
    start = _start_carry(config, batch, batch_size, torch.zeros((), dtype=fdt, device=obs.device))
    # Network inputs at positions 0..L: o_0, o_1, ..., o_{L-1}, o_L (= next_obs of the last step),
    # each with the action and reward that came before it.
    seq = torch.cat([obs[:1], next_obs], dim=0)
    prev_a = torch.cat([start.prev_action.reshape(1, batch_size).long(), action], dim=0)
    prev_r = torch.cat([start.prev_reward.reshape(1, batch_size).to(fdt), reward], dim=0)
    lstm_start = (start.h, start.c)

    online_carry = lstm_start
    if burn > 0:
        if config.burn_in_stop_gradient:
            with torch.no_grad():
                _, online_carry = q_unroll(params, seq[:burn], prev_a[:burn], prev_r[:burn], lstm_start)
            online_carry = (online_carry[0].detach(), online_carry[1].detach())
        else:
            _, online_carry = q_unroll(params, seq[:burn], prev_a[:burn], prev_r[:burn], lstm_start)
    q_online, _ = q_unroll(params, seq[burn:], prev_a[burn:], prev_r[burn:], online_carry)  # [T+1, B, A]
    with torch.no_grad():
        q_target = q_unroll(target, seq, prev_a, prev_r, lstm_start)[0][burn:]  # burn-in, then the trained part

    q_tm1 = q_online[:-1]
    a_tm1 = action[burn:]
    r_t = reward[burn:]
    gamma = config.gamma if gamma is None else gamma
    discount_t = gamma * (1.0 - batch["terminated"][burn:].reshape(-1, batch_size).to(fdt))
    mask = batch["mask"][burn:].bool()
    td = returns.transformed_n_step_q_learning(
        q_tm1,
        a_tm1,
        q_target[1:],
        q_online[1:].detach(),
        r_t,
        discount_t,
        config.n_step,
        mask=mask,
        rescale_eps=config.rescale_eps if config.value_rescaling else None,
    )
    zero = torch.zeros((), dtype=td.dtype, device=td.device)
    td_valid = torch.where(mask, td, zero)
    per_sequence = 0.5 * td_valid.pow(2).sum(dim=0)  # [B]
    if "weight" in batch.keys():
        weight = batch["weight"][0].to(td.dtype)
    else:
        weight = torch.ones(batch_size, dtype=td.dtype, device=td.device)
    value = (weight * per_sequence).mean()
    td_detached = td_valid.detach()
    aux = TensorDict(
        {
            "priorities": returns.sequence_priorities(td_detached, mask, eta=config.priority_eta),
            "td_error": td_detached,
            "q": returns.masked_mean(returns.select_action_values(q_tm1, a_tm1).detach(), mask),
            "td_abs": returns.masked_mean(td_detached.abs(), mask),
            "valid_fraction": mask.to(fdt).mean(),
            "weight_mean": weight.mean(),
        },
        batch_size=[],
    )
    return value, aux


def update(
    state: TensorDict, batch: TensorDict, noise: TensorDict | None = None
) -> tuple[TensorDict, TensorDict]:
    """One R2D2 gradient step. Pure. Returns ``(new_state, metrics)``.

    Adam on :func:`loss`, then ``step += 1`` and the target copied from the
    new online parameters when ``step % target_period == 0``. ``noise`` is
    accepted for a uniform ``update`` signature and unused. ``metrics``:
    0-dim ``loss``, ``q``, ``td_abs``, ``valid_fraction``, ``grad_norm``,
    ``lr`` (the rate of this step), ``priority_mean``, and ``priorities [B]`` -- the new priorities of the
    sampled sequences, for ``replay.update_priorities(batch["window"][0],
    metrics["priorities"])`` (pop it before logging scalars). A ``state["hparams"]``
    entry (``lr``, ``gamma``) replaces its :class:`Config` field and is carried to
    the new state.
    """
    config: Config = _inputs.state_config(state, Config, "r2d2.update", "r2d2.init")
    _check_batch(config, batch, "r2d2.update")
    params, target = state["params"], state["target"]
    hparams = _hparams.of(state)
    kwargs = {} if _hparams.entry(hparams, "gamma") is None else {"gamma": hparams["gamma"]}
    grads, (value, aux) = grad_and_value(loss, has_aux=True)(params, target, config, batch, **kwargs)
    grad_norm = global_norm(grads)
    opt = q_optimizer(config)
    # the schedule at this optimizer's step (= updates so far), from the state's rate if it holds one
    lr = opt.learning_rate(state["opt"], _hparams.entry(hparams, "lr"))
    params, opt_state = opt.step(grads, state["opt"], params, lr=lr)
    step = state["step"] + 1
    target = periodic_copy(target, params, step, config.target_period)
    new_state = TensorDict({"params": params, "target": target, "opt": opt_state, "step": step}, batch_size=[])
    _hparams.carry(new_state, hparams)
    new_state.set_non_tensor("config", config)
    metrics = TensorDict(
        {
            "loss": value.detach(),
            "q": aux["q"],
            "td_abs": aux["td_abs"],
            "valid_fraction": aux["valid_fraction"],
            "grad_norm": grad_norm.detach(),
            "lr": lr_metric(lr, grad_norm),
            "priority_mean": aux["priorities"].mean(),
            "priorities": aux["priorities"],
        },
        batch_size=[],
    )
    return new_state, metrics


# ------------------------------------------------------------------ acting
def draw_act_noise(
    batch: int, *, generator: torch.Generator | None = None, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """Uniform ``[2, batch]`` draws for :func:`act`: row 0 decides, row 1 picks the random action."""
    return torch.rand((2, batch), generator=generator, device=device)


def act(
    params: TensorDict,
    obs: torch.Tensor,
    prev_action: torch.Tensor | None,
    prev_reward: torch.Tensor | None,
    carry: Carry,
    epsilon: float | torch.Tensor,
    noise: torch.Tensor | None = None,
    reset: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Carry]:
    """Epsilon-greedy actions for a batch of envs. Returns ``(action [B] int64, next carry)``.

    ``obs [B, O]``; ``prev_action``, ``prev_reward [B]``: the action each env
    took at its previous step and the reward it got (``None``: the carry's);
    ``carry``: the :class:`Carry` after the previous step; ``reset [B]``
    (bool, optional): envs whose episode starts at this observation (their
    LSTM state, previous action and reward are zeroed first; see
    :func:`prepare_carry`, which gives the state to store in the replay).
    ``epsilon``: a float or a per-env ``[B]`` tensor (:func:`actor_epsilons`).
    ``noise [2, B]`` holds U[0, 1) draws (:func:`draw_act_noise`): env ``b``
    explores when ``noise[0, b] < epsilon`` and then takes action
    ``floor(noise[1, b] * A)`` (uniform over all actions, rlax
    ``epsilon_greedy``). The next carry holds the new LSTM state and
    ``prev_action = action``; its ``prev_reward`` is still this step's input
    (pass the new reward at the next call).
    """
    _check_params("r2d2.act", params)
    _check_carry("r2d2.act", carry)
    _inputs.check_epsilon("r2d2.act", epsilon, carry[0].shape[0])
    with torch.no_grad():
        carry = _prepare_carry("r2d2.act", carry, prev_action, prev_reward, reset, _num_actions(params))
        q, (h, c) = q_step(params, obs, carry)
        batch, num_actions = q.shape
        if noise is None:
            noise = torch.rand((2, batch), device=q.device)
        if tuple(noise.shape) != (2, batch):
            raise ValueError(f"act: noise must have shape (2, {batch}), got {tuple(noise.shape)}.")
        greedy = q.argmax(dim=-1)
        random = torch.clamp((noise[1] * num_actions).long(), max=num_actions - 1)
        explore = noise[0] < torch.as_tensor(epsilon, device=q.device)
        action = torch.where(explore, random, greedy)
        return action, Carry(h, c, action, carry.prev_reward)


def greedy_action(
    params: TensorDict,
    obs: torch.Tensor,
    carry: Carry,
    *,
    config: Config | None = None,
    noise: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Carry]:
    """Evaluation action and next carry (what :class:`rlfunc.runtime.policy.Policy` calls).

    Greedy when ``config.eval_epsilon`` is 0 (the default, as Acme's
    ``evaluation_epsilon``); otherwise epsilon-greedy with it, ``noise`` as in
    :func:`act`. Uses the carry's previous action and reward; the next carry
    records the chosen action. The caller resets the carry to
    :func:`initial_carry` at every episode start (the Policy does).
    """
    eps = 0.0 if config is None else config.eval_epsilon
    if eps > 0.0:
        return act(params, obs, None, None, carry, eps, noise)
    with torch.no_grad():
        q, (h, c) = q_step(params, obs, carry)
        action = q.argmax(dim=-1)
        return action, Carry(h, c, action, carry.prev_reward)


def replay_kwargs(config: Config, capacity: int) -> dict:
    """Keyword arguments for :class:`rlfunc.replay.prioritized.PrioritizedSequenceReplay` from ``config``,
    holding ``capacity`` sequences (the runtime's ``train.replay_size``)."""
    return {
        "capacity": int(capacity),
        "sequence_length": config.burn_in + config.sequence_length,
        "period": config.sequence_period,
        "priority_exponent": config.priority_exponent,
        "importance_exponent": config.importance_exponent,
    }
