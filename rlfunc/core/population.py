"""Populations: many independent learners as one state with a leading member dimension.

DESIGN.md, "Populations and scale-out": write for one, vmap for many. The
algorithms in :mod:`rlfunc.algos` are single-member pure functions; a
population of ``P`` members is the single-member state with a leading ``[P]``
dimension on every tensor leaf (the static ``config`` kept once), updated by
``torch.vmap(update)`` applied from outside, then compiled. Members share no
data and no gradients: member ``k`` of a vmapped update computes what a single
update of member ``k``'s state, batch and noise computes (tests/test_population.py:
parameters, optimizer moments and losses to 1e-5 relative over 50+ updates for
REDQ, SAC, RLPD, DrQ-v2, DRQN and R2D2). This is how PureJaxRL-style JAX code
trains many agents on one device (``jax.vmap`` over the train state); here the
state is a TensorDict, which ``torch.vmap`` splits and stacks along dim 0.

Pure functions, no I/O:

* :func:`stack` / :func:`unstack` / :func:`member` / :func:`size`: between
  a list of single-member states and the population state;
* :func:`with_hparams`: settings as data -- the numeric hyperparameters an
  algorithm reads from ``state["hparams", name]`` (its module's ``HPARAMS``:
  learning rates everywhere, ``gamma``, ``tau``, REDQ's fixed ``init_alpha``)
  as 0-dim tensors per member, so members may differ in them while the
  ``Config`` stays static; :func:`stack` does this by itself for members whose
  configs differ only in such fields;
* :func:`vmap_update`: the population update ``(states [P], batches [P, ...],
  noise [P, ...]) -> (states [P], metrics [P, ...])``; :func:`vmap`, the same for
  any function (the runtime's vmapped ``act``), both direct for one member;
* :func:`draw_per_member`: each member's noise from its own generator.

Randomness. ``torch.vmap`` cannot split a ``torch.Generator``, and drawing
inside the vmapped function with ``randomness="different"`` would make a
member's numbers depend on ``P`` and on the batching. No algorithm's
``update`` needs a generator: REDQ/SAC/RLPD and DrQ-v2 take all their draws as
a ``noise`` TensorDict (``draw_noise``: policy noise, target-subset draws,
augmentation shifts), DRQN and R2D2 draw nothing in ``update`` (their
``noise`` argument is unused; exploration noise is the actor's, outside the
update). So the population draws each member's noise *outside* the vmapped
function from that member's own generator (:func:`draw_per_member`) and
passes it in stacked ``[P, ...]``, and :func:`vmap_update` runs with
``randomness="error"``: an update that tried to draw (e.g. ``update(state,
batch)`` without noise, which falls back to the global generator) is one
``ValueError`` sentence pointing at :func:`draw_per_member` instead of silently
sharing or splitting a stream. A member's numbers
are then those of a single run with its generator, whatever ``P``.

Numerics. Eagerly, a single update uses PyTorch's fused Adam kernel and one
``_foreach_lerp`` for the target networks. Under ``torch.vmap``
:class:`rlfunc.core.optim.Adam` runs the same fused kernel on each member's
slice of the stacked buffers (:func:`rlfunc.core.optim.fused_adam`, a custom op
with a batching rule), and :func:`rlfunc.core.targets.polyak` one
``torch.lerp`` per leaf (the same arithmetic, bit-identical on CPU); compiled,
Adam is the traced out-of-place arithmetic. Batched matrix products sum in
another order than single ones, so a member matches its single run to float
tolerance, not bit for bit: after 50 updates of the tiny test problems the
largest difference is ~2e-6 of a tensor's scale.
Settings held as tensors (``hparams``) also round differently from the Python
floats of a ``Config`` (e.g. ``gamma`` times a float32 tensor); a state
without ``hparams`` runs exactly the float code a single run always ran.

One member. A population of one runs no ``torch.vmap``: :func:`vmap_update` (and
:func:`vmap`, which the runtime acts through) drops the leading ``[1]`` of every
argument (:func:`squeeze0`, views), calls the single-member function on them and
puts the ``[1]`` back on its results (:func:`unsqueeze0`). So its member computes
exactly -- bit for bit -- what its single run computes (vmapped, a population of one
differed from it at ~1e-8: batched products sum in another order), at the single
run's cost plus two TensorDict rebuilds. ``randomness="error"`` is not enforced on
that path (nothing is batched there, so no stream can be shared or split).

Schedules. A learning-rate schedule (:class:`rlfunc.core.optim.LRSchedule`)
is relative to its rate: a member whose rate is a tensor in ``hparams``
follows the population config's schedule rescaled to start from it
(:meth:`rlfunc.core.optim.Schedule.scaled`), which is what the member's own
config with that rate would give. DRQN/R2D2/DQN's older
``lr_decay_updates``/``lr_end`` spelling has an absolute end rate, and keeps it:
its schedule (:class:`rlfunc.algos._qstate.DecayToRate`) restarted from a
member's rate decays linearly from that rate to the config's ``lr_end``, as the
member's single run does (not to ``lr_end * member_lr / config.lr``).

What is shared. Everything in the ``Config`` that is not a setting as data:
shapes (hidden sizes, ensemble size, batch size, sequence lengths), counts
(``updates_per_step``, ``target_period``, ``n_step``) and switches. A sweep
over those is several populations. All six algorithms in scope vmap (REDQ,
SAC, RLPD, DrQ-v2, DRQN, R2D2); none needs to know it is in a population.

Usage, from a user's own script: stack two seeds' states and update both with
``torch.vmap(redq.update)`` (what :func:`vmap_update` wraps)::

    >>> import gymnasium as gym, torch
    >>> from tensordict import TensorDict
    >>> from rlfunc.algos import redq
    >>> from rlfunc.core import population
    >>> config = redq.Config(hidden_sizes=(16, 16), num_critics=3, updates_per_step=2, batch_size=8)
    >>> obs_space, act_space = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (1,))
    >>> states = [redq.init(config, obs_space, act_space, seed=s) for s in (0, 1)]
    >>> states[1] = population.with_hparams(states[1], critic_lr=1e-3)   # settings as data
    >>> pop = population.stack(states)                                   # every leaf [P, ...]
    >>> pop["params", "log_alpha"].shape, pop["hparams", "critic_lr"]
    (torch.Size([2]), tensor([0.0003, 0.0010]))
    >>> P, G, B = 2, config.updates_per_step, config.batch_size
    >>> batch = TensorDict({"obs": torch.randn(P, G, B, 3), "action": torch.rand(P, G, B, 1) * 2 - 1,
    ...                     "reward": torch.randn(P, G, B), "next_obs": torch.randn(P, G, B, 3),
    ...                     "terminated": torch.zeros(P, G, B)}, batch_size=[P, G, B])
    >>> gens = [torch.Generator().manual_seed(100 + k) for k in range(P)]   # one stream per member
    >>> noise = population.draw_per_member(lambda g: redq.draw_noise(config, G, B, 1, generator=g), gens)
    >>> pop, metrics = torch.vmap(redq.update, randomness="error")(pop, batch, noise)
    >>> metrics["critic_loss"].shape, pop["opt", "critic", "step"]
    (torch.Size([2]), tensor([2., 2.]))
    >>> single, _ = redq.update(states[1], batch[1], noise[1])           # member 1 on its own
    >>> torch.allclose(population.member(pop, 1)["params", "actor", "mean", "weight"],
    ...                single["params", "actor", "mean", "weight"], rtol=1e-5, atol=1e-7)
    True
    >>> step = torch.compile(population.vmap_update(redq.update), fullgraph=True)   # doctest: +SKIP

REDQ, SAC and RLPD also run their ``G``-step loop once for all members, each step
vmapped (what a population trainer compiles step by step): the same numbers::

    >>> looped, _ = redq.make_population_update()(population.stack(states), batch, noise)
    >>> torch.equal(looped["params", "critic", "0", "weight"], pop["params", "critic", "0", "weight"])
    True
    >>> step = redq.make_population_update("step")   # two small compiled graphs   # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import importlib
import numbers
from typing import Any, Callable, Mapping, Sequence

import torch
from tensordict import TensorDict

__all__ = [
    "stack",
    "unstack",
    "member",
    "size",
    "hparam_names",
    "with_hparams",
    "vmap_update",
    "vmap",
    "squeeze0",
    "unsqueeze0",
    "draw_per_member",
]


def _config(state: TensorDict, where: str):
    if "config" not in state.keys():
        raise ValueError(f"{where}: the state has no 'config' entry; pass states made by an algorithm's init.")
    return state.get_non_tensor("config")


def _algo_module(config):
    return importlib.import_module(type(config).__module__)


def hparam_names(config) -> tuple[str, ...]:
    """The ``Config`` fields the algorithm of ``config`` reads from ``state["hparams"]``
    (its module's ``HPARAMS``, e.g. RLPD's, which are REDQ's; ``()`` for a config whose
    module declares none)."""
    return tuple(getattr(_algo_module(config), "HPARAMS", ()))


def _init_settings(config) -> tuple[str, ...]:
    return tuple(getattr(_algo_module(config), "INIT_SETTINGS", ()))


def _is_number(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def with_hparams(state: TensorDict, **values: float | Sequence[float] | torch.Tensor) -> TensorDict:
    """``state`` with ``state["hparams", name] = value`` for each ``name=value`` (a new TensorDict;
    the input is not modified).

    ``name`` must be a setting the algorithm reads as data (:func:`hparam_names`, e.g.
    REDQ's ``critic_lr``, ``gamma``, ``tau``; its ``init_alpha`` only with ``auto_alpha`` off:
    with it on, ``init`` already set ``params["log_alpha"]`` from the config and the update
    never reads the setting, so a value other than the config's is refused -- init with that
    config instead, :func:`stack` takes such members). Values are stored as float32 0-dim tensors
    on the state's device; for a stacked population state (batch size ``[P]``) a value
    is one number for all members or ``P`` numbers, one each. From then on the value in
    the state, not the ``Config``'s, is what the update uses.
    """
    return _with_hparams(state, values, from_config=False)


def _with_hparams(state: TensorDict, values: Mapping[str, Any], *, from_config: bool) -> TensorDict:
    config = _config(state, "with_hparams")
    allowed = hparam_names(config)
    out = state.clone(recurse=False)
    hparams = out["hparams"].clone(recurse=False) if "hparams" in out.keys() else TensorDict({}, batch_size=state.batch_size)
    for name, value in values.items():
        if name not in allowed:
            kind = f"{type(config).__module__}.{type(config).__name__}"
            listed = ", ".join(allowed) if allowed else "none"
            raise ValueError(
                f"with_hparams: {name!r} is not a setting {kind} reads from the state; the ones it does: {listed}."
            )
        try:
            tensor = torch.as_tensor(value, dtype=torch.float32, device=state.device).detach().clone()
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(f"with_hparams: {name} must be a number, a sequence of numbers or a tensor, got {value!r}.") from None
        inert = name in _init_settings(config) and getattr(config, "auto_alpha", False)
        own = torch.tensor(float(getattr(config, name)), dtype=torch.float32, device=tensor.device) if inert else None
        if inert and not from_config and bool((tensor != own).any()):
            # e.g. REDQ's init_alpha: with auto_alpha the temperature is params["log_alpha"], set by init
            raise ValueError(
                f"with_hparams: {name} is only an initial value with auto_alpha on (update never reads it); "
                f"init each member with its own config's {name} instead (stack takes members that differ in it)."
            )
        if tensor.shape != state.batch_size and tensor.dim() != 0:
            raise ValueError(
                f"with_hparams: {name} must be one number or one per member ({list(state.batch_size)}), "
                f"got shape {list(tensor.shape)}."
            )
        if not bool(torch.isfinite(tensor).all()):
            raise ValueError(f"with_hparams: {name} must be finite, got {value!r}.")
        hparams[name] = tensor.expand(state.batch_size).clone() if state.batch_dims else tensor
    out["hparams"] = hparams
    return out


def _structure(state: TensorDict) -> dict:
    return {k: (tuple(v.shape), v.dtype) for k, v in state.items(include_nested=True, leaves_only=True)}


def stack(states: Sequence[TensorDict]) -> TensorDict:
    """One population state from single-member states: every tensor leaf stacked on a new
    leading dimension ``[P]`` (``batch_size [P]``), the static ``config`` kept once.

    The members' configs must be equal except in settings the algorithm holds as data:
    its ``HPARAMS`` (a field that differs, or that any member already holds in its
    ``hparams``, is written into every member's ``hparams`` from its own config,
    unless the member already has that entry) and its
    ``INIT_SETTINGS`` (already state tensors, e.g. REDQ's ``target_entropy``). The
    population's config is the first member's. Any other difference (a hidden size,
    a switch) is refused in one sentence naming the fields: such members are separate
    populations. The members' tensors must have the same keys, shapes and dtypes.
    """
    states = list(states)
    if not states:
        raise ValueError("stack: needs at least one state.")
    configs = [_config(s, "stack") for s in states]
    first = configs[0]
    for k, cfg in enumerate(configs):
        if type(cfg) is not type(first):
            raise ValueError(
                f"stack: member {k}'s config is a {type(cfg).__name__} of {type(cfg).__module__}, member 0's a "
                f"{type(first).__name__} of {type(first).__module__}; a population is one algorithm."
            )
        if states[k].batch_dims:
            raise ValueError(f"stack: member {k} has batch size {list(states[k].batch_size)}; stack single-member states.")
    data_fields, init_fields = hparam_names(first), _init_settings(first)
    differing: set[str] = set()
    if dataclasses.is_dataclass(first):
        for k, cfg in enumerate(configs[1:], start=1):
            diff = [f.name for f in dataclasses.fields(first) if getattr(cfg, f.name) != getattr(first, f.name)]
            static = [n for n in diff if n not in data_fields and n not in init_fields]
            if static:
                raise ValueError(
                    f"stack: member {k}'s config differs from member 0's in {', '.join(static)}, which "
                    f"{type(first).__module__} does not take as data (it does: "
                    f"{', '.join(data_fields + tuple(f for f in init_fields if f not in data_fields)) or 'none'}); "
                    "members that differ there are separate populations."
                )
            differing.update(diff)
    elif any(cfg != first for cfg in configs[1:]):
        raise ValueError("stack: the members' configs differ; a population shares one config.")
    # Settings as data in any member are data in all: each member without an entry
    # gets its own config's value (which is what its single run would use).
    as_data = set(differing) & set(data_fields)
    for state in states:
        if "hparams" in state.keys():
            as_data.update(state["hparams"].keys())
    members = []
    for state, cfg in zip(states, configs):
        own = [n for n in sorted(as_data) if not ("hparams" in state.keys() and n in state["hparams"].keys())]
        if own:
            bad = [n for n in own if not _is_number(getattr(cfg, n))]
            if bad:
                raise ValueError(f"stack: {', '.join(bad)} differ across members but are not numbers in every config.")
            state = _with_hparams(state, {n: float(getattr(cfg, n)) for n in own}, from_config=True)
        members.append(state.exclude("config"))
    ref = _structure(members[0])
    for k, m in enumerate(members[1:], start=1):
        got = _structure(m)
        if got != ref:
            def dotted(key) -> str:
                return ".".join(key) if isinstance(key, tuple) else str(key)

            missing = sorted(set(map(dotted, ref)) ^ set(map(dotted, got)))
            names = missing or [dotted(key) for key in ref if ref[key] != got.get(key)]
            listed = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            what = "keys present in only one of them" if missing else "leaves of different shapes or dtypes"
            raise ValueError(f"stack: member {k}'s state does not match member 0's ({what}: {listed}).")
    out = torch.stack(members, dim=0)
    out.set_non_tensor("config", first)
    return out


def size(state: TensorDict) -> int:
    """The number of members ``P`` of a population state (its batch size ``[P]``)."""
    if state.batch_dims != 1:
        raise ValueError(f"size: a population state has batch size [P], got {list(state.batch_size)}.")
    return int(state.batch_size[0])


def member(state: TensorDict, k: int) -> TensorDict:
    """Member ``k``'s single-member state (its tensors, its ``hparams``, the population's
    ``config``): what its own ``update`` takes. A view of the population's tensors, as
    TensorDict indexing gives; clone it to keep it past an in-place change."""
    p = size(state)
    if not -p <= k < p:
        raise IndexError(f"member: k must be in [0, {p}) for a population of {p}, got {k}.")
    out = state.exclude("config")[k]
    if "config" in state.keys():
        out.set_non_tensor("config", state.get_non_tensor("config"))
    return out


def unstack(state: TensorDict) -> list[TensorDict]:
    """The ``P`` single-member states of a population state (inverse of :func:`stack`, up
    to the ``hparams`` that :func:`stack` wrote and the config, which is the population's)."""
    return [member(state, k) for k in range(size(state))]


def vmap_update(
    update: Callable[..., tuple[TensorDict, TensorDict]],
    *,
    randomness: str = "error",
    chunk_size: int | None = None,
) -> Callable[..., tuple[TensorDict, TensorDict]]:
    """The population form of a single-member ``update(state, batch[, noise]) -> (state, metrics)``.

    Returns ``population_update(states, batches[, noise]) -> (states, metrics)``, where
    every argument and result has a leading member dimension ``[P]`` (states from
    :func:`stack`, batches and noise stacked per member, e.g. :func:`draw_per_member`),
    built with ``torch.vmap(update, randomness=randomness)``. ``randomness="error"``
    (the default) refuses any random draw inside the update: all noise comes in as
    arguments (module doc). ``chunk_size`` is ``torch.vmap``'s (members per chunk,
    for memory). Pure; compiles with ``torch.compile(fullgraph=True)``, one graph for
    every call: the static ``config`` goes around the vmapped function (each member's
    update sees it as usual) and is set on the result as :func:`stack` sets it, so the
    state that comes out has the structure of the one that went in.
    Keyword arguments of ``update`` (e.g. REDQ's ``steps``) go through
    ``functools.partial`` first.
    """

    def population_update(state: TensorDict, batch: TensorDict, *noise: Any) -> tuple[TensorDict, TensorDict]:
        p = size(state)
        for name, arg in (("batch", batch), *((f"noise {i}", n) for i, n in enumerate(noise))):
            if arg is None:
                continue
            lead = arg.batch_size[:1] if isinstance(arg, TensorDict) else getattr(arg, "shape", ())[:1]
            if tuple(lead) != (p,):
                raise ValueError(
                    f"population update: {name} must have a leading member dimension of {p} (the population's "
                    f"size), got {list(lead)}; stack one per member."
                )
        config = _config(state, "population update")
        args = tuple(n for n in noise if n is not None)
        if p == 1:  # one member: its own update on its own tensors, no vmap (module doc, "One member")
            member_state = squeeze0(state.exclude("config"))
            member_state.set_non_tensor("config", config)
            new_member, metrics = update(member_state, squeeze0(batch), *(squeeze0(a) for a in args))
            new_state, metrics = unsqueeze0(new_member.exclude("config")), unsqueeze0(metrics)
        else:

            def member_update(tensors: TensorDict, *args: Any) -> tuple[TensorDict, TensorDict]:
                member_state = tensors.clone(recurse=False)
                member_state.set_non_tensor("config", config)
                new_state, metrics = update(member_state, *args)
                return new_state.exclude("config"), metrics

            vmapped = torch.vmap(member_update, randomness=randomness, chunk_size=chunk_size)
            new_state, metrics = vmapped(state.exclude("config"), batch, *args)
            if state.device is not None:  # vmap's result has none; keep the state's (no copy: same device)
                new_state = new_state.to(state.device)
        new_state.set_non_tensor("config", config)
        return new_state, metrics

    population_update.__doc__ = f"``torch.vmap`` of {getattr(update, '__qualname__', update)!s} over members."
    return population_update


# The eager fast path rebuilds TensorDicts through tensordict's private constructor (tested with
# tensordict 0.15); where a release lacks it, the public ``apply`` does the same, slower.
_FAST_TD = all(hasattr(TensorDict, name) for name in ("_new_unsafe", "_fast_apply")) and hasattr(TensorDict(), "_tensordict")


def _map_leaves(tree: Any, fn: Callable[[torch.Tensor], torch.Tensor], batch: Callable[[torch.Size], torch.Size]) -> Any:
    """``fn`` on every tensor of ``tree`` (a tensor, a TensorDict, a tuple or named tuple of them,
    or ``None``), TensorDicts rebuilt with batch size ``batch(old)``. Eagerly, plain TensorDicts are
    rebuilt directly from their leaves (a few microseconds a leaf; TensorDict's own shape methods
    cost several times that, which a small update notices); anything else, and everything while
    compiling, through TensorDict's public methods."""
    if tree is None:
        return None
    if isinstance(tree, tuple):
        parts = [_map_leaves(t, fn, batch) for t in tree]
        return type(tree)(*parts) if hasattr(tree, "_fields") else tuple(parts)
    if isinstance(tree, torch.Tensor):
        return fn(tree)
    if isinstance(tree, TensorDict):
        if _FAST_TD and not torch.compiler.is_compiling() and type(tree) is TensorDict:
            return _rebuild(tree, fn, batch(tree.batch_size))
        if hasattr(tree, "_fast_apply"):  # what TensorDict's own shape methods call (traceable by torch.compile)
            return tree._fast_apply(fn, batch_size=batch(tree.batch_size), propagate_lock=False)
        return tree.apply(fn, batch_size=batch(tree.batch_size))
    raise TypeError(f"population: cannot split or stack a {type(tree).__name__} by member; pass tensors or TensorDicts.")


def _rebuild(td: TensorDict, fn: Callable[[torch.Tensor], torch.Tensor], batch_size: torch.Size) -> TensorDict:
    out = {}
    for key, value in td._tensordict.items():
        if type(value) is TensorDict:
            out[key] = _rebuild(value, fn, batch_size + value.batch_size[td.batch_dims:])
        elif isinstance(value, torch.Tensor):
            out[key] = fn(value)
        else:  # a non-tensor leaf or another TensorDict class: TensorDict's own method for the whole
            return td._fast_apply(fn, batch_size=batch_size, propagate_lock=False)
    return TensorDict._new_unsafe(out, batch_size=batch_size, device=td.device)


def squeeze0(tree: Any) -> Any:
    """A population of one's only member: every tensor's leading ``[1]`` dimension dropped (views),
    TensorDicts' batch sizes with it. Inverse of :func:`unsqueeze0`."""
    return _map_leaves(tree, lambda t: t[0], lambda b: b[1:])


def unsqueeze0(tree: Any) -> Any:
    """A single member's tensors (or TensorDicts, tuples of them) as a population of one: a leading
    ``[1]`` dimension on each (views). Inverse of :func:`squeeze0`."""
    return _map_leaves(tree, lambda t: t.unsqueeze(0), lambda b: torch.Size([1]) + b)


def vmap(fn: Callable[..., Any], *, randomness: str = "error", chunk_size: int | None = None) -> Callable[..., Any]:
    """``torch.vmap(fn, randomness=randomness, chunk_size=chunk_size)`` over a leading member
    dimension of every argument and result (tensors, TensorDicts, tuples of them), except that
    for a population of one (every argument's leading size 1) ``fn`` runs directly on the only
    member's tensors and its results get the leading ``[1]`` back (:func:`squeeze0`,
    :func:`unsqueeze0`): the single member's own call, with no batching overhead, and exactly
    the numbers its single run computes. The population runtime acts through it."""

    def population_fn(*args: Any) -> Any:
        lead = {(a.batch_size[:1] if isinstance(a, TensorDict) else a.shape[:1]) for a in _leading(args)}
        if lead == {torch.Size([1])}:
            return unsqueeze0(fn(*squeeze0(args)))
        return torch.vmap(fn, randomness=randomness, chunk_size=chunk_size)(*args)

    population_fn.__doc__ = f"``torch.vmap`` of {getattr(fn, '__qualname__', fn)!s} over members (direct for one)."
    return population_fn


def _leading(tree: Any) -> list:
    if tree is None:
        return []
    if isinstance(tree, tuple):
        return [x for t in tree for x in _leading(t)]
    return [tree]


def draw_per_member(draw: Callable[[torch.Generator], Any], generators: Sequence[torch.Generator]) -> Any:
    """``torch.stack([draw(g) for g in generators])``: member ``k``'s noise from its own
    generator ``generators[k]``, stacked ``[P, ...]`` (tensors or TensorDicts).

    Outside the vmapped update (a generator cannot be split by ``torch.vmap``), so a
    member draws exactly what a single run with that generator draws, whatever ``P``.
    """
    if isinstance(generators, torch.Generator):
        raise ValueError("draw_per_member: generators must be a sequence, one torch.Generator per member; got one generator.")
    generators = list(generators)
    if not generators:
        raise ValueError("draw_per_member: needs one generator per member, got none.")
    return torch.stack([draw(g) for g in generators], dim=0)
