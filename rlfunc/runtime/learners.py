"""Learners: the stateful glue between the loop and a pure algorithm.

A learner owns the algorithm state (one TensorDict), its replay buffer and
its random generator, and exposes what the training loop needs:

* ``explore(obs, env_step, episode_start)`` -> actions for every env
  (random before ``train.random_steps``, then the stochastic policy;
  ``episode_start [num_envs]`` marks observations that begin an episode, where
  recurrent learners reset their carry);
* ``observe(rows)`` stores transitions from the collector;
* ``learn()`` -> metrics (or ``None`` while there is too little data);
* ``policy()`` -> a deterministic :class:`~rlfunc.runtime.policy.Policy`;
* ``state_tensors()`` / ``load_state_tensors(td)`` for checkpoints.

Only :meth:`learn` calls the (optionally compiled) pure ``update``; with
``train.cuda_graph`` it is wrapped by :func:`learner_update` so that the state
keeps fixed addresses and the update replays as a CUDA graph.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from rlfunc.replay.sequence import SequenceReplay
from rlfunc.replay.uniform import UniformReplay
from rlfunc.runtime.policy import Policy

__all__ = ["TransitionLearner", "SequenceLearner", "R2D2Learner", "PriorDataLearner", "PixelLearner"]


def compiled_update(algo, train_cfg):
    """The algorithm's ``update``, compiled as ``train.compile``/``train.compile_mode`` ask.

    Algorithms with a ``make_update(mode)`` (REDQ, SAC, RLPD) may compile per
    step (``"step"``: graphs independent of the number of updates per env
    step) or whole (``"full"``); others compile ``update`` whole.
    """
    if not train_cfg.compile:
        return algo.update
    if hasattr(algo, "make_update"):
        return algo.make_update(train_cfg.compile_mode)
    return torch.compile(algo.update, fullgraph=True)


def learner_update(algo, train_cfg, state: TensorDict):
    """What a learner calls as ``update``: :func:`compiled_update`, and with
    ``train.cuda_graph`` that update behind
    :class:`~rlfunc.runtime.graphs.FixedStateUpdate` (state at fixed addresses,
    recorded and replayed as a CUDA graph; eager with one warning if capture
    fails). The learner keeps calling ``self.state, metrics =
    self._update(self.state, batch[, noise])``.
    """
    update = compiled_update(algo, train_cfg)
    if getattr(train_cfg, "cuda_graph", False):
        from rlfunc.runtime.graphs import FixedStateUpdate

        return FixedStateUpdate(update, state, cuda_graph=True)
    return update


def _fixed_state(update, state: TensorDict) -> TensorDict:
    """The wrapper's own (fixed-address) state when ``update`` is a FixedStateUpdate, else ``state``."""
    from rlfunc.runtime.graphs import FixedStateUpdate

    return update.state if isinstance(update, FixedStateUpdate) else state


def _generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(int(seed))


