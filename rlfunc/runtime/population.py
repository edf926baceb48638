"""Training a population: many seeds and settings of one learner in one process.

Issue #24 and DESIGN.md, "Populations and scale-out": a population is ``P``
independent learners whose states are stacked on a leading member dimension
and updated by one vmapped update (:func:`rlfunc.core.population.vmap_update`
of the algorithm's pure ``update``; with ``train.compile`` as :func:`population_update`
compiles it: REDQ, SAC and RLPD each vmapped step, the others the whole update). This is PureJaxRL's recipe (``jax.vmap`` over whole
training states, Lu et al. 2022, "Discovered Policy Optimisation") applied to
off-policy learners with replay. Members share no data and no gradients.
``train.population.vectorize`` (:data:`~rlfunc.runtime.population_members.VECTORIZE`) chooses ``loop`` instead where
batching does not pay (:func:`~rlfunc.runtime.population_members.resolve_vectorize`): each member's own single-run
``update`` and ``act`` in turn on its unstacked state, bit for bit its single run.

Written once for every learner. Member ``k`` *is* its single run's learner
(:mod:`rlfunc.runtime.learners`, built from member ``k``'s resolved config) without
its algorithm state, which lives in the stacked population state. The learner keeps
everything else its single run keeps -- its generator (seeded ``seed + 1``), its
replay (uniform, RLPD's mixed sampler over the shared prior dataset, DrQ-v2's
frame-stack replay, DRQN/DQN's sequence replay, R2D2's prioritized one), its
recurrent carries, exploration schedule or epsilon ladder, counters -- and runs
the halves of its single-run ``explore`` and ``learn`` around the pure calls:
``act_inputs`` / ``act_outputs`` around one vmapped ``act_fn`` over the stacked
parameters, ``prepare_state`` / ``update_inputs`` / ``after_update`` (R2D2's
priorities written back, its rate limiter's count) around one vmapped update. So
a member draws its exploration noise, replay indices and update noise from its own
generator in its single run's order, cuts and prioritizes windows with its single
run's code, and nothing here repeats a learner's logic.

Steps, per member as in its single run. Every member's ``env.num_envs`` copies are
sub-envs of one gymnasium vector env (:class:`~rlfunc.runtime.population_collector.PopulationCollector`:
``P x num_envs`` copies, each member's seeded from its seed as its single run seeds them,
stepped with its single run's reset rule; evaluation episodes from ``seed + 10000`` in
each member's own env), so an env step of the population builds one set of rows and,
where the learner only stores them (REDQ, SAC, RLPD), writes every member's into the
batched replay at once (``population_observe``); vmapped REDQ, SAC and RLPD members,
past their warm-up, act with every member's observations moved to the device in one
copy and the actions back in one (``population_act_inputs`` / ``population_act_outputs``;
other learners, and ``vectorize=loop``, build each member's inputs in turn). Each member counts its own env steps: a vector
env's autoreset step stores fewer rows, so members' counts can differ by a few
steps while the run goes on. The loop runs in rounds (one vmapped act, every
member's env step, then one sub-step per stored row, as the single run's loop
counts them); at each sub-step the members whose learner is ``ready`` learn
together. A member that is not ready keeps its state unchanged (its row of the
vmapped update is computed on another member's inputs and dropped), so learners
whose readiness differs across members (R2D2's samples-per-insert limiter, rows
skipped by autoreset) stay exact. Vmapped, a learner whose readiness reads only
its env step (``train_every`` boundaries) has its round's due updates counted and
run together before the round's next log, evaluation or act: members whose
autoreset steps shifted their counts would otherwise each pay a whole masked
update at a different row (a 3-seed DRQN population on MinAtar ran 2.4x slower
than three single runs that way, in a one-off timing: docs/populations.md). DrQ-v2 learns between acting and stepping the
env, as its single run (``learns_before_env_step``). Each member logs and
evaluates when its own env step crosses ``log_every`` / ``eval_every``; the one
population checkpoint is written after a round in which the most advanced member
crossed ``checkpoint_every``, so with ``env.num_envs > 1`` a resumed population
continues from a slightly different point than a single run would (with one env
per member, at an episode boundary, it continues exactly). A checkpoint that falls inside
a round (a crash's, or the last one when ``train.total_steps`` is reached mid-round)
records each member's rows stored and not counted yet (``pending_env_steps``); a resumed
population counts them first, as the uninterrupted run would have, before it steps the envs.

Replays (issue #24 §5). Every member's replay is a row of one batched replay
(storage ``[P, capacity, ...]``) where the learner offers one (``population_replay``):
REDQ/SAC/RLPD's transitions in a :class:`~rlfunc.replay.population.PopulationReplay`,
DRQN/DQN's windows in a :class:`~rlfunc.replay.population_sequence.PopulationSequenceReplay`,
DrQ-v2's frames in a :class:`~rlfunc.replay.population_pixels.PopulationPixelReplay`.
Member ``k``'s learner holds its ``member(k)``, its single replay over row ``k``, so
it stores, cuts windows and flushes with its single run's code. When every member
learns at a step, all members' rows come from one ``population_sample`` call
(member ``k``'s indices from its generator as its single replay draws them --
RLPD's prior rows first, as :class:`~rlfunc.replay.offline.MixedSampler` -- then one
gather); when only some do (the masked update), each of them samples its own row.
The batched replay is checkpointed once for the population. R2D2 keeps one
prioritized replay per member (``P`` gathers and one ``torch.stack`` per update)
in this version: a prioritized member's row cannot be sampled alone (the masked
update needs that, and R2D2's limiter makes members ready at different steps) and
its priorities would go back ``[P, B]`` into the batched sum-tree, not through its
learner. DRQN/DQN from pixels (frame sequence replays) keep theirs too.

Files. Each member has its own ``member-<k>/`` directory with ``config.yaml`` (its
resolved settings: its seed and grid values, no ``train.population``),
``metrics.csv`` and ``eval.csv`` (``frames`` as well for action-repeated envs), so
``rlfunc plot`` reads it as a run, its policy as a weights-only checkpoint
(:func:`rlfunc.runtime.api.export`'s format) in ``member-<k>/checkpoints/``
(``rlfunc.load`` / ``rlfunc eval``), best evaluation in ``member-<k>/best/`` with
``train.keep_best``, and TensorBoard events. One training checkpoint for the whole
population lives in the run directory's ``checkpoints/`` (the verified format of
:mod:`rlfunc.runtime.checkpoint`: the stacked state and each member's learner
tensors -- replay, generator); :func:`resume` continues every member from it, each
learner doing what its single run's resume does (sequence learners close open
episodes and zero their carries), first rewriting a member's policy that a kill between
the two writes left behind and running an evaluation that an interruption skipped.

Numerics. A member computes what the single run with its seed and settings
computes (bit for bit in a population of one, which runs its member's ``act`` and
``update`` without ``torch.vmap``: :func:`rlfunc.core.population.vmap`), otherwise
up to float rounding, not bit for bit: batched matrix products sum in
another order (eagerly, Adam is the fused kernel per member, bit for bit), and settings held as
tensors round differently from Python floats (:mod:`rlfunc.core.population`,
"Numerics"). tests/test_population_runtime.py and tests/test_population_learners.py
measure it end to end: every evaluation return equal to 1e-6 relative and final
weights to 1e-5 of each tensor's scale (measured ~1e-6) for REDQ (one env and two),
SAC, RLPD, DRQN, DQN, R2D2 and DrQ-v2.

Speed. On one CPU thread a population's total throughput over P separate learners in
the same process (``python benchmarks/run.py population``, CPU time, beside one other job;
benchmarks/results/population_<algo>.json; docs/populations.md has the table) is, at
REDQ's shape (N=10, G=20, 256x256, batch 256), 1.01x / 0.99x / 1.06x / 1.09x at
P = 1 / 2 / 4 / 8, and for SAC 0.96x / 0.99x / 1.15x / 1.31x. A population of one
runs its single run's calls (same cost, within the measurements' spread). Each REDQ
member's update is matrix products that keep the core busy, which one batched product
does hardly faster; batching saves per-op overhead, which matters more the smaller the
update and the larger P. R2D2 at paper width, DrQ-v2, RLPD and compiled DRQN with a conv
torso are slower vmapped on a CPU (docs/populations.md), so ``auto`` loops them there
(:data:`~rlfunc.runtime.population_members.CPU_VMAP`, :func:`~rlfunc.runtime.population_members.resolve_vectorize`). The gain #24
expects is on a GPU, where one member's update leaves the card latency-bound and mostly idle.

Scope. Every algorithm of the registry: REDQ, SAC, RLPD (the prior dataset shared
read-only: each member's learner loads and checks it as its single run does, then
every member samples the first one's copy and the others are dropped, so building
the population holds up to ``P`` copies for a moment; checkpoints record its
SHA-256 and resume refuses a changed file), DRQN, DQN, R2D2 and DrQ-v2, with any ``env.num_envs`` their single
runs take. Refused in one sentence before training, because the population loop
does not implement them yet: RLPD's ``data.pretrain_steps`` (a prior-only phase
before the first online update), stopping rules (a rule would stop one member of
a run all members share), ``train.checkpoint_replay=false`` (the refill after resume is not
counted per member) and ``train.wandb`` (one W&B run per member is not opened);
grid keys that are not settings the algorithm takes as data (a population shares
its shapes), and callbacks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from tensordict import TensorDict

from rlfunc.runtime.config import ConfigError
from rlfunc.runtime.graphs import FixedStateUpdate
from rlfunc.runtime.interrupts import InterruptGuard
from rlfunc.runtime.population_collector import PopulationCollector
from rlfunc.runtime.population_members import (member_specs, plain_spec, refuse_dropped_grid_keys, refuse_given_twice,
                                               refuse_resolved_twins, refuse_set_and_grid, resolve_vectorize)
from rlfunc.runtime.specs import parse_grid, parse_seeds

__all__ = [
    "PopulationTrainer",
    "PopulationResult",
    "train",
    "resume",
    "is_population_run",
]


def population_update(algo, cfg):
    """The vmapped update of ``algo`` for ``train`` settings ``cfg``: eager
    (:func:`rlfunc.core.population.vmap_update`); with ``train.compile`` and
    ``train.compile_mode: step`` (the default), for algorithms with a
    ``make_population_update`` (REDQ, SAC, RLPD), their members' step loop with each vmapped
    critic and policy step compiled once (two small graphs); otherwise
    ``torch.compile(fullgraph=True)`` of the vmapped update (REDQ's ``G`` steps unrolled:
    254 s for a population of two at ``G = 20`` on a 2-core CPU, a one-off timing)."""
    from rlfunc.core import population
    from rlfunc.runtime.perf import allow_recompiles

    if cfg.compile:
        allow_recompiles()  # a process may train many configs (a sweep's worker, benchmarks/run.py learn)
    if cfg.compile and cfg.compile_mode == "step" and hasattr(algo, "make_population_update"):
        return algo.make_population_update("step")
    update = population.vmap_update(algo.update)
    return torch.compile(update, fullgraph=True) if cfg.compile else update


@dataclasses.dataclass
class PopulationResult:
    """What :func:`train` returns: the run directory and each member's
    :class:`~rlfunc.runtime.trainer.TrainResult` (its ``run_dir`` is ``member-<k>/``)."""

    run_dir: Path
    env_steps: int
    members: list
    wall_s: float
    gradient_steps: int = 0
    stop_reason: str = "total_steps"
    vectorize: str = "vmap"  # how the members were updated: "vmap" or "loop" (train.population.vectorize)


def is_population_run(run_dir: str | Path) -> bool:
    """True for a run directory a population wrote: its newest checkpoint's meta.json, read as JSON only,
    describes a population (also with its member directories deleted or moved), or, with no checkpoint to
    read (a population stopped before its first), it holds ``member-0/``."""
    from rlfunc.runtime.checkpoint import CheckpointError, _read_meta, resolve_checkpoint

    run_dir = Path(run_dir)
    member_dirs = (run_dir / "member-0").is_dir()
    if not (run_dir / "checkpoints").is_dir():
        return member_dirs
    try:
        meta = _read_meta(resolve_checkpoint(run_dir))
    except CheckpointError:  # none readable: member-0/ says it is a population, else the single run's path says why
        return member_dirs
    if "population" in meta:
        return True
    # a single run's checkpoint (its config, no population) decides against member-0/: a single run's directory
    # holding one of its own (an export written there, a member copied in to compare) resumes as the single run
    return member_dirs and "config" not in meta


def _stack(items: list, device: torch.device) -> Any:
    """Member inputs (tensors, TensorDicts, tuples and named tuples of them) stacked on a new dim 0,
    on ``device`` (a learner may hand over host scalars, e.g. a schedule's epsilon or DrQ-v2's agent
    step, which a single call mixes with device tensors but a batched dimension may not)."""
    first = items[0]
    if first is None:
        return None
    if isinstance(first, tuple):
        parts = [_stack([it[i] for it in items], device) for i in range(len(first))]
        return type(first)(*parts) if hasattr(first, "_fields") else tuple(parts)
    if len(items) == 1:  # a population of one: a view with a leading [1], no copy
        from rlfunc.core.population import unsqueeze0

        return unsqueeze0(first.to(device))
    return torch.stack([x.to(device) for x in items])


def _index(tree: Any, k: int) -> Any:
    """Member ``k``'s part of a stacked result (:func:`_stack`'s inverse for one member)."""
    if tree is None:
        return None
    if isinstance(tree, tuple):
        parts = [_index(t, k) for t in tree]
        return type(tree)(*parts) if hasattr(tree, "_fields") else tuple(parts)
    return tree[k]


class _SavedWithThePopulation:
    """Stands in for a member's row of a batched replay while its learner writes its checkpoint tensors."""

    def state_dict(self) -> TensorDict:
        return TensorDict({}, batch_size=[])


