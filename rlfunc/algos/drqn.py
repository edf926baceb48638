"""DRQN: Deep Recurrent Q-Network (Hausknecht & Stone, AAAI Fall Symposium 2015).

Pure functions over one TensorDict state, for discrete actions. Faithful to the
paper's "bootstrapped random updates" (official code: mhauskn/dqn, branch
``recurrent``, built on DQN-in-the-Caffe):

* the network is an encoder, then an LSTM *in place of* DQN's first fully
  connected layer, then a linear Q head on the LSTM output;
* training samples windows of ``sequence_length = 10`` consecutive steps from
  inside one episode (:class:`rlfunc.replay.sequence.SequenceReplay`; the
  padded tail of a short episode is masked), starts the LSTM from a **zero
  state** for every window, and puts the loss on **every valid step** of it;
* the target network is unrolled over the same window from its own zero
  state; targets use the **plain max** ``r_t + gamma (1 - terminated_t)
  max_a Q'(h'_{t+1}, a)`` (double Q-learning is the ``double_q`` option);
* the target network is a copy of the online one every ``target_period``
  updates (:func:`rlfunc.core.targets.periodic_copy`);
* the TD error is clipped to [-1, 1] in the gradient (Huber, delta 1), the
  error clipping of DQN (Mnih et al. 2015), whose training setup DRQN keeps;
  ``huber_delta=None`` gives the plain squared error;
* exploration is epsilon-greedy with a linear schedule
  (:func:`epsilon`; DQN: 1.0 -> 0.1 over the 1M frames after the replay start,
  uniformly random before it: ``eps_decay_delay``, below).

Bootstrapping through time-limit truncation: windows store ``next_obs`` per
step (the true final observation on a truncated step), and the target unroll
runs over ``obs_0, next_obs_0, ..., next_obs_{T-1}``, so even a window's last
step has a bootstrap value; only ``terminated`` zeroes the discount.

Encoders (``encoder``): ``"mlp"`` (default) for vector observations;
``"nature"``, the paper's Atari torso (the three conv layers of Mnih et al.
2015 on one 84x84 grayscale frame per step, the LSTM in place of the first
fully connected layer: ``encoder_sizes=()``); ``"minatar"``, MinAtar's torso
(Young & Tian 2019: one 3x3 conv, 16 channels, on the ``[10, 10, C]``
observation). A conv torso's flattened features go through ``encoder_sizes``
(if any) into the LSTM (:func:`rlfunc.core.nets.torso_apply`).

Small-scale choices that differ from the paper's Atari setup (each a config
field): an MLP encoder (``encoder_sizes=(64,)``, ReLU) instead of the three
conv layers on 84x84 frames; an LSTM of 64 units instead of 512; Adam (lr
1e-3) instead of Adadelta; the target copied every 1,000
updates instead of 10,000; epsilon decayed 1.0 -> 0.05 over 10,000 env steps
instead of 1.0 -> 0.1 over 1M frames; replay counted in windows (the runtime's
``train.replay_size``, default 50,000 windows, and ``train.learning_starts``,
default 1,000 env steps: :mod:`rlfunc.runtime.registry`). Options beyond
the paper, off by default: ``double_q`` (van Hasselt et al. 2016),
``initial_state="stored"`` (start both unrolls from the actor state stored
with the window, R2D2's "stored state" without burn-in),
``lr_schedule`` (a learning-rate schedule,
:class:`rlfunc.core.optim.LRSchedule`: constant, linear or cosine with
optional warm-up, counted in updates, e.g. ``{kind: linear, decay_updates:
74000, end_factor: 0.1}``; the paper's rate is constant;
``lr_decay_updates``/``lr_end`` is its older alias for a linear decay to
``lr_end`` and computes the same rates bit for bit), ``dueling`` (the linear
Q head split into linear value and advantage heads, ``q = v + a - mean_a a``, Wang et al. 2016, as
R2D2's; meant for small action gaps), ``n_step`` (the target is the n-step
return ``r_t + ... + gamma^{n-1} r_{t+n-1} + gamma^n max_a Q'(h'_{t+n}, a)``
summed inside the window, cut short at its end, R2D2's return without value
rescaling; the paper's DRQN and DQN use n = 1), ``value_rescaling`` (the target
is ``h(r_t + ... + gamma^n h^-1(max_a Q'))`` with R2D2's ``h(x) = sign(x)
(sqrt(|x| + 1) - 1) + eps x``, Pohlen et al. 2018, so the network learns
squashed values) and ``exploration="actor_ladder"`` (each env of the
vector env acts with its own fixed ``eps_i = epsilon_base^(1 + epsilon_alpha i
/ (N - 1))`` from the first step, Ape-X's and R2D2's actors,
:func:`actor_epsilons`, instead of the one decaying schedule of :func:`epsilon`).

Window placement (``sequence_period``): the default 1 starts a window at every
step that has ``sequence_length`` steps after it in the episode, the paper's
"random point in the episode". Then the step ``k`` steps before an episode's
end lies in only ``k`` windows (interior steps in ``sequence_length``), so the
last steps -- where CartPole's failures and their zero bootstrap are -- are
replayed up to ``sequence_length`` times less often than they occur (measured
here: 0.7% of replayed steps were terminal vs 4.3% of collected ones). Setting
``sequence_period = sequence_length`` tiles each episode instead (the last
window zero-padded): every step is replayed equally often, each window still
starts from a zero state. ``configs/drqn/cartpole_*.yaml`` do that.

``core="mlp"`` is the memory-less control, *not* DRQN: the LSTM is replaced by
a fully connected ReLU layer of ``lstm_size`` units (the carry passes through
unchanged, so the same runtime drives it). With ``sequence_length=1`` it is a
plain feed-forward DQN (Mnih et al. 2015: one-step Q-learning from uniformly
replayed transitions, periodic target copy, Huber, epsilon-greedy); the
runtime registers it as ``dqn``.

``update(state, batch)`` takes a time-major ``[T, B]`` batch from the sequence
replay with keys ``obs [T, B, O]``, ``action [T, B]``, ``reward [T, B]``,
``next_obs [T, B, O]``, ``terminated [T, B]``, ``mask [T, B]`` (and
``init_carry`` for ``initial_state="stored"``). It is pure, has no host syncs
and compiles with ``torch.compile(fullgraph=True)``.

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

Usage, acting in ``N`` envs and one update by hand (a whole training script:
``rlfunc.examples.drqn_cartpole``)::

    >>> import gymnasium as gym, torch
    >>> from tensordict import TensorDict
    >>> from rlfunc.algos import drqn
    >>> config = drqn.Config(encoder_sizes=(16,), lstm_size=16)
    >>> state = drqn.init(config, gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), seed=0)
    >>> carry = drqn.initial_carry(config, 3)               # one LSTM state per env
    >>> noise = drqn.draw_act_noise(3, generator=torch.Generator().manual_seed(0))
    >>> action, carry = drqn.act(state["params"], torch.zeros(3, 4), carry, drqn.epsilon(config, 0), noise)
    >>> action.shape, action.dtype
    (torch.Size([3]), torch.int64)
    >>> T, B = config.sequence_length, 4                    # windows from SequenceReplay.sample
    >>> batch = TensorDict({"obs": torch.randn(T, B, 4), "action": torch.randint(2, (T, B)),
    ...                     "reward": torch.randn(T, B), "next_obs": torch.randn(T, B, 4),
    ...                     "terminated": torch.zeros(T, B, dtype=torch.bool),
    ...                     "mask": torch.ones(T, B, dtype=torch.bool)}, batch_size=[T, B])
    >>> state, metrics = drqn.update(state, batch)
    >>> int(state["step"])
    1
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from tensordict import TensorDict
from torch.func import grad_and_value

from rlfunc.algos import _checks, _hparams, _inputs
from rlfunc.algos._qstate import check_lr_decay, lr_metric, q_learning_state, q_optimizer
from rlfunc.core import nets
from rlfunc.core import returns
from rlfunc.core.exploration import actor_epsilons
from rlfunc.core.optim import LRSchedule, global_norm, linear_schedule
from rlfunc.core.targets import periodic_copy

__all__ = [
    "Config",
    "HPARAMS",
    "init",
    "initial_carry",
    "q_step",
    "q_unroll",
    "loss",
    "update",
    "act",
    "greedy_action",
    "draw_act_noise",
    "epsilon",
    "actor_epsilons",
    "carry_to_td",
    "carry_from_td",
    "ENCODERS",
    "check_obs_space",
    "torso_init",
    "encoder_mlp_init",
    "encode",
]


HPARAMS = ("lr", "gamma")
"""The :class:`Config` fields :func:`update` reads from ``state["hparams", name]`` when
present (settings as data, module doc)."""


@dataclasses.dataclass(frozen=True)
class Config:
    """DRQN hyperparameters (module docstring: which follow the paper, which are small-scale)."""

    encoder: str = "mlp"  # "mlp" (vector obs), "nature" (the paper's Atari conv torso) or "minatar"
    encoder_sizes: tuple[int, ...] = (64,)  # MLP layers (after the conv torso when encoder is not "mlp")
    lstm_size: int = 64
    sequence_length: int = 10
    sequence_period: int = 1  # window starts every step: a random point in an episode
    batch_size: int = 32
    gamma: float = 0.99
    lr: float = 1e-3
    lr_schedule: LRSchedule | None = None  # option, e.g. {kind: linear, decay_updates: 74000, end_factor: 0.1}
    lr_decay_updates: int | None = None  # old spelling of lr_schedule {kind: linear, decay_updates: N}, with lr_end
    lr_end: float = 0.0
    adam_eps: float = 1e-8
    max_grad_norm: float | None = None
    huber_delta: float | None = 1.0
    target_period: int = 1_000
    double_q: bool = False
    n_step: int = 1  # option: n-step return inside the window (R2D2's; the paper's target is one-step)
    value_rescaling: bool = False  # option: R2D2's h(.) transform of the target (Pohlen et al. 2018)
    rescale_eps: float = 1e-3
    dueling: bool = False  # option: value + advantage linear heads on the LSTM output (Wang et al. 2016)
    initial_state: str = "zeros"  # "zeros" (DRQN) or "stored" (the replayed actor state)
    core: str = "lstm"  # "lstm" (DRQN) or "mlp" (memory-less control: a ReLU layer in its place)
    eps_start: float = 1.0
    eps_end: float = 0.05
    eps_decay_steps: int = 10_000
    eps_decay_delay: int = 0  # env steps at eps_start before the decay begins (DQN's and MinAtar's code: the replay start)
    exploration: str = "schedule"  # "schedule" (DQN: eps_start -> eps_end) or "actor_ladder" (Ape-X)
    epsilon_base: float = 0.4  # actor_ladder: eps_i = epsilon_base^(1 + epsilon_alpha i / (N - 1))
    epsilon_alpha: float = 7.0
    eval_epsilon: float = 0.0
    # Read by the training runtime, not by update() (replay size and warm-up: train.replay_size, train.learning_starts):
    train_every: int = 1
    lstm_init: str = "torch_default"  # nn.LSTM's; "orthogonal", "haiku" (hk.LSTM's), "lecun_normal" (flax's)
    forget_bias: float = 0.0  # added to the LSTM's forget-gate bias at init; 1.0: hk.LSTM's constant forget bias
    init: str = "torch_default"  # linear and conv layers: PyTorch's; "haiku", "lecun_normal", "orthogonal", ...

    def __post_init__(self) -> None:
        _checks.check_finite(self)
        _checks.check_booleans(self)
        _checks.positive_float(self, "lr", "adam_eps")
        check_lr_decay(self)
        _checks.positive_int(self, "lstm_size", "sequence_length", "batch_size", "target_period")
        _checks.positive_int(self, "train_every")
        _checks.nonnegative_int(self, "eps_decay_steps", "eps_decay_delay")
        _checks.layer_sizes(self, "encoder_sizes", allow_empty=True)
        if not isinstance(self.sequence_period, int) or not 1 <= self.sequence_period <= self.sequence_length:
            raise ValueError(
                f"sequence_period must be between 1 and sequence_length ({self.sequence_length}), "
                f"got {self.sequence_period}."
            )
        if not isinstance(self.n_step, int) or not 1 <= self.n_step <= self.sequence_length:
            raise ValueError(
                f"n_step must be between 1 and sequence_length ({self.sequence_length}): the return is "
                f"summed inside one window; got {self.n_step}."
            )
        _checks.nonnegative_float(self, "rescale_eps")
        _checks.discount(self, "gamma")
        _checks.one_of(self, "core", ("lstm", "mlp"))
        _checks.one_of(self, "encoder", ENCODERS)
        _checks.one_of(self, "initial_state", ("zeros", "stored"))
        _checks.optional_positive_float(self, "huber_delta", off="squared error")
        _checks.optional_positive_float(self, "max_grad_norm", off="no clipping")
        if self.exploration not in ("schedule", "actor_ladder"):
            raise ValueError(
                f"exploration must be 'schedule' (one decaying epsilon) or 'actor_ladder' "
                f"(one fixed epsilon per env), got {self.exploration!r}."
            )
        _checks.fraction(self, "epsilon_base")
        _checks.nonnegative_float(self, "epsilon_alpha")
        _checks.probability(self, "eps_start", "eps_end", "eval_epsilon")
        if self.eps_end > self.eps_start:
            raise ValueError(
                f"eps_end ({self.eps_end}) must not exceed eps_start ({self.eps_start}): the schedule decays from "
                f"eps_start to eps_end, so raise eps_start or lower eps_end."
            )
        _checks.one_of(self, "init", _checks.LINEAR_INITS)
        _checks.one_of(self, "lstm_init", _checks.LSTM_INITS)


ENCODERS = ("mlp", *nets.TORSOS)
"""``Config.encoder`` choices: an MLP on flat vectors, or a pixel torso of :data:`rlfunc.core.nets.TORSOS`."""


def check_obs_space(encoder: str, obs_space, algo: str = "DRQN") -> tuple[int, ...]:
    """The observation shape, or one ``ValueError`` sentence when ``encoder`` cannot read ``obs_space``."""
    import gymnasium as gym

    if not isinstance(obs_space, gym.spaces.Box):
        raise ValueError(f"{algo} needs a Box observation space, got {obs_space}.")
    shape = tuple(int(s) for s in obs_space.shape)
    if encoder == "mlp":
        if len(shape) != 1:
            hint = " or set agent.encoder to 'nature' (Atari frames) or 'minatar'" if len(shape) in (2, 3) else ""
            raise ValueError(
                f"{algo} with agent.encoder='mlp' needs a flat 1-D Box observation space, got shape {shape}; "
                f"flatten the observation{hint}."
            )
        return shape
    try:
        nets.torso_check(encoder, shape)
    except ValueError as exc:
        raise ValueError(f"{algo} with agent.encoder={encoder!r}: {exc}") from None
    return shape


def _space_dims(obs_space, act_space, encoder: str = "mlp") -> tuple[tuple[int, ...], int]:
    import gymnasium as gym

    if not isinstance(act_space, gym.spaces.Discrete):
        raise ValueError(
            f"DRQN needs a Discrete action space, got {act_space}; use REDQ or DrQ-v2 for continuous actions."
        )
    return check_obs_space(encoder, obs_space), int(act_space.n)


def torso_init(config, obs_shape: tuple[int, ...], gen: torch.Generator) -> tuple[dict, int]:
    """``({"torso": params} or {}, features out)`` for ``config.encoder`` on observations of ``obs_shape``
    (shared with :mod:`rlfunc.algos.r2d2`); no torso and no draws from ``gen`` for ``encoder="mlp"``."""
    if config.encoder == "mlp":
        return {}, obs_shape[0]
    torso = nets.torso_init(config.encoder, obs_shape, init=config.init, generator=gen)
    return {"torso": torso}, nets.torso_output_size(config.encoder, obs_shape)


def encoder_mlp_init(config, features: int, gen: torch.Generator) -> TensorDict:
    """The encoder MLP ``features -> encoder_sizes`` (empty when ``encoder_sizes`` is)."""
    enc = tuple(config.encoder_sizes)
    return nets.mlp_init((features, *enc), init=config.init, generator=gen) if enc else TensorDict({}, batch_size=[])


def encode(params: TensorDict, obs: torch.Tensor, lead: int) -> torch.Tensor:
    """Features of ``obs [*lead dims, *obs shape]``: the pixel torso (if ``params`` has one), then the
    encoder MLP (ReLU after every layer; none if it has no layers). Shared with :mod:`rlfunc.algos.r2d2`."""
    if "torso" in params.keys():
        obs = nets.torso_apply(params["torso"], obs, lead)
    elif obs.dim() != lead + 1:
        raise ValueError(f"expected observations with {lead} batch dim(s) then one feature dim, got shape {tuple(obs.shape)}.")
    if "encoder" not in params.keys() or nets.num_linear_layers(params["encoder"]) == 0:
        return obs  # no encoder layers (a checkpoint drops the empty TensorDict)
    return nets.mlp_apply(params["encoder"], obs, activate_last=True)


def _network_init(config: Config, obs_shape: tuple[int, ...], num_actions: int, gen: torch.Generator) -> TensorDict:
    torso, features = torso_init(config, obs_shape, gen)
    enc = tuple(config.encoder_sizes)
    lstm_in = enc[-1] if enc else features
    if config.core == "lstm":
        core_key = "lstm"
        core = nets.lstm_init(lstm_in, config.lstm_size, init=config.lstm_init, forget_bias=config.forget_bias, generator=gen)
    else:
        core_key = "fc"
        core = nets.linear_init(lstm_in, config.lstm_size, init=config.init, generator=gen)
    return TensorDict(
        {
            **torso,
            "encoder": encoder_mlp_init(config, features, gen),  # after the core: the generator order of before
            core_key: core,
            "head": nets.dueling_init(config.lstm_size, (), num_actions, init=config.init, generator=gen)
            if config.dueling
            else nets.linear_init(config.lstm_size, num_actions, init=config.init, generator=gen),
        },
        batch_size=[],
    )


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
    (``torch.nn.LSTM`` layout; ``fc``, a linear layer, for ``core="mlp"``)
    and ``head`` (linear; ``value`` and ``advantage`` linear layers with
    ``dueling``). The static ``config`` is
    stored as a non-tensor entry.
    """
    if not isinstance(config, Config):
        raise ValueError(f"drqn.init: config must be a drqn.Config, got a {type(config).__name__}.")
    obs_shape, num_actions = _space_dims(obs_space, act_space, config.encoder)
    gen = torch.Generator(device="cpu").manual_seed(_inputs.check_seed(seed, "drqn.init"))
    device = _inputs.check_device_arg(device, "drqn.init")
    return q_learning_state(config, _network_init(config, obs_shape, num_actions, gen), device)


