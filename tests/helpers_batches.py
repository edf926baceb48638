"""Random sequence batches shaped as DRQN's and R2D2's updates take them (population tests)."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from rlfunc.algos import r2d2


def sequence_batch(T, B, g):
    return TensorDict(
        {
            "obs": torch.randn(T, B, 4, generator=g),
            "action": torch.randint(2, (T, B), generator=g),
            "reward": torch.randn(T, B, generator=g),
            "next_obs": torch.randn(T, B, 4, generator=g),
            "terminated": torch.rand(T, B, generator=g) < 0.1,
            "mask": torch.rand(T, B, generator=g) < 0.9,
        },
        batch_size=[T, B],
    )


def r2d2_batch(config, g):
    T, B = config.burn_in + config.sequence_length, config.batch_size
    batch = sequence_batch(T, B, g)
    carry = r2d2.Carry(
        torch.randn(B, config.lstm_size, generator=g),
        torch.randn(B, config.lstm_size, generator=g),
        torch.randint(2, (B,), generator=g),
        torch.randn(B, generator=g),
    )
    batch["init_carry"] = r2d2.carry_to_td(carry).expand(T, B)
    batch["weight"] = torch.rand(B, generator=g).expand(T, B)
    return batch
