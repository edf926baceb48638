"""DrQ-v2's learner from pixels (:class:`PixelLearner`)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from rlfunc.runtime.config import ConfigError
from rlfunc.runtime.learners.base import TransitionLearner, _numel, check_warmup
from rlfunc.runtime.memory import Need

__all__ = ["PixelLearner"]


class PixelLearner(TransitionLearner):
    """DrQ-v2 from pixels: frame-once n-step replay, an update every few agent steps.

    * :meth:`explore` acts uniformly at random for the first
      ``train.learning_starts`` agent steps (DrQ-v2: 2000 = 4000 frames), then
      samples the policy with sigma from the schedule at the current agent
      step and *unclipped* noise (the official ``dist.sample(clip=None)``);
    * :meth:`observe` stores each step in a
      :class:`~rlfunc.replay.pixels.PixelReplay` (newest frame only; stacks
      and n-step rewards assembled at sample time; ``agent.nstep``,
      ``agent.gamma``, ``agent.frame_stack``); ``train.replay_size`` counts
      frames (one per agent step plus one per episode start);
    * :meth:`ready` is True every ``agent.update_every`` agent steps once
      ``train.learning_starts`` were collected; :meth:`learn` writes the agent
      step into ``state["agent_step"]`` (what the sigma schedule reads),
      samples one ``[B]`` batch and runs one pure ``update``;
    * the trainer runs the update between acting and stepping the env
      (``learns_before_env_step``), the official order (drqv2 ``train.py``:
      ``act``, ``agent.update(replay_iter, global_step)``, ``env.step``): the
      update at agent step ``t`` sees ``t`` stored steps, uses ``t`` for the
      schedule, and runs on the device while the env renders on the host;
    * on CUDA it turns on ``torch.backends.cudnn.benchmark`` as the official
      ``train.py`` does (fixed image shapes: cuDNN times its convolution
      algorithms once and keeps the fastest).

    One env only (``env.num_envs: 1``), as in the official code.
    """

    learns_before_env_step = True
    learning_starts_unit = "agent steps"
    replay_size_unit = "frames"

    @classmethod
    def check_run_config(cls, run_config) -> None:
        """One env; ``train.learning_starts`` (agent steps) fits ``train.total_steps`` and the replay (frames)."""
        if int(run_config.env.num_envs) != 1:
            raise ConfigError(
                f"{run_config.algo} trains on one env (env.num_envs: 1), got env.num_envs={run_config.env.num_envs}; "
                "set env.num_envs=1."
            )
        t = run_config.train
        check_warmup(t, t.replay_size, f"train.replay_size={t.replay_size} frames")

    def _replay_need(self) -> Need:
        """A :class:`~rlfunc.replay.pixels.PixelReplay`: per-slot bookkeeping for every slot, frames as written."""
        frame = _numel(self.obs_space) // self.config.frame_stack  # uint8 [C, H, W] of one frame
        # action (float32), reward (float32), terminated, valid (device + host), episode start (device + host, int64)
        per_slot = 4 * _numel(self.act_space) + 4 + 1 + 2 + 16
        cap = self.train_cfg.replay_size
        frames = min(cap, self.train_cfg.total_steps + 1)  # frames are committed only as they are written
        return Need(
            f"train.replay_size={cap}",
            cap * per_slot + frames * frame,
            f"the pixel replay of {self.env_id} ({per_slot} bytes per slot, {frame}-byte frames for "
            f"{frames} agent steps)",
            "lower train.replay_size",
        )

    def __init__(self, entry, run_config, obs_space: gym.Space, act_space: gym.Space) -> None:
        from rlfunc.replay.pixels import PixelReplay

        self.check_run_config(run_config)
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
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = True

    def act_inputs(self, obs: np.ndarray, env_step: int, episode_start: np.ndarray | None = None):
        self._env_step = int(env_step)
        n = obs.shape[0]
        if env_step < self.train_cfg.learning_starts:
            a = torch.rand((n, self.act_dim), generator=self.generator, device=self.device) * 2.0 - 1.0
            return a.cpu().numpy()
        obs_t = torch.as_tensor(obs, device=self.device)
        noise = torch.randn((n, self.act_dim), generator=self.generator, device=self.device)
        # the agent step as a (host) tensor, what sigma's schedule makes of an int (torch.as_tensor(step))
        return obs_t, noise, torch.tensor(int(env_step))

    def act_fn(self, params, obs: torch.Tensor, noise: torch.Tensor, step: torch.Tensor):
        return self.algo.act(params, obs, noise, config=self.config, step=step)

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
            env_step >= self.train_cfg.learning_starts
            and env_step % self.config.update_every == 0
            and len(self.replay) >= 1
        )

    def sample_batch(self) -> TensorDict:
        return self.replay.sample(self.config.batch_size, generator=self.generator)

    def prepare_state(self, state: TensorDict) -> None:
        # The agent step explore() was called with (learn runs right after it); in place (a fill kernel,
        # no host sync): with train.cuda_graph the state's buffers must not move.
        state["agent_step"].fill_(self._env_step)

    def update_inputs(self, rows: TensorDict | None = None):
        batch = self.sample_batch() if rows is None else rows
        noise = self.algo.draw_noise(
            self.config, batch.batch_size[0], self.act_dim, generator=self.generator, device=self.device
        )
        return (batch, noise), None

    def population_replay(self, members: int):
        """:class:`~rlfunc.replay.population_pixels.PopulationPixelReplay`: every member's frame ring in one storage."""
        from rlfunc.replay.population_pixels import PopulationPixelReplay

        r = self.replay
        return PopulationPixelReplay(
            r.capacity, r.obs_shape, r.action_dim, members=members, frame_stack=r.frame_stack, nstep=r.nstep,
            gamma=r.gamma, device=self.device,
        )

    def population_sample(self, replay, generators) -> TensorDict:
        return replay.sample(self.config.batch_size, generators)

    def load_state_tensors(self, td: TensorDict) -> None:
        super().load_state_tensors(td)
        # The collector starts a new episode after a restore: close the replay's open one.
        self.replay.flush()