class TransitionLearner:
    """Off-policy learning from uniformly replayed transitions (REDQ, SAC).

    Each call of :meth:`learn` draws ``G * B`` rows at once (``G =
    agent.updates_per_step``), reshapes them to ``[G, B]`` and runs one pure
    ``update`` over them: one environment step's worth of learning.
    """

    def __init__(self, entry, run_config, obs_space: gym.Space, act_space: gym.Space) -> None:
        self.entry = entry
        self.algo = entry.algo
        self.config = run_config.agent
        self.train_cfg = run_config.train
        self.device = torch.device(self.train_cfg.device)
        self.obs_space, self.act_space = obs_space, act_space
        seed = self.train_cfg.seed
        self.state = self.algo.init(self.config, obs_space, act_space, seed=seed, device=self.device)
        self.replay = UniformReplay(self.train_cfg.replay_size, device=self.device)
        self.generator = _generator(self.device, seed + 1)
        self.act_dim = int(np.prod(act_space.shape))
        self._update = learner_update(self.algo, self.train_cfg, self.state)
        self.state = _fixed_state(self._update, self.state)

    # -- acting -------------------------------------------------------------
    def explore(self, obs: np.ndarray, env_step: int, episode_start: np.ndarray | None = None) -> np.ndarray:
        n = obs.shape[0]
        if env_step < self.train_cfg.random_steps:
            a = torch.rand((n, self.act_dim), generator=self.generator, device=self.device) * 2.0 - 1.0
        else:
            obs_t = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
            noise = torch.randn((n, self.act_dim), generator=self.generator, device=self.device)
            a = self.algo.act(self.state["params"], obs_t, noise, config=self.config)
        return a.cpu().numpy()

    def observe(self, rows: TensorDict) -> None:
        stored = TensorDict(
            {
                "obs": rows["obs"].float(),
                "action": rows["action"].float(),
                "reward": rows["reward"].float(),
                "next_obs": rows["next_obs"].float(),
                "terminated": rows["terminated"].float(),
            },
            batch_size=rows.batch_size,
        )
        self.replay.add(stored)

    # -- learning -----------------------------------------------------------
    def ready(self, env_step: int) -> bool:
        return env_step >= self.train_cfg.random_steps and len(self.replay) >= 1

    def sample_batch(self) -> TensorDict:
        g, b = self.config.updates_per_step, self.config.batch_size
        return self.replay.sample(g * b, generator=self.generator).reshape(g, b)

    def learn(self) -> TensorDict:
        batch = self.sample_batch()
        g, b = batch.batch_size
        noise = self.algo.draw_noise(self.config, g, b, self.act_dim, generator=self.generator, device=self.device)
        self.state, metrics = self._update(self.state, batch, noise)
        return metrics

    def params_finite(self) -> bool:
        leaves = [v for v in self.state.exclude("config").values(True, True) if v.is_floating_point()]
        return bool(torch.stack([torch.isfinite(v).all() for v in leaves]).all())

    # -- evaluation and saving ---------------------------------------------
    def policy(self) -> Policy:
        low = high = None
        native = getattr(self, "native_action_space", None) or self.act_space
        if isinstance(native, gym.spaces.Box):
            low, high = native.low, native.high
        return Policy(self.entry.name, self.state["params"], self.config, low, high, self.obs_space.shape, self.device)

    def state_tensors(self) -> TensorDict:
        return TensorDict(
            {
                "state": self.state.exclude("config"),
                "replay": self.replay.state_dict(),
                "generator": self.generator.get_state(),
            },
            batch_size=[],
        )

    def load_state_tensors(self, td: TensorDict) -> None:
        state = td["state"].to(self.device)
        expected = set(self.state.exclude("config").keys(True, True))
        got = set(state.keys(True, True))
        if expected != got:
            missing = sorted(map(str, expected - got))[:3]
            raise ValueError(
                f"Checkpoint state does not match algo {self.entry.name!r} (missing {missing}); load it with the config it was trained with."
            )
        for key in expected:
            if state[key].shape != self.state[key].shape:
                raise ValueError(
                    f"Checkpoint tensor {key} has shape {tuple(state[key].shape)} but this config expects "
                    f"{tuple(self.state[key].shape)}; load it with the config it was trained with."
                )
        config = self.state.get_non_tensor("config")
        self.state = state
        self.state.set_non_tensor("config", config)
        self.replay.load_state_dict(td["replay"])
        self.generator.set_state(td["generator"])

    def export_meta(self) -> dict[str, Any]:
        """What :func:`rlfunc.load` needs besides the tensors."""
        meta: dict[str, Any] = {"obs_shape": list(self.obs_space.shape)}
        native = getattr(self, "native_action_space", None) or self.act_space
        if isinstance(native, gym.spaces.Box):
            meta["action_low"] = native.low.tolist()
            meta["action_high"] = native.high.tolist()
        return meta


