"""Recurrent learners over replayed windows: :class:`SequenceLearner` (DRQN, DQN control) and :class:`R2D2Learner`."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from rlfunc.core.exploration import actor_epsilons
from rlfunc.replay.sequence import SequenceReplay
from rlfunc.runtime.config import ConfigError
from rlfunc.runtime.learners.base import TransitionLearner, _fixed_state, _generator, _numel, check_warmup, learner_update
from rlfunc.runtime.memory import Need

__all__ = ["SequenceLearner", "R2D2Learner", "frame_stack_size"]


def frame_stack_size(run_config, obs_space: gym.Space) -> int:
    """The planes per observation a pixel agent's frame replay stores apart and rebuilds when sampling
    (:mod:`rlfunc.replay.frame_sequence`): ``stack_size`` of gymnasium's ``FrameStackObservation`` in
    ``env.wrappers`` where it pads with the reset frame (its default ``padding_type="reset"``) and the
    observations' leading axis is that stack; 1 (whole observations) otherwise. The replay checks at
    every step that the observations are that frame stack."""
    size = 1
    for entry in getattr(run_config.env, "wrappers", None) or []:
        name, kwargs = (entry, {}) if isinstance(entry, str) else next(iter(dict(entry).items()))
        if str(name).replace(":", ".").split(".")[-1] != "FrameStackObservation":
            continue
        kwargs = dict(kwargs or {})
        if kwargs.get("padding_type", "reset") == "reset" and int(kwargs.get("stack_size", 1)) > 1:
            size = int(kwargs["stack_size"])
        else:
            size = 1
    shape = tuple(getattr(obs_space, "shape", None) or ())
    return size if len(shape) >= 2 and shape[0] == size else 1


class SequenceLearner(TransitionLearner):
    """Recurrent off-policy learning from replayed windows (DRQN; the ``dqn`` control).

    The algorithm module provides ``init``, ``update``, ``act`` (epsilon-greedy
    with explicit noise), ``epsilon(config, env_step)``, ``draw_act_noise``,
    ``initial_carry``, ``carry_to_td`` and ``greedy_action``
    (:mod:`rlfunc.algos.drqn`). Subclasses change the replay
    (:meth:`_make_replay`), the carry and the acting call
    (:meth:`_carry_before_step`, :meth:`act_fn`), the exploration rate
    (:meth:`_epsilon`) and when and how to learn (:meth:`ready`, :meth:`learn`):
    :class:`R2D2Learner`.

    * :meth:`explore` keeps one recurrent carry per env, zeroes it where
      ``episode_start`` is True, and acts epsilon-greedily with the schedule
      ``epsilon(config, env_step)`` (no separate uniform warm-up: the schedule
      starts at ``eps_start = 1``), or, with ``agent.exploration:
      actor_ladder``, with one fixed rate per env
      (:func:`rlfunc.core.exploration.actor_epsilons`);
    * :meth:`observe` feeds a :class:`~rlfunc.replay.sequence.SequenceReplay`
      (``train.replay_size`` windows of ``agent.sequence_length`` steps,
      a new window every ``agent.sequence_period`` steps) with the rows'
      ``env_id``; the actor's carry before each step goes with it when the
      algorithm starts unrolls from stored state (``initial_state="stored"``);
    * :meth:`ready` is True every ``agent.train_every`` env steps once
      ``train.learning_starts`` env steps were collected; :meth:`learn` samples
      ``[T, B]`` windows and runs one pure ``update`` (compiled with
      ``train.compile``).
    """

    learning_starts_unit = "env steps"
    replay_size_unit = "windows"

    @classmethod
    def check_run_config(cls, run_config) -> None:
        """``train.learning_starts`` (env steps) fits ``train.total_steps`` and the env steps the replay
        holds (``train.replay_size`` windows, one every ``agent.sequence_period`` steps)."""
        t, period = run_config.train, run_config.agent.sequence_period
        holds = t.replay_size * period
        check_warmup(
            t, holds,
            f"train.replay_size={t.replay_size} windows, one every agent.sequence_period={period} "
            f"steps: about {holds} env steps",
        )

    # -- memory: what _make_replay will allocate ----------------------------------
    def _replay_shape(self) -> tuple[str, int, int, int]:
        """``(capacity key, capacity in windows, steps per window, extra bytes per window)``."""
        return "train.replay_size", self.train_cfg.replay_size, self.config.sequence_length, 0

    @property
    def pixels(self) -> bool:
        """A conv encoder (``agent.encoder`` not ``mlp``): frames go to a frame sequence replay as uint8."""
        return getattr(self.config, "encoder", "mlp") != "mlp"

    def _replay_need(self) -> Need:
        key, capacity, steps, extra = self._replay_shape()
        carry_bytes = 0
        if getattr(self.config, "initial_state", "zeros") == "stored":
            carry = self.algo.carry_to_td(self.algo.initial_carry(self.config, 1, device="meta"))
            carry_bytes = sum(v.numel() * v.element_size() for v in carry.values(True, True))
            extra += carry_bytes
        if self.pixels:  # each uint8 frame once (rlfunc.replay.frame_sequence)
            from rlfunc.replay.frame_sequence import default_frame_capacity, frame_replay_bytes

            period = self.config.sequence_period
            k = self.frame_stack
            ring = self.train_cfg.frame_capacity or default_frame_capacity(capacity, steps, self.frame_envs, period, k)
            nbytes = frame_replay_bytes(capacity, steps, self.num_envs, period, _numel(self.obs_space) // k,
                                        frame_capacity=ring, frame_stack=k, window_extra=extra, pending_extra=carry_bytes)
            each = "each frame stored once" if k == 1 else f"each frame of the stacks of {k} stored once"
            return Need(
                f"{key}={capacity}", nbytes,
                f"the replay of {self.env_id} windows of {steps} steps, {each}", f"lower {key}",
            )
        # obs and next_obs (float32), action (int64), reward (float32), terminated, truncated, mask (bool)
        per_step = 8 * _numel(self.obs_space) + 8 + 4 + 3
        per_window = steps * per_step + 16 + extra  # + the window's env and start (int64)
        return Need(
            f"{key}={capacity}", capacity * per_window,
            f"the replay of {self.env_id} windows of {steps} steps ({per_window} bytes each)", f"lower {key}",
        )

    def _sampled_rows(self) -> tuple[int, int]:
        """``(windows one update samples, bytes of each)``: ``agent.batch_size`` windows of float32 obs and
        next obs plus action, reward and flags per step."""
        _, _, steps, _ = self._replay_shape()
        return int(self.config.batch_size), steps * (8 * _numel(self.obs_space) + 8 + 4 + 3)

    def __init__(self, entry, run_config, obs_space: gym.Space, act_space: gym.Space) -> None:
        self._bind(entry, run_config, obs_space, act_space)
        self.num_envs = int(run_config.env.num_envs)
        # Envs whose frames a pixel replay's ring holds: a distributed learner's replay takes every actor's.
        d = getattr(run_config, "distributed", None)
        self.frame_envs = self.num_envs if d is None else d.actors * d.envs_per_actor
        self.frame_stack = frame_stack_size(run_config, obs_space) if self.pixels else 1
        if self.train_cfg.frame_capacity is not None and not self.pixels:
            raise ConfigError(
                f"train.frame_capacity sizes the frame ring of a pixel replay, but agent.encoder="
                f"{self.config.encoder!r} stores whole observations; remove train.frame_capacity."
            )
        self._check_memory()
        seed = self.train_cfg.seed
        self.state = self.algo.init(self.config, obs_space, act_space, seed=seed, device=self.device)
        self.replay = self._make_replay()
        self._init_acting(_generator(self.device, seed + 1))
        self._batch_keys = ["obs", "action", "reward", "next_obs", "terminated", "mask"]
        if self.store_carry:
            self._batch_keys.append("init_carry")
        self._update = learner_update(self.algo, self.train_cfg, self.state)
        self.state = _fixed_state(self._update, self.state)

    def _init_acting(self, generator: torch.Generator) -> None:
        """What acting keeps: the generator of its noise, one carry per env, the carry each env
        acted from, the exploration rates."""
        self.store_carry = getattr(self.config, "initial_state", "zeros") == "stored"
        self.generator = generator
        self.carry = self.algo.initial_carry(self.config, self.num_envs, device=self.device)
        self._carry_before = self.carry  # the carry each env acted from at the last explore
        self._epsilons = None  # [num_envs] fixed per-env rates, or None for the schedule
        if getattr(self.config, "exploration", "schedule") == "actor_ladder":
            self._epsilons = self._actor_epsilons()
        self._env_step = 0

    @classmethod
    def for_acting(cls, entry, run_config, obs_space: gym.Space, act_space: gym.Space, *, replay: SequenceReplay,
                   epsilons: torch.Tensor, seed: int):
        """An instance that only acts and cuts windows, for a distributed actor
        (:mod:`rlfunc.scale.distributed`): the same :meth:`explore` and :meth:`observe` as the
        single-process learner, no training state, update or replay of its own. ``replay`` (the
        actor's outbox; its ``num_envs`` are the actor's envs) receives the windows, ``epsilons``
        are its envs' fixed rates, ``seed`` seeds the acting noise. Set the parameters it acts with
        as ``acting.state = TensorDict({"params": params}, [])``."""
        self = cls.__new__(cls)
        self._bind(entry, run_config, obs_space, act_space)
        self.num_envs = self.frame_envs = replay.num_envs
        self.frame_stack = getattr(replay, "frame_stack", 1)
        self.replay = replay
        self._init_acting(_generator(self.device, seed))
        self._epsilons = torch.as_tensor(epsilons, dtype=torch.float32, device=self.device).reshape(self.num_envs)
        self.state = TensorDict({}, batch_size=[])
        return self

    def _make_replay(self) -> SequenceReplay:
        if self.pixels:
            from rlfunc.replay.frame_sequence import FrameSequenceReplay as cls
        else:
            cls = SequenceReplay
        return cls(
            self.train_cfg.replay_size,
            self.config.sequence_length,
            self.num_envs,
            period=self.config.sequence_period,
            device=self.device,
            **({"frame_envs": self.frame_envs, "frame_stack": self.frame_stack,
                "frame_capacity": self.train_cfg.frame_capacity} if self.pixels else {}),
        )

    # -- acting -------------------------------------------------------------
    def _actor_epsilons(self) -> torch.Tensor:
        return actor_epsilons(self.num_envs, self.config.epsilon_base, self.config.epsilon_alpha).to(self.device)

    def _epsilon(self, env_step: int) -> torch.Tensor:
        if self._epsilons is not None:
            return self._epsilons
        return self.algo.epsilon(self.config, env_step)

    @property
    def epsilons(self) -> torch.Tensor:
        """``[num_envs]`` exploration rate of each env at the last explored step."""
        return torch.broadcast_to(self._epsilon(self._env_step), (self.num_envs,)).clone()

    def _carry_before_step(self, start: torch.Tensor | None):
        """The carry each env acts from: the last one, zeroed where ``start [n]`` (bool) is True."""
        h, c = self.carry
        if start is not None:
            h = torch.where(start.reshape(-1, 1), 0.0, h)
            c = torch.where(start.reshape(-1, 1), 0.0, c)
        return (h, c)

    def act_fn(self, params: TensorDict, obs: torch.Tensor, carry, epsilon: torch.Tensor, noise: torch.Tensor):
        return self.algo.act(params, obs, carry, epsilon, noise)

    def act_inputs(self, obs: np.ndarray, env_step: int, episode_start: np.ndarray | None = None):
        """The observations, the carry each env acts from (zeroed at episode starts), its epsilon and
        the acting noise (no separate warm-up: the schedule starts at ``eps_start``)."""
        n = obs.shape[0]
        self._env_step = int(env_step)
        if n != self.num_envs:
            raise ValueError(f"explore got observations of {n} envs, the learner was built for {self.num_envs}.")
        obs_t = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
        start = None
        if episode_start is not None:
            start = torch.as_tensor(np.asarray(episode_start, dtype=bool), device=self.device).reshape(n)
        self._carry_before = self._carry_before_step(start)
        noise = self.algo.draw_act_noise(n, generator=self.generator, device=self.device)
        return obs_t, self._carry_before, self._epsilon(env_step), noise

    def act_outputs(self, out) -> np.ndarray:
        action, self.carry = out
        return action.cpu().numpy()

    def observe(self, rows: TensorDict) -> None:
        n = rows.batch_size[0]
        if n == 0:
            return
        env_ids = rows["env_id"].to(torch.int64)
        step = TensorDict(
            {
                "obs": rows["obs"].to(torch.uint8) if self.pixels else rows["obs"].float(),
                "action": rows["action"].to(torch.int64).reshape(n),
                "reward": rows["reward"].float().reshape(n),
                "next_obs": rows["next_obs"].to(torch.uint8) if self.pixels else rows["next_obs"].float(),
                "terminated": rows["terminated"].bool().reshape(n),
                "truncated": rows["truncated"].bool().reshape(n),
            },
            batch_size=[n],
        ).to(self.device)
        carry = None
        if self.store_carry:
            carry = self.algo.carry_to_td(self._carry_before)[env_ids.to(self.device)]
        self.replay.add(step, carry, env_ids=env_ids.cpu().numpy())

    # -- learning -----------------------------------------------------------
    def ready(self, env_step: int) -> bool:
        return (
            env_step >= self.train_cfg.learning_starts
            and env_step % self.config.train_every == 0
            and len(self.replay) >= 1
        )

    def sample_batch(self) -> TensorDict:
        return self.replay.sample(self.config.batch_size, generator=self.generator).select(*self._batch_keys)

    def update_inputs(self, rows: TensorDict | None = None) -> tuple[tuple, Any]:
        return (self.sample_batch() if rows is None else rows.select(*self._batch_keys),), None

    def population_replay(self, members: int):
        """:class:`~rlfunc.replay.population_sequence.PopulationSequenceReplay` for the uniform window
        replay (not for frame sequence or prioritized replays: their members stay separate)."""
        if type(self.replay) is not SequenceReplay:
            return None
        from rlfunc.replay.population_sequence import PopulationSequenceReplay

        r = self.replay
        return PopulationSequenceReplay(
            r.capacity, r.sequence_length, r.num_envs, members=members, period=r.period, device=self.device
        )

    def population_sample(self, replay, generators) -> TensorDict:
        return replay.sample(self.config.batch_size, generators)

    def after_update(self, metrics: TensorDict, context: Any) -> TensorDict:
        if self._epsilons is None:  # a fixed ladder is not a training curve
            # on the learner's device, beside the update's metrics (the trainer stacks their finiteness)
            metrics["epsilon"] = self._epsilon(self._env_step).to(self.device)
        if hasattr(self.replay, "windows_sampleable"):  # a frame replay: windows it can still sample (evicted ones out)
            metrics["replay_windows"] = torch.full((), float(self.replay.windows_sampleable), device=self.device)
        return metrics

    # -- saving -----------------------------------------------------------------
    def load_state_tensors(self, td: TensorDict) -> None:
        super().load_state_tensors(td)
        # The collector starts a new episode in every env after a restore:
        # close the replay's open episodes (bootstrapping through the cut, as
        # through a time limit) and start every carry from zeros.
        self.replay.flush()
        self.carry = self.algo.initial_carry(self.config, self.num_envs, device=self.device)
        self._carry_before = self.carry

    def export_meta(self) -> dict[str, Any]:
        meta = super().export_meta()
        meta["num_actions"] = int(self.act_space.n) if isinstance(self.act_space, gym.spaces.Discrete) else None
        return meta


class R2D2Learner(SequenceLearner):
    """R2D2 (:mod:`rlfunc.algos.r2d2`): :class:`SequenceLearner` with prioritized
    windows, stored state with the previous action and reward, and one fixed
    epsilon per actor.

    * **actors**: every env of the vector env is one actor with its own
      ``eps_i = epsilon_base^(1 + epsilon_alpha i / (N - 1))``
      (:func:`rlfunc.core.exploration.actor_epsilons`; Ape-X / R2D2). Inference is
      batched centrally, SEED-RL style: one ``act`` call per vector step
      computes the Q-values of all ``N`` actors with the learner's current
      parameters (no parameter lag, unlike the paper's distributed actors);
    * **carry**: :class:`rlfunc.algos.r2d2.Carry` ``(h, c, prev_action,
      prev_reward)`` per env, zeroed at episode starts
      (:func:`~rlfunc.algos.r2d2.prepare_carry`); :meth:`observe` writes each
      env's reward into it for the next step. The carry an env acted from is
      stored with each step, so every window keeps the state *before* its
      first step;
    * **replay**: :class:`~rlfunc.replay.prioritized.PrioritizedSequenceReplay`
      from :func:`~rlfunc.algos.r2d2.replay_kwargs` (``train.replay_size``
      windows of ``burn_in + sequence_length`` steps every
      ``sequence_period``; priority exponent 0.9, importance exponent 0.6);
      after each update the new priorities (``metrics["priorities"]``) are
      written back for the sampled windows and removed from the metrics;
    * **when to learn** (Acme's ``SampleToInsertRatio`` rate limiter, without
      blocking the actors): once ``train.learning_starts`` windows are stored
      (Acme's ``min_replay_size``; R2D2 counts this key in windows, not env
      steps), an update runs at an env step when ``(updates + 1) * batch_size
      <= samples_per_insert * (windows_inserted - learning_starts) +
      batch_size``, at most one update per env step (so ``samples_per_insert``
      above ``batch_size * sequence_period`` caps at one update per step).
      The slack is one batch; Acme's limiter allows an ``error_buffer`` of
      ``0.1 * samples_per_insert * min_replay_size`` samples (20,000 with its
      defaults: a burst of ~300 updates once ``min_replay_size`` windows are in;
      ``agents/jax/r2d2/builder.py`` ``make_replay_tables``).
    """

    ready_reads_updates = True  # the limiter counts this learner's updates

    learning_starts_unit = "windows stored"
    replay_size_unit = "windows"

    @classmethod
    def check_run_config(cls, run_config) -> None:
        """``train.learning_starts`` windows can be stored within ``train.total_steps`` (at most one per
        env step) and fit in the replay (``train.replay_size`` windows)."""
        t = run_config.train
        if t.learning_starts > t.total_steps:
            raise ConfigError(
                f"train.learning_starts={t.learning_starts} windows cannot be stored in train.total_steps={t.total_steps} "
                "env steps (at most one per env step): the run would end before learning starts; lower "
                "train.learning_starts or raise train.total_steps."
            )
        if t.learning_starts > t.replay_size:
            raise ConfigError(
                f"train.learning_starts={t.learning_starts} windows is more than the replay holds "
                f"(train.replay_size={t.replay_size} windows), so learning would never start; lower "
                "train.learning_starts or raise train.replay_size."
            )
        if not t.checkpoint_replay:
            raise ConfigError(
                "train.checkpoint_replay=false is not available for r2d2: its samples-per-insert bound counts the "
                "windows the replay has taken in, which an empty replay after resume would restart from zero and "
                "stall learning; keep train.checkpoint_replay=true."
            )

    def _replay_shape(self) -> tuple[str, int, int, int]:
        c = self.config
        # + the sum-tree's leaves and in-block prefix sums (float64) per sequence
        return "train.replay_size", self.train_cfg.replay_size, c.burn_in + c.sequence_length, 16

    def __init__(self, entry, run_config, obs_space: gym.Space, act_space: gym.Space) -> None:
        super().__init__(entry, run_config, obs_space, act_space)
        self._epsilons = self._actor_epsilons()
        self._batch_keys.append("weight")
        self._updates = 0  # = int(state["step"]), kept on the host (no device sync per env step)

    def _make_replay(self) -> SequenceReplay:
        kwargs = self.algo.replay_kwargs(self.config, self.train_cfg.replay_size)
        if self.pixels:
            from rlfunc.replay.frame_sequence import PrioritizedFrameSequenceReplay as cls

            kwargs["frame_envs"] = self.frame_envs
            kwargs["frame_stack"] = self.frame_stack
            kwargs["frame_capacity"] = self.train_cfg.frame_capacity
        else:
            from rlfunc.replay.prioritized import PrioritizedSequenceReplay as cls

        return cls(num_envs=self.num_envs, device=self.device, **kwargs)

    # -- acting -------------------------------------------------------------
    def _carry_before_step(self, start: torch.Tensor | None):
        return self.algo.prepare_carry(self.carry, reset=start)

    def act_fn(self, params: TensorDict, obs: torch.Tensor, carry, epsilon: torch.Tensor, noise: torch.Tensor):
        return self.algo.act(params, obs, None, None, carry, epsilon, noise)

    def observe(self, rows: TensorDict) -> None:
        super().observe(rows)
        n = rows.batch_size[0]
        if n == 0:
            return
        # The reward each env just got is the network's "previous reward" input at its next step.
        idx = rows["env_id"].to(torch.int64).to(self.device)
        prev_reward = self.carry.prev_reward.clone()
        prev_reward[idx] = rows["reward"].float().reshape(n).to(self.device)
        self.carry = self.carry._replace(prev_reward=prev_reward)

    # -- learning -----------------------------------------------------------
    def ready(self, env_step: int) -> bool:
        cfg, start = self.config, self.train_cfg.learning_starts
        if len(self.replay) < max(start, 1):
            return False
        allowed = cfg.samples_per_insert * (self.replay.windows_added - start) + cfg.batch_size
        return (self._updates + 1) * cfg.batch_size <= allowed

    def update_inputs(self, rows: TensorDict | None = None) -> tuple[tuple, Any]:
        sample = self.replay.sample(self.config.batch_size, generator=self.generator) if rows is None else rows
        return (sample.select(*self._batch_keys),), sample["window"][0]

    def after_update(self, metrics: TensorDict, context: Any) -> TensorDict:
        """The update's new priorities written back for the sampled windows (``context``)."""
        self._updates += 1
        priorities = metrics.pop("priorities")
        self.replay.update_priorities(context, priorities)
        # made on the learner's device, as the update's metrics: a CPU tensor among CUDA ones failed the
        # trainer's torch.stack of their finiteness at the first update on a GPU
        # windows that can be sampled: a pixel replay's evicted windows (frames overwritten) left out
        windows = getattr(self.replay, "windows_sampleable", len(self.replay))
        metrics["replay_windows"] = torch.full((), float(windows), device=self.device)
        return metrics

    # -- saving -----------------------------------------------------------------
    def load_state_tensors(self, td: TensorDict) -> None:
        super().load_state_tensors(td)
        self._updates = int(self.state["step"])
