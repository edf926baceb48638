"""DrQ-v2's learner from pixels (:class:`PixelLearner`)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from rlfunc.runtime.config import ConfigError
from rlfunc.runtime.learners.base import TransitionLearner, _numel, check_warmup
from rlfunc.runtime.memory import Need, format_bytes

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
        """A :class:`~rlfunc.replay.pixels.PixelReplay`: per-slot bookkeeping for every slot, and its frames:
        on the CPU those the run writes (the ring is ``torch.empty``: its pages are committed only as frames
        are written), on any other device (CUDA) the whole ring, which the device reserves at once."""
        frame = _numel(self.obs_space) // self.config.frame_stack  # uint8 [C, H, W] of one frame
        # action (float32), reward (float32), terminated, valid (device + host), episode start (device + host, int64)
        per_slot = 4 * _numel(self.act_space) + 4 + 1 + 2 + 16
        cap = self.train_cfg.replay_size
        if self.device.type == "cpu":
            frames = min(cap, self.train_cfg.total_steps + 1)  # frames are committed only as they are written
            held = f"{frames} agent steps"
        else:
            frames = cap
            held = f"all {cap} slots, reserved at once on {self.device.type}"
        return Need(
            f"train.replay_size={cap}",
            cap * per_slot + frames * frame,
            f"the pixel replay of {self.env_id} ({per_slot} bytes per slot, {frame}-byte frames for {held})",
            "lower train.replay_size",
        )

    # One update's working memory, measured on the CPU as the peak RSS growth over a learner's first
    # learn() (the replay holding 40 random steps), across batch size, image size and encoder width:
    # 84x84x9 images, 4x32 convs: 264 MB at batch 64, 871 MB at 256 (3.16 MB a sample +
    # 62 MB); 64x64: 176 / 528 MB (1.83 MB a sample + 58 MB); 84x84 with 4x16 convs: 686 MB at 256;
    # agent.hidden_dim 256 instead of 1024: 256 / 852 MB (the networks barely move it). Per sample that is
    # ~7x the float32 image (the uint8 batch as floats, obs and next obs, each shifted and normalized, and
    # the image gradient) plus ~2x the encoder's feature maps (kept for the backward pass, and their
    # gradients): 7 x 254 KB + 2 x 742 KB = 3.26 MB at 84x84 (3% over the measured), 1.84 MB at 64x64, 2.52 MB
    # with 4x16 convs; plus a fixed 64 MB (the measured 58-62 MB).
    UPDATE_IMAGE_COPIES = 7
    UPDATE_FEATURE_COPIES = 2
    UPDATE_FIXED_BYTES = 64_000_000

    def _batch_need(self) -> Need:
        """One update's working memory (not only its sampled rows): ``agent.batch_size`` x (the augmented
        float32 images and the encoder's feature maps with their gradients) plus a fixed part, from the
        measurements above (the comment on :attr:`UPDATE_IMAGE_COPIES`)."""
        from rlfunc.core.nets import conv_encoder_output_shape

        cfg = self.config
        image = 4 * _numel(self.obs_space)  # one stacked observation as float32
        shape = tuple(self.obs_space.shape)
        channels, strides = tuple(cfg.encoder_channels), tuple(cfg.encoder_strides)
        try:  # every conv layer's feature map [C, H, W] as float32
            features = sum(
                4 * math.prod(conv_encoder_output_shape(shape, channels[: i + 1], strides[: i + 1]))
                for i in range(len(channels))
            )
        except ValueError:  # images too small for the encoder: init refuses them in its own words
            features = 0
        per = self.UPDATE_IMAGE_COPIES * image + self.UPDATE_FEATURE_COPIES * features
        b = int(cfg.batch_size)
        return Need(
            f"agent.batch_size={b}", b * per + self.UPDATE_FIXED_BYTES,
            f"each update's working memory ({format_bytes(per)} a sample: augmented images, encoder activations "
            f"and gradients)", "lower agent.batch_size",
        )

    population_replaces_replay = True
    """A population (:mod:`rlfunc.runtime.population`) builds each member with ``own_replay=False``:
    :meth:`population_replay` holds every member's ring, so no member allocates one of its own first."""

    def __init__(self, entry, run_config, obs_space: gym.Space, act_space: gym.Space, *, own_replay: bool = True) -> None:
        """``own_replay=False``: no :class:`~rlfunc.replay.pixels.PixelReplay` of its own (``self.replay`` is
        ``None`` until :meth:`use_replay` hands it its row of a population's :meth:`population_replay`)."""
        self.check_run_config(run_config)
        super().__init__(entry, run_config, obs_space, act_space)
        cfg = self.config
        if tuple(obs_space.shape)[0] % cfg.frame_stack != 0:
            raise ValueError(
                f"Observations have {obs_space.shape[0]} channels, not a multiple of agent.frame_stack={cfg.frame_stack}; "
                "set agent.frame_stack to the env's frame stack."
            )
        self.replay = None
        if own_replay:
            from rlfunc.replay.pixels import PixelReplay

            self.replay = PixelReplay(self.train_cfg.replay_size, **self._replay_kwargs())
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

    def _replay_kwargs(self) -> dict:
        """The :class:`~rlfunc.replay.pixels.PixelReplay` arguments after its capacity (``train.replay_size``)."""
        cfg = self.config
        return dict(obs_shape=tuple(self.obs_space.shape), action_dim=self.act_dim, frame_stack=cfg.frame_stack,
                    nstep=cfg.nstep, gamma=cfg.gamma, device=self.device)

    def population_replay(self, members: int):
        """:class:`~rlfunc.replay.population_pixels.PopulationPixelReplay`: every member's frame ring in one storage
        (built from the config: a member built with ``own_replay=False`` has no replay to copy it from)."""
        from rlfunc.replay.population_pixels import PopulationPixelReplay

        return PopulationPixelReplay(self.train_cfg.replay_size, members=members, **self._replay_kwargs())

    def population_sample(self, replay, generators) -> TensorDict:
        return replay.sample(self.config.batch_size, generators)

    def load_state_tensors(self, td: TensorDict) -> None:
        super().load_state_tensors(td)
        # The collector starts a new episode after a restore: close the replay's open one.
        self.replay.flush()
