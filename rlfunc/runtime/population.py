"""Training a population: many seeds and settings of one transition learner in one process.

Issue #24 and DESIGN.md, "Populations and scale-out": a population is ``P``
independent learners whose states are stacked on a leading member dimension
and updated by one vmapped update (:func:`rlfunc.core.population.vmap_update`
of the algorithm's pure ``update``, compiled with ``torch.compile(fullgraph=True)``
when ``train.compile``). This is PureJaxRL's recipe (``jax.vmap`` over whole
training states, Lu et al. 2022, "Discovered Policy Optimisation") applied to an
off-policy learner with replay. Members share no data and no gradients:

* member ``k`` has its own seed and settings (its own resolved config), its own
  algorithm state (``init`` with its seed), its own generator (seeded ``seed + 1``
  as :class:`~rlfunc.runtime.learners.TransitionLearner` seeds it) for
  exploration, replay indices and update noise, drawn in the single run's order
  (:func:`rlfunc.core.population.draw_per_member`);
* its own replay, one row of a :class:`rlfunc.replay.population.PopulationReplay`
  (storage ``[P, capacity, ...]``, per-member counters, one gather per update);
* its own env and evaluation env, seeded from its seed exactly as a single run
  seeds them (:class:`~rlfunc.runtime.collector.Collector`, evaluation episodes
  from ``seed + 10000``);
* its own ``member-<k>/`` directory with ``config.yaml`` (its resolved settings:
  its seed and grid values, no ``train.population``), ``metrics.csv`` and
  ``eval.csv``, so ``rlfunc plot`` reads it as a run, and its policy as a
  weights-only checkpoint (:func:`rlfunc.runtime.api.export`'s format) in
  ``member-<k>/checkpoints/`` (``rlfunc.load`` / ``rlfunc eval``), best
  evaluation in ``member-<k>/best/`` with ``train.keep_best``.

One training checkpoint for the whole population lives in the run directory's
``checkpoints/`` (the verified format of :mod:`rlfunc.runtime.checkpoint`);
:func:`resume` continues every member from it.

Acting is the vmapped ``act`` over the stacked parameters. So a member computes
what the single run with its seed and settings computes, up to float rounding,
not bit for bit: vmapped Adam is the unfused arithmetic, batched matrix products
sum in another order, and settings held as tensors round differently from Python
floats (:mod:`rlfunc.core.population`, "Numerics"); tests/test_population_runtime.py
measures the end-to-end difference of evaluation returns.

Speed. On one CPU thread at REDQ's shape (N=10, G=20, 256x256, batch 256) a
population is not faster than its members run one after the other in the same
process: 0.89x (P=1), 0.92x (P=2), 0.96x (P=4) of their total throughput
(``python benchmarks/run.py population``, benchmarks/results/population_redq.json).
Each member's update is already compute-bound there (~480 ms per env step either
way), so batching the matrix products saves nothing, while the vmapped update
pays Adam's unfused arithmetic and vmap's overhead. The gain #24 expects is on a
GPU, where one member's update leaves the card latency-bound and mostly idle.

Scope of this stage: REDQ, SAC and RLPD (:class:`TransitionLearner`,
:class:`~rlfunc.runtime.learners.PriorDataLearner`) with ``env.num_envs == 1``
(each member then stores exactly one transition per step, so all members are
ready to learn at the same step and update in lock step). RLPD's prior dataset
is loaded once and shared read-only: every mini-batch of member ``k`` holds its
prior rows (drawn first, from its generator, as
:class:`~rlfunc.replay.offline.MixedSampler` draws them) and then its online
rows; checkpoints record the dataset's SHA-256 and resume refuses a changed
file. DrQ-v2, DRQN, DQN and R2D2 are refused in one sentence (their learners are
not batched over members yet: frame stacks, sequence and prioritized replays),
as are RLPD's ``data.pretrain_steps``, stopping rules, ``train.cuda_graph``,
``train.checkpoint_replay=false`` and ``train.wandb``. TensorBoard events are
written per member, in ``member-<k>/``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from tensordict import TensorDict

from rlfunc.runtime.config import MAX_SEED, ConfigError
from rlfunc.runtime.specs import parse_grid, parse_seeds

__all__ = [
    "SUPPORTED",
    "supports",
    "check_spec",
    "member_specs",
    "PopulationTrainer",
    "PopulationResult",
    "train",
    "resume",
    "is_population_run",
]

SUPPORTED = ("redq", "sac", "rlpd")
"""Algorithms a population trains in this version."""

_NOT_YET = {
    "drqv2": "its pixel frame-stack replay",
    "drqn": "its sequence replay",
    "dqn": "its sequence replay",
    "r2d2": "its prioritized sequence replay",
}


def check_spec(spec: Any, seed: int = 0) -> None:
    """``train.population`` is ``{seeds: [int, ...], grid: {agent.NAME: [value, ...]}}`` (each
    optional; no seeds means ``[train.seed]``); anything else is one :class:`ConfigError` sentence.
    Whether a grid key is a setting the algorithm takes as data is checked with the algorithm
    (:func:`member_specs`)."""
    if not isinstance(spec, dict):
        raise ConfigError(f"train.population must be a mapping with keys seeds and grid, got {spec!r}.")
    extra = [k for k in spec if k not in ("seeds", "grid")]
    if extra:
        raise ConfigError(f"train.population has unknown key {extra[0]!r}; it takes seeds and grid.")
    seeds = spec.get("seeds")
    if seeds is not None:
        if (
            not isinstance(seeds, list)
            or not seeds
            or any(isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= MAX_SEED for s in seeds)
        ):
            raise ConfigError(f"train.population.seeds must be a non-empty list of integers in [0, 2**32 - 1], got {seeds!r}.")
        if len(set(seeds)) != len(seeds):
            raise ConfigError(f"train.population.seeds lists a seed twice ({seeds!r}); each member needs its own seed.")
    grid = spec.get("grid")
    if grid is not None:
        if not isinstance(grid, dict):
            raise ConfigError(f"train.population.grid must map agent.NAME to a list of values, got {grid!r}.")
        for key, values in grid.items():
            if not isinstance(key, str) or not key.startswith("agent.") or key.count(".") != 1:
                raise ConfigError(
                    f"train.population.grid key {key!r} must name an agent setting, e.g. agent.critic_lr; only "
                    "settings the algorithm takes as data may differ within a population."
                )
            if not isinstance(values, list) or not values:
                raise ConfigError(f"train.population.grid.{key} must be a non-empty list of values, got {values!r}.")
            if len(set(map(repr, values))) != len(values):
                raise ConfigError(f"train.population.grid.{key} lists a value twice ({values!r}).")


@dataclasses.dataclass(frozen=True)
class MemberSpec:
    """One member: its index, seed, grid values and resolved single-run config."""

    index: int
    seed: int
    settings: dict
    config: Any  # RunConfig


def supports(run_config) -> str | None:
    """Whether this version trains ``run_config`` (its algorithm and train settings; the
    ``train.population`` spec aside) as a population: ``None`` if it does, else the one sentence
    :func:`member_specs` refuses it with. ``benchmarks/run.py learn`` asks this before running
    seeds as one population."""
    train = run_config.train
    algo = run_config.algo
    if algo not in SUPPORTED:
        why = _NOT_YET.get(algo, "its learner")
        return (
            f"train.population: {algo} is not batched yet ({why} is not batched over members); populations train "
            f"{', '.join(s.upper() for s in SUPPORTED[:-1])} and {SUPPORTED[-1].upper()} in this version, so run {algo}'s seeds as separate runs."
        )
    if run_config.env.num_envs != 1:
        return (
            f"train.population needs env.num_envs=1 in this version (got {run_config.env.num_envs}): members step in lock "
            "step, which vector envs' autoreset steps would break; use env.num_envs=1."
        )
    refusals = {
        "cuda_graph": "train.cuda_graph",
        "stop_at_return": "stopping rules (train.stop_at_return)",
        "patience_evals": "stopping rules (train.patience_evals)",
        "max_updates": "stopping rules (train.max_updates)",
        "max_wall_s": "stopping rules (train.max_wall_s)",
    }
    for name, what in refusals.items():
        value = getattr(train, name)
        if (value is not None) if name == "stop_at_return" else bool(value):
            return f"train.population does not support {what} yet; unset train.{name} for a population."
    if getattr(run_config.data, "pretrain_steps", 0):
        return "train.population does not support data.pretrain_steps yet; set data.pretrain_steps=0 for a population."
    if train.wandb is not None:
        return "train.population does not support train.wandb yet; remove it for a population (TensorBoard works)."
    if not train.checkpoint_replay:
        return "train.population does not support train.checkpoint_replay=false yet; remove it for a population."
    return None


def member_specs(run_config) -> list[MemberSpec]:
    """The members of ``run_config``'s ``train.population``: for each grid combination (in the
    grid's order, last key fastest), each seed; member ``k``'s config is the population's with
    ``train.population`` removed, ``train.seed`` its seed and its grid values set (each checked
    by :func:`~rlfunc.runtime.config.build_config`). Refuses, in one sentence, an algorithm not
    batched yet, a grid key that is not a setting the algorithm takes as data, and what this
    stage does not do yet (module doc)."""
    from rlfunc.core import population
    from rlfunc.runtime.config import build_config, to_dict

    spec, train = run_config.train.population, run_config.train
    check_spec(spec, train.seed)
    why = supports(run_config)
    if why is not None:
        raise ConfigError(why)
    algo = run_config.algo
    data = population.hparam_names(run_config.agent) + tuple(
        n for n in population._init_settings(run_config.agent) if n not in population.hparam_names(run_config.agent)
    )
    grid = dict(spec.get("grid") or {})
    for key in grid:
        name = key.split(".", 1)[1]
        if name not in data:
            raise ConfigError(
                f"train.population.grid: {key} is not a setting {algo} takes as data (those are: "
                f"{', '.join('agent.' + n for n in data)}); members that differ in it are separate populations."
            )
    seeds = list(spec.get("seeds") or [train.seed])
    raw = to_dict(run_config)
    raw["train"].pop("population", None)
    members = []
    for combo in itertools.product(*grid.values()):
        settings = dict(zip(grid, combo))
        for seed in seeds:
            member = {**raw, "train": {**raw["train"], "seed": seed}, "agent": dict(raw["agent"])}
            for key, value in settings.items():
                member["agent"][key.split(".", 1)[1]] = value
            try:
                config = build_config(member)
            except ConfigError as exc:
                raise ConfigError(f"train.population member with seed {seed} and {settings}: {exc}") from None
            members.append(MemberSpec(len(members), seed, settings, config))
    return members


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


def is_population_run(run_dir: str | Path) -> bool:
    """True for a run directory a population wrote (it holds ``member-0/``)."""
    return (Path(run_dir) / "member-0").is_dir()


class PopulationTrainer:
    """Holds a population run's imperative state; :meth:`run` trains every member to ``total_steps``.

    Built from a population :class:`~rlfunc.runtime.config.RunConfig` (one with
    ``train.population``). Everything that can be refused is refused here, before any
    training: the config (:func:`member_specs`), the memory for ``P`` replays, and
    :func:`rlfunc.core.population.stack` of the members' initial states (members whose
    configs differ in anything not held as data).
    """

    def __init__(self, config, run_dir: Path) -> None:
        from rlfunc.core import population
        from rlfunc.envs import env_spaces
        from rlfunc.replay.population import PopulationReplay
        from rlfunc.runtime.collector import Collector
        from rlfunc.runtime.learners.base import _generator
        from rlfunc.runtime.memory import Need, require_memory
        from rlfunc.runtime.perf import set_threads, tune_allocator
        from rlfunc.runtime.registry import get_algo
        from rlfunc.runtime.trainer import _make_envs

        self.config = config
        self.run_dir = Path(run_dir)
        self.members = member_specs(config)
        cfg = config.train
        tune_allocator()
        if cfg.threads:
            set_threads(cfg.threads)
        if cfg.device.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError("train.device is 'cuda' but no CUDA device is available; set train.device=cpu.")
        self.entry = get_algo(config.algo)
        self.algo = self.entry.algo
        self.device = torch.device(cfg.device)
        envs = [_make_envs(m.config) for m in self.members]
        self.envs = [e for e, _, _ in envs]
        self.eval_envs = [e for _, e, _ in envs]
        obs_space, act_space = env_spaces(self.envs[0])
        # Each member's learner: its config (REDQ's env-dependent target entropy resolved), its
        # initial state from its seed, its generator (seed + 1); the replay is the population's.
        self.learners = []
        for m, (_, _, native) in zip(self.members, envs):
            learner = self.entry.make_learner(m.config, obs_space, act_space)
            learner.native_action_space = native
            self.learners.append(learner)
        p = len(self.members)
        one = self.learners[0]._replay_need()
        require_memory(
            [Need(f"{one.subject} for each of {p} members", p * one.nbytes, one.what, f"{one.fix} or the population's size")],
            self.device,
        )
        try:
            self.state = population.stack([lr.state for lr in self.learners])
        except ValueError as exc:
            raise ConfigError(f"train.population: {exc}") from None
        self.agent = self.learners[0].config
        # RLPD: one prior dataset, shared read-only by every member (each member draws its own rows from it).
        self.dataset = getattr(self.learners[0], "dataset", None)
        self.offline_rows = 0
        if self.dataset is not None:
            for lr in self.learners[1:]:
                lr.dataset = lr.sampler.dataset = self.dataset
            self.offline_rows = self.learners[0].sampler.offline_rows(self.agent.batch_size)
        self.act_dim = self.learners[0].act_dim
        self.generators = [_generator(self.device, m.seed + 1) for m in self.members]
        for lr in self.learners:  # each member's state now lives in the population's
            lr.state = None
        self.replay = PopulationReplay(p, cfg.replay_size, device=self.device)
        update = population.vmap_update(self.algo.update)
        self._update = torch.compile(update, fullgraph=True) if cfg.compile else update
        agent = self.agent
        self._act = torch.vmap(lambda params, obs, noise: self.algo.act(params, obs, noise, config=agent), randomness="error")
        self.collectors = [Collector(env, seed=m.seed) for env, m in zip(self.envs, self.members)]
        self.gradient_steps_per_call = int(getattr(config.agent, "updates_per_step", 1))
        self.env_step = 0
        self.learner_calls = 0
        self.evals: list[list[tuple[int, float]]] = [[] for _ in self.members]
        self.ckpt_dir = self.run_dir / "checkpoints"
        self._best = [-math.inf] * p
        self._prior_wall = 0.0
        self._saved: int | None = None
        self._unchecked: list[tuple[int, list, torch.Tensor]] = []
        self._tensorboard: list = []
        self._t0 = time.monotonic()

    # -- members ---------------------------------------------------------------------------
    def member_dir(self, k: int) -> Path:
        return self.run_dir / f"member-{k}"

    def member_state(self, k: int) -> TensorDict:
        """Member ``k``'s single-member state (a view of the population's)."""
        from rlfunc.core import population

        return population.member(self.state, k)

    def policy(self, k: int):
        """Member ``k``'s deterministic :class:`~rlfunc.runtime.policy.Policy` (through its learner's)."""
        learner = self.learners[k]
        learner.state = self.member_state(k)
        try:
            return learner.policy()
        finally:
            learner.state = None

    @property
    def gradient_steps(self) -> int:
        return self.learner_calls * self.gradient_steps_per_call

    def _wall_s(self) -> float:
        return time.monotonic() - self._t0 + self._prior_wall

    # -- acting and learning ---------------------------------------------------------------
    def explore(self) -> list[np.ndarray]:
        """Every member's actions for its current observation, each drawn from its own generator
        as :meth:`TransitionLearner.explore` draws them (uniform before ``train.learning_starts``,
        then the stochastic policy: the vmapped ``act``)."""
        n, dev = 1, self.device
        if self.env_step < self.config.train.learning_starts:
            acts = [torch.rand((n, self.act_dim), generator=g, device=dev) * 2.0 - 1.0 for g in self.generators]
            return [a.cpu().numpy() for a in acts]
        obs = torch.stack([torch.as_tensor(c.obs, dtype=torch.float32, device=dev) for c in self.collectors])
        noise = torch.stack([torch.randn((n, self.act_dim), generator=g, device=dev) for g in self.generators])
        actions = self._act(self.state["params"], obs, noise).cpu().numpy()
        return list(actions)

    def observe(self, k: int, rows: TensorDict) -> None:
        stored = TensorDict(
            {key: rows[key].float() for key in ("obs", "action", "reward", "next_obs", "terminated")},
            batch_size=rows.batch_size,
        )
        self.replay.add(k, stored)

    def learn(self) -> TensorDict:
        """One population update: every member's ``G * B`` rows (its own indices, one gather),
        every member's noise from its own generator, one vmapped update. Metrics ``[P]``."""
        from rlfunc.core import population

        g, b = self.agent.updates_per_step, self.agent.batch_size
        p, k = len(self.members), self.offline_rows
        parts = []
        if k > 0:  # RLPD: each member's prior rows first, from its generator (MixedSampler's order), one gather
            rows = self.dataset.rows
            idx = torch.stack([torch.randint(len(self.dataset), (g * k,), generator=gen, device=rows.device) for gen in self.generators])
            parts.append(rows[idx].reshape(p, g, k))
        if k < b:
            parts.append(self.replay.sample(g * (b - k), self.generators).reshape(p, g, b - k))
        batch = parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)
        noise = population.draw_per_member(
            lambda gen: self.algo.draw_noise(self.agent, g, b, self.act_dim, generator=gen, device=self.device),
            self.generators,
        )
        self.state, metrics = self._update(self.state, batch, noise)
        self.learner_calls += 1
        keys = [k for k, v in metrics.items(True, True) if v.is_floating_point()]
        finite = torch.stack([torch.isfinite(metrics[k]).reshape(p, -1).all(1) for k in keys], 1)  # [P, keys]
        self._unchecked.append((self.env_step, keys, finite))
        return metrics

    def _check_finite(self) -> None:
        from rlfunc.runtime.trainer import NonFiniteLossError, first_non_finite

        pending, self._unchecked = self._unchecked, []
        failed = first_non_finite(pending)
        if failed is None:
            return
        step, keys, finite = failed
        k, j = (~finite).nonzero()[0].tolist()
        key = keys[j] if isinstance(keys[j], str) else ".".join(keys[j])
        raise NonFiniteLossError(
            f"Training stopped at env step {step}: member {k} (seed {self.members[k].seed}) has a non-finite {key}; "
            "the last good checkpoint is kept; lower the learning rates or check the rewards."
        )

    # -- evaluation, logs, checkpoints ------------------------------------------------------
    def evaluate(self) -> list[float]:
        from rlfunc.runtime.evaluate import run_episodes

        means = []
        for k, m in enumerate(self.members):
            returns = run_episodes(self.policy(k), self.eval_envs[k], self.config.train.eval_episodes, seed=m.seed + 10_000)
            mean = float(np.mean(returns))
            self.evals[k].append((self.env_step, mean))
            row = {
                "step": self.env_step,
                "time_s": round(self._wall_s(), 3),
                "mean_return": mean,
                "std_return": float(np.std(returns)),
                "episodes": len(returns),
                "stop_reason": "",
            }
            self._eval_logs[k].write(row)
            if self._tensorboard:
                self._tensorboard[k].write("eval", row)
            self._save_best(k, mean)
            means.append(mean)
        return means

    def _member_meta(self, k: int) -> dict[str, Any]:
        from rlfunc.runtime.config import to_dict

        learner = self.learners[k]
        return {
            "algo": self.config.algo,
            "config": to_dict(self.members[k].config),
            **learner.export_meta(),
            "env_step": self.env_step,
            "updates": self.learner_calls,
            "gradient_steps": self.gradient_steps,
            "evals": self.evals[k],
            "population_member": k,
            "weights_only": True,
        }

    def _member_policy_tensors(self, k: int) -> TensorDict:
        params = self.member_state(k)["params"].clone()
        return TensorDict({"state": TensorDict({"params": params}, batch_size=[])}, batch_size=[])

    def _save_best(self, k: int, mean: float) -> None:
        from rlfunc.runtime.checkpoint import CheckpointWriteError, prune_checkpoints, save_checkpoint

        if not self.config.train.keep_best or not mean > self._best[k]:
            return
        self._best[k] = mean
        best = self.member_dir(k) / "best"
        meta = {**self._member_meta(k), "eval_return": mean}
        try:
            save_checkpoint(best, f"step_{self.env_step:09d}", self._member_policy_tensors(k), meta)
        except CheckpointWriteError as exc:
            print(f"rlfunc: warning: {exc} Member {k}'s best policy so far is not saved.", file=sys.stderr)
            return
        prune_checkpoints(best, keep=1)

    def save(self) -> Path:
        """The population's training checkpoint in ``checkpoints/``, then each member's policy
        (weights only, :func:`rlfunc.runtime.api.export`'s format) in ``member-<k>/checkpoints/``."""
        from rlfunc.runtime.checkpoint import prune_checkpoints, save_checkpoint
        from rlfunc.runtime.config import to_dict
        from rlfunc.runtime.trainer import NonFiniteLossError

        leaves = [v for v in self.state.exclude("config").values(True, True) if v.is_floating_point()]
        if not bool(torch.stack([torch.isfinite(v).all() for v in leaves]).all()):
            raise NonFiniteLossError(f"Parameters became non-finite by env step {self.env_step}; not saving them.")
        meta = {
            "algo": self.config.algo,
            "config": to_dict(self.config),
            "population": [{"seed": m.seed, "settings": m.settings} for m in self.members],
            "env_step": self.env_step,
            "updates": self.learner_calls,
            "gradient_steps": self.gradient_steps,
            "episodes": [c.episodes for c in self.collectors],
            "env_rng": [c.rng_state() for c in self.collectors],
            "evals": self.evals,
            "best": [r if math.isfinite(r) else None for r in self._best],
            "wall_s": self._wall_s(),
            "replay_saved": True,
        }
        if self.dataset is not None:
            from rlfunc.replay.offline import describe

            meta["dataset"] = describe(self.dataset)
        tensors = TensorDict(
            {
                "state": self.state.exclude("config"),
                "replay": self.replay.state_dict(),
                "generator": torch.stack([g.get_state() for g in self.generators]),
            },
            batch_size=[],
        )
        name = f"step_{self.env_step:09d}"
        path = save_checkpoint(self.ckpt_dir, name, tensors, meta)
        prune_checkpoints(self.ckpt_dir, keep=self.config.train.keep_checkpoints)
        for k in range(len(self.members)):
            directory = self.member_dir(k) / "checkpoints"
            save_checkpoint(directory, name, self._member_policy_tensors(k), self._member_meta(k))
            prune_checkpoints(directory, keep=1)
        self._saved = self.env_step
        return path

    def restore(self, checkpoint: Path, tensors: TensorDict, meta: dict[str, Any]) -> None:
        """Continue every member from a verified population checkpoint."""
        from rlfunc.runtime.checkpoint import CheckpointError, check_structure

        expected = TensorDict(
            {"state": self.state.exclude("config"), "generator": torch.stack([g.get_state() for g in self.generators])},
            batch_size=[],
        )
        for root in ("state", "generator"):
            check_structure(checkpoint, tensors, expected, root)
        try:
            state = tensors["state"].to(self.device)
            state.set_non_tensor("config", self.state.get_non_tensor("config"))
            self.replay.load_state_dict(tensors["replay"])
            for g, s in zip(self.generators, tensors["generator"]):
                g.set_state(s.clone())
            for c, rng, episodes in zip(self.collectors, meta["env_rng"], meta["episodes"]):
                c.restore(rng)
                c.episodes = int(episodes)
            evals = [[(int(s), float(r)) for s, r in member] for member in meta["evals"]]
            best = [-math.inf if r is None else float(r) for r in meta.get("best", [None] * len(self.members))]
            env_step, calls = int(meta["env_step"]), int(meta["updates"])
        except (KeyError, TypeError, ValueError, IndexError, RuntimeError) as exc:
            raise CheckpointError(
                f"Checkpoint {str(checkpoint)!r} does not fit this population ({type(exc).__name__}: {exc}); resume it "
                "with the rlfunc version that wrote it."
            ) from None
        saved = (meta.get("dataset") or {}).get("sha256")
        current = self.dataset.checksum if self.dataset is not None else None
        if saved != current:
            from rlfunc.replay.offline import DatasetError

            raise DatasetError(
                f"The prior dataset {getattr(self.dataset, 'path', None)!r} is not the one this population was trained with "
                f"(sha256 {(current or 'none')[:12]} now, {(saved or 'none')[:12]} in the checkpoint); restore the original "
                "file or start a new run."
            )
        if len(evals) != len(self.members):
            raise CheckpointError(f"Checkpoint {str(checkpoint)!r} holds {len(evals)} members, not {len(self.members)}.")
        self.state = state
        self.env_step, self.learner_calls, self.evals, self._best = env_step, calls, evals, best
        self._prior_wall = float(meta.get("wall_s", 0.0))
        self._saved = env_step

    def _log(self, metrics, steps_per_s: float, recent: list[list[float]]) -> None:
        for k in range(len(self.members)):
            row: dict[str, Any] = {
                "step": self.env_step,
                "learner_calls": self.learner_calls,
                "gradient_steps": self.gradient_steps,
                "time_s": round(self._wall_s(), 3),
                "steps_per_s": round(steps_per_s, 3),
                "episode_return": float(np.mean(recent[k][-10:])) if recent[k] else math.nan,
                "stop_reason": "",
            }
            if metrics is not None:
                for key, v in metrics.items():
                    row[key] = float(v[k])
            self._metrics_logs[k].write(row, complete=metrics is not None)
            if self._tensorboard:
                self._tensorboard[k].write("train", row)

    # -- the loop ----------------------------------------------------------------------------
    def run(self, resumed: bool = False) -> PopulationResult:
        from rlfunc.runtime.checkpoint import clean_leftovers
        from rlfunc.runtime.config import to_dict
        from rlfunc.runtime.run_log import CsvLog, Progress
        from rlfunc.runtime.trainer import RunInterrupted, TrainResult, _save_on_sigterm, write_atomic

        cfg = self.config.train
        p = len(self.members)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for line in clean_leftovers(self.ckpt_dir):
            print(f"rlfunc: {self.ckpt_dir}: {line}", file=sys.stderr)
        write_atomic(self.run_dir / "config.yaml", yaml.safe_dump(to_dict(self.config), sort_keys=False))
        truncate = self.env_step if resumed else None
        self._metrics_logs, self._eval_logs = [], []
        for k, m in enumerate(self.members):
            d = self.member_dir(k)
            d.mkdir(exist_ok=True)
            for sub in ("checkpoints", "best"):
                for line in clean_leftovers(d / sub):
                    print(f"rlfunc: {d / sub}: {line}", file=sys.stderr)
            write_atomic(d / "config.yaml", yaml.safe_dump(to_dict(m.config), sort_keys=False))
            self._metrics_logs.append(CsvLog(d / "metrics.csv", truncate_after=truncate))
            self._eval_logs.append(CsvLog(d / "eval.csv", truncate_after=truncate))
        self._tensorboard = []
        if cfg.tensorboard:  # each member's events in its own directory, as a single run's
            from rlfunc.runtime.run_log import TensorBoardLog

            purge = None if truncate is None else truncate + 1
            self._tensorboard = [TensorBoardLog(self.member_dir(k), purge_step=purge) for k in range(p)]
        if not resumed:
            for c, m in zip(self.collectors, self.members):
                c.reset(seed=m.seed)
        self._t0 = time.monotonic()
        verb = "resuming" if resumed else "training"
        print(f"rlfunc: {verb} a population of {p} {self.config.algo} members on {self.config.env.id} in {self.run_dir}", file=sys.stderr)
        progress = Progress(cfg.progress, cfg.total_steps, self.env_step, f"{self.config.algo} x{p} {self.config.env.id}")
        recent: list[list[float]] = [[] for _ in range(p)]
        window_t, window_steps = time.monotonic(), 0
        metrics = None
        last = None
        b_rows = self.agent.batch_size
        restore_sigterm = _save_on_sigterm()
        try:
            while self.env_step < cfg.total_steps:
                self._check_finite()
                actions = self.explore()
                for k, c in enumerate(self.collectors):
                    rows, finished = c.step(actions[k])
                    self.observe(k, rows)
                    recent[k].extend(r for _, r, _ in finished)
                prev = self.env_step
                self.env_step += 1
                window_steps += 1
                if self.env_step >= cfg.learning_starts and (len(self.replay) >= 1 or self.offline_rows == b_rows):
                    metrics = self.learn()
                if self.env_step // cfg.log_every > prev // cfg.log_every:
                    self._check_finite()
                    now = time.monotonic()
                    self._log(metrics, window_steps / max(now - window_t, 1e-9), recent)
                    window_t, window_steps = now, 0
                    recent = [r[-10:] for r in recent]
                if self.env_step // cfg.eval_every > prev // cfg.eval_every:
                    self._check_finite()
                    last = float(np.mean(self.evaluate()))
                if self.env_step // cfg.checkpoint_every > prev // cfg.checkpoint_every:
                    self._check_finite()
                    self.save()
                progress.update(self.env_step, last)
            self._check_finite()
            if not self.evals[0] or self.evals[0][-1][0] != self.env_step:
                last = float(np.mean(self.evaluate()))
            if self._saved != self.env_step:
                self.save()
        except BaseException as exc:
            from rlfunc.runtime.trainer import NonFiniteLossError

            saved = False
            if not isinstance(exc, NonFiniteLossError) and self.env_step > 0 and self._saved != self.env_step:
                try:
                    self.save()
                    saved = True
                except Exception:  # never mask the original error
                    pass
            if isinstance(exc, KeyboardInterrupt) and not isinstance(exc, RunInterrupted):
                where = f"saved at step {self.env_step}" if saved else "last checkpoint kept"
                raise RunInterrupted(f"interrupted; {where}; continue with `rlfunc resume {self.run_dir}`") from None
            raise
        finally:
            restore_sigterm()
            progress.update(self.env_step, last, force=True)
            progress.close()
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
                env_steps=self.env_step,
                final_return=self.evals[k][-1][1] if self.evals[k] else None,
                evals=list(self.evals[k]),
                wall_s=wall,
                gradient_steps=self.gradient_steps,
            )
            for k in range(p)
        ]
        return PopulationResult(self.run_dir, self.env_step, results, wall, self.gradient_steps)