FEWER_MEMBERS = "give fewer members (train.population.seeds or train.population.grid, the CLI's --seeds or --grid)"
"""What a memory refusal of a population names besides the single run's keys: its member count's keys."""


def population_needs(learner, members: int, vmapped: bool = True) -> list:
    """What a population of ``members`` learners like ``learner`` (its first member, already built) needs
    before the others are built: ``members`` of its replay, ``2 x members`` of its state (parameters,
    targets, optimizer state; :func:`rlfunc.runtime.memory.network_need`): each member's own state plus
    the stacked copy :func:`rlfunc.core.population.stack` makes of them, both held until the members'
    own are dropped; and one update's working memory (:meth:`_batch_need`: DrQ-v2's augmented images and
    encoder activations, the others' sampled batch) for every member where the update is vmapped (all
    members' batches in one call; ``vmapped=False``: one member's at a time), counted as a single run
    counts it (when it is at least 1% of the rest)."""
    from rlfunc.runtime.memory import Need, format_bytes, network_need

    one = learner._replay_need()
    needs = [Need(f"{one.subject} for each of {members} members", members * one.nbytes, one.what,
                  f"{one.fix} or {FEWER_MEMBERS}")]
    state = network_need(learner.algo, learner.config, learner.obs_space, learner.act_space)
    if state is not None:
        needs.append(Need(
            f"{state.subject} of {members} members", 2 * members * state.nbytes,
            f"{state.what} (each member's and their stacked copy, {format_bytes(state.nbytes)} each)",
            f"{state.fix} or {FEWER_MEMBERS}", plural=True,
        ))
    batch = learner._batch_need()
    if batch is not None:
        if vmapped and members > 1:
            batch = Need(
                f"{batch.subject} for each of {members} vmapped members", members * batch.nbytes,
                f"{batch.what}, every member's in one vmapped update",
                f"{batch.fix} or {FEWER_MEMBERS} or set train.population.vectorize=loop (one member's update at a time)",
            )
        if batch.nbytes >= 0.01 * sum(n.nbytes for n in needs):  # as Learner._check_memory
            needs.append(batch)
    return needs


