"""Distributed R2D2: actors in Ray actor processes feeding one learner (Kapturowski et al., ICLR 2019).

The paper's layout (after Ape-X, Horgan et al., ICLR 2018): many actors, each with its own env
and its own fixed epsilon, act with a copy of the network they refresh every 400 env steps,
cut their experience into overlapping sequences with the recurrent state stored before each,
compute each sequence's initial priority themselves, and send them to a shared prioritized
replay; one learner samples it, updates and publishes parameters. Here:

* **actors** (:class:`ActorProcess`, one Ray actor each, ``distributed.actor_cpus`` /
  ``actor_gpus``): ``distributed.envs_per_actor`` envs each, with their slice of the epsilon
  ladder over all ``N = actors * envs_per_actor`` envs, ``eps_i = 0.4^(1 + 7 i / (N - 1))``
  (:func:`actor_epsilon_slice`). They act and cut windows with the single-process learner's own
  code (:meth:`rlfunc.runtime.learners.SequenceLearner.for_acting`: the same carry handling,
  stored state, burn-in + length windows every period, into a small outbox
  :class:`~rlfunc.replay.sequence.SequenceReplay`), on CPU. One call of
  :meth:`ActorProcess.collect` takes the parameters published when the call was sent (each actor
  keeps two calls queued, so the second starts with those of one chunk earlier: at most one
  chunk's publications behind the newest), steps the envs for
  ``distributed.param_sync_steps`` env steps (summed over the actor's envs; the paper: 400),
  and returns the windows it finished with their initial priorities (:func:`window_priorities`:
  the R2D2 loss's ``0.9 max + 0.1 mean |td|`` from the actor's copy of the online and target
  networks) -- one chunk. Env ``i`` of the whole set is seeded ``train.seed + i`` and actor 0
  draws its acting noise from ``train.seed + 1``, as the single-process learner, so one actor
  produces the single-process run's windows for the same parameters (tested).
* **pixel agents** (``agent.encoder`` ``minatar`` or ``nature``): the outbox is the learner's kind of
  frame replay (:class:`~rlfunc.replay.frame_sequence.FrameSequenceReplay`, a ring of
  :func:`~rlfunc.replay.frame_sequence.outbox_frame_capacity` frames), filled by the same
  :meth:`observe`; a chunk carries the frames written since the actor's previous chunk, each once
  (``frames``, ``frames_from``: the outbox's number of the first), and windows that hold the outbox's
  frame numbers instead of observations (priorities are computed on the frames gathered from the
  outbox; with gymnasium's ``FrameStackObservation``, each observation's newest plane with the number
  of the frame before it, as the learner's replay stores stacks). The learner's
  :class:`~rlfunc.replay.frame_sequence.PrioritizedFrameSequenceReplay`
  takes it with :meth:`~rlfunc.replay.frame_sequence.PrioritizedFrameSequenceReplay.add_chunk`,
  renumbering each actor's frames into its one ring (sized by
  :func:`~rlfunc.replay.frame_sequence.default_frame_capacity` over all ``actors * envs_per_actor``
  envs). :func:`chunk_bytes` counts what a chunk carries.
* **learner** (:class:`DistributedTrainer`, in the driver, on ``train.device``): the
  single-process :class:`~rlfunc.runtime.learners.R2D2Learner` -- the same pure
  ``r2d2.update`` and prioritized sequence replay -- fed by
  :meth:`~rlfunc.replay.prioritized.PrioritizedSequenceReplay.add_windows` as chunks arrive
  (``ray.wait``; each actor keeps two calls queued, so it starts the next chunk at once). It
  publishes ``{params, target, version}`` with ``ray.put`` every
  ``distributed.param_sync_updates`` updates, and updates only while ``updates + 1 <=
  max_replay_ratio * (env steps inserted since the replay first held train.learning_starts
  windows)``: it never outruns the data, and it never blocks the actors (they run freely; when
  the learner is slower, the ratio falls below the bound) unless ``distributed.min_replay_ratio``
  is set: then no actor starts a new chunk while the learner is below that ratio (Acme's rate
  limiter blocks inserts the same way). ``metrics.csv`` adds ``param_version`` (the update count
  of the newest published parameters) and ``replay_ratio``; its ``steps_per_s`` is measured on the actors'
  collection times, not on when chunks reach the learner (chunks arriving together gave rows tens to
  billions of times the actors' rate), and leaves the learner's evaluations and checkpoint writes out, with
  the steps the actors collect during them (:class:`RateWindow`).
* **counters**: ``env_step`` counts the transitions of the chunks inserted; a chunk is counted
  once, when it arrives. An actor is asked for env steps only once its process is up (it answered
  :meth:`ActorProcess.info`), so an actor Ray cannot place (another job holds its CPUs) reserves
  none of the steps still missing: the actors that run collect them, and if none runs for
  :data:`ACTOR_START_TIMEOUT_S` the run stops in one sentence. An actor that dies loses the chunk
  it was cutting (never counted), its other queued call is dropped, and Ray restarts it
  (``distributed.max_restarts``) while the learner trains on; it is asked again once the new
  process answers. Each death is counted once (``actor_deaths``); one more than
  ``distributed.max_restarts`` stops the run in one sentence. The run ends with the first chunk at
  or past ``train.total_steps`` (calls ask only for the steps still missing, counting those in flight as
  the ``envs_per_actor - 1`` more each may collect, so it ends at most ``envs_per_actor - 1`` steps past it).
  A chunk's count and an update are each one block a Ctrl-C or SIGTERM waits for (as a single run's count);
  a row due at a chunk that an error or signal cut off is still written (:meth:`DistributedTrainer._row_due_here`).
  With ``train.max_updates`` the learner stops updating at the limit, and the next chunk stops the run.
* **checkpoints and resume**: the single-run format (:mod:`rlfunc.runtime.checkpoint`: learner
  state, replay with priorities, generators, counters) plus this trainer's parameter version and
  replay-ratio origin. ``rlfunc resume`` continues from the newest checkpoint with *fresh* actors:
  their envs start new episodes (seeds shifted by the env steps already taken) and windows they
  had not sent when the run stopped are not in the checkpoint. The replay ratio goes on over the whole
  run (its counters are the checkpoint's), and the learner waits for the fresh actors' first chunk
  instead of updating on the restored replay while they start, unless ``distributed.min_replay_ratio``
  holds them for it (:meth:`DistributedTrainer._may_update`). A run that has all its steps starts no actor.

Ray is imported lazily (:func:`connect_for`, which reuses :func:`rlfunc.scale.sweep.connect`);
nothing outside ``rlfunc.scale`` imports this module except the dispatch in
:func:`rlfunc.runtime.trainer.train` / ``resume`` for configs with a ``distributed`` section.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from rlfunc.core.exploration import actor_epsilons
from rlfunc.replay.sequence import SequenceReplay
from rlfunc.runtime.checkpoint import CheckpointError, is_count
from rlfunc.runtime.config import ConfigError, RunConfig, to_dict
from rlfunc.runtime.run_log import Progress
from rlfunc.runtime.run_dir import discard_new_run_dir, new_run_dir, prepare_run_dir
from rlfunc.runtime.trainer import Trainer, TrainResult, _StopRun, check_train_device

__all__ = [
    "RAY_MISSING",
    "actor_epsilon_slice",
    "actor_seeds",
    "spread_seed",
    "window_priorities",
    "chunk_bytes",
    "RateWindow",
    "ActorProcess",
    "DistributedTrainer",
    "connect_for",
    "resume_address",
    "train",
    "resume",
]

# How long a run waits with no actor running (none placed yet, or all restarting) before it stops in one
# sentence: on a busy cluster other jobs may hold the CPUs the actors ask for.
ACTOR_START_TIMEOUT_S = 120.0

RAY_MISSING = 'A distributed run (the config\'s distributed section) needs Ray, which is not installed; install it with pip install -e ".[ray]".'


# ----------------------------------------------------------------------------- pure pieces


def actor_epsilon_slice(actors: int, envs_per_actor: int, index: int, base: float = 0.4, alpha: float = 7.0) -> torch.Tensor:
    """Actor ``index``'s ``[envs_per_actor]`` slice of the Ape-X ladder over all ``actors * envs_per_actor`` envs."""
    eps = actor_epsilons(actors * envs_per_actor, base, alpha)
    return eps[index * envs_per_actor : (index + 1) * envs_per_actor].clone()