def _new_run_dir(config, members: int) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    env = config.env.id.replace("/", "_").replace(":", "_")
    base = Path(config.train.run_dir) / f"{config.algo}-{env}-pop{members}-{stamp}"
    path, i = base, 1
    while path.exists():
        path = Path(f"{base}-{i}")
        i += 1
    return path


def train(
    config=None,
    overrides: dict[str, Any] | list[str] | None = None,
    run_dir: str | Path | None = None,
    *,
    seeds: list[int] | str | None = None,
    grid: dict[str, list[Any]] | list[str] | None = None,
):
    """Train a population, or a single run when there is none.

    ``config``/``overrides``/``run_dir`` as :func:`rlfunc.train`; ``seeds``
    (``[0, 1]`` or ``"0-3"``) and ``grid`` (``{"agent.critic_lr": [3e-4, 1e-3]}``
    or ``["agent.critic_lr=3e-4,1e-3"]``) set ``train.population`` (the CLI's
    ``--seeds``/``--grid``). A config without ``train.population`` trains one run
    with :func:`rlfunc.runtime.trainer.train` (returns its ``TrainResult``);
    otherwise returns a :class:`PopulationResult`. Everything is checked before the
    run directory is made and any training starts.
    """
    from rlfunc.runtime import trainer
    from rlfunc.runtime.config import RunConfig, apply_overrides, build_config, load_config, parse_overrides

    if isinstance(config, RunConfig):
        if overrides or seeds is not None or grid is not None:
            raise ConfigError("Pass overrides, seeds and grid with a YAML path or mapping, not with a built RunConfig.")
        run_config = config
    else:
        raw = config if isinstance(config, dict) else load_config(config)
        if isinstance(overrides, list):
            overrides = parse_overrides(overrides)
        raw = apply_overrides(raw, overrides or {})
        if seeds is not None or grid is not None:
            train_raw = raw.get("train") or {}
            spec = dict(train_raw.get("population") or {})
            if seeds is not None:
                spec["seeds"] = parse_seeds(seeds) if isinstance(seeds, str) else list(seeds)
            if grid is not None:
                spec["grid"] = parse_grid(grid) if isinstance(grid, list) else dict(grid)
            raw = {**raw, "train": {**train_raw, "population": spec}}
        run_config = build_config(raw)
    if run_config.train.population is None:
        return trainer.train(run_config, run_dir=run_dir)
    members = member_specs(run_config)  # refusals before the run directory is made
    run_dir = Path(run_dir) if run_dir is not None else _new_run_dir(run_config, len(members))
    created = trainer.prepare_run_dir(run_dir)
    try:
        pop = PopulationTrainer(run_config, run_dir)
    except BaseException:
        if created and run_dir.is_dir() and not any(run_dir.iterdir()):
            run_dir.rmdir()
        raise
    return pop.run()