class PopulationTrainer:
    """Holds a population run's imperative state; :meth:`run` trains every member to ``total_steps``.

    Built from a population :class:`~rlfunc.runtime.config.RunConfig` (one with
    ``train.population``). Everything that can be refused is refused here, before any
    training: the config (:func:`~rlfunc.runtime.population_members.member_specs`), the memory for ``P``
    replays, ``2P`` states and, vmapped, ``P`` updates' working memory (:func:`population_needs`), and
    :func:`rlfunc.core.population.stack` of the members' initial states (members whose
    configs differ in anything not held as data).

    Member ``k`` is its single run's learner (``self.learners[k]``: its replay, generator,
    carries and counters) without its state, which lives stacked in ``self.state``; the
    learner's halves around the pure calls (``act_inputs``/``act_outputs``,
    ``prepare_state``/``update_inputs``/``after_update``) run per member, the pure ``act``
    and ``update`` once, vmapped over members.
    """

    def __init__(self, config, run_dir: Path) -> None:
        try:
            self._build(config, run_dir)
        except BaseException:  # refused (memory, settings) after some envs were made: none is left open
            self.close_envs()
            raise

    def _build(self, config, run_dir: Path) -> None:
        from rlfunc.core import population
        from rlfunc.envs import build_wrappers, env_fns, env_spaces
        from rlfunc.runtime.memory import require_memory
        from rlfunc.runtime.perf import set_matmul_precision, set_threads, tune_allocator
        from rlfunc.runtime.registry import get_algo
        from rlfunc.runtime.trainer import _frames_per_step, _make_envs, check_train_device

        self.config = config
        self.run_dir = Path(run_dir)
        self.members = member_specs(config)
        cfg = config.train
        tune_allocator()
        if cfg.threads:
            set_threads(cfg.threads)
        set_matmul_precision(cfg.matmul_precision)
        check_train_device(cfg.device)
        self.entry = get_algo(config.algo)
        self.algo = self.entry.algo
        self.device = torch.device(cfg.device)
        self.eval_envs, natives = [], []
        for m in self.members:
            _, eval_env, native = _make_envs(m.config, train_env=False)
            self.eval_envs.append(eval_env)
            natives.append(native)
        # Every member's training envs, P x env.num_envs copies, in one vector env (issue #24 §5).
        self.collector = PopulationCollector(
            [env_fns(m.config.env.id, m.config.env.num_envs, kwargs=m.config.env.kwargs,
                     wrappers=build_wrappers(m.config.env.wrappers)) for m in self.members],
            vector=config.env.num_envs > 1,
        )
        self.frames_per_step = _frames_per_step(self.collector.env)
        obs_space, act_space = env_spaces(self.collector.env)
        p = len(self.members)
        # vmap or loop: how many members' update working memory is held at once (population_needs)
        self.vectorize = resolve_vectorize(cfg.population.get("vectorize", "auto"), config.algo, cfg.device,
                                           getattr(config.agent, "encoder", "mlp"), bool(cfg.compile), p)
        # Each member's learner, as its single run builds it: its config (REDQ's env-dependent target
        # entropy resolved), its initial state from its seed, its replay, its generator (seed + 1).
        # A learner whose replay the population's batched one replaces (DrQ-v2's pixel ring) is built
        # without one of its own: P rings, not 2P. The first one sizes its replay and its state: P
        # replays, 2P states (the members' own and their stacked copy, held together while stacking)
        # and, vmapped, P updates' working memory must fit before the others are built.
        learner_cls = self.entry.learner_cls
        no_own_replay = {"own_replay": False} if getattr(learner_cls, "population_replaces_replay", False) else {}
        self.learners = []
        for k, (m, native) in enumerate(zip(self.members, natives)):
            # RLPD: the members share one data section (grids are agent settings), so the first member's
            # loaded and checked dataset is every member's: read once, not P times over.
            shared = {"dataset": self.learners[0].dataset} if k and getattr(self.learners[0], "dataset", None) is not None else {}
            learner = self.entry.make_learner(m.config, obs_space, act_space, **shared, **no_own_replay)
            learner.native_action_space = native
            self.learners.append(learner)
            if k == 0:
                require_memory(population_needs(learner, p, vmapped=self.vectorize == "vmap"), self.device)
        # The settings each member's own state holds as data; stack adds those that differ across members.
        own_hparams = [set(lr.state["hparams"].keys()) if "hparams" in lr.state.keys() else set() for lr in self.learners]
        # and the algorithm config each member's state carries (RLPD's state holds the REDQ config it runs)
        own_configs = [lr.state.get_non_tensor("config") for lr in self.learners]
        try:
            self.state = population.stack([lr.state for lr in self.learners])
        except ValueError as exc:
            raise ConfigError(f"train.population: {exc}") from None
        refuse_resolved_twins(self.members, self.state)
        self.agent = self.learners[0].config
        # RLPD: one prior dataset, shared read-only by every member (each member draws its own rows from it).
        self.dataset = getattr(self.learners[0], "dataset", None)
        for lr in self.learners:  # each member's state now lives in the population's
            lr.state = None
        # Where the learner has one, every member's replay is a row of one batched replay (one gather
        # per update); each learner keeps its own code over its row (member(k): its single replay).
        try:
            self.replay = self.learners[0].population_replay(p)
        except (RuntimeError, MemoryError) as exc:  # one storage for all P: the kernel may refuse it at once
            if "alloc" not in str(exc) and "memory" not in str(exc).lower():
                raise
            raise ConfigError(
                f"The population's replay ({p} members x train.replay_size={cfg.replay_size}, reserved at once as "
                f"one storage) could not be allocated on this machine; lower train.replay_size or {FEWER_MEMBERS}."
            ) from None
        if self.replay is not None:
            for k, lr in enumerate(self.learners):
                lr.use_replay(self.replay.member(k))
        self._update = population_update(self.algo, cfg)
        # A population of one, and every member with vectorize=loop, runs its single-run update and act
        # on its unstacked state, kept between calls (no vmap, no restacking): the single run's cost.
        from rlfunc.runtime.learners.base import compiled_update

        self._looped = p == 1 or self.vectorize == "loop"
        self._update_one = compiled_update(self.algo, cfg) if self._looped else None
        # Eagerly looped, a member whose settings differ from the others' updates with its own config (its
        # settings Python floats, as in its single run) and without the hparams stack added: bit for bit.
        # Compiled, it keeps them as data: one graph for every member, no recompilation per setting.
        added = [sorted(set(self.state["hparams"].keys()) - own) if "hparams" in self.state.keys() else [] for own in own_hparams]
        self._own_settings = [(config, tuple(a)) if a else None for config, a in zip(own_configs, added)]
        if not self._looped or cfg.compile:
            self._own_settings = [None] * p
        if cfg.cuda_graph:  # the state at fixed addresses, each update one CUDA graph replay (rlfunc.runtime.graphs)
            if p == 1:
                self._update_one = FixedStateUpdate(self._update_one, self._member_states()[0], cuda_graph=True)
            else:
                self._update = FixedStateUpdate(self._update, self.state, cuda_graph=True)
        self._act = population.vmap(self.learners[0].act_fn, randomness="error")
        self._stacked_metrics = None  # the last vmapped update's metrics, [P, ...], until after_update read them
        self.learns_before_env_step = bool(getattr(self.learners[0], "learns_before_env_step", False))
        # Vmapped, a round's due updates are counted and run together (_learn_due) where readiness
        # does not read the learner's own update count; looped, each member's update costs only its own.
        self._defers_updates = not self._looped and not self.learns_before_env_step and not any(
            lr.ready_reads_updates for lr in self.learners
        )
        self._due = [0] * p
        self._interrupts = InterruptGuard()  # Ctrl-C/SIGTERM wait for the counted env step's updates
        from rlfunc.runtime.learners.base import TransitionLearner

        # A learner whose prepare_state writes nothing (TransitionLearner's) is not handed each member's view.
        self._prepares = type(self.learners[0]).prepare_state is not TransitionLearner.prepare_state
        self.gradient_steps_per_call = int(getattr(config.agent, "updates_per_step", 1))
        self.env_steps = [0] * p
        self.learner_calls = [0] * p
        # Per member: rows of the current round stored in its replay and not counted in env_steps yet (a
        # checkpoint inside a round records them: a resume counts them before stepping the envs again).
        self._pending = [0] * p
        self._round_start = 0  # the most advanced member's env step when the current round began
        self._recent: list[list[float]] = [[] for _ in range(p)]  # returns since each member's last log, and the 10 before
        self.evals: list[list[tuple[int, float]]] = [[] for _ in self.members]
        self.ckpt_dir = self.run_dir / "checkpoints"
        self._best = [-math.inf] * p
        self._last_metrics: list = [None] * p
        self._logged: list[int | None] = [None] * p  # the env step of each member's newest metrics row
        self._start_steps: list[int] = [0] * p  # each member's env step when this process's run began
        self._prior_wall = 0.0
        self._saved: tuple[int, ...] | None = None
        self._unchecked: list[tuple[list[int], list, torch.Tensor]] = []
        self._tensorboard: list = []
        self._learning = False
        self._progress = None
        self._t0 = time.monotonic()

    # -- members ---------------------------------------------------------------------------
    def member_dir(self, k: int) -> Path:
        return self.run_dir / f"member-{k}"

    def member_state(self, k: int) -> TensorDict:
        """Member ``k``'s single-member state (a view of the population's, or with ``vectorize=loop``
        the member's own tensors as its last update returned them)."""
        return self._member_states()[k]

    @property
    def state(self) -> TensorDict:
        """The population's state, every leaf ``[P, ...]`` (``config`` kept once). Members updated one
        by one (a population of one, ``vectorize=loop``) keep their states as their updates returned
        them; they are stacked here, on demand: as views for one member, else as a copy made at each
        read (checkpoints; nothing writes into it)."""
        if self._stacked is not None:
            return self._stacked
        from rlfunc.core import population

        members = self._unstacked
        if len(members) > 1:
            return population.stack(members)
        stacked = population.unsqueeze0(members[0].exclude("config"))
        stacked.set_non_tensor("config", members[0].get_non_tensor("config"))
        self._stacked = stacked
        return stacked

    @state.setter
    def state(self, value: TensorDict) -> None:
        self._stacked, self._unstacked = value, None

    def _member_states(self) -> list[TensorDict]:
        """Every member's single-member state: each update's result where members are updated one by
        one, else (and after the state was set) views of ``self.state``'s tensors."""
        if self._unstacked is None:
            from rlfunc.core import population

            if len(self.members) == 1:
                member = population.squeeze0(self._stacked.exclude("config"))
                member.set_non_tensor("config", self._stacked.get_non_tensor("config"))
                self._unstacked = [member]
            else:
                self._unstacked = population.unstack(self._stacked)
        return self._unstacked

    def _with_state(self, k: int, fn):
        """``fn(learner k)`` with the learner holding its member's state (a view) for the call."""
        learner = self.learners[k]
        learner.state = self.member_state(k)
        try:
            return fn(learner)
        finally:
            learner.state = None

    def policy(self, k: int):
        """Member ``k``'s deterministic :class:`~rlfunc.runtime.policy.Policy` (through its learner's)."""
        return self._with_state(k, lambda lr: lr.policy())

    @property
    def env_step(self) -> int:
        """The env steps of the member that has taken the fewest (all equal with ``env.num_envs=1``)."""
        return min(self.env_steps)

    def gradient_steps(self, k: int) -> int:
        return self.learner_calls[k] * self.gradient_steps_per_call

    def _wall_s(self) -> float:
        return time.monotonic() - self._t0 + self._prior_wall

    def _frames(self, k: int) -> dict[str, int]:
        return {"frames": self.env_steps[k] * self.frames_per_step} if self.frames_per_step != 1 else {}

    # -- acting and learning ---------------------------------------------------------------
    def explore(self, active: list[int] | None = None) -> list[np.ndarray | None]:
        """The actions of every member in ``active`` (default: all; ``None`` for the others), each
        from its learner's ``act_inputs`` (its generator, carry, schedule) as its single run's
        ``explore`` draws them, then one vmapped ``act_fn`` over the stacked parameters (or, while
        some members have finished, each active member's ``act_fn`` on its own parameters)."""
        p = len(self.members)
        active = list(range(p)) if active is None else active
        c = self.collector
        if len(active) == p > 1 and not self._looped:  # every member's inputs and actions at once, where the learner can
            first = self.learners[0]
            stacked = first.population_act_inputs(self.learners, c.all_obs(), self.env_steps)
            if stacked is not None:
                out = self._act(self.state["params"], *stacked)
                together = first.population_act_outputs(out)
                return together if together is not None else [self.learners[k].act_outputs(_index(out, k)) for k in range(p)]
        actions: list[np.ndarray | None] = [None] * p
        inputs = {}
        for k in active:
            got = self.learners[k].act_inputs(c.obs(k), self.env_steps[k], c.episode_start(k))
            if isinstance(got, np.ndarray):  # no network acts (the uniform warm-up)
                actions[k] = got
            else:
                inputs[k] = got
        if len(inputs) == p == 1:  # one member: its single run's call
            actions[0] = self.learners[0].act_outputs(self.learners[0].act_fn(self.member_state(0)["params"], *inputs[0]))
        elif len(inputs) == p and not self._looped:
            out = self._act(self.state["params"], *_stack([inputs[k] for k in range(p)], self.device))
            for k in range(p):
                actions[k] = self.learners[k].act_outputs(_index(out, k))
        else:
            for k, args in inputs.items():
                out = self.learners[k].act_fn(self.member_state(k)["params"], *args)
                actions[k] = self.learners[k].act_outputs(out)
        return actions

    def observe(self, k: int, rows: TensorDict) -> None:
        """Member ``k``'s rows into its own replay (its learner's ``observe``)."""
        self.learners[k].observe(rows)

    def collect(self, actions: list[np.ndarray | None]) -> tuple[list[int], list[list[tuple[int, float, int]]]]:
        """One step of every member's envs (one vector env; ``None``: a member that has finished) and
        every stored row into its member's replay: with a batched replay whose learner only stores its
        rows, all members' rows in one write (the learner's ``population_observe``), else each
        member's rows through its learner's ``observe``. Returns each member's stored rows and its
        ended episodes ``(env_index, return, length)``."""
        rows, counts, finished = self.collector.step(actions)
        counts = counts.tolist()
        if self.replay is None or not self.learners[0].population_observe(self.replay, rows, counts):
            start = 0
            for k, n in enumerate(counts):
                if n:
                    self.observe(k, rows[start : start + n])
                start += n
        return counts, finished

    def learn(self, ready: list[int] | None = None) -> None:
        """One population update for the members in ``ready`` (default: all): each one's batch and
        noise from its learner (its replay, its generator), one vmapped update over all members
        (``vectorize=loop``: each ready member's own update in turn), then each one's
        ``after_update`` (e.g. R2D2's priorities) on its metrics. A member not in ``ready`` keeps
        its state, so members whose learners become ready at different env steps stay exact."""
        p = len(self.members)
        ready = list(range(p)) if ready is None else list(ready)
        if not ready:
            return
        args, contexts = {}, {}
        rows = batched = None
        if self.replay is not None and len(ready) == p:  # every member's rows in one gather
            rows = self.learners[0].population_sample(self.replay, [lr.generator for lr in self.learners])
            batched = self.learners[0].population_update_inputs(self.learners, rows)
        if self._prepares:
            for k in ready:
                self.learners[k].prepare_state(self.member_state(k))  # in place, into the stacked state
        if batched is not None:  # the batch as sampled, [P, ...], and each member's noise stacked
            stacked, members_contexts = batched
            contexts = dict(enumerate(members_contexts))
        else:
            for k in ready:
                args[k], contexts[k] = self.learners[k].update_inputs(None if rows is None else rows[k])
        if self._looped:
            per_member, keys, finite = self._update_members(ready, args, stacked if batched is not None else None)
        else:
            per_member = None
            if batched is None:
                stacked = _stack([args.get(k, args[ready[0]]) for k in range(p)], self.device)
            keys, finite = self._update_stacked(ready, stacked)
        self._unchecked.append((list(self.env_steps), keys, finite))
        for k in ready:
            self._last_metrics[k] = self.learners[k].after_update(
                per_member[k] if per_member is not None else self._stacked_metrics[k], contexts[k]
            )
            self.learner_calls[k] += 1
        self._stacked_metrics = None
        if not self._learning:
            self._learning = True
            if self._progress is not None:
                self._progress.learning_started(self.env_step)

    def _learn_due(self) -> None:
        """The updates counted in ``self._due`` (vmapped, deferred within a round): as many
        population updates as the most any member has due, each for the members that still have
        one. Every update a member's learner was ready for runs in the same order and on the same
        replay contents as at its own row (a round's rows are all stored before its first row is
        counted, and these learners' readiness does not read their update counts), so only the
        grouping changes: members whose autoreset steps shifted their env-step counts (a
        ``train_every`` boundary at a different row of the round) share one vmapped call instead
        of each paying for a masked one."""
        while any(self._due):
            ready = [k for k, n in enumerate(self._due) if n]
            with self._interrupts.deferring():  # a Ctrl-C or SIGTERM waits for the next count
                for k in ready:
                    self._due[k] -= 1
                self.learn(ready)

    def _update_members(self, ready: list[int], args: dict, stacked) -> tuple[dict, list, torch.Tensor]:
        """Each member in ``ready``, one after the other, through its single run's update on its own
        state (a population of one; ``vectorize=loop``): what its single run computes, bit for bit.
        The others are not computed at all. Returns each one's metrics and the finiteness rows."""
        from rlfunc.core import population

        p = len(self.members)
        members = self._member_states()
        per_member = {}
        for k in ready:
            if stacked is not None:  # rows of the one batched sample
                member_args = population.squeeze0(tuple(stacked)) if p == 1 else _index(tuple(stacked), k)
            else:
                member_args = population.squeeze0(_stack([args[k]], self.device))
            members[k], per_member[k] = self._update_own(k, members[k], member_args)
        self._stacked = None  # the members' states are the updates' results now (self.state stacks them)
        first = per_member[ready[0]]
        keys = [key for key, v in first.items(True, True) if v.is_floating_point()]
        finite = torch.ones(p, len(keys), dtype=torch.bool, device=self.device)
        for k, m in per_member.items():
            finite[k] = torch.stack([torch.isfinite(m[key]).all() for key in keys])
        return per_member, keys, finite

    def _update_own(self, k: int, state: TensorDict, args: tuple) -> tuple[TensorDict, TensorDict]:
        """Member ``k``'s single-run update of ``state``: where its settings differ from the others' and
        the update is eager, with its own config and without the ``hparams`` :func:`~rlfunc.core.population.stack`
        added (as its single run holds them), which go back on the result unchanged."""
        own = self._own_settings[k]
        if own is None:
            return self._update_one(state, *args)
        config, added = own
        hparams = state["hparams"]
        single = state.exclude("config", *(("hparams", n) for n in added))
        if not single["hparams"].keys():
            single = single.exclude("hparams")
        single.set_non_tensor("config", config)
        new, metrics = self._update_one(single, *args)
        updated = new["hparams"] if "hparams" in new.keys() else None
        new = new.exclude("config", "hparams")
        new["hparams"] = TensorDict(
            {n: hparams[n] if n in added else updated[n] for n in hparams.keys()}, batch_size=hparams.batch_size,
            device=hparams.device,
        )
        new.set_non_tensor("config", state.get_non_tensor("config"))
        return new, metrics

    def _update_stacked(self, ready: list[int], stacked) -> tuple[list, torch.Tensor]:
        """One vmapped update over every member (``vectorize=vmap``); a member not in ``ready`` keeps
        its state (its row was computed on another member's inputs and is dropped). Leaves the
        stacked metrics in ``self._stacked_metrics``; returns the finiteness rows."""
        p = len(self.members)
        previous = None
        if len(ready) < p:  # the members not ready keep these values
            previous = self.state.exclude("config")
            if isinstance(self._update, FixedStateUpdate):  # it writes the new state into these buffers in place
                previous = previous.clone()
        new_state, metrics = self._update(self.state, *stacked)
        mask = torch.ones(p, dtype=torch.bool, device=self.device)
        if len(ready) < p:
            mask = torch.zeros(p, dtype=torch.bool, device=self.device)
            mask[ready] = True
            config = self.state.get_non_tensor("config")
            new_state = new_state.exclude("config").apply(
                lambda new, old: torch.where(mask.reshape(-1, *([1] * (new.dim() - 1))), new, old),
                previous,
            )
            new_state.set_non_tensor("config", config)
        self.state = new_state
        keys = [key for key, v in metrics.items(True, True) if v.is_floating_point()]
        finite = torch.stack([torch.isfinite(metrics[key]).reshape(p, -1).all(1) for key in keys], 1)
        if len(ready) < p:
            finite = finite | ~mask[:, None]
        self._stacked_metrics = metrics
        return keys, finite

    def _check_finite(self) -> None:
        from rlfunc.runtime.trainer import NonFiniteLossError, first_non_finite

        pending, self._unchecked = self._unchecked, []
        failed = first_non_finite(pending)
        if failed is None:
            return
        steps, keys, finite = failed
        k, j = (~finite).nonzero()[0].tolist()
        key = keys[j] if isinstance(keys[j], str) else ".".join(keys[j])
        raise NonFiniteLossError(
            f"Training stopped at env step {steps[k]}: member {k} (seed {self.members[k].seed}) has a non-finite {key}; "
            "the last good checkpoint is kept; lower the learning rates or check the rewards."
        )

    # -- evaluation, logs, checkpoints ------------------------------------------------------
    def evaluate(self, k: int) -> float:
        """Member ``k``'s evaluation (its seed's episodes), logged in its ``eval.csv``."""
        return self.evaluate_members([k])[0]

    def evaluate_members(self, ks: list[int]) -> list[float]:
        """The evaluations of members ``ks`` (each its seed's episodes in its own eval env, logged in its
        ``eval.csv``). Where the policy keeps nothing between steps (REDQ, SAC, RLPD, DrQ-v2), the
        members' eval envs are stepped in lockstep (:func:`rlfunc.runtime.evaluate.run_episodes_together`):
        each step moves every member's observation to the device in one copy, runs each member's own
        policy on its row and brings every action back in one copy (on a GPU one synchronisation per
        step instead of one per member). Each member's actions are its own policy's, bit for bit, so
        ``rlfunc eval`` of ``member-<k>`` reproduces its ``eval.csv`` (a vmapped act over the members
        would round differently). Recurrent and Q-learning policies (DRQN, DQN, R2D2) evaluate one
        member after another."""
        from rlfunc.runtime.evaluate import run_episodes, run_episodes_together

        episodes = self.config.train.eval_episodes
        seeds = [self.members[k].seed + 10_000 for k in ks]
        policies = [self.policy(k) for k in ks]
        if len(ks) > 1 and all(p.stateless for p in policies):
            def act_all(obs: np.ndarray, running: list[int]) -> np.ndarray:
                obs_t = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
                return torch.stack([policies[i].action_tensor(obs_t[r]) for r, i in enumerate(running)]).cpu().numpy()

            returns = run_episodes_together(act_all, [self.eval_envs[k] for k in ks], episodes, seeds)
        else:
            returns = [run_episodes(pol, self.eval_envs[k], episodes, seed=seed) for k, pol, seed in zip(ks, policies, seeds)]
        return [self._record_eval(k, r) for k, r in zip(ks, returns)]

    def _record_eval(self, k: int, returns: list[float]) -> float:
        from rlfunc.runtime.trainer import eval_row

        mean = float(np.mean(returns))
        self.evals[k].append((self.env_steps[k], mean))
        row = eval_row(self.env_steps[k], self._frames(k), self._wall_s(), returns)
        self._eval_logs[k].write(row)
        if self._tensorboard:
            self._tensorboard[k].write("eval", row)
        self._save_best(k, mean)
        return mean

    def _member_meta(self, k: int) -> dict[str, Any]:
        from rlfunc.runtime.config import to_dict

        return {
            "algo": self.config.algo,
            "config": to_dict(self.members[k].config),
            **self.learners[k].export_meta(),
            "env_step": self.env_steps[k],
            "updates": self.learner_calls[k],
            "gradient_steps": self.gradient_steps(k),
            "evals": self.evals[k],
            "population_member": k,
            "weights_only": True,
        }

    def _member_policy_tensors(self, k: int) -> TensorDict:
        params = self.member_state(k)["params"].clone()
        return TensorDict({"state": TensorDict({"params": params}, batch_size=[])}, batch_size=[])

    def _save_best(self, k: int, mean: float) -> None:
        from rlfunc.runtime.checkpoint import CheckpointWriteError, checkpoint_name, prune_best, save_checkpoint

        if not self.config.train.keep_best or not mean > self._best[k]:
            return
        best = self.member_dir(k) / "best"
        meta = {**self._member_meta(k), "eval_return": mean}
        try:
            path = save_checkpoint(best, checkpoint_name(self.env_steps[k]), self._member_policy_tensors(k), meta)
        except CheckpointWriteError as exc:  # the best return stays the saved one's: a later better policy is kept
            print(f"rlfunc: warning: {exc} Member {k}'s best policy so far is not saved.", file=sys.stderr)
            return
        self._best[k] = mean
        prune_best(best, path, mean)  # never a better one (saved after the checkpoint a resume started from)

    def _member_tensors(self, k: int) -> TensorDict:
        """What member ``k``'s learner checkpoints besides its state (replay, generator, ...); a batched
        replay is saved once for all members (its rows are not copied per member here)."""
        if self.replay is None:
            return self._with_state(k, lambda lr: lr.state_tensors().exclude("state"))
        learner, row = self.learners[k], self.learners[k].replay
        learner.replay = _SavedWithThePopulation()
        try:
            return self._with_state(k, lambda lr: lr.state_tensors().exclude("state", "replay"))
        finally:
            learner.replay = row

    @staticmethod
    def _finite(state: TensorDict) -> bool:
        """Whether every floating-point tensor of the stacked ``state`` (its ``config`` left out) is finite:
        what :meth:`save` writes, and what a missed row is written for (:meth:`_write_missed_rows`)."""
        leaves = [v for v in state.values(True, True) if v.is_floating_point()]
        return bool(torch.stack([torch.isfinite(v).all() for v in leaves]).all())

    def save(self) -> Path:
        """The population's training checkpoint in ``checkpoints/`` (the stacked state and each
        member's learner tensors: replay, generator), then each member's policy (weights only,
        :func:`rlfunc.runtime.api.export`'s format) in ``member-<k>/checkpoints/``."""
        from rlfunc.runtime.checkpoint import checkpoint_name, prune_checkpoints, save_checkpoint
        from rlfunc.runtime.config import to_dict
        from rlfunc.runtime.trainer import NonFiniteLossError

        state = self.state.exclude("config")  # with vectorize=loop, stacked from the members here: once per save
        if not self._finite(state):
            raise NonFiniteLossError(f"Parameters became non-finite by env step {max(self.env_steps)}; not saving them.")
        p = len(self.members)
        meta = {
            "algo": self.config.algo,
            "config": to_dict(self.config),
            "population": [{"seed": m.seed, "settings": m.settings} for m in self.members],
            "env_step": max(self.env_steps),
            "env_steps": list(self.env_steps),
            "updates": list(self.learner_calls),
            "episodes": list(self.collector.episodes),
            "env_rng": [self.collector.rng_state(k) for k in range(p)],
            "evals": self.evals,
            "best": [r if math.isfinite(r) else None for r in self._best],
            "wall_s": self._wall_s(),
            "replay_saved": True,
            "pending_env_steps": list(self._pending),  # each member's stored rows of this round not counted yet
            "round_start": self._round_start,
            "recent_returns": [r[-10:] for r in self._recent],  # each member's metrics.csv episode_return continues
        }
        if self.dataset is not None:
            from rlfunc.replay.offline import describe

            meta["dataset"] = describe(self.dataset)
        tensors = TensorDict(
            {
                "state": state,
                "members": TensorDict({str(k): self._member_tensors(k) for k in range(p)}, batch_size=[]),
            },
            batch_size=[],
        )
        if self.replay is not None:
            tensors["replay"] = self.replay.state_dict()
        name = checkpoint_name(max(self.env_steps))
        path = save_checkpoint(self.ckpt_dir, name, tensors, meta)
        self._saved = tuple(self.env_steps)  # the state is saved: a failed policy write below needs no second save
        prune_checkpoints(self.ckpt_dir, keep=self.config.train.keep_checkpoints)
        self._save_policies(range(p))
        return path

    def _save_or_continue(self) -> None:
        """A checkpoint (:func:`rlfunc.runtime.trainer.save_or_continue`, as a single run's)."""
        from rlfunc.runtime.trainer import save_or_continue

        save_or_continue(self.save, self.config.train)

    def _save_policies(self, ks) -> None:
        """Members ``ks``'s policies (weights only) in their ``member-<k>/checkpoints/``, each at its env step."""
        from rlfunc.runtime.checkpoint import checkpoint_name, prune_checkpoints, save_checkpoint

        for k in ks:
            directory = self.member_dir(k) / "checkpoints"
            save_checkpoint(directory, checkpoint_name(self.env_steps[k]), self._member_policy_tensors(k), self._member_meta(k))
            prune_checkpoints(directory, keep=1)

    def _stale_policies(self) -> list[int]:
        """The members whose ``member-<k>/checkpoints/`` does not hold the policy of the restored state: a
        process killed after writing the population's checkpoint and before the members' policies left the
        previous ones (after the last save of a finished run, nothing would write them again)."""
        from rlfunc.runtime.checkpoint import checkpoint_name, latest_checkpoint

        stale = []
        for k, step in enumerate(self.env_steps):
            head = latest_checkpoint(self.member_dir(k) / "checkpoints")
            if head is None or head.name != checkpoint_name(step):
                stale.append(k)
        return stale

    def restore(self, checkpoint: Path, tensors: TensorDict, meta: dict[str, Any]) -> None:
        """Continue every member from a verified population checkpoint: the stacked state, and each
        member's learner from its tensors (its ``load_state_tensors``: replay, generator, and what
        its single run's resume does, e.g. closing open episodes and zeroing carries). A checkpoint
        that does not fit closes the envs, as a single run's restore does."""
        try:
            self._restore(checkpoint, tensors, meta)
        except BaseException:
            self.close_envs()
            raise

    def _restore(self, checkpoint: Path, tensors: TensorDict, meta: dict[str, Any]) -> None:
        from rlfunc.runtime.checkpoint import CheckpointError, check_structure, recorded_best_return

        p = len(self.members)
        if "members" not in tensors.keys():
            raise CheckpointError(
                f"Checkpoint {str(checkpoint)!r} was written by an earlier version of populations (no per-member "
                "learner tensors); resume it with the rlfunc version that wrote it."
            )
        check_structure(checkpoint, tensors, TensorDict({"state": self.state.exclude("config")}, batch_size=[]), "state")
        saved = (meta.get("dataset") or {}).get("sha256")
        current = self.dataset.checksum if self.dataset is not None else None
        if saved != current:
            from rlfunc.replay.offline import DatasetError

            raise DatasetError(
                f"The prior dataset {getattr(self.dataset, 'path', None)!r} is not the one this population was trained with "
                f"(sha256 {(current or 'none')[:12]} now, {(saved or 'none')[:12]} in the checkpoint); restore the original "
                "file or start a new run."
            )
        try:
            if len(meta["evals"]) != p or len(tensors["members"].keys()) != p:
                raise CheckpointError(f"Checkpoint {str(checkpoint)!r} holds {len(meta['evals'])} members, not {p}.")
            state = tensors["state"].to(self.device)
            state.set_non_tensor("config", self.state.get_non_tensor("config"))
            self.state = state
            if self.replay is not None:  # before the learners, whose resume writes into their rows (flush)
                self.replay.load_state_dict(tensors["replay"])
            for k in range(p):
                td = tensors["members", str(k)].clone(recurse=False)
                td["state"] = self.member_state(k).exclude("config")
                self._with_state(k, lambda lr: lr.load_state_tensors(td))
            env_steps, calls, episodes, best, prior_wall = _restored_counters(checkpoint, meta, p)
            pending, round_start, recent = _restored_round(checkpoint, meta, p, self.collector.num_envs)
            self.collector.restore(meta["env_rng"])
            self.collector.episodes = episodes
            evals = [[(int(s), float(r)) for s, r in member] for member in meta["evals"]]
        except CheckpointError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, RuntimeError, OverflowError) as exc:
            raise CheckpointError(
                f"Checkpoint {str(checkpoint)!r} does not fit this population ({type(exc).__name__}: {exc}); resume it "
                "with the rlfunc version that wrote it."
            ) from None
        # a member's best/ may hold a better policy than the checkpoint records: one saved after it
        best = [max(b, recorded_best_return(self.member_dir(k) / "best")) for k, b in enumerate(best)]
        self.env_steps, self.learner_calls, self.evals, self._best = env_steps, calls, evals, best
        self._pending, self._round_start, self._recent = pending, round_start, recent
        self._prior_wall = prior_wall
        self._saved = tuple(env_steps)

    def _log(self, k: int, steps_per_s: float, recent: list[float]) -> None:
        from rlfunc.runtime.trainer import metrics_row

        metrics = self._last_metrics[k]
        row = metrics_row(
            self.env_steps[k], self._frames(k), self.learner_calls[k], self.gradient_steps(k), self._wall_s(),
            steps_per_s, recent, metrics,
        )
        self._metrics_logs[k].write(row, complete=metrics is not None)
        self._logged[k] = self.env_steps[k]
        if self._tensorboard:
            self._tensorboard[k].write("train", row)

    def _write_missed_rows(self) -> None:
        """The metrics rows of the members whose log step a crash, Ctrl-C or SIGTERM ended between the step's
        count and its row (a held interrupt raised in another member's row, the finite check or the due
        updates before it): written before the population is saved at that step, or the resumed run, which
        continues after it, would have no row there (as a single run's ``Trainer._write_missed_row``). Only
        where the state is finite (it is saved then); a failure here must not hide the run's own error."""
        cfg = self.config.train
        if not getattr(self, "_metrics_logs", None):
            return
        missed = [
            k for k, step in enumerate(self.env_steps)
            if step != self._start_steps[k] and self._logged[k] != step
            and (step % cfg.log_every == 0 or step == cfg.total_steps)
        ]
        if not missed:
            return
        try:
            if not self._finite(self.state.exclude("config")):
                return
            now = time.monotonic()
            for k in missed:
                self._log(k, self._window_steps[k] / max(now - self._window_t[k], 1e-9), self._recent[k])
                self._recent[k] = self._recent[k][-10:]
        except Exception:  # noqa: BLE001 -- the run's own error is what is raised; the rows are a nicety
            pass

    # -- the loop ----------------------------------------------------------------------------
    def _open_logs(self, resumed: bool) -> None:
        from rlfunc.runtime.checkpoint import clean_leftovers
        from rlfunc.runtime.config import to_dict
        from rlfunc.runtime.run_log import CsvLog
        from rlfunc.runtime.run_dir import write_atomic

        self.run_dir.mkdir(parents=True, exist_ok=True)
        for line in clean_leftovers(self.ckpt_dir):
            print(f"rlfunc: {self.ckpt_dir}: {line}", file=sys.stderr)
        write_atomic(self.run_dir / "config.yaml", yaml.safe_dump(to_dict(self.config), sort_keys=False))
        self._metrics_logs, self._eval_logs = [], []
        for k, m in enumerate(self.members):
            truncate = self.env_steps[k] if resumed else None
            d = self.member_dir(k)
            d.mkdir(exist_ok=True)
            for sub in ("checkpoints", "best"):
                for line in clean_leftovers(d / sub):
                    print(f"rlfunc: {d / sub}: {line}", file=sys.stderr)
            write_atomic(d / "config.yaml", yaml.safe_dump(to_dict(m.config), sort_keys=False))
            self._metrics_logs.append(CsvLog(d / "metrics.csv", truncate_after=truncate))
            self._eval_logs.append(CsvLog(d / "eval.csv", truncate_after=truncate))
        self._tensorboard = []
        if self.config.train.tensorboard:  # each member's events in its own directory, as a single run's
            from rlfunc.runtime.run_log import TensorBoardLog

            self._tensorboard = [
                TensorBoardLog(self.member_dir(k), purge_step=(self.env_steps[k] + 1) if resumed else None)
                for k in range(len(self.members))
            ]

    def run(self, resumed: bool = False) -> PopulationResult:
        """Train the population (:meth:`_run`), holding the run directory's lock
        (:func:`~rlfunc.runtime.checkpoint.lock_run_dir`) until it ends: another process training
        there is refused with one sentence."""
        from rlfunc.runtime.checkpoint import locked_run_dir

        with locked_run_dir(self.run_dir):
            try:
                return self._run(resumed)
            finally:
                self.close_envs()

    def close_envs(self) -> None:
        """Close every member's training copies (one vector env) and evaluation env, as a single run does
        (:meth:`rlfunc.runtime.trainer.Trainer.close_envs`)."""
        from rlfunc.runtime.trainer import close_quietly

        close_quietly(getattr(self, "collector", None), *getattr(self, "eval_envs", []))

    def _missed_evaluations(self) -> list[int]:
        """The members whose evaluation was due at their restored env step but is not recorded: the
        population was interrupted (Ctrl-C, SIGTERM, a crash) before or during the round's evaluations
        and saved at that step (a single run's resume does the same, ``Trainer._missed_evaluation``)."""
        cfg = self.config.train
        return [
            k for k, step in enumerate(self.env_steps)
            if 0 < step < cfg.total_steps and step % cfg.eval_every == 0 and (not self.evals[k] or self.evals[k][-1][0] != step)
        ]

    def _run(self, resumed: bool = False) -> PopulationResult:
        """Every member's single-run loop, in rounds: each unfinished member acts (one vmapped act),
        [learns first where its learner does, DrQ-v2], steps its env and stores its rows; then for
        each stored row, as the single run counts them, its env step advances and the members whose
        learners are ready learn together (one vmapped update), and each member logs and evaluates
        when its own env step crosses ``log_every``/``eval_every``. The population checkpoint is
        written after a round in which the most advanced member crossed ``checkpoint_every``."""
        from rlfunc.runtime.run_log import Progress
        from rlfunc.runtime.checkpoint import CheckpointWriteError
        from rlfunc.runtime.trainer import NonFiniteLossError, RunInterrupted, TrainResult

        cfg = self.config.train
        p, total = len(self.members), cfg.total_steps
        self._open_logs(resumed)
        if not resumed:
            self.collector.reset([m.seed for m in self.members])
        self._t0 = time.monotonic()
        verb = "resuming" if resumed else "training"
        how = " (vmapped)" if self.vectorize == "vmap" else " (each member's own update in turn: vectorize=loop)"
        print(f"rlfunc: {verb} a population of {p} {self.config.algo} members on {self.config.env.id}{how if p > 1 else ''} "
              f"in {self.run_dir}", file=sys.stderr)
        progress = Progress(cfg.progress, total, self.env_step, f"{self.config.algo} x{p} {self.config.env.id}")
        self._progress = progress
        self._window_t, self._window_steps = [time.monotonic()] * p, [0] * p
        self._start_steps = list(self.env_steps)  # a resumed member's row at its restored step is in metrics.csv
        last = None
        restore_sigterm = self._interrupts.install()
        crash_line = None
        try:
            if resumed:  # each member's policy as the restored state holds it (rlfunc.load, eval, export read it)
                self._save_policies(self._stale_policies())
            missed = self._missed_evaluations() if resumed else []
            if missed:  # as each member's run would have, before its next step
                for k, mean in zip(missed, self.evaluate_members(missed)):
                    last = mean if k == 0 else last
            self._window_t = [time.monotonic()] * p  # the rate's window starts at the first step, as a single run's
            if any(n and step < total for n, step in zip(self._pending, self.env_steps)):
                last = self._finish_round(progress, last)  # a resume inside a round: its stored rows first, no env step
            while self.env_step < total:
                self._interrupts.check()
                self._check_finite()
                active = [k for k in range(p) if self.env_steps[k] < total]
                actions = self.explore(active)
                with self._interrupts.deferring():  # until the rows are stored (pending), as a single run
                    if self.learns_before_env_step:
                        self.learn([k for k in active if self.learners[k].ready(self.env_steps[k])])
                    counts, finished = self.collect(actions)
                    for k in active:  # a member already at total_steps keeps its rows past it pending (a resume's)
                        self._recent[k].extend(r for _, r, _ in finished[k])
                        self._pending[k] = counts[k]
                    self._round_start = max(self.env_steps)
                last = self._finish_round(progress, last)
            self._interrupts.check()  # one held during the last round's updates: the resume evaluates
            self._check_finite()
            evaluating = self._unevaluated()
            if evaluating:
                for k, mean in zip(evaluating, self.evaluate_members(evaluating)):
                    last = mean if k == 0 else last
            if self._saved != tuple(self.env_steps) or evaluating:  # the final evaluations are in the checkpoint
                self._save_or_continue()
        except BaseException as exc:
            saved = False
            # a failed write is not tried again on the way out (as a single run's): the disk is still full
            unsaveable = isinstance(exc, (NonFiniteLossError, CheckpointWriteError))
            if not unsaveable and max(self.env_steps) > 0 and self._saved != tuple(self.env_steps):
                try:
                    self._learn_due()  # the counted updates, so that the saved state matches its env steps
                    self._write_missed_rows()  # before the state is saved at a log step whose row is missing
                    self.save()
                    saved = True
                except Exception as save_error:  # never mask the original error, but say what was not saved
                    from rlfunc.runtime.trainer import report_unsaved

                    report_unsaved(max(self.env_steps), None, save_error)
            saved = saved or self._saved == tuple(self.env_steps)  # or saved at this step already
            where = f"saved at step {max(self.env_steps)}" if saved else "last checkpoint kept"
            if isinstance(exc, KeyboardInterrupt) and not isinstance(exc, RunInterrupted):
                raise RunInterrupted(f"interrupted; {where}; continue with `rlfunc resume {self.run_dir}`") from None
            if not unsaveable and not isinstance(exc, KeyboardInterrupt) and (saved or self._saved is not None):
                # any other error says so too, as a single run's (Trainer._save_on_the_way_out); else nothing to resume
                from rlfunc.runtime.trainer import _what_stopped

                crash_line = (f"rlfunc: the population stopped at env step {max(self.env_steps)} ({_what_stopped(exc)}); "
                              f"{where}; continue with `rlfunc resume {self.run_dir}`")
            raise
        finally:
            restore_sigterm()
            progress.update(self.env_step, last, force=True)
            progress.close()
            self._progress = None
            if crash_line is not None:  # after the progress bar's last line
                print(crash_line, file=sys.stderr)
            for log in self._metrics_logs + self._eval_logs:
                log.close()
            for tb in self._tensorboard:
                try:
                    tb.close()
                except Exception:  # a logger failing to flush must not hide the run's own error
                    pass
        wall = self._wall_s()
        results = [
            TrainResult(
                run_dir=self.member_dir(k),
                env_steps=self.env_steps[k],
                final_return=self.evals[k][-1][1] if self.evals[k] else None,
                evals=list(self.evals[k]),
                wall_s=wall,
                gradient_steps=self.gradient_steps(k),
            )
            for k in range(p)
        ]
        return PopulationResult(self.run_dir, self.env_step, results, wall, max(r.gradient_steps for r in results),
                                vectorize=self.vectorize)

    def _unevaluated(self) -> list[int]:
        """The members whose newest evaluation is not at their env step (the final evaluation's)."""
        return [k for k, step in enumerate(self.env_steps) if not self.evals[k] or self.evals[k][-1][0] != step]

    def _finish_round(self, progress, last: float | None) -> float | None:
        """Count the round's stored rows (``self._pending``) as each member's single run counts them, one
        sub-step per row, until each member's are counted or it reached ``train.total_steps`` (those left
        stay pending: the final checkpoint records them): its env step advances, the members whose
        learners are ready learn together (one vmapped update), and each member logs and evaluates when
        its own env step crosses ``log_every``/``eval_every``. Then the round's deferred updates and,
        if the most advanced member crossed ``checkpoint_every`` in the round, the checkpoint. Returns
        member 0's newest evaluation (``last`` if none)."""
        cfg, p = self.config.train, len(self.members)
        while True:
            stepped = [k for k in range(p) if self._pending[k] and self.env_steps[k] < cfg.total_steps]
            if not stepped:
                break
            self._interrupts.check()  # a Ctrl-C or SIGTERM held during the previous count's updates
            prev = {k: self.env_steps[k] for k in stepped}
            with self._interrupts.deferring():  # the count and its updates: the saved state matches env_steps
                for k in stepped:
                    self.env_steps[k] += 1
                    self._window_steps[k] += 1
                    self._pending[k] -= 1
                if not self.learns_before_env_step:
                    ready = [k for k in stepped if self.learners[k].ready(self.env_steps[k])]
                    if self._defers_updates:
                        for k in ready:
                            self._due[k] += 1
                    else:
                        self.learn(ready)
            evaluating = []
            for k in stepped:
                logs = (self.env_steps[k] // cfg.log_every > prev[k] // cfg.log_every  # and at the member's last step
                        or self.env_steps[k] == cfg.total_steps > prev[k])
                if logs or self.env_steps[k] // cfg.eval_every > prev[k] // cfg.eval_every:
                    self._learn_due()  # a log or evaluation sees every update up to its step
                if logs:
                    self._check_finite()
                    now = time.monotonic()
                    self._log(k, self._window_steps[k] / max(now - self._window_t[k], 1e-9), self._recent[k])
                    self._window_t[k], self._window_steps[k] = now, 0
                    self._recent[k] = self._recent[k][-10:]
                if self.env_steps[k] // cfg.eval_every > prev[k] // cfg.eval_every:
                    evaluating.append(k)
            if evaluating:  # together (nothing updates between a member's row and here)
                self._check_finite()
                with self._off_the_clock():  # with the best/ writes in it
                    for k, mean in zip(evaluating, self.evaluate_members(evaluating)):
                        last = mean if k == 0 else last
        self._learn_due()  # before the checkpoint and the next act
        # In the last round a final evaluation still follows for the members not evaluated at their step;
        # the end of the run saves after it (as a single run's loop, Trainer._count_rows).
        final_eval_follows = self.env_step >= cfg.total_steps and bool(self._unevaluated())
        if max(self.env_steps) // cfg.checkpoint_every > self._round_start // cfg.checkpoint_every and not final_eval_follows:
            self._check_finite()
            with self._off_the_clock():
                self._save_or_continue()
        progress.update(self.env_step, last)
        return last

    @contextlib.contextmanager
    def _off_the_clock(self):
        """Time spent inside (evaluations with their ``best/`` writes, a checkpoint: not env stepping) is left
        out of every member's ``steps_per_s`` window, as a single run's (``_LoopState.off_the_clock``)."""
        started = time.monotonic()
        try:
            yield
        finally:
            self._window_t = [t + time.monotonic() - started for t in self._window_t]