def spread_seed(*parts: int) -> int:
    """A 32-bit seed numpy's ``SeedSequence`` draws from ``parts`` (non-negative integers): for actors
    that must not replay earlier streams, spread over ``[0, 2**32)`` instead of next to the run's seed,
    whose neighbours seed other streams (``seed + 10_000 + j``: the run's evaluation episodes)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0])


def actor_seeds(seed: int, index: int, envs_per_actor: int, start_step: int = 0) -> tuple[int, int]:
    """``(env seed, acting-noise seed)`` of actor ``index``: its envs are reset with ``env seed + j``
    (env ``i`` of the whole set with ``seed + i``) and actor 0 draws its noise from ``seed + 1``, as
    the single-process learner with the same envs does. Fresh actors of a resumed run
    (``start_step`` > 0, the env steps already taken) draw both from ``(seed, index, start_step)``
    (:func:`spread_seed`), so they neither replay the first episodes nor, as ``seed + start_step``
    did when a run resumed at step 10,000, step through the evaluation episodes' seeds."""
    if start_step:
        return spread_seed(seed, index, start_step, 0), spread_seed(seed, index, start_step, 1)
    return seed + index * envs_per_actor, seed + 1 + 1_000_003 * index


def window_priorities(algo, published: TensorDict, agent_config, windows: TensorDict) -> torch.Tensor:
    """Initial priorities ``[k]`` of windows a :meth:`~rlfunc.replay.sequence.SequenceReplay.drain` handed
    out, from the actor's copy of the online and target networks (``published["params"]``,
    ``published["target"]``): the loss's ``priority_eta max_t |td_t| + (1 - eta) mean_t |td_t|`` over each
    window's valid trained steps (R2D2, eta = 0.9; Ape-X actors compute priorities themselves)."""
    k = windows.batch_size[0]
    if k == 0:
        return torch.zeros(0)
    batch = windows["steps"].transpose(0, 1)  # [T, k], time-major as the replay samples
    if "init_carry" in windows.keys():
        batch["init_carry"] = windows["init_carry"].expand(batch.batch_size[0], k)
    with torch.no_grad():
        _, aux = algo.loss(published["params"], published["target"], agent_config, batch)
    return aux["priorities"]


def chunk_bytes(chunk: dict[str, Any]) -> int:
    """Bytes of the tensors an actor sends in one chunk: its windows, their priorities and, for a pixel
    agent, the frames written since its previous chunk (each once)."""
    total = 0
    for key in ("windows", "priorities", "frames"):
        value = chunk.get(key)
        if isinstance(value, TensorDict):
            total += sum(v.numel() * v.element_size() for v in value.values(True, True))
        elif isinstance(value, torch.Tensor):
            total += value.numel() * value.element_size()
    return total