def resume(run_dir: str | Path, total_steps: int | None = None) -> PopulationResult:
    """Continue every member of the population in ``run_dir`` from its newest checkpoint that
    verifies (optionally to a new ``total_steps``); the config is the one stored in it."""
    from rlfunc.runtime.checkpoint import CheckpointError, load_newest_good
    from rlfunc.runtime.config import apply_overrides, build_config

    run_dir = Path(run_dir)
    if not (run_dir / "checkpoints").is_dir():
        raise ConfigError(f"{str(run_dir)!r} has no checkpoints/ to resume from; pass the population's run directory once it has saved one.")
    checkpoint, tensors, meta = load_newest_good(run_dir)
    raw = meta.get("config")
    if not isinstance(raw, dict) or "population" not in meta:
        raise CheckpointError(f"Checkpoint {str(checkpoint)!r} is not a population's; resume it with `rlfunc resume` of its own run.")
    if total_steps is not None:
        if total_steps < int(meta.get("env_step", 0)):
            raise ConfigError(
                f"--total-steps {total_steps} is below the {meta.get('env_step')} env steps the run already has; pass a larger number."
            )
        raw = apply_overrides(raw, {"train.total_steps": total_steps})
    run_config = build_config(raw, resolved=True)
    pop = PopulationTrainer(run_config, run_dir)
    pop.restore(checkpoint, tensors, meta)
    return pop.run(resumed=True)