def _restored_counters(checkpoint: Path, meta: dict[str, Any], p: int):
    """``(env_steps, updates, episodes, best, wall_s)`` of a population checkpoint's meta.json, checked:
    one count per member (an integer from 0 to :data:`~rlfunc.runtime.checkpoint.MAX_STEP`, what
    the logs count on from in int64; the largest env step is the checkpoint's own ``env_step``), one best
    return per member (finite, or ``None``) and a finite training time. Anything else (a crafted meta.json
    whose checksum was made again) is one :class:`~rlfunc.runtime.checkpoint.CheckpointError` sentence,
    not an ``IndexError`` mid-training."""
    from rlfunc.runtime.checkpoint import MAX_STEP, CheckpointError

    def bad(what: str) -> CheckpointError:
        return CheckpointError(
            f"Checkpoint {str(checkpoint)!r} has {what} in meta.json, not what rlfunc writes for a population of {p}; "
            "use an earlier checkpoint."
        )

    def counts(key: str) -> list[int]:
        values = meta.get(key)
        if not (isinstance(values, list) and len(values) == p
                and all(type(v) is int and 0 <= v <= MAX_STEP for v in values)):
            raise bad(f"an invalid {key} (one count from 0 to {MAX_STEP} per member)")
        return list(values)

    env_steps, calls, episodes = counts("env_steps"), counts("updates"), counts("episodes")
    if meta.get("env_step") != max(env_steps):
        raise bad("an env_step that is not its members' largest env_steps")
    best = meta.get("best", [None] * p)
    if not (isinstance(best, list) and len(best) == p and all(
        b is None or (type(b) in (int, float) and math.isfinite(b)) for b in best
    )):
        raise bad("an invalid best (one finite return or null per member)")
    wall = meta.get("wall_s", 0.0)
    if type(wall) not in (int, float) or not (math.isfinite(wall) and wall >= 0):
        raise bad("an invalid wall_s (a finite number of seconds)")
    return env_steps, calls, episodes, [-math.inf if b is None else float(b) for b in best], float(wall)


