"""Imperative pixel torsos for the DRQN and R2D2 baselines: ``nn.Conv2d`` + ReLU stacks, flattened.

The same torsos as :func:`rlfunc.core.nets.torso_apply`, written the ordinary way: ``"minatar"``
(Young & Tian 2019: one 3x3 conv, 16 channels, on channels-last ``[..., 10, 10, C]`` boolean
planes, permuted to channels first) and ``"nature"`` (Mnih et al. 2015: 32 8x8 /4, 64 4x4 /2,
64 3x3 /1 on ``[..., H, W]`` frames or ``[..., S, H, W]`` stacks, scaled by 1/255). For the
parity tests of ``tests/test_pixel_recurrent_parity.py``; not part of the library.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from tensordict import TensorDict

__all__ = ["ConvTorso"]

_LAYERS = {"minatar": [(16, 3, 1)], "nature": [(32, 8, 4), (64, 4, 2), (64, 3, 1)]}  # (channels, kernel, stride)


class ConvTorso(nn.Module):
    """``kind``'s conv stack for ``in_channels`` input planes; ``frame_rank`` dims per observation."""

    def __init__(self, kind: str, in_channels: int, frame_rank: int) -> None:
        super().__init__()
        self.kind, self.frame_rank = kind, frame_rank
        convs, c = [], in_channels
        for out, k, s in _LAYERS[kind]:
            convs.append(nn.Conv2d(c, out, k, stride=s))
            c = out
        self.convs = nn.ModuleList(convs)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        lead = obs.shape[: obs.dim() - self.frame_rank]
        x = obs.reshape(-1, *obs.shape[len(lead):]).float()
        if self.kind == "minatar":
            x = x.permute(0, 3, 1, 2)
        else:
            x = (x.unsqueeze(1) if x.dim() == 3 else x) / 255.0
        for conv in self.convs:
            x = torch.relu(conv(x))
        return x.flatten(1).reshape(*lead, -1)

    @classmethod
    def from_functional(cls, torso: TensorDict, obs_shape) -> "ConvTorso":
        """The torso of rlfunc ``params["torso"]`` (``{kind: {"0": conv, ...}}``), its weights copied."""
        kind = next(iter(torso.keys()))
        module = cls(kind, torso[kind, "0", "weight"].shape[1], len(obs_shape))
        with torch.no_grad():
            for i, conv in enumerate(module.convs):
                conv.weight.copy_(torso[kind, str(i), "weight"])
                conv.bias.copy_(torso[kind, str(i), "bias"])
        return module

    def functional_grads(self) -> TensorDict:
        """The ``.grad``s in rlfunc's ``params["torso"]`` layout."""
        return TensorDict(
            {self.kind: {str(i): {"weight": c.weight.grad, "bias": c.bias.grad} for i, c in enumerate(self.convs)}}, []
        )