class SequenceLearner(TransitionLearner):
    """Recurrent off-policy learning from replayed windows (DRQN; the ``dqn`` control).

    The algorithm module provides ``init``, ``update``, ``act`` (epsilon-greedy
    with explicit noise), ``epsilon(config, env_step)``, ``draw_act_noise``,
    ``initial_carry``, ``carry_to_td`` and ``greedy_action``
    (:mod:`rlfunc.algos.drqn`). Subclasses change the replay
    (:meth:`_make_replay`), the carry and the acting call
    (:meth:`_carry_before_step`, :meth:`_act`), the exploration rate
    (:meth:`_epsilon`) and when and how to learn (:meth:`ready`, :meth:`learn`):
    :class:`R2D2Learner`.

    * :meth:`explore` keeps one recurrent carry per env, zeroes it where
      ``episode_start`` is True, and acts epsilon-greedily with the schedule
      ``epsilon(config, env_step)`` (no separate uniform warm-up: the schedule
      starts at ``eps_start = 1``);
    * :meth:`observe` feeds a :class:`~rlfunc.replay.sequence.SequenceReplay`
      (``agent.buffer_windows`` windows of ``agent.sequence_length`` steps,
      a new window every ``agent.sequence_period`` steps) with the rows'
      ``env_id``; the actor's carry before each step goes with it when the
      algorithm starts unrolls from stored state (``initial_state="stored"``);
    * :meth:`ready` is True every ``agent.train_every`` env steps once
      ``agent.learning_starts`` steps were collected; :meth:`learn` samples
      ``[T, B]`` windows and runs one pure ``update`` (compiled with
      ``train.compile``).

    The agent section, not ``train``, sets the replay size and the warm-up:
    ``train.random_steps`` and ``train.replay_size`` are not used.
    """

    def __init__(self, entry, run_config, obs_space: gym.Space, act_space: gym.Space) -> None:
        self.entry = entry
        self.algo = entry.algo
        self.config = run_config.agent
        self.train_cfg = run_config.train
        self.device = torch.device(self.train_cfg.device)
        self.obs_space, self.act_space = obs_space, act_space
        self.num_envs = int(run_config.env.num_envs)
        seed = self.train_cfg.seed
        self.state = self.algo.init(self.config, obs_space, act_space, seed=seed, device=self.device)
        self.replay = self._make_replay()
        self.store_carry = getattr(self.config, "initial_state", "zeros") == "stored"
        self.generator = _generator(self.device, seed + 1)
        self.carry = self.algo.initial_carry(self.config, self.num_envs, device=self.device)
        self._carry_before = self.carry  # the carry each env acted from at the last explore
        self._env_step = 0
        self._batch_keys = ["obs", "action", "reward", "next_obs", "terminated", "mask"]
        if self.store_carry:
            self._batch_keys.append("init_carry")
        self._update = learner_update(self.algo, self.train_cfg, self.state)
        self.state = _fixed_state(self._update, self.state)

    def _make_replay(self) -> SequenceReplay:
        return SequenceReplay(
            self.config.buffer_windows,
            self.config.sequence_length,
            self.num_envs,
            period=self.config.sequence_period,
            device=self.device,
        )

    # -- acting -------------------------------------------------------------
    def _epsilon(self, env_step: int) -> torch.Tensor:
        return self.algo.epsilon(self.config, env_step)

    def _carry_before_step(self, start: torch.Tensor | None):
        """The carry each env acts from: the last one, zeroed where ``start [n]`` (bool) is True."""
        h, c = self.carry
        if start is not None:
            h = torch.where(start.reshape(-1, 1), 0.0, h)
            c = torch.where(start.reshape(-1, 1), 0.0, c)
        return (h, c)

    def _act(self, obs: torch.Tensor, carry, epsilon: torch.Tensor, noise: torch.Tensor):
        return self.algo.act(self.state["params"], obs, carry, epsilon, noise)

    def explore(self, obs: np.ndarray, env_step: int, episode_start: np.ndarray | None = None) -> np.ndarray:
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
        action, self.carry = self._act(obs_t, self._carry_before, self._epsilon(env_step), noise)
        return action.cpu().numpy()

    def observe(self, rows: TensorDict) -> None:
        n = rows.batch_size[0]
        if n == 0:
            return
        env_ids = rows["env_id"].to(torch.int64)
        step = TensorDict(
            {
                "obs": rows["obs"].float(),
                "action": rows["action"].to(torch.int64).reshape(n),
                "reward": rows["reward"].float().reshape(n),
                "next_obs": rows["next_obs"].float(),
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
            env_step >= self.config.learning_starts
            and env_step % self.config.train_every == 0
            and len(self.replay) >= 1
        )

    def sample_batch(self) -> TensorDict:
        return self.replay.sample(self.config.batch_size, generator=self.generator).select(*self._batch_keys)

    def learn(self) -> TensorDict:
        self.state, metrics = self._update(self.state, self.sample_batch())
        metrics["epsilon"] = self._epsilon(self._env_step)
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
      (:func:`rlfunc.algos.r2d2.actor_epsilons`; Ape-X / R2D2). Inference is
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
      from :func:`~rlfunc.algos.r2d2.replay_kwargs` (``replay_capacity``
      windows of ``burn_in + sequence_length`` steps every
      ``sequence_period``; priority exponent 0.9, importance exponent 0.6);
      after each update the new priorities (``metrics["priorities"]``) are
      written back for the sampled windows and removed from the metrics;
    * **when to learn** (Acme's ``SampleToInsertRatio`` rate limiter, without
      blocking the actors): once ``min_replay_size`` windows are stored, an
      update runs at an env step when ``(updates + 1) * batch_size <=
      samples_per_insert * (windows_inserted - min_replay_size) +
      batch_size``, at most one update per env step (so ``samples_per_insert``
      above ``batch_size * sequence_period`` caps at one update per step).

    The agent section sets replay size, warm-up and rate (``replay_capacity``,
    ``min_replay_size``, ``samples_per_insert``); ``train.random_steps`` and
    ``train.replay_size`` are not used.
    """

    def __init__(self, entry, run_config, obs_space: gym.Space, act_space: gym.Space) -> None:
        super().__init__(entry, run_config, obs_space, act_space)
        self._epsilons = self.algo.actor_epsilons(
            self.num_envs, self.config.epsilon_base, self.config.epsilon_alpha
        ).to(self.device)
        self._batch_keys.append("weight")
        self._updates = 0  # = int(state["step"]), kept on the host (no device sync per env step)

    def _make_replay(self) -> SequenceReplay:
        from rlfunc.replay.prioritized import PrioritizedSequenceReplay

        return PrioritizedSequenceReplay(
            num_envs=self.num_envs, device=self.device, **self.algo.replay_kwargs(self.config)
        )

    # -- acting -------------------------------------------------------------
    def _epsilon(self, env_step: int) -> torch.Tensor:
        return self._epsilons

    @property
    def epsilons(self) -> torch.Tensor:
        """``[num_envs]`` exploration rate of each actor (fixed for the whole run)."""
        return self._epsilons.clone()

    def _carry_before_step(self, start: torch.Tensor | None):
        return self.algo.prepare_carry(self.carry, reset=start)

    def _act(self, obs: torch.Tensor, carry, epsilon: torch.Tensor, noise: torch.Tensor):
        return self.algo.act(self.state["params"], obs, None, None, carry, epsilon, noise)

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
        cfg = self.config
        if len(self.replay) < max(cfg.min_replay_size, 1):
            return False
        allowed = cfg.samples_per_insert * (self.replay.windows_added - cfg.min_replay_size) + cfg.batch_size
        return (self._updates + 1) * cfg.batch_size <= allowed

    def learn(self) -> TensorDict:
        sample = self.replay.sample(self.config.batch_size, generator=self.generator)
        self.state, metrics = self._update(self.state, sample.select(*self._batch_keys))
        self._updates += 1
        priorities = metrics.pop("priorities")
        self.replay.update_priorities(sample["window"][0], priorities)
        metrics["replay_windows"] = torch.tensor(float(len(self.replay)))
        return metrics

    # -- saving -----------------------------------------------------------------
    def load_state_tensors(self, td: TensorDict) -> None:
        super().load_state_tensors(td)
        self._updates = int(self.state["step"])


class PriorDataLearner(TransitionLearner):
    """Off-policy learning from online replay mixed with prior data (RLPD).

    The run config's ``data`` section names the dataset (``.npz`` or Minari
    directory, :mod:`rlfunc.replay.offline`). It is loaded and validated
    against the env's spaces here, at construction, so a bad dataset stops
    the run before any env step. Each :meth:`learn` draws one ``[G, B]``
    batch in which every mini-batch holds exactly ``round(B *
    data.offline_ratio)`` prior rows and the rest from the online replay
    (:class:`~rlfunc.replay.offline.MixedSampler`); the prior data is never
    copied into the online buffer.

    ``data.pretrain_steps > 0`` (the earlier package's option; RLPD's
    default is 0) runs that many updates on prior-only ``[G, B]`` batches
    before the first online update (the official ``train_finetuning.py``
    pre-training loop).

    Checkpoints do not contain the dataset: they store its path and SHA-256
    (``meta["dataset"]`` and a tensor in the state), and a resumed run reloads
    the file and refuses to continue if it changed.
    """

    def __init__(self, entry, run_config, obs_space: gym.Space, act_space: gym.Space) -> None:
        from rlfunc.replay.offline import MixedSampler, load_dataset

        super().__init__(entry, run_config, obs_space, act_space)
        self.data_cfg = run_config.data
        self.dataset = None
        if self.data_cfg.path:
            native_act = _native_action_space(run_config, act_space)
            self.dataset = load_dataset(
                self.data_cfg.path,
                obs_space,
                native_act,
                fmt=self.data_cfg.format,
                env_id=run_config.env.id,
                device=self.device,
            )
        ratio = self.data_cfg.offline_ratio if self.dataset is not None else 0.0
        self.sampler = MixedSampler(self.dataset, self.replay, ratio)
        self.pretrained = 0

    def ready(self, env_step: int) -> bool:
        return env_step >= self.train_cfg.random_steps and self.sampler.ready()

    def sample_batch(self) -> TensorDict:
        g, b = self.config.updates_per_step, self.config.batch_size
        return self.sampler.sample(g, b, generator=self.generator)

    def pretrain(self) -> TensorDict | None:
        """Run the remaining ``data.pretrain_steps`` prior-only updates (no-op when done)."""
        metrics = None
        g, b = self.config.updates_per_step, self.config.batch_size
        while self.dataset is not None and self.pretrained < self.data_cfg.pretrain_steps:
            batch = self.dataset.sample(g * b, generator=self.generator).reshape(g, b)
            noise = self.algo.draw_noise(self.config, g, b, self.act_dim, generator=self.generator, device=self.device)
            self.state, metrics = self._update(self.state, batch, noise)
            self.pretrained += 1
        return metrics

    def learn(self) -> TensorDict:
        self.pretrain()
        return super().learn()

    def _checksum_tensor(self) -> torch.Tensor:
        digest = bytes.fromhex(self.dataset.checksum) if self.dataset is not None else b""
        return torch.tensor(list(digest), dtype=torch.uint8)

    def state_tensors(self) -> TensorDict:
        td = super().state_tensors()
        td["data"] = TensorDict(
            {"sha256": self._checksum_tensor(), "pretrained": torch.tensor(self.pretrained, dtype=torch.int64)},
            batch_size=[],
        )
        return td

    def load_state_tensors(self, td: TensorDict) -> None:
        from rlfunc.replay.offline import DatasetError

        if "data" in td.keys():
            saved = bytes(td["data", "sha256"].tolist()).hex()
            current = self._checksum_tensor()
            if saved != bytes(current.tolist()).hex():
                path = self.dataset.path if self.dataset is not None else None
                raise DatasetError(
                    f"The prior dataset {path!r} is not the one this run was trained with "
                    f"(sha256 {bytes(current.tolist()).hex()[:12] or 'none'} now, {saved[:12] or 'none'} in the checkpoint); "
                    "restore the original file or start a new run."
                )
            self.pretrained = int(td["data", "pretrained"])
        super().load_state_tensors(td)

    def export_meta(self) -> dict[str, Any]:
        from rlfunc.replay.offline import describe

        meta = super().export_meta()
        if self.dataset is not None:
            meta["dataset"] = describe(self.dataset)
        return meta


def _native_action_space(run_config, act_space: gym.Space) -> gym.Space:
    """The env's own action space (before rlfunc rescales it to [-1, 1])."""
    from rlfunc.envs import build_wrappers, make_env

    env = make_env(
        run_config.env.id,
        kwargs=run_config.env.kwargs,
        wrappers=build_wrappers(run_config.env.wrappers),
        rescale_actions=False,
    )
    space = env.action_space
    env.close()
    return space