def _restored_round(checkpoint: Path, meta: dict[str, Any], p: int, num_envs: int):
    """``(pending env steps, round start, recent returns)`` of a population checkpoint's meta.json: each
    member's rows of the interrupted round stored and not counted (from 0 to ``num_envs``, one member's
    copies per round), the env step the round began at and each member's newest episode returns. A
    checkpoint of an earlier version has none of them: nothing pending, no returns. Anything else is one
    :class:`~rlfunc.runtime.checkpoint.CheckpointError` sentence, as :func:`_restored_counters`."""
    from rlfunc.runtime.checkpoint import MAX_STEP, CheckpointError

    pending = meta.get("pending_env_steps", [0] * p)
    round_start = meta.get("round_start", meta.get("env_step"))
    recent = meta.get("recent_returns", [[] for _ in range(p)])
    what = None
    if not (isinstance(pending, list) and len(pending) == p and all(type(v) is int and 0 <= v <= num_envs for v in pending)):
        what = f"an invalid pending_env_steps (one count from 0 to env.num_envs={num_envs} per member)"
    elif not (type(round_start) is int and 0 <= round_start <= MAX_STEP):
        what = f"an invalid round_start (an env step from 0 to {MAX_STEP})"
    elif not (isinstance(recent, list) and len(recent) == p and all(
        isinstance(r, list) and all(type(v) in (int, float) for v in r) for r in recent
    )):
        what = "an invalid recent_returns (a list of episode returns per member)"
    if what:
        raise CheckpointError(
            f"Checkpoint {str(checkpoint)!r} has {what} in meta.json, not what rlfunc writes for a population of {p}; "
            "use an earlier checkpoint."
        )
    return list(pending), round_start, [[float(v) for v in r] for r in recent]