class RateWindow:
    """``steps_per_s`` of a distributed run's ``metrics.csv`` rows: env steps of training per second of
    training wall time, as a single run's, measured on the actors' collection times (each chunk's ``began`` ..
    ``ended``) rather than on when the learner read the chunks.

    Chunks reach the learner in bursts: two actors collecting side by side finish within milliseconds of each
    other, and each chunk may cross a ``train.log_every`` multiple. Measured from one row to the next chunk's
    arrival, the second row's window held a whole chunk's steps over those milliseconds, or over nothing when
    both came in one ``ray.wait`` (rows tens to billions of times the actors' rate). So a row's window ends
    where every step collected before it has arrived (:meth:`known_until`), and each chunk's steps count
    spread evenly over its collection, the part inside the window; a window with no steps known past the
    previous row keeps that row's rate and goes on.

    The learner's evaluations and checkpoint writes (its pauses, :meth:`off_the_clock`) are left out of the
    window's time, and so are the steps the actors collect during them: the actors do not stop during a
    pause (they finish their queued calls, then idle), so counting those steps without their time would give
    the row after a pause a rate above what the actors did. The first window starts when the first actor was
    asked for steps (:meth:`asked`) or its first chunk began, not when the learner started: the actors'
    start-up (their processes, imports and envs) is not env stepping.

    Times are ``time.time()``: the clock the learner and the actors' processes share on one machine (on a
    cluster, as well as the nodes' clocks agree). A chunk without times counts in full in the next window.
    ``in_flight()`` returns the actors with calls in flight (the loop's). Like
    :class:`rlfunc.runtime.trainer._LoopState`, it is the trainer's ``_loop_state`` (the final evaluation
    and a stop row use :meth:`off_the_clock` and :meth:`rate_so_far`)."""

    KEPT_PAUSES = 16  # a chunk is collected over far fewer pauses than this

    def __init__(self, clock=None, in_flight=None) -> None:
        self.clock = clock if clock is not None else time.time
        self.in_flight = in_flight if in_flight is not None else tuple
        self.created = self.clock()
        self.start: float | None = None  # the window's start; None until the first row's window is measured
        self.first: float | None = None  # the earliest ask or collection start before the first row
        self.open: list[list[float]] = []  # [began, ended, steps, counted up to] of chunks not wholly counted
        self.untimed = 0.0  # steps of chunks without times, counted in full in the next window
        self.steps_per_s = 0.0
        self.pauses: list[tuple[float, float]] = []  # (start, end) of the newest pauses
        self.asked_at: dict[int, float] = {}  # actor -> when it was last asked while it had no call in flight
        self.ended_at: dict[int, float] = {}  # actor -> the end of its newest chunk counted

    def asked(self, actor: int) -> None:
        """Actor ``actor``, with no call in flight, is sent one: it collects nothing before now."""
        now = self.clock()
        self.asked_at[actor] = now
        self._note_first(now)

    def add(self, env_steps: int, began: float | None = None, ended: float | None = None,
            actor: int | None = None) -> None:
        """Count a chunk's ``env_steps``, collected by ``actor`` from ``began`` to ``ended``."""
        if actor is not None and ended is not None:
            self.ended_at[actor] = max(ended, self.ended_at.get(actor, ended))
        if began is None or ended is None or not ended > began:
            self.untimed += env_steps
            return
        self._note_first(began)
        self.open.append([began, ended, float(env_steps), began])

    def _note_first(self, t: float) -> None:
        if self.start is None:
            self.first = t if self.first is None else min(self.first, t)

    def known_until(self) -> float:
        """The time before which every step collected has been counted: now, or, for each actor with a call in
        flight, the end of its newest chunk counted or when it was asked (an actor runs its calls in order)."""
        end = self.clock()
        for actor in set(self.in_flight()):
            marks = [t for t in (self.asked_at.get(actor), self.ended_at.get(actor)) if t is not None]
            if marks:
                end = min(end, max(marks))
        return end

    def _outside_pauses(self, lo: float, hi: float) -> float:
        """Seconds of ``(lo, hi]`` outside the pauses."""
        if not hi > lo:
            return 0.0
        return max(0.0, hi - lo - sum(max(0.0, min(hi, e) - max(lo, s)) for s, e in self.pauses))

    def measure(self, restart: bool = True) -> None:
        """``steps_per_s`` of the window up to :meth:`known_until`; ``restart``: the next window starts there."""
        end = self.known_until()
        start = self.start
        if start is None:
            start = min(self.first, end) if self.first is not None else self.created
        seconds = self._outside_pauses(start, end)
        counted = self.untimed + sum(c[2] * self._outside_pauses(c[3], min(c[1], end)) / (c[1] - c[0])
                                     for c in self.open)
        if not (seconds > 0 and counted > 0):  # nothing known past the previous row: its rate stands
            if self.start is None:  # the first row, before each actor asked has sent a chunk: the arrived ones
                self._first_estimate(start)
            return
        self.steps_per_s = counted / seconds
        if restart:
            for c in self.open:
                c[3] = max(c[3], min(c[1], end))
            self.open = [c for c in self.open if c[3] < c[1]]
            self.untimed, self.start = 0.0, end

    def _first_estimate(self, start: float) -> None:
        """A first row's rate while some actor's first chunk is still collected: the steps arrived since
        ``start`` over the time since (a lower bound; the next row's window holds the first one's steps)."""
        arrived, seconds = self.untimed + sum(c[2] for c in self.open), self.clock() - start
        if arrived > 0 and seconds > 0:
            self.steps_per_s = arrived / seconds

    def rate_so_far(self) -> float:
        """The window's rate so far (a stop row's), or the last row's if no step is known past it."""
        self.measure(restart=False)
        return self.steps_per_s

    @contextlib.contextmanager
    def off_the_clock(self):
        """A pause of the learner (an evaluation, a checkpoint write): its time is left out of the window,
        and so are the steps the actors collect during it."""
        start = self.clock()
        try:
            yield
        finally:
            self.pauses = [*self.pauses, (start, self.clock())][-self.KEPT_PAUSES:]


def _actor_env(config: RunConfig, n: int):
    """The actor's envs: one env for ``n == 1``, else a vector env (as the single-process trainer builds them)."""
    from rlfunc.envs import build_wrappers, make_env, make_vector_env

    wrappers = build_wrappers(config.env.wrappers)
    if n == 1:
        return make_env(config.env.id, kwargs=config.env.kwargs, wrappers=wrappers)
    return make_vector_env(config.env.id, n, kwargs=config.env.kwargs, wrappers=wrappers)


# ----------------------------------------------------------------------------- the actor


