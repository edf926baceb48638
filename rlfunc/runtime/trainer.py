"""The training loop: the only place that threads state through env, replay and update.

``train(config)`` -> a run directory::

    runs/<algo>-<env>-s<seed>-<time>/
        config.yaml       the resolved config (every default written out)
        metrics.csv       training metrics every ``train.log_every`` env steps and at the last step
        eval.csv          deterministic evaluation every ``train.eval_every`` steps
                          (``step`` counts agent steps; with an action-repeated env
                          both files also log ``frames`` = steps x action repeat)
        checkpoints/      step_*/ (atomic, no pickle) and ``latest``

``resume(run_dir)`` continues from the latest checkpoint with the same state,
optimizer, replay, generators and counters. A non-finite loss stops training
with :class:`NonFiniteLossError` and never overwrites the last good checkpoint;
any other crash (or Ctrl-C, or SIGTERM) first saves the current state if it is finite, and says
on stderr where it was saved and how to continue. Callbacks' ``on_end`` is called however a run ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import signal
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import yaml
from tensordict import TensorDict

from rlfunc.envs import build_wrappers, env_spaces, make_env, make_vector_env
from rlfunc.runtime.checkpoint import (
    MAX_STEP,
    CheckpointError,
    CheckpointWriteError,
    check_structure,
    checkpoint_name,
    clean_leftovers,
    is_count,
    load_newest_good,
    lock_run_dir,
    locked_run_dir,
    prune_best,
    prune_checkpoints,
    recorded_best_return,
    save_checkpoint,
    unlock_run_dir,
)
from rlfunc.replay.offline import DatasetError
from rlfunc.runtime.collector import Collector
from rlfunc.runtime.config import (
    ConfigError,
    RunConfig,
    apply_overrides,
    build_config,
    check_train_packages,
    load_config,
    to_dict,
)
from rlfunc.runtime.callbacks import check as check_callbacks
from rlfunc.runtime.callbacks import from_config as stopping_rules
from rlfunc.runtime.evaluate import run_episodes
from rlfunc.runtime.interrupts import InterruptGuard
from rlfunc.runtime.perf import set_matmul_precision, set_threads, tune_allocator
from rlfunc.runtime.registry import get_algo
from rlfunc.runtime.resume_checks import (consent_to_loaded, refuse_edited_config_copy, refuse_part_of_a_larger_run,
                                          refuse_relative_data_elsewhere, resumed_total_steps)
from rlfunc.runtime.run_dir import (WANDB_RUN_ID_FILE, discard_new_run_dir, new_run_dir, prepare_run_dir,
                                    refuse_nothing_saved, started_run, write_atomic)
from rlfunc.runtime.run_log import CsvLog, Progress, TensorBoardLog, WandbLog

__all__ = ["train", "resume", "TrainResult", "NonFiniteLossError", "RunInterrupted", "Trainer"]

"""What a run directory holds; a directory with any of them already holds a run."""


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN/inf loss; the last good checkpoint is kept."""


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped training after the state was saved; ``str()`` says where and how to continue."""


@dataclasses.dataclass
class TrainResult:
    run_dir: Path
    env_steps: int
    final_return: float | None
    evals: list[tuple[int, float]]
    wall_s: float  # training wall time of the whole run, including the parts before a resume
    stop_reason: str = "total_steps"  # why the run ended: total_steps, or a stopping rule's / callback's reason
    gradient_steps: int = 0  # gradient steps of the whole run (REDQ/RLPD: G critic steps per learner call)


class _StopRun(Exception):
    """Raised inside the loop when a stopping rule or callback ends the run."""


class _LoopState:
    """What :meth:`Trainer._loop` keeps between env steps (and hands to :meth:`Trainer._count_rows`):
    the newest evaluation's mean return and learner metrics, and the env-step rate's window."""

    def __init__(self, last_eval: float | None, learn_first: bool) -> None:
        self.last_eval = last_eval
        self.learn_first = learn_first  # the learner updates before each env step (DrQ-v2), not at each counted row
        self.metrics = None
        self.window_t, self.window_steps = time.monotonic(), 0
        self.steps_per_s = 0.0

    def measure(self, restart: bool = True) -> None:
        """``steps_per_s`` of the env steps since the window started; ``restart``: a new window from now."""
        now = time.monotonic()
        self.steps_per_s = self.window_steps / max(now - self.window_t, 1e-9)
        if restart:
            self.window_t, self.window_steps = now, 0

    def rate_so_far(self) -> float:
        """The rate of the window so far, which goes on (a stop row at a step that is not a log step: its
        partial window's); the last row's rate if no env step was counted since (a stop row at that row's step)."""
        if self.window_steps:
            self.measure(restart=False)
        return self.steps_per_s

    @contextlib.contextmanager
    def off_the_clock(self):
        """Time spent inside (an evaluation, a checkpoint or ``best/`` write: it is not env stepping) is left
        out of the window, whichever row's window it falls in; else the row after each evaluation or
        checkpoint showed a lower rate (several times lower after an evaluation)."""
        start = time.monotonic()
        try:
            yield
        finally:
            self.window_t += time.monotonic() - start


def save_or_continue(save, train_cfg) -> None:
    """``save()``; a failed write (:class:`CheckpointWriteError`) stops the run unless
    ``train.on_checkpoint_error`` is ``continue``, where it is one warning and training goes on
    (single runs and populations)."""
    try:
        save()
    except CheckpointWriteError as exc:
        if train_cfg.on_checkpoint_error != "continue":
            raise
        print(f"rlfunc: warning: {exc} Training continues without this checkpoint.", file=sys.stderr)


def _make_envs(config: RunConfig, train_env: bool = True):
    """``(training env, evaluation env, the env's native action space)``; ``train_env=False``: no
    training env (``None``: a population steps its members' copies in one vector env)."""
    wrappers = build_wrappers(config.env.wrappers)
    if not train_env:
        env = None
    elif config.env.num_envs == 1:
        env = make_env(config.env.id, kwargs=config.env.kwargs, wrappers=wrappers)
    else:
        env = make_vector_env(config.env.id, config.env.num_envs, kwargs=config.env.kwargs, wrappers=wrappers)
    eval_env = make_env(config.env.id, kwargs=config.env.kwargs, wrappers=wrappers)
    native = make_env(config.env.id, kwargs=config.env.kwargs, wrappers=wrappers, rescale_actions=False)
    native_space = native.action_space
    try:
        _first_step(native, config.env)
    except BaseException:  # the env refuses its own settings: the copies made before it are closed too
        close_quietly(env, eval_env)
        raise
    finally:
        native.close()
    return env, eval_env, native_space


def close_quietly(*envs) -> None:
    """``env.close()`` for each env given (``None`` skipped); an env whose close fails must not hide the
    run's result or its own error, so the failure is one line on stderr."""
    for env in envs:
        if env is None:
            continue
        try:
            env.close()
        except Exception as exc:  # noqa: BLE001 -- a third-party env's close: any error, reported
            print(f"rlfunc: closing the env failed ({type(exc).__name__}: {exc}); the run is unaffected.", file=sys.stderr)


def _first_step(env: gym.Env, section) -> None:
    """Reset ``env`` (a throwaway copy) and take one step with a fixed action, so that an env which
    fails on its own settings (``env.kwargs: {g: abc}`` on Pendulum: a TypeError inside its physics)
    is one :class:`ConfigError` sentence before training, not a traceback at the first step."""
    space = env.action_space
    try:
        env.reset(seed=0)
        if isinstance(space, gym.spaces.Box) and np.isfinite(space.low).all() and np.isfinite(space.high).all():
            action = ((space.low.astype(np.float64) + space.high) / 2).astype(space.dtype)
        elif isinstance(space, gym.spaces.Discrete):
            action = space.start
        else:
            return
        env.step(action)
    except Exception as exc:  # noqa: BLE001 -- the env's own code refused its settings
        what = f"env.kwargs {section.kwargs}" if section.kwargs else "its settings"
        raise ConfigError(
            f"Environment {section.id!r} failed at its first step with {what} ({type(exc).__name__}: "
            f"{' '.join(str(exc).split())}); check env.kwargs and env.wrappers."
        ) from None


def check_train_device(device: str) -> None:
    """``train.device`` is usable on this machine, else one :class:`ConfigError` sentence (before any env
    is made): CUDA or MPS asked for where there is none, a CUDA index past the machine's devices."""
    from rlfunc.runtime.api import check_device

    try:
        check_device(device)
    except ValueError as exc:
        raise ConfigError(f"train.device={device}: {exc}") from None


def check_env_and_agent(config: RunConfig, spaces: dict | None = None) -> None:
    """What a :class:`Trainer` checks as it makes its envs and learner, without making them: ``train.device``
    (:func:`check_train_device`), the env and its settings (one copy, reset and stepped once:
    :func:`_first_step`) and the algorithm's own space and size checks (its ``init`` on the ``meta``
    device: :func:`~rlfunc.runtime.memory.state_bytes`, nothing allocated). A sweep on this machine calls it
    for each distinct run before Ray starts, so that an env or space a run cannot use is one sentence
    then, not a failed task after the sweep started (:func:`rlfunc.scale.sweep.sweep`). ``spaces``: a dict
    the caller keeps across calls, so that runs differing only in agent settings make the env once
    (a pixel env takes seconds to make)."""
    import json

    from rlfunc.runtime.memory import state_bytes

    check_train_device(config.train.device)
    key = json.dumps(dataclasses.asdict(config.env), sort_keys=True, default=repr)
    if spaces is None or key not in spaces:
        env = make_env(config.env.id, kwargs=config.env.kwargs, wrappers=build_wrappers(config.env.wrappers))
        try:
            _first_step(env, config.env)
            found = env_spaces(env)
        finally:
            close_quietly(env)
        if spaces is not None:
            spaces[key] = found
    obs_space, act_space = spaces[key] if spaces is not None else found
    entry = get_algo(config.algo)
    for_env = getattr(entry.algo, "config_for_env", None)
    agent = config.agent if for_env is None else for_env(config.agent, config.env.id)
    try:
        state_bytes(entry.algo, agent, obs_space, act_space)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _frames_per_step(env) -> int:
    """Env frames per agent step: the ``action_repeat`` of a pixel env or wrapper (DMC), times the
    ``frame_skip`` of gymnasium's ``AtariPreprocessing`` and the ALE emulator's own fixed ``frameskip``
    (Atari's frames are emulator frames: 4 per agent step in the papers' setting), else 1."""
    try:
        sub = env.envs[0] if isinstance(env, gym.vector.VectorEnv) else env
    except (AttributeError, TypeError, IndexError):
        return 1
    frames = 1
    for name in ("action_repeat", "frame_skip"):
        try:
            frames *= max(1, int(sub.get_wrapper_attr(name)))
        except (AttributeError, TypeError, ValueError):
            pass
    ale_skip = getattr(getattr(sub, "unwrapped", None), "_frameskip", None)  # ale_py's AtariEnv; a range is stochastic
    if isinstance(ale_skip, int) and not isinstance(ale_skip, bool):
        frames *= max(1, ale_skip)
    return frames


class Trainer:
    """Holds one run's imperative state; :meth:`run` trains to ``total_steps`` or until a stopping rule.

    Counters, named so they cannot be misread: ``env_step`` (agent steps
    taken in the env; ``frames`` in the logs counts action-repeated env
    frames), ``learner_calls`` (calls of the learner's update) and
    ``gradient_steps`` (optimizer steps of the critic/Q-network: a REDQ/RLPD
    call does ``agent.updates_per_step`` of them, every other algorithm one).
    """

    def __init__(self, config: RunConfig, run_dir: Path, callbacks: list | None = None) -> None:
        try:
            self._build(config, run_dir, callbacks)
        except BaseException:  # refused (memory, settings) after the envs were made: none is left open
            self.close_envs()
            raise

    def _build(self, config: RunConfig, run_dir: Path, callbacks: list | None) -> None:
        self.config = config
        self.run_dir = Path(run_dir)
        self.callbacks = check_callbacks(callbacks) + stopping_rules(config.train)
        tune_allocator()
        if config.train.threads:
            set_threads(config.train.threads)
        set_matmul_precision(config.train.matmul_precision)
        check_train_device(config.train.device)
        self.entry = get_algo(config.algo)
        self.env, self.eval_env, native_space = _make_envs(config)
        obs_space, act_space = env_spaces(self.env)
        self.learner = self.entry.make_learner(config, obs_space, act_space)
        self.learner.native_action_space = native_space
        self.frames_per_step = _frames_per_step(self.env)
        self.gradient_steps_per_call = int(getattr(config.agent, "updates_per_step", 1))
        self.collector = Collector(self.env, seed=config.train.seed)
        self.env_step = 0
        self.learner_calls = 0
        # Rows of the newest vector env step stored in the replay and not counted in env_step yet (a
        # checkpoint inside one vector step records them: a resume counts them before stepping the envs).
        self._pending_rows = 0
        self._recent_returns: list[float] = []  # returns of the episodes ended since the last log, and the 10 before
        self._interrupts = InterruptGuard()  # Ctrl-C/SIGTERM wait for the counted env step's updates
        self.evals: list[tuple[int, float]] = []
        self.ckpt_dir = self.run_dir / "checkpoints"
        self.best_dir = self.run_dir / "best"
        self._best_return = -math.inf
        self._last_good_ckpt: Path | None = None
        self._unchecked: list[tuple[int, list, torch.Tensor]] = []  # updates whose finiteness is not read yet
        self._prior_wall = 0.0  # seconds of training behind the restored checkpoint (0 for a new run)
        self._saved: tuple[int, int, int] | None = None  # _saved_key() of the last checkpoint written
        self._checkpoint_total: int | None = None  # a restored checkpoint's train.total_steps (_keep_checkpoint_total)
        self._learning_from = 0  # after a resume without a stored replay: refill it before learning again
        self._learning = False  # learned in this process yet (the progress line's phase)
        self._progress: Progress | None = None
        self._last_metrics = None  # the newest learner metrics (for the row that records a stop)
        self._logged_step: int | None = None  # env step of the newest metrics row this process wrote
        self._loop_state = None  # the loop's _LoopState (its steps_per_s window), kept for the stop row
        self._start_step = 0  # env step this process started training from
        self._t0 = time.monotonic()

    @property
    def gradient_steps(self) -> int:
        return self.learner_calls * self.gradient_steps_per_call

    @property
    def wall_s(self) -> float:
        return self._wall_s()

    # -- checkpoints ----------------------------------------------------------
    def _policy_meta(self) -> dict[str, Any]:
        return {"algo": self.config.algo, "config": to_dict(self.config), **self.learner.export_meta()}

    def save(self) -> Path:
        if not self.learner.params_finite():
            raise NonFiniteLossError(
                f"Parameters became non-finite by env step {self.env_step}; not saving them. "
                f"The last good checkpoint is {self._last_good_ckpt}."
            )
        meta = {
            **self._policy_meta(),
            "env_step": self.env_step,
            "updates": self.learner_calls,  # learner calls (the meta key of format 1)
            "gradient_steps": self.gradient_steps,
            "episodes": self.collector.episodes,
            "env_rng": self.collector.rng_state(),
            "evals": self.evals,
            "wall_s": self._wall_s(),
            "replay_saved": self.config.train.checkpoint_replay,
            "pending_env_steps": self._pending_rows,  # stored rows of this vector step not counted yet
            "recent_returns": self._recent_returns[-10:],  # metrics.csv's episode_return continues from them
            **self._extra_meta(),
        }
        tensors = self.learner.state_tensors()
        if not self.config.train.checkpoint_replay:
            tensors = tensors.exclude("replay")
        path = save_checkpoint(self.ckpt_dir, checkpoint_name(self.env_step), tensors, meta)
        self._last_good_ckpt = path
        self._saved = self._saved_key()
        prune_checkpoints(self.ckpt_dir, keep=self.config.train.keep_checkpoints)
        self._call("on_checkpoint", path)
        return path

    def _saved_key(self) -> tuple[int, int, int]:
        """What tells whether the state changed since the last checkpoint: env step, evaluations, learner calls."""
        return (self.env_step, len(self.evals), self.learner_calls)

    def _extra_meta(self) -> dict[str, Any]:
        """What a subclass keeps in the checkpoint's meta beside the counters (read back in its ``restore``)."""
        return {}

    def _save_or_continue(self) -> None:
        """A periodic checkpoint (:func:`save_or_continue`)."""
        save_or_continue(self.save, self.config.train)

    def _save_best(self, mean: float) -> None:
        """``train.keep_best``: the policy of the best evaluation so far, weights only, in ``best/``
        (a better one already there, saved after the checkpoint a resume started from, is never
        replaced: :meth:`restore` starts the best return from it)."""
        if not self.config.train.keep_best or not mean > self._best_return:
            return
        tensors = TensorDict({"state": {"params": self.learner.state["params"]}}, batch_size=[])
        meta = {**self._policy_meta(), "env_step": self.env_step, "eval_return": mean, "weights_only": True}
        try:
            path = save_checkpoint(self.best_dir, checkpoint_name(self.env_step), tensors, meta)
        except CheckpointWriteError as exc:  # the best return stays the saved one's: a later better policy is kept
            print(f"rlfunc: warning: {exc} The best policy so far is not saved.", file=sys.stderr)
            return
        self._best_return = mean
        prune_best(self.best_dir, path, mean)

    def restore(self, checkpoint: Path, tensors, meta: dict[str, Any]) -> None:
        """Continue from a verified checkpoint (see :func:`rlfunc.runtime.checkpoint.load_newest_good`).
        A checkpoint that does not fit is one :class:`CheckpointError`; the trainer closes its envs then
        (it is not run after a failed restore)."""
        try:
            self._restore(checkpoint, tensors, meta)
        except BaseException:
            self.close_envs()
            raise

    def _restore(self, checkpoint: Path, tensors, meta: dict[str, Any]) -> None:
        if meta.get("weights_only"):
            raise CheckpointError(
                f"{str(checkpoint)!r} holds a policy's weights only (an export or the best policy), not a training state; "
                "resume the run directory that `rlfunc train` created."
            )
        if meta.get("algo") != self.config.algo:
            raise CheckpointError(
                f"Checkpoint {str(checkpoint)!r} was trained with algo {meta.get('algo')!r}, not {self.config.algo!r}; resume it with its own config."
            )
        expected = self.learner.state_tensors()
        for root in ("state", "generator"):
            check_structure(checkpoint, tensors, expected, root)
        without_replay = "replay" not in tensors.keys()
        if without_replay:
            tensors = tensors.clone(recurse=False)
            tensors["replay"] = expected["replay"]
        what = restored_meta_problem(meta)
        if what is not None:
            raise CheckpointError(
                f"Checkpoint {str(checkpoint)!r} has {what} in meta.json, not what rlfunc writes; use an earlier checkpoint."
            )
        try:
            self.learner.load_state_tensors(tensors)
            env_step, calls = int(meta["env_step"]), int(meta["updates"])
            episodes = int(meta.get("episodes", 0))
            evals = [(int(s), float(r)) for s, r in meta.get("evals", [])]
            prior_wall = float(meta.get("wall_s", 0.0))  # older checkpoints lack it: counted from 0
            pending = int(meta.get("pending_env_steps", 0))  # older checkpoints lack it: none counted
            recent = [float(r) for r in meta.get("recent_returns", [])]
            self.collector.restore(meta["env_rng"])
        except (KeyError, TypeError, ValueError, IndexError, RuntimeError, OverflowError) as exc:
            if isinstance(exc, (CheckpointError, DatasetError)):  # already one sentence about the file
                raise
            raise CheckpointError(
                f"Checkpoint {str(checkpoint)!r} does not fit this run ({type(exc).__name__}: {exc}); resume it with the rlfunc version and config that wrote it."
            ) from None
        if env_step < 0 or calls < 0:
            raise CheckpointError(f"Checkpoint {str(checkpoint)!r} has negative counters; use an earlier checkpoint.")
        if not 0 <= pending <= self.collector.num_envs:
            raise CheckpointError(
                f"Checkpoint {str(checkpoint)!r} has pending_env_steps={pending}: one vector step of "
                f"env.num_envs={self.collector.num_envs} copies stores no more rows; use an earlier checkpoint."
            )
        self.env_step, self.learner_calls, self.collector.episodes = env_step, calls, episodes
        self._pending_rows, self._recent_returns = pending, recent
        self.evals, self._prior_wall = evals, prior_wall
        self._last_good_ckpt = Path(checkpoint)
        self._saved = self._saved_key()  # the checkpoint holds this state: no need to write it again
        stored_train = meta["config"].get("train") if isinstance(meta.get("config"), dict) else None
        self._checkpoint_total = stored_train.get("total_steps") if isinstance(stored_train, dict) else None
        # best/ may hold a better policy than these evaluations show: one saved after this checkpoint
        self._best_return = max([r for _, r in evals] + [recorded_best_return(self.best_dir)])
        if without_replay:
            # train.learning_starts in env (agent) steps; a learner counting windows waits on its replay itself
            steps = getattr(self.learner, "learning_starts_unit", "env steps") in ("env steps", "agent steps")
            warmup = self.config.train.learning_starts if steps else 0
            self._learning_from = env_step + pending + warmup  # the pending rows were not saved either
            print(
                f"rlfunc: {checkpoint.name} was saved without its replay (train.checkpoint_replay=false): "
                f"resuming with an empty replay, refilled by the policy for {warmup} steps before learning continues.",
                file=sys.stderr,
            )

    # -- evaluation -------------------------------------------------------------
    def evaluate(self, stopped: str | None = None) -> float:
        """Evaluate the current policy, record it (eval.csv, ``best/``) and call the ``on_eval`` callbacks;
        a callback's stop reason raises ``_StopRun``. ``stopped``: the run already stopped for this reason
        (its final evaluation): the row records it and a callback's reason cannot stop it again."""
        returns = run_episodes(
            self.learner.policy(), self.eval_env, self.config.train.eval_episodes, seed=self.config.train.seed + 10_000
        )
        mean = float(np.mean(returns))
        self.evals.append((self.env_step, mean))
        self._last_eval_row = eval_row(self.env_step, self._frames(), self._wall_s(), returns)
        reason = None
        try:  # the row is written even if a callback (or a Ctrl-C) breaks off here: evals has it
            self._save_best(mean)
            reason = self._ask("on_eval", self.env_step, list(map(float, returns)))
        finally:
            if stopped or reason:
                self._last_eval_row["stop_reason"] = stopped or reason
            self._eval_log.write(self._last_eval_row)
            self._write_external("eval", self._last_eval_row)
        if reason and not stopped:
            raise _StopRun(reason)
        return mean

    def _missed_evaluation(self) -> bool:
        """Whether an evaluation was due by the restored step but is not recorded: the run was
        interrupted (Ctrl-C, SIGTERM, a crash) before or during it, and saved at that step. The loop
        evaluates when a step crosses a multiple of ``train.eval_every`` (with several envs, or a
        distributed run's chunks, the step need not be that multiple), so the test is that the step
        passed a multiple the newest evaluation had not."""
        step, every = self.env_step, self.config.train.eval_every
        newest = self.evals[-1][0] if self.evals else 0
        return 0 < step < self.config.train.total_steps and step // every > newest // every

    # -- callbacks -------------------------------------------------------------------
    def _call(self, hook: str, *args) -> None:
        for cb in self.callbacks:
            fn = getattr(cb, hook, None)
            if fn is not None:
                fn(self, *args)

    def _ask(self, hook: str, *args) -> str | None:
        """Call ``hook`` on every callback; the first truthy answer is the reason to stop."""
        reason = None
        for cb in self.callbacks:
            fn = getattr(cb, hook, None)
            answer = fn(self, *args) if fn is not None else None
            if answer and reason is None:
                reason = answer if isinstance(answer, str) else f"{type(cb).__name__}.{hook}"
        return reason

    # -- the loop -----------------------------------------------------------------
    def run(self, resumed: bool = False) -> TrainResult:
        """Train in the run directory, holding its lock (:func:`~rlfunc.runtime.checkpoint.lock_run_dir`)
        until the run ends: another process training there is refused with one sentence."""
        with locked_run_dir(self.run_dir):
            try:
                return self._run(resumed)
            finally:
                self.close_envs()

    def close_envs(self) -> None:
        """Close the training and evaluation envs (a finished run's, or a failed one's after its crash save).

        Unclosed, a pixel env keeps its renderer: each DMC cartpole at 84x84 left about 2.4 MB behind
        in a process that trains run after run (a notebook, a sweep's reused Ray worker)."""
        close_quietly(getattr(self, "env", None), getattr(self, "eval_env", None))

    def _run(self, resumed: bool) -> TrainResult:
        cfg = self.config.train
        for directory in (self.ckpt_dir, self.best_dir):
            for line in clean_leftovers(directory):
                print(f"rlfunc: {directory}: {line}", file=sys.stderr)
        truncate = self.env_step if resumed else None
        # TensorBoard and W&B first: a logger that refuses its settings (wandb.init) leaves no run files
        # behind, so the same command runs again once the setting is fixed.
        self._external = self._open_external(truncate)
        self._write_config_copy()
        self._metrics_log = CsvLog(self.run_dir / "metrics.csv", truncate_after=truncate)
        self._eval_log = CsvLog(self.run_dir / "eval.csv", truncate_after=truncate)
        if not resumed:
            self.collector.reset(seed=cfg.seed)
        self._t0 = time.monotonic()
        verb = "resuming" if resumed else "training"
        print(f"rlfunc: {verb} {self.config.algo} on {self.config.env.id} in {self.run_dir}", file=sys.stderr)
        progress = Progress(cfg.progress, cfg.total_steps, self.env_step, f"{self.config.algo} {self.config.env.id}")
        self._progress = progress
        last_eval = self.evals[-1][1] if self.evals else None
        restore_sigterm = self._interrupts.install()
        self._unchecked = []
        try:
            # The stopped run's final evaluation and the last save are guarded too: a Ctrl-C, SIGTERM or
            # crash there still saves the state (review of the run surface: it escaped unsaved).
            stop_reason, last_eval = self._train_to_end(progress, last_eval, resumed)
            if self._saved != self._saved_key():  # not saved at this step already
                self._save_or_continue()
        except (NonFiniteLossError, CheckpointWriteError) as exc:  # nothing is saved: the last good checkpoint stays
            self._close_logs(progress)
            restore_sigterm()
            self._end_after_error(exc, exc)
            raise
        except BaseException as exc:
            self._write_missed_row()  # before the logs close and the state is saved at this step
            self._close_logs(progress)
            restore_sigterm()
            interrupted = self._save_on_the_way_out(exc)  # a Ctrl-C's RunInterrupted, else None
            self._end_after_error(exc, interrupted or exc)
            if interrupted is not None:
                raise interrupted from None
            raise
        restore_sigterm()
        progress.update(self.env_step, last_eval, force=True)
        self._close_logs(progress)
        self._call("on_end", stop_reason)
        return TrainResult(
            run_dir=self.run_dir,
            env_steps=self.env_step,
            final_return=last_eval,
            evals=list(self.evals),
            wall_s=self._wall_s(),
            stop_reason=stop_reason,
            gradient_steps=self.gradient_steps,
        )

    def _train_to_end(self, progress: Progress, last_eval: float | None, resumed: bool) -> tuple[str, float | None]:
        """Train to ``train.total_steps`` or a stopping rule, then the final evaluation;
        returns ``(stop reason, newest evaluation's mean return)``. A resumed run that a rule
        already stopped (``reached``) stops before its first step."""
        self._start_step = self.env_step
        try:
            self._call("on_start")
            reason = self._ask("reached") if resumed else None
            if reason:
                print(f"rlfunc: this run already stopped at env step {self.env_step} ({reason}); nothing to train"
                      f"{self._keep_checkpoint_total()}.", file=sys.stderr)
                raise _StopRun(reason)
            if resumed and self._missed_evaluation():  # as the run would have, before its next step
                last_eval = self.evaluate()
            last_eval = self._loop(progress, last_eval)
            self._interrupts.check()  # one held during the last step's updates (after its final evaluation)
            self._check_finite()
            # The loop evaluates its last step before that step's row; this is the final evaluation of a
            # resume that had no step left to train (saved at total_steps before its final evaluation).
            if not self.evals or self.evals[-1][0] != self.env_step:
                with self._off_the_clock():
                    last_eval = self.evaluate()
        except _StopRun as stop:
            return str(stop), self._finish_stopped(str(stop), last_eval)
        return "total_steps", last_eval

    def _write_config_copy(self) -> None:
        """``config.yaml``, the run's config written out for people: a resume reads the config stored in the
        checkpoint (:func:`~rlfunc.runtime.resume_checks.refuse_edited_config_copy` compares the two)."""
        write_atomic(self.run_dir / "config.yaml", yaml.safe_dump(to_dict(self.config), sort_keys=False))

    def _keep_checkpoint_total(self) -> str:
        """A resume with ``--total-steps`` of a run a stopping rule already stopped trains nothing: its
        ``config.yaml`` gets the checkpoint's ``train.total_steps`` back (it had been written with the new
        one, which the next plain resume then named as an edit it does not read). Returns the words to add
        to the "nothing to train" line, or ``""`` when the total is the checkpoint's."""
        stored, given = self._checkpoint_total, self.config.train.total_steps
        if not isinstance(stored, int) or isinstance(stored, bool) or stored == given:
            return ""
        self.config = dataclasses.replace(self.config, train=dataclasses.replace(self.config.train, total_steps=stored))
        self._write_config_copy()
        return f" (--total-steps {given} does not lift a stopping rule; the run keeps train.total_steps {stored})"

    def _save_on_the_way_out(self, exc: BaseException) -> RunInterrupted | None:
        """Keep the current state if it is sound (nothing trained is lost). A Ctrl-C is returned as the
        :class:`RunInterrupted` to raise, whose message says where it was saved and how to continue; any
        other error (a callback's, SIGTERM's ``SystemExit``) prints the same line on stderr, then goes on
        as it is."""
        try:
            if self._saved != self._saved_key() and self.env_step > 0 and self.learner.params_finite():
                self.save()
        except Exception as save_error:  # never mask the original error, but say what was not saved
            if self._saved != self._saved_key():
                report_unsaved(self.env_step, self._last_good_ckpt, save_error)
            else:  # written; the on_checkpoint callback that failed at the crash save is what raised
                print(f"rlfunc: warning: the state at env step {self.env_step} was saved on the way out, and a "
                      f"callback's on_checkpoint raised there ({type(save_error).__name__}: {save_error}).",
                      file=sys.stderr)
        saved = self._saved == self._saved_key()  # this step's state is in the newest checkpoint
        where = f"saved at step {self.env_step}" if saved else f"last checkpoint {self._last_good_ckpt}"
        if isinstance(exc, KeyboardInterrupt):
            if isinstance(exc, RunInterrupted):
                return None
            return RunInterrupted(f"interrupted; {where}; continue with `rlfunc resume {self.run_dir}`")
        if saved or self._last_good_ckpt is not None:  # else there is nothing to resume
            print(f"rlfunc: the run stopped at env step {self.env_step} ({_what_stopped(exc)}); {where}; "
                  f"continue with `rlfunc resume {self.run_dir}`", file=sys.stderr)
        return None

    def _write_missed_row(self) -> None:
        """The metrics row of a log step that a crash, Ctrl-C or SIGTERM ended between the step's updates and
        its row (in ``on_step`` or the finite check): written before the state is saved at that step, or the
        resumed run, which continues after it, would have no row there. Only where the learner's state is
        finite (it is saved then); a failure here must not hide the run's own error."""
        step = self.env_step
        if (getattr(self, "_metrics_log", None) is None or step == self._start_step or self._logged_step == step
                or not self._row_due_here()):
            return
        try:
            if not self.learner.params_finite():
                return
            rate = self._loop_state.rate_so_far() if self._loop_state is not None else math.nan
            self._log(self._last_metrics, rate, self._recent_returns)
        except Exception:  # noqa: BLE001 -- the run's own error is what is raised; the row is a nicety
            pass

    def _row_due_here(self) -> bool:
        """Whether the current env step has a metrics row (:meth:`_write_missed_row`): this loop counts one env
        step at a time, so a multiple of ``train.log_every``, or the last step."""
        cfg = self.config.train
        return self.env_step % cfg.log_every == 0 or self.env_step == cfg.total_steps

    def _end_after_error(self, exc: BaseException, raised: BaseException) -> None:
        """``on_end(run, reason)`` of every callback for a run that ends with ``exc`` (after its state was
        saved; :func:`end_reason` says what happened). An ``on_end`` that raises must not hide the run's own
        error, ``raised``: its error is one warning line on stderr and a note on ``raised``."""
        reason = end_reason(exc)
        for cb in self.callbacks:
            fn = getattr(cb, "on_end", None)
            if fn is None:
                continue
            try:
                fn(self, reason)
            except BaseException as end_error:  # noqa: BLE001 -- the run's own error is what is raised
                note = (f"rlfunc: warning: callback {type(cb).__name__}.on_end raised {type(end_error).__name__}: "
                        f"{end_error} (the run ended with: {reason})")
                print(note, file=sys.stderr)
                raised.add_note(note)

    def _loop(self, progress: Progress, last_eval: float | None) -> float | None:
        """Collect and learn until ``train.total_steps`` (a stopping rule raises ``_StopRun``); returns the
        newest evaluation's mean return. The distributed R2D2 trainer (:mod:`rlfunc.scale.distributed`)
        replaces it.

        One vector env step stores the rows of every env copy at once; :meth:`_count_rows` then counts
        them one env step at a time. A checkpoint written between two of those counts (a periodic one at
        a step that is not a multiple of ``env.num_envs``, a stop, a crash, ``train.total_steps``) records
        the stored rows not counted yet (``pending_env_steps``): a resumed run counts them first, as the
        uninterrupted run would have, before it steps the envs again."""
        # DrQ-v2's official order is act, update, env step (drqv2 train.py); the others update after storing the step.
        loop = _LoopState(last_eval, bool(getattr(self.learner, "learns_before_env_step", False)))
        self._loop_state = loop
        if self._pending_rows:  # a resume inside a vector step: its stored rows first, without stepping the envs
            self._count_rows(loop)
            progress.update(self.env_step, loop.last_eval)
        while self.env_step < self.config.train.total_steps:
            self._interrupts.check()
            self._check_finite()  # the last step's updates are done by now (explore syncs anyway)
            actions = self.learner.explore(
                self.collector.obs, self.env_step, episode_start=self.collector.episode_start
            )
            # Until the rows are stored (pending), an interrupt waits: a save between DrQ-v2's update and
            # its env step would make the resumed run update again before the same step.
            with self._interrupts.deferring():
                if loop.learn_first and self._ready():
                    loop.metrics = self._learn()  # runs on the device while the env steps on the host
                rows, finished = self.collector.step(actions)
                self.learner.observe(rows)
                self._recent_returns.extend(r for _, r, _ in finished)
                self._pending_rows = rows.batch_size[0]
            self._count_rows(loop)
            progress.update(self.env_step, loop.last_eval)
        return loop.last_eval

    def _count_rows(self, loop: _LoopState) -> None:
        """Count the stored rows of the newest vector step (``self._pending_rows``), one env step each,
        until none is left or ``train.total_steps`` is reached (the rows left stay pending; the final
        checkpoint records them): the learner updates, ``on_step`` rules, logging, evaluation and
        checkpoints at each step, as one env's run does them."""
        cfg = self.config.train
        while self._pending_rows > 0 and self.env_step < cfg.total_steps:
            self._interrupts.check()  # a Ctrl-C or SIGTERM held during the previous count's updates
            with self._interrupts.deferring():  # the count and its updates: the saved state matches env_step
                prev = self.env_step
                self.env_step += 1
                self._pending_rows -= 1
                loop.window_steps += 1
                if not loop.learn_first and self._ready():
                    loop.metrics = self._learn()
            reason = self._ask("on_step")
            # every log_every steps, and at the last step (a run of 1000 steps logging every 300 ends with a row)
            log_due = self.env_step // cfg.log_every > prev // cfg.log_every or self.env_step == cfg.total_steps
            last = self.env_step >= cfg.total_steps
            if log_due or reason:
                self._check_finite()
                loop.measure()  # before an evaluation at this step: it is not env stepping
            # At each multiple of eval_every, and at the last step (the run's final evaluation, also when
            # train.total_steps is no multiple of it): before this step's metrics row, so that an on_eval stop
            # is recorded in it, one row per step (the final evaluation ran after the last row, and a stop
            # there wrote the step's row again, with episode_return nan).
            if not reason and (self.env_step // cfg.eval_every > prev // cfg.eval_every or last):
                self._check_finite()
                try:
                    with loop.off_the_clock():
                        loop.last_eval = self.evaluate()
                except _StopRun as stop:
                    reason = str(stop)
                    if not log_due:
                        loop.measure(restart=False)
                except BaseException:
                    if log_due:  # a crash or Ctrl-C in the evaluation: this step's row is still written
                        self._log(loop.metrics, loop.steps_per_s, self._recent_returns)
                    raise
            if log_due or reason:
                self._log(loop.metrics, loop.steps_per_s, self._recent_returns, reason or "")
                self._recent_returns = self._recent_returns[-10:]
            if reason:
                raise _StopRun(reason)
            # The last step was evaluated above: a periodic save here holds the final evaluation, and the
            # end of the run does not write the same step again.
            if self.env_step // cfg.checkpoint_every > prev // cfg.checkpoint_every:
                self._check_finite()
                with loop.off_the_clock():  # writing a checkpoint is not env stepping either
                    self._save_or_continue()

    def _off_the_clock(self):
        """:meth:`_LoopState.off_the_clock` of the loop's window (nothing outside a loop)."""
        loop = self._loop_state
        return loop.off_the_clock() if loop is not None else contextlib.nullcontext()

    def _finish_stopped(self, reason: str, last_eval: float | None) -> float | None:
        """A stopping rule ended the run: log the reason in metrics.csv if this step has no row yet (the
        loop writes a stop's row itself, with the reason: a step never gets a second row), and evaluate
        the final state unless this step was just evaluated (its row has it then)."""
        self._check_finite()
        if self._logged_step != self.env_step and self.env_step != self._start_step:  # else rows of the run before
            # the rate of the row's partial window (the steps since the last row), as every row's
            rate = self._loop_state.rate_so_far() if self._loop_state is not None else math.nan
            self._log(self._last_metrics, rate, self._recent_returns, reason)
        if self.evals and self.evals[-1][0] == self.env_step:
            return self.evals[-1][1]
        return self.evaluate(stopped=reason)  # on_eval sees the final evaluation too, as a run that ends at total_steps

    def _ready(self) -> bool:
        return self.env_step >= self._learning_from and self.learner.ready(self.env_step)

    def _wall_s(self) -> float:
        """Training wall time of the run so far, counting the parts before each resume
        (``time_s`` in the CSV logs, ``wall_s`` in checkpoints)."""
        return time.monotonic() - self._t0 + self._prior_wall

    def _frames(self) -> dict[str, int]:
        """``{"frames": env frames}`` for action-repeated envs (agent steps stay in ``step``)."""
        return {"frames": self.env_step * self.frames_per_step} if self.frames_per_step != 1 else {}

    def _learn(self):
        """One ``learner.learn()``; its metrics' finiteness is queued on the device, read by :meth:`_check_finite`."""
        if not self._learning:
            self._learning = True
            if self._progress is not None:
                self._progress.learning_started(self.env_step)
        metrics = self.learner.learn()
        self._last_metrics = metrics
        self.learner_calls += 1
        leaves = [(k, v) for k, v in metrics.items(True, True) if v.is_floating_point()]
        keys = [k for k, _ in leaves]
        # Reduced now (a CUDA graph overwrites its metrics at the next replay), read later: no host sync per update.
        values = [v for _, v in leaves]
        if values and all(v.dim() == 0 and v.dtype == values[0].dtype for v in values):
            # Scalar metrics (every learner's): one stack and one isfinite, the same flags as the per-key
            # reductions below in 2 ops instead of 2 per key (~30 us of each MinAtar DQN update's glue).
            finite = torch.isfinite(torch.stack(values))
        else:
            finite = torch.stack([torch.isfinite(v).all() for v in values])
        self._unchecked.append((self.env_step, keys, finite))
        return metrics

    def _check_finite(self) -> None:
        """Raise :class:`NonFiniteLossError` if an update since the last check had a non-finite metric.

        Called once per loop iteration (before acting, which waits for the
        device anyway) and before logging, evaluating and saving, so the
        updates of one env step run without a host sync between them.
        """
        pending, self._unchecked = self._unchecked, []
        failed = first_non_finite(pending)
        if failed is None:
            return
        step, keys, finite = failed
        bad = [k if isinstance(k, str) else ".".join(k) for k, ok in zip(keys, finite.tolist()) if not ok]
        raise NonFiniteLossError(
            f"Training stopped at env step {step}: non-finite {', '.join(bad)}. "
            f"The last good checkpoint is kept at {self._last_good_ckpt}; lower the learning rates or check the rewards."
        )

    def _log(self, metrics, steps_per_s: float, recent_returns: list[float], stop_reason: str = "") -> None:
        row = metrics_row(
            self.env_step, self._frames(), self.learner_calls, self.gradient_steps, self._wall_s(), steps_per_s,
            recent_returns, metrics, stop_reason,
        )
        self._metrics_log.write(row, complete=metrics is not None)
        self._logged_step = self.env_step
        self._write_external("train", row)
        self._call("on_log", row)

    # -- external loggers (TensorBoard, W&B) ------------------------------------------
    def _open_external(self, purge_step: int | None) -> list:
        loggers: list = []
        try:
            if self.config.train.tensorboard:
                loggers.append(TensorBoardLog(self.run_dir, purge_step=None if purge_step is None else purge_step + 1))
            if self.config.train.wandb is not None:
                settings = dict(self.config.train.wandb)
                id_file = self.run_dir / WANDB_RUN_ID_FILE
                resume_id = None
                if purge_step is not None and id_file.is_file() and not id_file.is_symlink():
                    resume_id = id_file.read_text().strip() or None
                log = WandbLog(settings, self.run_dir, to_dict(self.config), resume_id=resume_id,
                               resumed=purge_step is not None)
                loggers.append(log)
                if "id" not in settings and getattr(log.run, "id", None):  # for a resume to continue this W&B run
                    write_atomic(id_file, f"{log.run.id}\n")
        except BaseException:
            # W&B refusing its settings must not leave the TensorBoard writer opened before it (its
            # event file and writer thread) behind: one more of each per failed attempt in the process.
            for logger in loggers:
                try:
                    logger.close()
                except Exception:  # the logger's own error must not hide the one raised here
                    pass
            raise
        return loggers

    def _write_external(self, prefix: str, row: dict[str, Any]) -> None:
        for logger in getattr(self, "_external", []):
            logger.write(prefix, row)

    def _close_logs(self, progress: Progress) -> None:
        progress.close()
        for log in (getattr(self, "_metrics_log", None), getattr(self, "_eval_log", None)):
            if log is not None:
                log.close()
        for logger in getattr(self, "_external", []):
            try:
                logger.close()
            except Exception:  # a logger failing to flush must not hide the run's own error
                pass
        self._external = []


def restored_meta_problem(meta: dict[str, Any]) -> str | None:
    """What is wrong with the counters a single run's checkpoint restores (a meta.json edited and its
    checksum made again), as the words after "has" in a sentence, or ``None``: ``env_step`` and ``updates``
    (and ``episodes``, ``pending_env_steps`` where present) JSON integers from 0 to
    :data:`~rlfunc.runtime.checkpoint.MAX_STEP`, ``wall_s`` a finite number of seconds >= 0, ``evals`` [step, return]
    pairs and ``recent_returns`` numbers. A missing ``env_step`` or ``updates`` is left to the caller."""

    def count(value: Any) -> bool:
        return is_count(value, MAX_STEP)

    def number(value: Any) -> bool:
        return type(value) in (int, float)

    for key in ("env_step", "updates", "episodes", "pending_env_steps"):
        if key in meta and not count(meta[key]):
            return f"an invalid {key} ({meta[key]!r} is not a count from 0 to {MAX_STEP})"
    wall = meta.get("wall_s", 0.0)
    if not (number(wall) and math.isfinite(wall) and wall >= 0):
        return f"an invalid wall_s ({wall!r} is not a finite number of seconds >= 0)"
    evals = meta.get("evals", [])
    if not (isinstance(evals, list) and all(
        isinstance(e, list) and len(e) == 2 and count(e[0]) and number(e[1]) for e in evals
    )):
        return "an invalid evals (a list of [env step, mean return] pairs)"
    recent = meta.get("recent_returns", [])
    if not (isinstance(recent, list) and all(number(r) for r in recent)):
        return "an invalid recent_returns (a list of episode returns)"
    return None


def eval_row(step: int, frames: dict[str, int], time_s: float, returns, stop_reason: str = "") -> dict[str, Any]:
    """One ``eval.csv`` row (the single-run and the population trainers write the same columns)."""
    return {
        "step": step,
        **frames,
        "time_s": round(time_s, 3),
        "mean_return": float(np.mean(returns)),
        "std_return": float(np.std(returns)),
        "episodes": len(returns),
        "stop_reason": stop_reason,
    }


def metrics_row(
    step: int, frames: dict[str, int], learner_calls: int, gradient_steps: int, time_s: float, steps_per_s: float,
    recent_returns: list[float], metrics, stop_reason: str = "",
) -> dict[str, Any]:
    """One ``metrics.csv`` row: the counters, the mean of the last 10 episode returns and the
    learner's newest metrics (the single-run and the population trainers write the same columns)."""
    row: dict[str, Any] = {
        "step": step,
        **frames,
        "learner_calls": learner_calls,
        "gradient_steps": gradient_steps,
        "time_s": round(time_s, 3),
        "steps_per_s": round(steps_per_s, 3),
        "episode_return": float(np.mean(recent_returns[-10:])) if recent_returns else math.nan,
        "stop_reason": stop_reason,
    }
    if metrics is not None:
        for k, v in metrics.items():
            row[k] = float(v)
    return row


def first_non_finite(pending: list[tuple[int, list, torch.Tensor]]) -> tuple[int, list, torch.Tensor] | None:
    """The first ``(env_step, metric keys, finite flags)`` of ``pending`` (updates whose metrics'
    finiteness was reduced on the device, not read yet) with a non-finite metric, or ``None``.
    One host read for all of them (the single-run and the population trainers share it)."""
    if not pending:
        return None
    flags = torch.stack([f.all() for _, _, f in pending]).cpu()
    if bool(flags.all()):
        return None
    return pending[int((~flags).nonzero()[0, 0])]


def end_reason(exc: BaseException) -> str:
    """The ``reason`` that ``on_end`` callbacks get for a run ending with ``exc``: ``interrupted`` (Ctrl-C),
    ``terminated (SIGTERM)``, ``non-finite loss: ...`` or ``error: ExceptionType: message``."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    if isinstance(exc, SystemExit) and exc.code == 128 + signal.SIGTERM:
        return "terminated (SIGTERM)"
    if isinstance(exc, NonFiniteLossError):
        return f"non-finite loss: {exc}"
    return f"error: {type(exc).__name__}: {exc}"


def _what_stopped(exc: BaseException) -> str:
    """How the line of a run that ended with ``exc`` names it: ``SIGTERM`` or ``ExceptionType: message``."""
    if isinstance(exc, SystemExit) and exc.code == 128 + signal.SIGTERM:
        return "SIGTERM"
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def report_unsaved(env_step: int, last_good: Path | None, error: BaseException) -> None:
    """One line on stderr when the state could not be saved on the way out of a crash (the crash's
    own error follows): the steps since the last checkpoint are not saved, and the user should know."""
    why = str(error) if isinstance(error, CheckpointWriteError) else f"{type(error).__name__}: {error}"
    kept = f"the newest checkpoint kept is {last_good}" if last_good else "no checkpoint was written"
    print(
        f"rlfunc: warning: the state at env step {env_step} could not be saved on the way out ({' '.join(why.split())}); {kept}.",
        file=sys.stderr,
    )




def _start(run_config: RunConfig, run_dir: Path, created: bool, callbacks: list | None) -> Trainer:
    """Build the trainer; if that fails, leave no empty run directory behind."""
    try:
        return Trainer(run_config, run_dir, callbacks)
    except BaseException:
        discard_new_run_dir(run_dir, created)
        raise


def train(
    config: str | Path | dict | RunConfig | None = None,
    overrides: dict[str, Any] | list[str] | None = None,
    run_dir: str | Path | None = None,
    callbacks: list | None = None,
) -> TrainResult:
    """Train from a YAML path, a packaged config's name (``"redq/hopper"``, as ``rlfunc train``), a raw
    mapping, a :class:`RunConfig` or the default.

    ``overrides``: ``{"train.seed": 3}`` or ``["train.seed=3"]``. ``callbacks``:
    objects with hooks the loop calls (:mod:`rlfunc.runtime.callbacks`; a hook
    may stop the run). Returns a :class:`TrainResult` (run directory, env
    steps, final/all eval returns, why it stopped).
    Everything is checked before any env is built: the config, and that the
    run directory holds no other run and is writable.
    """
    from rlfunc.runtime.api import as_path
    from rlfunc.runtime.config import parse_overrides

    if run_dir is not None:
        run_dir = as_path(run_dir, "run_dir")  # a bytes path too; a number or "" is one sentence
    if isinstance(config, RunConfig):
        if overrides:
            raise ConfigError("Pass overrides with a YAML path or mapping, not with a built RunConfig.")
        run_config = config
    else:
        raw = config if isinstance(config, dict) else load_config(config)
        if isinstance(overrides, list):
            overrides = parse_overrides(overrides)
        raw = apply_overrides(raw, overrides or {})
        run_config = build_config(raw)
    check_train_packages(run_config.train)  # also for a RunConfig built from a stored config (rlfunc.load)
    if run_config.train.population is not None:  # seeds x settings in one process (rlfunc.runtime.population)
        if callbacks:
            raise ConfigError("callbacks are not available for populations yet; train without train.population or drop callbacks.")
        from rlfunc.runtime import population

        return population.train(run_config, run_dir=run_dir)
    if run_config.distributed is not None:  # R2D2 on Ray actors (rlfunc.scale.distributed; imports Ray lazily)
        from rlfunc.scale import distributed

        return distributed.train(run_config, run_dir=run_dir, callbacks=callbacks)
    run_dir = run_dir if run_dir is not None else new_run_dir(run_config)
    created = prepare_run_dir(run_dir)
    return _start(run_config, run_dir, created, callbacks).run()


def resume(
    run_dir: str | Path,
    total_steps: int | None = None,
    callbacks: list | None = None,
    allow_import: str | list[str] | tuple[str, ...] = (),
    address: str | None = None,
    trust_wandb_settings: bool = False,
) -> TrainResult:
    """Continue the run in ``run_dir`` from its newest checkpoint that verifies (optionally to a new
    ``total_steps``). The config is the one stored in that checkpoint; the run's ``config.yaml`` is
    only a copy for people. Damaged newer checkpoints are skipped with a line saying why. A run
    directory another live process trains in is refused with one sentence before anything is done.

    The env is made from the checkpoint's config, a file that may be someone else's, so under
    :func:`rlfunc.envs.factory.from_loaded_file`: a module it names (``env.id`` ``module:Env-v0``, a
    ``module:ClassName`` wrapper) is imported only if it is already imported or named in
    ``allow_import`` (``rlfunc resume --allow-import MODULE``). For the same reason
    (:func:`~rlfunc.runtime.resume_checks.consent_to_loaded`):
    a distributed run's Ray cluster is joined only at an ``address`` the user gives (``rlfunc resume
    --address``; ``"local"`` runs Ray on this machine), never at the checkpoint's ``distributed.address``
    alone, and ``train.wandb`` keys other than W&B's project, entity, run and labels (``dir``, ``settings``,
    ...) are used only with ``trust_wandb_settings=True`` (``--trust-wandb-settings``)."""
    from rlfunc.envs.factory import from_loaded_file

    with from_loaded_file(allow_import):
        return _resume(run_dir, total_steps, callbacks, address=address, trust_wandb_settings=trust_wandb_settings)




def _resume(run_dir: str | Path, total_steps: int | None, callbacks: list | None, address: str | None = None,
            trust_wandb_settings: bool = False) -> TrainResult:
    from rlfunc.runtime import population
    from rlfunc.runtime.api import as_path, check_resume_packages, is_weights_only

    run_dir = as_path(run_dir, "run_dir")  # a bytes path too; None, a number or "" is one sentence
    if not run_dir.is_dir():
        raise ConfigError(f"{str(run_dir)!r} is not a run directory; pass the directory `rlfunc train` created.")
    refuse_part_of_a_larger_run(run_dir)
    if population.is_population_run(run_dir):
        if callbacks:
            raise ConfigError("callbacks are not available for populations yet; resume without callbacks.")
        if address is not None:
            raise ConfigError(
                f"--address {address!r} sets where a distributed run's Ray runs, and {str(run_dir)!r} is a population, "
                "which trains in one process; resume it without --address."
            )
        return population.resume(run_dir, total_steps=total_steps, trust_wandb_settings=trust_wandb_settings)
    # its loggers' packages and what it may do without consent, from meta.json alone: before any checkpoint is read
    check_resume_packages(run_dir, address=address, trust_wandb_settings=trust_wandb_settings)
    if is_weights_only(run_dir):
        raise ConfigError(
            f"{str(run_dir)!r} holds a policy's weights only (an `rlfunc export` or a run's best/ policy), "
            "with no optimizer state, replay or counters to continue from; resume the run directory "
            "`rlfunc train` created, or start a new run."
        )
    if not (run_dir / "checkpoints").is_dir() and not started_run(run_dir):
        raise ConfigError(
            f"{str(run_dir)!r} has no checkpoints/ to resume from; pass the directory `rlfunc train` created, once it has saved a checkpoint."
        )
    lock_run_dir(run_dir)  # another process training here: refused before anything is touched
    try:
        for line in clean_leftovers(run_dir / "checkpoints"):
            print(f"rlfunc: {run_dir / 'checkpoints'}: {line}", file=sys.stderr)
        refuse_nothing_saved(run_dir)
        checkpoint, tensors, meta = load_newest_good(run_dir)
        raw = meta.get("config")
        if not isinstance(raw, dict):
            raise CheckpointError(f"Checkpoint {str(checkpoint)!r} holds no run config; it was not written by `rlfunc train`.")
        stored = raw
        if total_steps is not None:
            raw = apply_overrides(raw, {"train.total_steps": resumed_total_steps(total_steps, meta)})
        run_config = build_config(raw, resolved=True)  # a config rlfunc wrote, possibly an older version's
        refuse_relative_data_elsewhere(run_config)
        check_train_packages(run_config.train, resuming=True)  # as checked before reading it: the checkpoint's own config
        run_config = consent_to_loaded(run_config, address, trust_wandb_settings)  # before Ray or W&B is reached
        if run_config.distributed is not None:  # fresh Ray actors, the learner from the checkpoint
            from rlfunc.scale import distributed

            refuse_edited_config_copy(run_dir, stored, total_steps)  # an edit there would be ignored, then written over
            loaded = [tensors]  # handed over in a box the resume empties, so no frame here keeps the loaded replay
            del tensors
            return distributed.resume(run_config, run_dir, checkpoint, loaded, meta, callbacks)
        trainer = Trainer(run_config, run_dir, callbacks)
        trainer.restore(checkpoint, tensors, meta)
        # after the checks of the checkpoint itself (its algorithm, the modules it names), before config.yaml is written
        refuse_edited_config_copy(run_dir, stored, total_steps)
        # The learner copied the replay out of the loaded checkpoint (its buffers are allocated at
        # capacity): the loaded copy must not stay alive for the whole resumed run, one more replay in memory.
        del tensors
        return trainer.run(resumed=True)
    finally:
        unlock_run_dir(run_dir)