def initial_carry(
    config: Config, batch: int, device: torch.device | str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero LSTM state ``(h, c)``, each ``[batch, lstm_size]`` (start of every episode)."""
    return nets.lstm_zero_carry(batch, config.lstm_size, device=device)


def carry_to_td(carry: tuple[torch.Tensor, torch.Tensor]) -> TensorDict:
    """``(h, c)`` -> ``TensorDict({"h", "c"}, [B])``, the form the sequence replay stores."""
    h, c = carry
    return TensorDict({"h": h, "c": c}, batch_size=h.shape[:1])


def carry_from_td(td: TensorDict) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of :func:`carry_to_td`."""
    return td["h"], td["c"]


def _head(params: TensorDict, h: torch.Tensor) -> torch.Tensor:
    if "advantage" in params["head"].keys():  # dueling=True
        return nets.dueling_apply(params["head"], h)
    return F.linear(h, params["head", "weight"], params["head", "bias"])


def _fc(params: TensorDict, x: torch.Tensor) -> torch.Tensor:
    return F.relu(F.linear(x, params["fc", "weight"], params["fc", "bias"]))


def q_unroll(
    params: TensorDict,
    obs: torch.Tensor,
    carry: tuple[torch.Tensor, torch.Tensor],
    reset: torch.Tensor | None = None,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Q-values over a sequence: ``obs [T, B, O]`` -> ``(q [T, B, A], final carry)``.

    Encoder -> LSTM -> linear (or dueling) head. ``reset [T, B]`` zeroes the carry before
    the marked steps (episode starts), as :func:`rlfunc.core.nets.lstm_unroll`.
    """
    if obs.dim() != 3 and "torso" not in params.keys():
        raise ValueError(f"q_unroll expects time-major obs [T, B, O], got shape {tuple(obs.shape)}.")
    x = encode(params, obs, 2)
    if "fc" in params.keys():  # core="mlp": memory-less, the carry passes through
        return _head(params, _fc(params, x)), carry
    hs, carry = nets.lstm_unroll(params["lstm"], x, carry, reset)
    return _head(params, hs), carry


def q_step(
    params: TensorDict, obs: torch.Tensor, carry: tuple[torch.Tensor, torch.Tensor]
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """One step: ``obs [B, O]`` -> ``(q [B, A], new carry)`` (acting)."""
    if not isinstance(params, TensorDict) or "head" not in params.keys():
        raise ValueError("q_step: params must be the state's parameters, state['params'] (with a 'head' entry).")
    if obs.dim() != 2 and "torso" not in params.keys():
        raise ValueError(f"q_step expects obs [B, O], got shape {tuple(obs.shape)}.")
    width = obs_width(params)
    if width is not None:
        like = obs_like(params)
        _inputs.check_tensor("q_step", "obs", obs, [(obs.shape[0], width)], dtype=like.dtype, labels=["B", "O"])
    x = encode(params, obs, 1)
    if "fc" in params.keys():  # core="mlp"
        return _head(params, _fc(params, x)), carry
    h, carry = nets.lstm_apply(params["lstm"], x, carry)
    return _head(params, h), carry


def _start_carry(config: Config, batch: TensorDict, batch_size: int, like: torch.Tensor):
    if config.initial_state == "stored":  # batch["init_carry"]: check_window_keys
        ic = batch["init_carry"]
        return ic["h"][0], ic["c"][0]
    return nets.lstm_zero_carry(batch_size, config.lstm_size, device=like.device, dtype=like.dtype)


def obs_width(params: TensorDict) -> int | None:
    """The feature width flat observations must have (``encoder="mlp"``), read from the first
    layer's weight; ``None`` for a pixel torso or when no layer comes before the recurrent core's
    extra inputs (R2D2 without encoder layers: its ``_embed`` checks the width)."""
    if "torso" in params.keys():
        return None
    if "encoder" in params.keys() and nets.num_linear_layers(params["encoder"]) > 0:
        return int(params["encoder", "0", "weight"].shape[-1])
    if "fc" in params.keys():
        return int(params["fc", "weight"].shape[-1])
    if "lstm" in params.keys() and "q" not in params["head"].keys() and "value" not in params["head"].keys():
        return int(params["lstm", "weight_ih"].shape[-1])  # DRQN: the LSTM reads the observation itself
    return None


def obs_like(params: TensorDict) -> torch.Tensor:
    """A parameter tensor of the recurrent core (its dtype and device are the networks')."""
    return next(iter(params["lstm" if "lstm" in params.keys() else "fc"].values()))


_BATCH_KEYS = ("obs", "action", "reward", "next_obs", "terminated", "mask")


def check_window_keys(config, batch: TensorDict, where: str, sample_from: str, carry_keys=("h", "c"), carry_hint: str = "") -> None:
    """One sentence (:class:`rlfunc.algos._inputs.MissingKeyError`) for a ``[T, B]`` window batch without
    an entry the loss reads: a per-step key, or with ``initial_state="stored"`` ``init_carry`` or one of
    its ``carry_keys``. Keys only, skipped under ``torch.compile`` (:mod:`rlfunc.algos._inputs`); shared with R2D2."""
    if torch.compiler.is_compiling():
        return
    _inputs.check_keys(
        where, batch, _BATCH_KEYS,
        f"sample it from {sample_from} (obs, action, reward, next_obs, terminated and mask, each [T, B]).",
    )
    if config.initial_state == "stored":
        hint = (
            "initial_state='stored' starts each window from the carry before its first step "
            f"({', '.join(carry_keys)}){carry_hint}."
        )
        _inputs.check_keys(where, batch, ("init_carry",), hint)
        _inputs.check_keys(where, batch["init_carry"], carry_keys, hint, name="batch['init_carry']")


def check_window_inputs(params: TensorDict, config, batch: TensorDict, where: str, carry_keys=("h", "c")) -> None:
    """One sentence for a ``[T, B]`` window batch the networks cannot read: empty, observations of
    another width or dtype, per-step entries of another shape, float action indices, a stored carry
    (``carry_keys``) of another shape or dtype. Shapes, dtypes and devices only -- not values (an
    action index out of range is the replay's to refuse), skipped under ``torch.compile``
    (:mod:`rlfunc.algos._inputs`); shared with R2D2."""
    if torch.compiler.is_compiling():
        return
    steps, rows = batch.batch_size
    if steps < 1 or rows < 1:
        raise ValueError(f"{where}: batch_size {list(batch.batch_size)} is empty; T and B must both be at least 1.")
    like = obs_like(params)
    width = obs_width(params)
    for key in ("obs", "next_obs"):
        obs = batch[key]
        if width is not None:
            _inputs.check_tensor(where, f"batch[{key!r}]", obs, [(steps, rows, width)], dtype=like.dtype, labels=["T", "B", "O"])
        elif not isinstance(obs, torch.Tensor) or obs.dim() < 3 or tuple(obs.shape[:2]) != (steps, rows) or obs.is_complex():
            got = list(obs.shape) if isinstance(obs, torch.Tensor) else type(obs).__name__
            raise ValueError(f"{where}: batch[{key!r}] must be [T, B, *obs_shape] = [{steps}, {rows}, ...], got {got}.")
        elif obs.is_floating_point() and obs.dtype != like.dtype:
            raise ValueError(
                f"{where}: batch[{key!r}] must have dtype {like.dtype} (the parameters') or hold integer frames, got {obs.dtype}."
            )
    both = [(steps, rows), (steps, rows, 1)]
    _inputs.check_tensor(where, "batch['action']", batch["action"], both, dtype="integer", labels=[["T", "B"], ["T", "B", 1]])
    for key in ("reward", "terminated"):
        _inputs.check_tensor(where, f"batch[{key!r}]", batch[key], both, dtype="real", labels=[["T", "B"], ["T", "B", 1]])
    _inputs.check_tensor(where, "batch['mask']", batch["mask"], [(steps, rows)], dtype="real", labels=["T", "B"])
    if config.initial_state == "stored" and "init_carry" in batch.keys():
        for key in ("h", "c"):
            _inputs.check_tensor(
                where, f"batch['init_carry', {key!r}]", batch["init_carry", key], [(steps, rows, config.lstm_size)],
                dtype=like.dtype, labels=["T", "B", "lstm_size"],
            )
        # R2D2's previous action and reward (a float action index was truncated). An index out of range (an
        # all-zero one-hot) is not refused here: reading the values is a host sync in the update; r2d2.act checks it.
        for key, dtype in (("prev_action", "integer"), ("prev_reward", "real")):
            if key in carry_keys:
                _inputs.check_tensor(
                    where, f"batch['init_carry', {key!r}]", batch["init_carry", key], both, dtype=dtype,
                    labels=[["T", "B"], ["T", "B", 1]],
                )
    _inputs.check_device(where, like, {"batch": batch})


def _check_batch(config: Config, batch: TensorDict, where: str) -> tuple[int, int]:
    if not isinstance(batch, TensorDict):
        raise ValueError(f"DRQN batches are TensorDicts of time-major windows [T, B], got a {type(batch).__name__}.")
    if batch.batch_dims != 2:
        raise ValueError(
            f"DRQN batches are time-major windows with batch_size [T, B], got {list(batch.batch_size)}."
        )
    check_window_keys(config, batch, where, "SequenceReplay", carry_hint=": pass the actor carry to SequenceReplay.add")
    return batch.batch_size[0], batch.batch_size[1]


def loss(
    params: TensorDict,
    target: TensorDict,
    config: Config,
    batch: TensorDict,
    *,
    gamma: float | torch.Tensor | None = None,
) -> tuple[torch.Tensor, TensorDict]:
    """Masked TD loss over a ``[T, B]`` window batch. Returns ``(loss, aux)``.

    Online Q-values ``q_tm1`` come from unrolling ``params`` over ``obs`` from
    the start state (zeros by default); target values ``q_t`` from unrolling
    ``target`` over ``obs_0, next_obs_0, ..., next_obs_{T-1}`` from its own
    start state, so ``q_t[t]`` is the target network's Q at ``o_{t+1}`` after
    seeing the window up to it. The target is one-step (the paper's); with
    ``n_step > 1`` it is the n-step return summed inside the window, cut short
    at the window's last valid step and stopped by termination, and with
    ``value_rescaling`` it is squashed by R2D2's ``h``
    (:func:`rlfunc.core.returns.transformed_n_step_targets`). The loss is the mean over valid steps
    (``mask``) of the Huber (or squared) TD error. ``aux`` holds metrics and
    the per-step ``td_error [T, B]`` (zero on padding; R2D2 priorities).
    ``gamma`` (e.g. ``state["hparams", "gamma"]``) replaces ``config.gamma``.
    """
    steps, batch_size = _check_batch(config, batch, "drqn.loss")
    check_window_inputs(params, config, batch, "drqn.loss")
    obs, next_obs = batch["obs"], batch["next_obs"]
    fdt = obs.dtype if obs.is_floating_point() else torch.float32  # pixel batches hold uint8 frames
    like = torch.zeros((), dtype=fdt, device=obs.device)
    mask = batch["mask"].bool()
    a_tm1 = batch["action"].reshape(steps, batch_size).long()
    r_t = batch["reward"].reshape(steps, batch_size).to(fdt)
    terminated = batch["terminated"].reshape(steps, batch_size).to(fdt)
    discount_t = (config.gamma if gamma is None else gamma) * (1.0 - terminated)
    seq = torch.cat([obs[:1], next_obs], dim=0)  # o_0, o_1, ..., o_T  [T+1, B, O]

    carry = _start_carry(config, batch, batch_size, like)
    if config.double_q:
        q_all, _ = q_unroll(params, seq, carry)
        q_tm1, q_selector = q_all[:-1], q_all[1:].detach()
    else:
        q_tm1, _ = q_unroll(params, obs, carry)
    with torch.no_grad():
        target_carry = _start_carry(config, batch, batch_size, like)
        q_t = q_unroll(target, seq, target_carry)[0][1:]
    if config.n_step > 1 or config.value_rescaling:
        target_t = returns.transformed_n_step_targets(
            r_t,
            discount_t,
            q_t,
            q_selector if config.double_q else q_t,  # selecting by the target's own Q = plain max
            config.n_step,
            mask=mask,
            rescale_eps=config.rescale_eps if config.value_rescaling else None,
        )
        td = target_t - returns.select_action_values(q_tm1, a_tm1)
    elif config.double_q:
        td = returns.double_q_learning(q_tm1, a_tm1, r_t, discount_t, q_t, q_selector)
    else:
        td = returns.q_learning(q_tm1, a_tm1, r_t, discount_t, q_t)
    value = returns.sequence_td_loss(td, mask, huber_delta=config.huber_delta)
    td_masked = torch.where(mask, td.detach(), torch.zeros((), dtype=td.dtype, device=td.device))
    aux = TensorDict(
        {
            "q": returns.masked_mean(returns.select_action_values(q_tm1, a_tm1).detach(), mask),
            "td_abs": returns.masked_mean(td_masked.abs(), mask),
            "valid_fraction": mask.to(fdt).mean(),
            "td_error": td_masked,
        },
        batch_size=[],
    )
    return value, aux


def update(
    state: TensorDict, batch: TensorDict, noise: TensorDict | None = None
) -> tuple[TensorDict, TensorDict]:
    """One DRQN gradient step on a ``[T, B]`` window batch. Pure.

    Adam on the masked TD loss, then ``step += 1`` and the target copied from
    the new online parameters when ``step % target_period == 0``. ``noise`` is
    accepted for a uniform ``update`` signature and unused (DRQN's update draws
    nothing). Returns ``(new_state, metrics)``; metrics are 0-dim tensors. A
    ``state["hparams"]`` entry (``lr``, ``gamma``) replaces its :class:`Config`
    field and is carried to the new state.
    """
    config: Config = _inputs.state_config(state, Config, "drqn.update", "drqn.init")
    _check_batch(config, batch, "drqn.update")
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
    new_state = TensorDict(
        {"params": params, "target": target, "opt": opt_state, "step": step}, batch_size=[]
    )
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
        },
        batch_size=[],
    )
    return new_state, metrics


def epsilon(config: Config, step: int | torch.Tensor) -> torch.Tensor:
    """Exploration rate at env step ``step``: ``eps_start`` for the first ``eps_decay_delay``
    steps, then linear ``eps_start -> eps_end`` over ``eps_decay_steps``, then constant. Pure;
    0-dim tensor. With ``exploration="actor_ladder"`` the runtime uses :func:`actor_epsilons` instead.

    The delay is where the original codes start the decay: DeepMind's DQN (``NeuralQLearner.lua``:
    ``ep_endt - max(0, numSteps - learn_start)``; the DRQN paper keeps DQN's training setup) and MinAtar's
    (``examples/dqn.py``: uniformly random actions before ``replay_start_size``, then annealed over
    ``t - replay_start_size``) both count it from the replay start; the default 0 counts it from the
    first step (CleanRL's), the schedule every run before this key used."""
    return linear_schedule(config.eps_start, config.eps_end, config.eps_decay_steps)(step - config.eps_decay_delay)


def draw_act_noise(
    batch: int, *, generator: torch.Generator | None = None, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """Uniform ``[2, batch]`` draws for :func:`act`: row 0 decides, row 1 picks the random action."""
    return torch.rand((2, batch), generator=generator, device=device)


def act(
    params: TensorDict,
    obs: torch.Tensor,
    carry: tuple[torch.Tensor, torch.Tensor],
    epsilon: float | torch.Tensor,
    noise: torch.Tensor | None = None,
    *,
    reset: torch.Tensor | None = None,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Epsilon-greedy actions for a batch of envs. Returns ``(action [B] int64, new_carry)``.

    ``obs [B, O]``; ``carry`` the LSTM state ``(h, c)`` before this step;
    ``reset [B]`` (optional, bool) zeroes the carry of envs whose episode
    starts at this observation. ``noise [2, B]`` holds U[0, 1) draws
    (:func:`draw_act_noise`): env ``b`` explores when ``noise[0, b] <
    epsilon`` and then takes action ``floor(noise[1, b] * A)`` (uniform over
    all actions, greedy one included, as rlax ``epsilon_greedy``). The carry
    advances whether or not the env explores.
    """
    if isinstance(obs, torch.Tensor) and obs.dim() > 0:  # another obs: q_step's sentence
        _inputs.check_epsilon("drqn.act", epsilon, obs.shape[0])
        if reset is not None:
            reset = _inputs.check_per_env("drqn.act", "reset", reset, obs.shape[0], "real", obs.device)
    with torch.no_grad():
        if reset is not None:
            start = reset.bool().reshape(-1, 1)
            carry = (torch.where(start, 0.0, carry[0]), torch.where(start, 0.0, carry[1]))
        q, carry = q_step(params, obs, carry)
        batch, num_actions = q.shape
        if noise is None:
            noise = torch.rand((2, batch), device=q.device)
        if tuple(noise.shape) != (2, batch):
            raise ValueError(f"act: noise must have shape (2, {batch}), got {tuple(noise.shape)}.")
        greedy = q.argmax(dim=-1)
        random = torch.clamp((noise[1] * num_actions).long(), max=num_actions - 1)
        explore = noise[0] < epsilon
        return torch.where(explore, random, greedy), carry


def greedy_action(
    params: TensorDict,
    obs: torch.Tensor,
    carry: tuple[torch.Tensor, torch.Tensor],
    *,
    config: Config | None = None,
    noise: torch.Tensor | None = None,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Evaluation action: ``obs [B, O]`` -> ``(action [B] int64, new carry)``.

    Greedy (``argmax_a Q``) when ``config.eval_epsilon`` is 0 (the default);
    otherwise epsilon-greedy with ``eval_epsilon`` (DQN's evaluation used
    0.05), with ``noise`` as in :func:`act` (drawn from torch's global RNG if
    not given). The carry advances either way; the caller resets it to
    :func:`initial_carry` at every episode start
    (:class:`rlfunc.runtime.policy.Policy` does).
    """
    eps = 0.0 if config is None else config.eval_epsilon
    if eps > 0.0:
        return act(params, obs, carry, eps, noise)
    with torch.no_grad():
        q, carry = q_step(params, obs, carry)
        return q.argmax(dim=-1), carry