def train(
    config=None,
    overrides: dict[str, Any] | list[str] | None = None,
    run_dir: str | Path | None = None,
    *,
    seeds: list[int] | str | None = None,
    grid: dict[str, list[Any]] | list[str] | None = None,
    vectorize: str | None = None,
):
    """Train a population, or a single run when there is none.

    ``config``/``overrides``/``run_dir`` as :func:`rlfunc.train`; ``seeds``
    (``[0, 1]`` or ``"0-3"``) and ``grid`` (``{"agent.critic_lr": [3e-4, 1e-3]}``
    or ``["agent.critic_lr=3e-4,1e-3"]``) and ``vectorize`` (``"auto"``, ``"vmap"``,
    ``"loop"``) set ``train.population`` (the CLI's ``--seeds``/``--grid``/``--vectorize``). A config without ``train.population`` trains one run
    with :func:`rlfunc.runtime.trainer.train` (returns its ``TrainResult``);
    otherwise returns a :class:`PopulationResult`. Everything is checked before the
    run directory is made and any training starts.
    """
    from rlfunc.runtime import run_dir as run_dirs
    from rlfunc.runtime import trainer
    from rlfunc.runtime.config import (RunConfig, apply_overrides, build_config, check_train_packages, load_config,
                                       parse_overrides)

    if isinstance(config, RunConfig):
        if overrides or seeds is not None or grid is not None or vectorize is not None:
            raise ConfigError("Pass overrides, seeds, grid and vectorize with a YAML path or mapping, not with a built RunConfig.")
        run_config = config
    else:
        raw = config if isinstance(config, dict) else load_config(config)
        if isinstance(overrides, list):
            overrides = parse_overrides(overrides)
        refuse_given_twice(overrides, seeds=seeds, grid=grid, vectorize=vectorize)
        raw = apply_overrides(raw, overrides or {})
        if vectorize is not None and seeds is None and grid is None and not (raw.get("train") or {}).get("population"):
            raise ConfigError("vectorize (--vectorize) sets how a population updates its members; give --seeds or --grid too.")
        if seeds is not None or grid is not None or vectorize is not None:
            train_raw = raw.get("train") or {}
            spec = dict(train_raw.get("population") or {})
            if vectorize is not None:
                spec["vectorize"] = vectorize
            if seeds is not None:  # not a list (seeds=3): train.population.seeds' own sentence
                spec["seeds"] = parse_seeds(seeds) if isinstance(seeds, str) else (
                    list(seeds) if isinstance(seeds, Iterable) else seeds)
            if grid is not None:  # neither a list nor a mapping: train.population.grid's own sentence
                new_grid = parse_grid(grid) if isinstance(grid, list) else (
                    dict(grid) if isinstance(grid, Mapping) else grid)
                refuse_dropped_grid_keys(spec.get("grid"), new_grid)
                spec["grid"] = new_grid
            raw = {**raw, "train": {**train_raw, "population": spec}}
        if isinstance(raw.get("train"), dict) and isinstance(raw["train"].get("population"), Mapping):
            raw = {**raw, "train": {**raw["train"], "population": plain_spec(raw["train"]["population"])}}
        refuse_set_and_grid(overrides, (raw.get("train") or {}).get("population"), grid is not None)
        run_config = build_config(raw)
    check_train_packages(run_config.train)  # also for a RunConfig built from a stored config (rlfunc.load)
    if run_config.train.population is None:
        return trainer.train(run_config, run_dir=run_dir)
    members = member_specs(run_config)  # refusals before the run directory is made
    from rlfunc.runtime.api import as_path

    run_dir = as_path(run_dir, "run_dir") if run_dir is not None else run_dirs.new_run_dir(run_config, f"pop{len(members)}")
    created = run_dirs.prepare_run_dir(run_dir)  # and its lock, released when the run ends
    try:
        pop = PopulationTrainer(run_config, run_dir)
    except BaseException:
        run_dirs.discard_new_run_dir(run_dir, created)
        raise
    return pop.run()


