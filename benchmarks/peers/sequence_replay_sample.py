"""``replay_sample_sequence`` -- batches per second of sampling 32 windows of 10
steps (DRQN shapes) from 100k stored transitions (episodes of 200 steps):
``rlfunc`` ``SequenceReplay`` and ``PrioritizedSequenceReplay``; TorchRL
``ReplayBuffer(LazyTensorStorage, SliceSampler(slice_len=10))`` (slices start
anywhere inside an episode; rlfunc stores aligned windows) and
``PrioritizedSliceSampler`` (unavailable, as above). SB3 has no sequence
replay (its recurrent buffers live in sb3-contrib and are on-policy rollouts).
"""

from __future__ import annotations

import torch

from benchmarks.peers.measure import (
    Variant,
    _device,
    _lazy_storage,
    _measure,
    _rows,
    _torchrl_prioritized,
    _unavailable_peers,
)


def task_replay_sample_sequence(task: str, args, sz: dict) -> list[dict]:
    from tensordict import TensorDict

    from rlfunc.replay.prioritized import PrioritizedSequenceReplay
    from rlfunc.replay.sequence import SequenceReplay

    C, T, B, L = sz["replay_capacity"], sz["seq_window"], sz["seq_batch"], sz["seq_episode"]
    O = sz["drqn_obs"]
    device = _device(args)
    envs = C // L  # envs in lockstep, one episode of L steps each
    g = torch.Generator().manual_seed(0)
    obs = torch.randn(L, envs, O, generator=g)
    problem = {"stored_transitions": envs * L, "episode_length": L, "window": T, "batch_windows": B, "obs_dim": O,
               "keys": "obs, action (int64), reward, next_obs, terminated, truncated",
               "work_per_call": f"sample {B} windows of {T} steps"}

    def step_td(t: int) -> TensorDict:
        last = torch.full((envs,), t == L - 1)
        return TensorDict(
            {"obs": obs[t], "action": torch.randint(2, (envs,), generator=g), "reward": obs[t, :, 0],
             "next_obs": obs[t] + 1, "terminated": torch.zeros(envs, dtype=torch.bool), "truncated": last},
            batch_size=[envs],
        )

    steps = [step_td(t) for t in range(L)]

    def rl(cls):
        def setup():
            rb = cls(C // T, T, num_envs=envs, period=T, device=device)
            for td in steps:
                rb.add(td)
            if hasattr(rb, "update_priorities"):
                rb.update_priorities(torch.arange(len(rb)), torch.rand(len(rb), generator=g) * 10)
            gen = torch.Generator(device=device).manual_seed(1)  # sampling draws its indices on ``device``
            return lambda: rb.sample(B, generator=gen)

        return setup

    def trl(prioritized: bool):
        def setup():
            from torchrl.data import LazyTensorStorage, ReplayBuffer
            from torchrl.data.replay_buffers import PrioritizedSliceSampler, SliceSampler

            flat = torch.stack(steps, 0).transpose(0, 1).reshape(envs * L)  # episode-contiguous
            flat["episode"] = torch.arange(envs).repeat_interleave(L)
            if prioritized:
                sampler = _torchrl_prioritized(lambda: PrioritizedSliceSampler(
                    max_capacity=envs * L, alpha=0.9, beta=0.6, slice_len=T, traj_key="episode"))
            else:
                sampler = SliceSampler(slice_len=T, traj_key="episode")
            rb = ReplayBuffer(storage=_lazy_storage(LazyTensorStorage, envs * L, device), sampler=sampler, batch_size=B * T)
            rb.extend(flat)
            return lambda: rb.sample()

        return setup

    missing = _unavailable_peers(("torchrl",))
    variants = [
        Variant("rlfunc", "SequenceReplay", rl(SequenceReplay)),
        Variant("rlfunc", "PrioritizedSequenceReplay", rl(PrioritizedSequenceReplay), prioritized=True),
        Variant("torchrl", "ReplayBuffer(LazyTensorStorage, SliceSampler)", trl(False), unavailable=missing.get("torchrl")),
        Variant("torchrl", "ReplayBuffer(LazyTensorStorage, PrioritizedSliceSampler)", trl(True),
                unavailable=missing.get("torchrl"), prioritized=True),
        Variant("stable-baselines3", "-", unavailable="SB3 has no sequence replay (sb3-contrib's recurrent buffers are on-policy rollouts)"),
    ]
    _measure(variants, args)
    return _rows(task, "batches/s", problem, variants, args.threads, _device(args).type)