class ActorProcess:
    """One R2D2 actor (a Ray actor: ``ray.remote(ActorProcess)``; usable in-process too).

    ``raw_config``: the run's resolved config (:func:`~rlfunc.runtime.config.to_dict`); ``index``: which
    actor (its epsilons and seeds); ``start_step``: the env steps the run already has (a resumed run's
    fresh actors draw other episodes).
    """

    def __init__(self, raw_config: dict, index: int, start_step: int = 0) -> None:
        from rlfunc.envs import env_spaces
        from rlfunc.runtime.collector import Collector
        from rlfunc.runtime.config import build_config
        from rlfunc.runtime.perf import set_threads
        from rlfunc.runtime.registry import get_algo

        config = build_config(raw_config, resolved=True)
        d = config.distributed
        set_threads(max(1, int(d.actor_cpus)))
        # Actors act on CPU with an eager network; the learner keeps train.device/compile.
        config = dataclasses.replace(config, train=dataclasses.replace(config.train, device="cpu", compile=False, cuda_graph=False))
        self.config, self.index = config, int(index)
        self.entry = get_algo(config.algo)
        n = d.envs_per_actor
        self.env = _actor_env(config, n)
        obs_space, act_space = env_spaces(self.env)
        env_seed, noise_seed = actor_seeds(config.train.seed, self.index, n, int(start_step))
        self.restarted = _restarted()
        if self.restarted:  # Ray restarted this process: other episodes and noise than its first life
            env_seed, noise_seed = spread_seed(env_seed, os.getpid(), 0), spread_seed(noise_seed, os.getpid(), 1)
        cut = self.entry.algo.replay_kwargs(config.agent, 1)
        # At most one window per transition, and a call collects < param_sync_steps + n transitions.
        chunk = d.param_sync_steps + n
        self.pixels = getattr(config.agent, "encoder", "mlp") != "mlp"
        if self.pixels:  # the learner's frame replay, small: each frame goes to the learner once
            from rlfunc.replay.frame_sequence import FrameSequenceReplay, outbox_frame_capacity
            from rlfunc.runtime.learners.sequence import frame_stack_size

            k = frame_stack_size(config, obs_space)  # the learner's: a stacked observation's newest plane each
            self.outbox = FrameSequenceReplay(chunk, cut["sequence_length"], n, period=cut["period"], frame_stack=k,
                                              frame_capacity=outbox_frame_capacity(chunk, cut["sequence_length"], n, k))
        else:
            self.outbox = SequenceReplay(chunk, cut["sequence_length"], n, period=cut["period"])
        self.epsilons = actor_epsilon_slice(d.actors, n, self.index, config.agent.epsilon_base, config.agent.epsilon_alpha)
        self.acting = self.entry.learner_cls.for_acting(
            self.entry, config, obs_space, act_space, replay=self.outbox, epsilons=self.epsilons, seed=noise_seed
        )
        self.collector = Collector(self.env, seed=env_seed)
        self.collector.reset(seed=env_seed)
        self.env_steps = 0

    def info(self) -> dict[str, Any]:
        """Where this actor runs and what it explores with."""
        return {"index": self.index, "pid": os.getpid(), "host": platform.node(), "restarted": self.restarted,
                "epsilons": self.epsilons.tolist()}

    def collect(self, published: TensorDict, env_steps: int) -> dict[str, Any]:
        """Act with ``published`` (``params``, ``target``, ``version``: those published when the learner sent
        the call, one chunk behind the newest for the second of two queued calls) until ``env_steps`` transitions were
        collected; return the windows finished meanwhile (:meth:`SequenceReplay.drain`) with their initial
        priorities, the transitions collected, the returns of the episodes that ended, and the version."""
        cpu0, wall0, began = time.process_time(), time.monotonic(), time.time()
        self.acting.state = TensorDict({"params": published["params"]}, batch_size=[])
        steps, returns = 0, []
        while steps < env_steps:
            actions = self.acting.explore(self.collector.obs, self.env_steps, episode_start=self.collector.episode_start)
            rows, finished = self.collector.step(actions)
            self.acting.observe(rows)
            steps += rows.batch_size[0]
            self.env_steps += rows.batch_size[0]
            returns.extend(r for _, r, _ in finished)
        windows = self.outbox.drain()
        frames = {}
        if self.pixels:  # the frames written since the last chunk, once; the windows hold their numbers
            frames_from, new = self.outbox.drain_frames()
            frames = {"frames": new, "frames_from": frames_from}
            scored = windows if windows.batch_size[0] == 0 else windows.clone(False)
            if windows.batch_size[0]:
                scored["steps"] = self.outbox.with_frames(windows["steps"])
        else:
            scored = windows
        priorities = window_priorities(self.entry.algo, published, self.config.agent, scored)
        return {
            "windows": windows,
            **frames,
            "priorities": priorities,
            "cpu_s": time.process_time() - cpu0,  # this process's CPU time for the chunk
            "wall_s": time.monotonic() - wall0,
            "began": began,  # on the clock the learner shares (time.time): RateWindow leaves its pauses out
            "ended": time.time(),
            "env_steps": steps,
            "returns": returns,
            "version": int(published["version"]),
            "actor": self.index,
            "pid": os.getpid(),
        }


def _saved_counters_problem(saved: Any, env_step: int, learner_calls: int) -> str | None:
    """What is wrong with a checkpoint's ``distributed`` counters (a meta.json edited and its checksum made
    again), as the words after "has" in a sentence, or ``None``: ``param_version`` a count up to the learner
    calls and ``ratio_from`` null or a count up to the env steps (a string there stopped the resumed run with
    a TypeError at its first update)."""
    if not isinstance(saved, dict):
        return "an invalid distributed entry (not a JSON object)"
    for key, limit in (("param_version", learner_calls), ("ratio_from", env_step)):
        value = saved.get(key)
        if (key in saved if key == "param_version" else value is not None) and not is_count(value, limit):
            return f"an invalid distributed.{key} ({value!r} is not a count from 0 to {limit})"
    return None