def resume(run_dir: str | Path, total_steps: int | None = None, trust_wandb_settings: bool = False) -> PopulationResult:
    """Continue every member of the population in ``run_dir`` from its newest checkpoint that
    verifies (optionally to a new ``total_steps``); the config is the one stored in it. A run
    directory another live process trains in is refused with one sentence before anything is done,
    and so is what the stored config may not do without the user's consent
    (:func:`rlfunc.runtime.resume_checks.consent_to_loaded`)."""
    from rlfunc.runtime import resume_checks
    from rlfunc.runtime.api import check_resume_packages
    from rlfunc.runtime.checkpoint import CheckpointError, clean_leftovers, load_newest_good, lock_run_dir, unlock_run_dir
    from rlfunc.runtime.config import apply_overrides, build_config, check_train_packages
    from rlfunc.runtime.run_dir import refuse_nothing_saved, started_run

    run_dir = Path(run_dir)
    if not (run_dir / "checkpoints").is_dir() and not started_run(run_dir):
        raise ConfigError(f"{str(run_dir)!r} has no checkpoints/ to resume from; pass the population's run directory once it has saved one.")
    # its loggers' packages and what it may do without consent, from meta.json alone: before any checkpoint is read
    check_resume_packages(run_dir, trust_wandb_settings=trust_wandb_settings)
    lock_run_dir(run_dir)  # another process training here: refused before anything is touched
    try:
        for line in clean_leftovers(run_dir / "checkpoints"):  # as a single run's resume does
            print(f"rlfunc: {run_dir / 'checkpoints'}: {line}", file=sys.stderr)
        refuse_nothing_saved(run_dir)  # a population killed before its first checkpoint
        checkpoint, tensors, meta = load_newest_good(run_dir)
        raw = meta.get("config")
        if not isinstance(raw, dict) or "population" not in meta:
            raise CheckpointError(f"Checkpoint {str(checkpoint)!r} is not a population's; resume it with `rlfunc resume` of its own run.")
        stored = raw
        if total_steps is not None:
            raw = apply_overrides(raw, {"train.total_steps": resume_checks.resumed_total_steps(total_steps, meta)})
        run_config = build_config(raw, resolved=True)
        resume_checks.refuse_relative_data_elsewhere(run_config)
        check_train_packages(run_config.train, resuming=True)
        run_config = resume_checks.consent_to_loaded(run_config, None, trust_wandb_settings)
        pop = PopulationTrainer(run_config, run_dir)
        pop.restore(checkpoint, tensors, meta)  # closes the envs itself if the checkpoint does not fit
        try:
            resume_checks.refuse_edited_config_copy(run_dir, stored, total_steps)  # as a single run's resume (its config.yaml)
            # and each member's config.yaml, the copy `rlfunc plot`, `eval` and `train member-<k>/config.yaml` read as a
            # run's: the resume writes the member's stored settings over it, so an edit there was lost without a word
            from rlfunc.runtime.config import to_dict

            for m in pop.members:
                resume_checks.refuse_edited_config_copy(pop.member_dir(m.index), to_dict(m.config), total_steps)
        except BaseException:
            pop.close_envs()  # refused: nothing of the built population is left open (rlfunc.resume from Python)
            raise
        del tensors  # the replays copied it: not kept alive beside them for the whole resumed run
        return pop.run(resumed=True)
    finally:
        unlock_run_dir(run_dir)