class PixelLearner(TransitionLearner):
    """DrQ-v2 from pixels: frame-once n-step replay, an update every few agent steps.

    * :meth:`explore` acts uniformly at random for the first
      ``train.random_steps`` agent steps (DrQ-v2: 2000 = 4000 frames), then
      samples the policy with sigma from the schedule at the current agent
      step and *unclipped* noise (the official ``dist.sample(clip=None)``);
    * :meth:`observe` stores each step in a
      :class:`~rlfunc.replay.pixels.PixelReplay` (newest frame only; stacks
      and n-step rewards assembled at sample time; ``agent.nstep``,
      ``agent.gamma``, ``agent.frame_stack``); ``train.replay_size`` counts
      frames;
    * :meth:`ready` is True every ``agent.update_every`` agent steps once
      ``train.random_steps`` were collected; :meth:`learn` writes the agent
      step into ``state["agent_step"]`` (what the sigma schedule reads),
      samples one ``[B]`` batch and runs one pure ``update``.

    One env only (``env.num_envs: 1``), as in the official code.
    """

    def __init__(self, entry, run_config, obs_space: gym.Space, act_space: gym.Space) -> None:
        from rlfunc.replay.pixels import PixelReplay

        if int(run_config.env.num_envs) != 1:
            raise ValueError(
                f"{entry.name} trains on one env (env.num_envs: 1), got env.num_envs={run_config.env.num_envs}."
            )
        super().__init__(entry, run_config, obs_space, act_space)
        cfg = self.config
        if tuple(obs_space.shape)[0] % cfg.frame_stack != 0:
            raise ValueError(
                f"Observations have {obs_space.shape[0]} channels, not a multiple of agent.frame_stack={cfg.frame_stack}; "
                "set agent.frame_stack to the env's frame stack."
            )
        self.replay = PixelReplay(
            self.train_cfg.replay_size,
            tuple(obs_space.shape),
            self.act_dim,
            frame_stack=cfg.frame_stack,
            nstep=cfg.nstep,
            gamma=cfg.gamma,
            device=self.device,
        )
        self._env_step = 0

    def explore(self, obs: np.ndarray, env_step: int, episode_start: np.ndarray | None = None) -> np.ndarray:
        self._env_step = int(env_step)
        n = obs.shape[0]
        if env_step < self.train_cfg.random_steps:
            a = torch.rand((n, self.act_dim), generator=self.generator, device=self.device) * 2.0 - 1.0
        else:
            obs_t = torch.as_tensor(obs, device=self.device)
            noise = torch.randn((n, self.act_dim), generator=self.generator, device=self.device)
            a = self.algo.act(self.state["params"], obs_t, noise, config=self.config, step=env_step)
        return a.cpu().numpy()

    def observe(self, rows: TensorDict) -> None:
        for i in range(rows.batch_size[0]):
            self.replay.add(
                rows["obs"][i],
                rows["action"][i],
                float(rows["reward"][i]),
                rows["next_obs"][i],
                bool(rows["terminated"][i]),
                bool(rows["truncated"][i]),
            )

    def ready(self, env_step: int) -> bool:
        return (
            env_step >= self.train_cfg.random_steps
            and env_step % self.config.update_every == 0
            and len(self.replay) >= 1
        )

    def sample_batch(self) -> TensorDict:
        return self.replay.sample(self.config.batch_size, generator=self.generator)

    def learn(self) -> TensorDict:
        # In place (a fill kernel, no host sync): with train.cuda_graph the state's buffers must not move.
        self.state["agent_step"].fill_(self._env_step + 1)
        batch = self.sample_batch()
        noise = self.algo.draw_noise(
            self.config, batch.batch_size[0], self.act_dim, generator=self.generator, device=self.device
        )
        self.state, metrics = self._update(self.state, batch, noise)
        return metrics

    def load_state_tensors(self, td: TensorDict) -> None:
        super().load_state_tensors(td)
        # The collector starts a new episode after a restore: close the replay's open one.
        self.replay.flush()
