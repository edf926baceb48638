"""``replay_sample`` -- batches per second of sampling 256 transitions (Hopper
shapes) from a full 100k-transition buffer: ``rlfunc`` ``UniformReplay``
(and ``PrioritizedSequenceReplay`` with 1-step windows, i.e. prioritized
transitions); SB3 ``ReplayBuffer`` (filled with its ``add``; ``sample``
returns torch tensors); TorchRL ``ReplayBuffer(LazyTensorStorage)`` and
``PrioritizedReplayBuffer`` (with torch 2.13 TorchRL's C++ extension does not
load, so its segment trees, hence its prioritized buffers, are unavailable).
"""

from __future__ import annotations

import numpy as np
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


def _transitions(n: int, obs: int, act: int):
    from tensordict import TensorDict

    g = torch.Generator().manual_seed(0)
    return TensorDict(
        {
            "obs": torch.randn(n, obs, generator=g),
            "action": torch.rand(n, act, generator=g) * 2 - 1,
            "reward": torch.randn(n, generator=g),
            "next_obs": torch.randn(n, obs, generator=g),
            "terminated": (torch.rand(n, generator=g) < 0.01).float(),
        },
        batch_size=[n],
    )


def task_replay_sample(task: str, args, sz: dict) -> list[dict]:
    from tensordict import TensorDict

    from rlfunc.replay.prioritized import PrioritizedSequenceReplay
    from rlfunc.replay.uniform import UniformReplay

    C, B, O, A = sz["replay_capacity"], sz["replay_batch"], sz["obs"], sz["act"]
    device = _device(args)
    data = _transitions(C, O, A)  # host data, stored into each buffer (on ``device`` where the buffer supports it)
    problem = {"stored_transitions": C, "batch": B, "obs_dim": O, "act_dim": A,
               "keys": "obs, action, reward, next_obs, terminated (float32)", "work_per_call": f"sample {B} transitions"}

    def rl_uniform():
        rb = UniformReplay(C, device=device)
        rb.add(data)
        g = torch.Generator(device=device).manual_seed(1)  # sampling draws its indices on ``device``
        return lambda: rb.sample(B, generator=g)

    def rl_prioritized():
        envs = 1000 if C % 1000 == 0 else 100
        rb = PrioritizedSequenceReplay(C, 1, num_envs=envs, period=1, device=device)
        zeros = torch.zeros(envs, dtype=torch.bool)
        for i in range(C // envs):
            rows = data[i * envs:(i + 1) * envs]
            rb.add(TensorDict({**rows.to_dict(), "truncated": zeros}, batch_size=[envs]))
        g = torch.Generator().manual_seed(1)
        rb.update_priorities(torch.arange(C), torch.rand(C, generator=g) * 10)
        gen = g if device.type == "cpu" else torch.Generator(device=device).manual_seed(1)  # sampling's, on device
        return lambda: rb.sample(B, generator=gen)

    def sb3_uniform():
        import gymnasium as gym
        from stable_baselines3.common.buffers import ReplayBuffer

        # SB3 stores numpy arrays on the host whatever ``device`` is; sample() copies the batch to ``device``
        rb = ReplayBuffer(C, gym.spaces.Box(-np.inf, np.inf, (O,), np.float32), gym.spaces.Box(-1, 1, (A,), np.float32),
                          device=device.type, n_envs=1)
        arrays = {k: v.numpy() for k, v in data.items()}
        info = [{}]
        for i in range(C):
            rb.add(arrays["obs"][i:i + 1], arrays["next_obs"][i:i + 1], arrays["action"][i:i + 1],
                   arrays["reward"][i:i + 1], arrays["terminated"][i:i + 1], info)
        return lambda: rb.sample(B)

    def trl_uniform():
        from torchrl.data import LazyTensorStorage, ReplayBuffer

        rb = ReplayBuffer(storage=_lazy_storage(LazyTensorStorage, C, device), batch_size=B)
        rb.extend(data)
        return lambda: rb.sample()

    def trl_prioritized():
        from torchrl.data import LazyTensorStorage, PrioritizedReplayBuffer

        rb = _torchrl_prioritized(lambda: PrioritizedReplayBuffer(
            alpha=0.9, beta=0.6, storage=_lazy_storage(LazyTensorStorage, C, device), batch_size=B))
        rb.extend(data)
        return lambda: rb.sample()

    missing = _unavailable_peers(("torchrl", "stable-baselines3"))
    on_dev = device.type != "cpu"
    if on_dev:
        problem["storage"] = (f"rlfunc and TorchRL store on {device.type} (rlfunc device=, LazyTensorStorage(device=)); "
                              f"SB3 stores numpy on the host and copies each sample to {device.type}")
    sb3_note = {"note": f"SB3's ReplayBuffer(device='{device.type}') stores numpy arrays on the host and copies every "
                        f"sampled batch to {device.type} (its real behaviour, measured as is)"} if on_dev else {}
    variants = [
        Variant("rlfunc", "UniformReplay", rl_uniform),
        Variant("rlfunc", "PrioritizedSequenceReplay, 1-step windows (prioritized transitions)", rl_prioritized,
                prioritized=True),
        Variant("stable-baselines3", "ReplayBuffer (numpy storage, returns torch tensors)", sb3_uniform,
                unavailable=missing.get("stable-baselines3"), **sb3_note),
        Variant("torchrl", "ReplayBuffer(LazyTensorStorage)", trl_uniform, unavailable=missing.get("torchrl")),
        Variant("torchrl", "PrioritizedReplayBuffer(LazyTensorStorage)", trl_prioritized,
                unavailable=missing.get("torchrl"), prioritized=True),
    ]
    _measure(variants, args)
    return _rows(task, "batches/s", problem, variants, args.threads, _device(args).type)