def _restarted() -> bool:
    """Whether Ray restarted this actor process (False outside Ray; never starts or joins a Ray)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return False
    try:
        return bool(ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:  # the driver, not an actor
        return False


# ----------------------------------------------------------------------------- the learner


class DistributedTrainer(Trainer):
    """The single-run :class:`~rlfunc.runtime.trainer.Trainer` (logs, evaluation, checkpoints, crash saves,
    callbacks) with its collect-and-learn loop replaced by Ray actors and a learner fed by their chunks
    (module docstring). ``chunks`` records ``(actor, version, env_steps, windows stored, pid, actor CPU s, actor wall s,
    bytes)`` of every chunk inserted (:func:`chunk_bytes`); ``actor_failures`` counts calls that failed on a dead or restarting actor (their steps are
    not counted), ``actor_deaths`` the deaths of actor processes (each once, however many calls it failed) and
    ``actor_restarts`` the actors whose chunks came from a new process."""

    def __init__(self, config: RunConfig, run_dir: Path, callbacks: list | None, ray) -> None:
        super().__init__(config, run_dir, callbacks)
        self.ray = ray
        self.version = 0  # learner updates behind the newest published parameters
        self.ratio_from: int | None = None  # env step at which the replay first held train.learning_starts windows
        self.chunks: list[tuple[int, int, int, int, int, float, float, int]] = []
        self.actor_failures = 0  # calls that failed because their actor was dead or restarting
        self.actor_deaths = 0  # deaths of actor processes seen (each once, however many calls it failed)
        self.actor_restarts = 0  # chunks that came from a new process of the same actor
        self._pids: dict[int, int] = {}
        self._first_update_t: float | None = None
        self.actors: list = []
        self.loop_stats: dict[str, float] = {}
        self._published = None
        self._row_due: int | None = None  # env_step of the chunk whose metrics row is due (a log_every crossing)

    # -- checkpoints ----------------------------------------------------------------
    def _extra_meta(self) -> dict[str, Any]:
        return {"distributed": {"param_version": self.version, "ratio_from": self.ratio_from,
                                "actor_failures_this_process": self.actor_failures,
                                "actor_deaths_this_process": self.actor_deaths,
                                "actor_restarts_this_process": self.actor_restarts}}

    def restore(self, checkpoint: Path, tensors, meta: dict[str, Any]) -> None:
        super().restore(checkpoint, tensors, meta)
        saved = meta.get("distributed")
        saved = {} if saved is None else saved  # a checkpoint of an older rlfunc
        what = _saved_counters_problem(saved, self.env_step, self.learner_calls)
        if what is not None:
            self.close_envs()  # as a failed restore of the single run's part (the trainer is not run)
            raise CheckpointError(
                f"Checkpoint {str(checkpoint)!r} has {what} in meta.json, not what rlfunc writes; use an earlier checkpoint."
            )
        self.version = saved.get("param_version", self.learner_calls)
        self.ratio_from = saved.get("ratio_from")

    # -- actors ---------------------------------------------------------------------
    def _publish(self) -> None:
        """``ray.put`` the learner's online and target parameters (on CPU) with their version."""
        state = self.learner.state
        td = TensorDict({"params": state["params"], "target": state["target"]}, batch_size=[]).to("cpu").clone()
        self.version = self.learner_calls
        td["version"] = torch.tensor(self.version)
        self._published = self.ray.put(td)

    def _start_actors(self) -> None:
        """Create the actors into ``self.actors`` one by one, so that the loop's ``finally`` kills those already
        created when creating one fails (a Ray error, a Ctrl-C or a sweep's cancel then): they outlived the run."""
        d = self.config.distributed
        cls = self.ray.remote(ActorProcess)
        raw = to_dict(self.config)
        self.actors = []
        for k in range(d.actors):
            self.actors.append(
                cls.options(num_cpus=d.actor_cpus, num_gpus=d.actor_gpus, max_restarts=d.max_restarts,
                            max_task_retries=0).remote(raw, k, self.env_step))

    # -- learning -------------------------------------------------------------------
    def _may_update(self, actors_held: bool = False) -> bool:
        """The replay holds ``train.learning_starts`` windows, one more update keeps the replay ratio at most
        ``distributed.max_replay_ratio`` updates per env step inserted since then, and this process has had a
        chunk. A resumed run keeps the checkpoint's counters, so the whole run has one ratio, but its learner
        waits for the fresh actors' first chunk: it spent the updates the bound still allowed at the save on the
        restored replay while the actors started (hundreds). Only ``actors_held`` (actors waiting for it to
        reach ``distributed.min_replay_ratio``) lets it update before, as the original run's learner did then."""
        if not self._replay_ready() or self._updates_spent() or not (self.chunks or actors_held):
            return False
        return self.learner_calls + 1 <= self.config.distributed.max_replay_ratio * (self.env_step - self.ratio_from)

    def _updates_spent(self) -> bool:
        """``train.max_updates`` gradient steps are done: the learner updates no more, and the run stops at the next
        chunk (its ``on_step``, where the rule answers). The rule is asked only as chunks arrive, and the learner
        may update many times between two: it went on updating past the limit (by hundreds of updates)."""
        limit = self.config.train.max_updates
        return bool(limit) and self.gradient_steps >= limit

    def _replay_ready(self) -> bool:
        """The replay holds ``train.learning_starts`` windows; the first time, the replay ratio counts from
        the env step reached (``ratio_from``)."""
        if len(self.learner.replay) < max(self.config.train.learning_starts, 1):
            return False
        if self.ratio_from is None:
            self.ratio_from = self.env_step
        return True

    def _behind(self, env_steps: int) -> bool:
        """With ``distributed.min_replay_ratio``: the learner would fall below it if the replay took in
        ``env_steps`` (the steps inserted and asked for); actors are held back then."""
        low = self.config.distributed.min_replay_ratio
        if low <= 0 or self.ratio_from is None or self._updates_spent():  # spent: the chunk that stops the run
            return False
        return self.learner_calls + 1 <= low * (env_steps - self.ratio_from - self.config.distributed.param_sync_steps)

    def replay_ratio(self) -> float:
        """Updates per env step inserted since learning could start (0 before)."""
        steps = self.env_step - (self.ratio_from if self.ratio_from is not None else self.env_step)
        return self.learner_calls / steps if steps > 0 else 0.0

    def _loop(self, progress: Progress, last_eval: float | None) -> float | None:
        cfg, d, ray = self.config.train, self.config.distributed, self.ray
        if self.env_step >= cfg.total_steps:  # a resumed run that has all its steps: no actor processes to start
            return last_eval
        # Only an actor whose process is up (it answered ``info`` or sent a chunk) is asked for env steps, so
        # an actor Ray cannot place yet (its CPUs held by another job) or is restarting reserves none of the
        # steps still missing: the others collect them and the run ends.
        up: set[int] = set()
        starting: dict[Any, tuple[int, int]] = {}  # info call -> (actor, life) of an actor not up yet
        inflight: dict[Any, tuple[int, int, int]] = {}  # collect call -> (actor, env steps asked, life)
        life = [0] * d.actors  # bumped when a call finds the actor's process gone: calls of older lives are dropped
        deaths = [0] * d.actors
        pids: dict[int, int] = {}  # actor -> pid of its process that answered last (None after a death seen)
        # the episode returns since the last log (and the 10 before), in self._recent_returns as the
        # single-run loop keeps them: a checkpoint saves them, so metrics.csv's episode_return continues
        state = {"metrics": None, "last_eval": last_eval, "nobody_up_since": time.monotonic()}
        # steps_per_s, on the actors' collection times (its docstring: chunks arriving together, evaluations)
        self._loop_state = RateWindow(in_flight=lambda: {k for k, _, _ in inflight.values()})

        held: list[int] = []  # actors waiting for the learner (distributed.min_replay_ratio)
        retry: dict[int, float] = {}  # actor not up -> when to ask it for info again

        def submit(k: int) -> None:
            """Ask actor ``k`` for the steps still missing (at most ``param_sync_steps``). A call collects up to
            ``envs_per_actor - 1`` steps more than it asks (its envs step together), so calls in flight count
            as that much: the run then ends at most ``envs_per_actor - 1`` steps past ``train.total_steps``."""
            if k not in up:
                return
            queued = sum(a for _, a, _ in inflight.values())
            worst = queued + len(inflight) * (d.envs_per_actor - 1)
            asked = min(d.param_sync_steps, cfg.total_steps - self.env_step - worst)
            if asked <= 0:
                return
            if self._behind(self.env_step + queued + asked):
                if k not in held:  # once: a held actor is asked again when the learner has caught up
                    held.append(k)
                return
            if all(j != k for j, _, _ in inflight.values()):  # it collects nothing before this call
                self._loop_state.asked(k)
            inflight[self.actors[k].collect.remote(self._published, asked)] = (k, asked, life[k])

        def fill(k: int) -> None:  # two calls queued per actor: it starts the next chunk at once
            for _ in range(2 - sum(1 for j, _, _ in inflight.values() if j == k)):
                submit(k)
                if k in held:  # still behind: asked again once the learner has caught up
                    break

        def answered(k: int, pid: int) -> None:
            """Actor ``k``'s process ``pid`` answered: it is up. A pid other than the one that answered before,
            with no death seen since, is a process Ray restarted after the calls only found it unavailable."""
            if pids.get(k) is not None and pids[k] != pid:
                died(k, None)
            pids[k] = pid
            if k not in up:
                up.add(k)
                state["nobody_up_since"] = None
                fill(k)

        def down(k: int) -> None:
            """Actor ``k``'s current process is gone or unreachable: drop its calls (their steps were never
            counted; a chunk of a gone process never arrives) and ask for its info again shortly."""
            life[k] += 1
            up.discard(k)
            for calls in (inflight, starting):
                for ref in [r for r, v in calls.items() if v[0] == k]:
                    del calls[ref]
            if k in held:
                held.remove(k)
            retry[k] = time.monotonic() + 0.5
            if not up and state["nobody_up_since"] is None:
                state["nobody_up_since"] = time.monotonic()
            for j in sorted(up):  # the steps its dropped calls had asked for go to the actors that are up
                fill(j)

        def died(k: int, exc) -> None:
            """One death of actor ``k``: seen by a call that failed with ActorDiedError (``exc``), or, with
            ``exc`` None, by a new process answering (Ray restarted it)."""
            deaths[k] += 1
            self.actor_deaths += 1
            pids[k] = None
            restarts = f"restart {deaths[k]} of at most distributed.max_restarts={d.max_restarts}"
            if exc is None:
                print(f"rlfunc: actor {k} is back in a new process ({restarts})", file=sys.stderr)
                return
            cause = ": " + " ".join(str(exc).split())[:200]
            if getattr(exc, "actor_init_failed", False):
                raise ConfigError(f"Distributed actor {k} could not start (its constructor raised){cause}.") from None
            if deaths[k] > d.max_restarts:
                again = f"continue with `rlfunc resume {self.run_dir}`" if self.env_step > 0 else "run it again"
                raise ConfigError(
                    f"Distributed actor {k} died {deaths[k]} time{'s' if deaths[k] > 1 else ''} and Ray restarts an "
                    f"actor at most distributed.max_restarts={d.max_restarts} times, so the run stopped at env step "
                    f"{self.env_step}: raise distributed.max_restarts or find what ends the actor, then {again}{cause}."
                ) from None
            print(f"rlfunc: actor {k} died; Ray restarts it ({restarts}) and the learner trains on meanwhile",
                  file=sys.stderr)

        def failed(k: int, call_life: int, exc) -> None:
            """A call of actor ``k`` failed. Its other calls are dropped (:func:`down`), so a death is counted
            once however many calls it failed; ActorUnavailableError (Ray is restarting the process, or it
            cannot be reached) is not a death by itself: the restarted process's new pid shows one. Nor is
            a lost result (ObjectLostError: the node whose object store held a finished chunk is gone, on a
            cluster): the chunk's steps were never counted, and the actor is asked again (a new pid then
            shows whether it died with the node)."""
            self.actor_failures += 1
            if call_life != life[k]:
                return  # a call of a life whose end was already seen
            if isinstance(exc, ray.exceptions.ObjectLostError):
                print(f"rlfunc: a chunk of actor {k} was lost before the learner read it (its node's object store "
                      "is gone); its steps are collected again", file=sys.stderr)
            elif not isinstance(exc, ray.exceptions.ActorUnavailableError):
                died(k, exc)
            elif k in up:
                print(f"rlfunc: actor {k} is unavailable (its process ended or cannot be reached); the learner "
                      "trains on until it is back", file=sys.stderr)
            down(k)

        def check_someone_starts() -> None:
            since = state["nobody_up_since"]
            if up or since is None or time.monotonic() - since < ACTOR_START_TIMEOUT_S:
                return
            free, total = ray.available_resources(), ray.cluster_resources()
            raise ConfigError(
                f"No distributed actor has been running for {ACTOR_START_TIMEOUT_S:g} s: each asks Ray for "
                f"{d.actor_cpus:g} CPU{'s' if d.actor_cpus != 1 else ''}"
                + (f" and {d.actor_gpus:g} GPU{'s' if d.actor_gpus != 1 else ''}" if d.actor_gpus else "")
                + f" and the Ray cluster has {free.get('CPU', 0.0):g} of {total.get('CPU', 0.0):g} CPUs"
                + (f" and {free.get('GPU', 0.0):g} of {total.get('GPU', 0.0):g} GPUs" if d.actor_gpus else "")
                + " free; stop what holds them, lower distributed.actor_cpus"
                + (" or distributed.actor_gpus" if d.actor_gpus else "") + ", or add nodes to the cluster."
            )

        # a call whose actor died or cannot be reached, or whose result was lost with its node
        lost_calls = (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError)
        self._publish()
        t0, first = time.monotonic(), None
        try:
            self._start_actors()
            for k in range(d.actors):  # each is asked for steps once its process is up
                starting[self.actors[k].info.remote()] = (k, life[k])
            while self.env_step < cfg.total_steps:
                self._interrupts.check()  # a Ctrl-C or SIGTERM held during the last insert's count or update
                self._check_finite()
                check_someone_starts()
                now = time.monotonic()
                for k in [k for k, t in retry.items() if t <= now]:
                    del retry[k]
                    starting[self.actors[k].info.remote()] = (k, life[k])
                for k in [held.pop(0) for _ in range(len(held))]:
                    fill(k)
                may = self._may_update(actors_held=bool(held))
                if not inflight and not starting and not may:
                    if retry:
                        time.sleep(0.1)
                        continue
                    raise RuntimeError("Distributed R2D2: every actor waits for the learner and the learner for data.")
                calls = list(inflight) + list(starting)
                ready = []
                if calls:
                    ready, _ = ray.wait(calls, num_returns=1, timeout=0 if may else (0.1 if retry else 1.0))
                    if ready:
                        ready, _ = ray.wait(calls, num_returns=len(calls), timeout=0)
                for ref in ready:
                    if ref in starting:
                        k, call_life = starting.pop(ref)
                        try:
                            info = ray.get(ref)
                        except lost_calls as exc:
                            failed(k, call_life, exc)
                            continue
                        if call_life == life[k]:
                            answered(k, info["pid"])
                        continue
                    if ref not in inflight:  # dropped meanwhile: its actor's process was gone
                        continue
                    k, _asked, call_life = inflight.pop(ref)
                    try:
                        chunk = ray.get(ref)
                    except lost_calls as exc:
                        failed(k, call_life, exc)
                        continue
                    if first is None:
                        first = (time.monotonic(), self.env_step)
                    self._interrupts.check()  # one held during the previous chunk's count: before this one counts
                    self._insert(chunk, progress, state)
                    if self.env_step >= cfg.total_steps:
                        break
                    answered(k, chunk["pid"])
                    submit(k)
                if may and self.env_step < cfg.total_steps:
                    with self._interrupts.deferring():  # an update and its count: the saved state matches them
                        state["metrics"] = self._learn_one()
        finally:
            end = time.monotonic()
            self.loop_stats = {
                "wall_s": end - t0,
                "steady_wall_s": end - first[0] if first else 0.0,
                "steady_env_steps": self.env_step - first[1] if first else 0,
                "env_steps": self.env_step,
                "updates": self.learner_calls,
                "updating_wall_s": end - self._first_update_t if self._first_update_t is not None else 0.0,
                "replay_ratio": self.replay_ratio(),
                "chunk_bytes": sum(c[7] for c in self.chunks),  # what the actors sent (tensors), all chunks
            }
            for actor in self.actors:
                ray.kill(actor, no_restart=True)
        return state["last_eval"]

    def _row_due_here(self) -> bool:
        """The chunk just counted crossed a ``train.log_every`` multiple or ended the run (``_insert`` records
        it): a chunk's env_step is rarely a multiple of ``log_every``, which a single run's step is at its rows.
        :meth:`Trainer._write_missed_row` then writes a row a callback's error, Ctrl-C or SIGTERM cut off."""
        return self._row_due is not None and self._row_due == self.env_step

    def _learn_one(self) -> TensorDict:
        if self._first_update_t is None:
            self._first_update_t = time.monotonic()
        metrics = self._learn()
        if self.learner_calls % self.config.distributed.param_sync_updates == 0:
            self._publish()
        metrics["param_version"] = torch.tensor(float(self.version))
        metrics["replay_ratio"] = torch.tensor(self.replay_ratio())
        return metrics

    def _insert(self, chunk: dict[str, Any], progress: Progress, state: dict[str, Any]) -> None:
        """Store one chunk's windows with their priorities, count its env steps and episodes, then log,
        evaluate and checkpoint at the thresholds it crossed (as the single-run loop does per env step)."""
        cfg = self.config.train
        replay = self.learner.replay
        # The chunk's windows and its counts go in together: a Ctrl-C or SIGTERM in between waits for the
        # loop's next check (as a single run's count), else the run saved windows its env_step did not count.
        with self._interrupts.deferring():
            if "frames" in chunk:  # a pixel actor's chunk: its new frames once, windows with its frame numbers
                rows = replay.add_chunk((chunk["actor"], chunk["pid"]), chunk["frames_from"], chunk["frames"],
                                        chunk["windows"], chunk["priorities"])
            else:
                rows = replay.add_windows(chunk["windows"], chunk["priorities"])
            prev = self.env_step
            self.env_step += int(chunk["env_steps"])
            # The ratio's start is set here, not first when the loop asks whether to update: chunks that arrive
            # together would otherwise all be inserted (and their actors asked again) before min_replay_ratio
            # could hold anyone, and a short run could end with every step collected and no update.
            self._replay_ready()
            self.collector.episodes += len(chunk["returns"])
            self._recent_returns.extend(chunk["returns"])
            self._loop_state.add(int(chunk["env_steps"]), chunk.get("began"), chunk.get("ended"), chunk["actor"])
            pid = self._pids.get(chunk["actor"])
            if pid is not None and pid != chunk["pid"]:
                self.actor_restarts += 1
            self._pids[chunk["actor"]] = chunk["pid"]
            self.chunks.append((chunk["actor"], chunk["version"], int(chunk["env_steps"]), int(rows.numel()),
                                chunk["pid"], float(chunk["cpu_s"]), float(chunk["wall_s"]), chunk_bytes(chunk)))
            last = prev < cfg.total_steps <= self.env_step  # the chunk that ends the run logs too
            log_due = self.env_step // cfg.log_every > prev // cfg.log_every or last
            # a chunk's env_step is rarely a multiple of train.log_every: _row_due_here asks this instead
            self._row_due = self.env_step if log_due else None
        reason = self._ask("on_step")
        if log_due or reason:
            self._check_finite()
            self._loop_state.measure()  # before an evaluation: it is not env stepping
        # At each eval_every crossed and at the chunk that ends the run (its final evaluation), before the
        # chunk's metrics row, so that an on_eval stop is recorded in that row: one row per step, as the
        # single-run loop (Trainer._count_rows). Evaluated after the row, a stop there wrote a second row.
        if not reason and (self.env_step // cfg.eval_every > prev // cfg.eval_every or last):
            self._check_finite()
            try:
                with self._loop_state.off_the_clock():  # and the steps the actors collect meanwhile (RateWindow)
                    state["last_eval"] = self.evaluate()
            except _StopRun as stop:
                reason = str(stop)
                if not log_due:
                    self._loop_state.measure(restart=False)
            except BaseException:
                if log_due:  # a crash or Ctrl-C in the evaluation: this chunk's row is still written
                    self._log(state["metrics"], self._loop_state.steps_per_s, self._recent_returns)
                raise
        if log_due or reason:
            self._log(state["metrics"], self._loop_state.steps_per_s, self._recent_returns, reason or "")
            self._recent_returns = self._recent_returns[-10:]
        if reason:
            raise _StopRun(reason)
        if self.env_step // cfg.checkpoint_every > prev // cfg.checkpoint_every:
            self._check_finite()
            with self._loop_state.off_the_clock():
                self._save_or_continue()
        progress.update(self.env_step, state["last_eval"])


# ----------------------------------------------------------------------------- entry points


LOCAL = "local"
"""``rlfunc resume --address local`` (``address="local"``): the resumed learner starts its own Ray on this
machine (``distributed.address`` null), whatever address the run was trained with."""


def _ray_running_here() -> bool:
    """Whether this process already has Ray initialized (a sweep's Ray task, a notebook that called
    ``ray.init``): :func:`rlfunc.scale.sweep.connect` then joins nothing, whatever the address says.
    Ray is not imported to ask."""
    ray = sys.modules.get("ray")
    try:
        return ray is not None and bool(ray.is_initialized())
    except Exception:  # a partly imported or stubbed ray
        return False


def resume_address(stored: str | None, given: str | None) -> str | None:
    """The ``distributed.address`` a resume runs with: ``stored`` is the checkpoint's (a file that may be
    someone else's), ``given`` the user's ``rlfunc resume --address`` (``address=`` of :func:`rlfunc.resume`).

    A resume never connects, on its own, to an address read from the checkpoint: joining a Ray cluster
    sends it this machine's Ray token (``RAY_AUTH_TOKEN``, ``~/.ray/auth_token``) and unpickles what it
    sends back. So with no ``given`` address a stored non-null one is refused in one sentence naming it
    and the flag. ``auto`` is refused the same way as ``host:port`` and ``ray://host:port``: Ray resolves
    it from ``RAY_ADDRESS`` or the address file of the newest ``ray start``, which on a node that joined a
    cluster names that cluster's head on another host. Only a stored null (a Ray of the resume's own on
    this machine, loopback) needs no flag, and so does a process where Ray is already initialized (a
    sweep's task resuming its own run inside the cluster), where no address is joined at all.

    ``given``: ``"local"`` (:data:`LOCAL`) starts Ray on this machine (``distributed.address`` null);
    anything else (``auto``, ``host:port``, ``ray://host:port``) is joined as ``rlfunc train`` joins its
    ``distributed.address``, after the same reachability check."""
    if given is not None:
        if not isinstance(given, str) or not given.strip():
            raise ConfigError(
                f"--address must be local, auto, host:port or ray://host:port, got {given!r}; pass e.g. --address local."
            )
        given = given.strip()
        return None if given == LOCAL else given
    if stored is None or _ray_running_here():
        return stored
    raise ConfigError(
        f"this run was trained on the Ray cluster at {stored!r} (distributed.address in its checkpoint), which a "
        f"resume does not join on its own; to resume it there pass --address {stored!r} (address= in rlfunc.resume), "
        f"or --address {LOCAL} to run Ray on this machine."
    )


def connect_for(config: RunConfig):
    """Ray for a distributed run (:func:`rlfunc.scale.sweep.connect`: a local loopback Ray without
    ``distributed.address``, else that cluster); returns ``(ray, started_here)``. One sentence, before
    training, when Ray is missing, the address cannot be reached, or the actors ask for more CPUs or
    GPUs than the cluster has in all; a line on stderr when fewer are free now (other jobs hold them:
    the actors Ray cannot place yet start later, and the run goes on with those that run)."""
    from rlfunc.scale.sweep import _prepare_join, connect

    d = config.distributed  # amounts Ray refuses were refused when the config was built (DistributedSection)
    _prepare_join(d.address)
    if importlib.util.find_spec("ray") is None:
        raise ConfigError(RAY_MISSING)
    if d.address is None:
        # Ray starts its worker processes at nice +15 by default (raylet worker_niceness), under the driver
        # that runs the learner; the actors do the acting, so a local Ray starts them at the driver's priority.
        os.environ.setdefault("RAY_worker_niceness", "0")
    try:
        ray, started = connect(d.address)
    except ConfigError as exc:
        raise ConfigError(str(exc).replace("--address", "distributed.address")) from None
    resources = ray.cluster_resources()
    free = None if _in_placement_group(ray) else ray.available_resources()  # a sweep's group holds its actors' share
    for what, per, have in (("CPU", d.actor_cpus, resources.get("CPU", 0.0)), ("GPU", d.actor_gpus, resources.get("GPU", 0.0))):
        need = d.actors * per
        if need > have + 1e-9:
            if started:
                ray.shutdown()
            key = f"distributed.actor_{what.lower()}s"
            raise ConfigError(
                f"distributed.actors={d.actors} x {key}={per:g} ask for {need:g} {what}s but the Ray cluster has "
                f"{have:g}; lower distributed.actors or {key}, or add nodes to the cluster."
            )
        if free is not None and need > free.get(what, 0.0) + 1e-9:
            print(f"rlfunc: the actors ask for {need:g} {what}s and the Ray cluster has {free.get(what, 0.0):g} of "
                  f"{have:g} free now (other jobs hold the rest); actors start as Ray can place them and the run "
                  "goes on with those that run", file=sys.stderr)
    return ray, started


def _in_placement_group(ray) -> bool:
    """Whether this process runs in a Ray placement group (a sweep task of a distributed config)."""
    try:
        return ray.get_runtime_context().get_placement_group_id() is not None
    except Exception:  # the driver of a job, or an older Ray
        return False


def train(run_config: RunConfig, run_dir: str | Path | None = None, callbacks: list | None = None) -> TrainResult:
    """Train ``run_config`` (with a ``distributed`` section) on Ray actors into ``run_dir`` (see the module docstring)."""
    run_dir = Path(run_dir) if run_dir is not None else new_run_dir(run_config)
    check_train_device(run_config.train.device)  # as the run directory: refused before Ray starts
    created = prepare_run_dir(run_dir)
    try:
        ray, started = connect_for(run_config)
    except BaseException:
        discard_new_run_dir(run_dir, created)
        raise
    try:
        try:
            trainer = DistributedTrainer(run_config, run_dir, callbacks, ray)
        except BaseException:
            discard_new_run_dir(run_dir, created)  # as a single run's: no empty directory, no lock held
            raise
        return trainer.run()
    finally:
        if started:
            ray.shutdown()


def resume(run_config: RunConfig, run_dir: Path, checkpoint: Path, loaded: list, meta: dict,
           callbacks: list | None = None) -> TrainResult:
    """Continue a distributed run from its verified newest checkpoint with fresh actors (module docstring).
    ``loaded``: a one-element list holding the checkpoint's tensors, emptied once the learner has copied
    them, so that the loaded replay is not kept in memory beside the learner's for the whole run."""
    ray, started = connect_for(run_config)
    try:
        trainer = DistributedTrainer(run_config, run_dir, callbacks, ray)
        trainer.restore(checkpoint, loaded.pop(), meta)
        if trainer.env_step < run_config.train.total_steps:
            print(
                f"rlfunc: resuming from {Path(checkpoint).name} with {run_config.distributed.actors} fresh actors "
                "(new episodes; windows the old actors had not sent are not in the checkpoint)",
                file=sys.stderr,
            )
        return trainer.run(resumed=True)
    finally:
        if started:
            ray.shutdown()
