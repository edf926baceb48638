"""Imperative DRQN baseline, written the ordinary way.

DRQN (Hausknecht & Stone 2015) as one would write it in plain PyTorch: an
``nn.Module`` Q-network (``nn.Linear`` + ReLU encoder, ``nn.LSTM``, ``nn.Linear``
head), a deep-copied target network, ``torch.optim.Adam``, and one update as
``zero_grad`` / ``backward`` / ``step``. Same loss as
:func:`rlfunc.algos.drqn.loss`: both unrolls start from a zero state, the
target network is unrolled over ``o_0, next_obs_0 .. next_obs_{T-1}``, plain
max target (or double-Q), Huber (delta 1) TD error averaged over the valid
steps of the windows, target copied every ``target_period`` updates.

It exists for **parity tests** (``tests/test_drqn_parity.py``: same loss and
gradients as the functional update for the same parameters and batch) and for
the **speed comparison** of ``benchmarks/run.py update --algo drqn``. It is not
part of the library. ``nn.LSTM`` runs the whole window in one call (cuDNN on a
GPU, a fused ATen loop on a CPU), the ordinary way and the fast one.
"""

from __future__ import annotations

import copy
from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from tensordict import TensorDict

__all__ = ["RecurrentQNetwork", "ImperativeDRQN"]


class RecurrentQNetwork(nn.Module):
    """Encoder MLP (ReLU after every layer) -> one-layer ``nn.LSTM`` -> linear Q head."""

    def __init__(self, obs_dim: int, num_actions: int, encoder_sizes: Sequence[int] = (64,), lstm_size: int = 64):
        super().__init__()
        sizes = (obs_dim, *encoder_sizes)
        self.encoder = nn.ModuleList(nn.Linear(sizes[i], sizes[i + 1]) for i in range(len(sizes) - 1))
        self.torso: nn.Module | None = None  # set by from_functional for a pixel agent (ConvTorso)
        self.lstm = nn.LSTM(sizes[-1], lstm_size)  # time-major [T, B, in]
        self.head = nn.Linear(lstm_size, num_actions)

    def forward(self, obs: torch.Tensor, carry: tuple[torch.Tensor, torch.Tensor] | None = None):
        """``obs [T, B, O]`` -> ``(q [T, B, A], (h, c) each [1, B, H])``; ``carry=None`` is the zero state."""
        x = obs if self.torso is None else self.torso(obs)  # benchmarks/baselines/conv.py (pixel agents)
        for layer in self.encoder:
            x = F.relu(layer(x))
        hs, carry = self.lstm(x, carry)
        return self.head(hs), carry

    def load_functional(self, params: TensorDict) -> "RecurrentQNetwork":
        """Copy rlfunc DRQN ``params`` (encoder / lstm / head) into this module."""
        if self.torso is not None:
            with torch.no_grad():
                for i, conv in enumerate(self.torso.convs):
                    conv.weight.copy_(params["torso", self.torso.kind, str(i), "weight"])
                    conv.bias.copy_(params["torso", self.torso.kind, str(i), "bias"])
        with torch.no_grad():
            for i, layer in enumerate(self.encoder):
                layer.weight.copy_(params["encoder", str(i), "weight"])
                layer.bias.copy_(params["encoder", str(i), "bias"])
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(self.lstm, f"{name}_l0").copy_(params["lstm", name])
            self.head.weight.copy_(params["head", "weight"])
            self.head.bias.copy_(params["head", "bias"])
        return self

    def functional_grads(self) -> TensorDict:
        """This module's ``.grad``s laid out as rlfunc's params TensorDict."""
        enc = {
            str(i): {"weight": layer.weight.grad, "bias": layer.bias.grad} for i, layer in enumerate(self.encoder)
        }
        lstm = {name: getattr(self.lstm, f"{name}_l0").grad for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}
        head = {"weight": self.head.weight.grad, "bias": self.head.bias.grad}
        out = TensorDict({"encoder": enc, "lstm": lstm, "head": head}, batch_size=[])
        if self.torso is not None:
            out["torso"] = self.torso.functional_grads()
        return out


class ImperativeDRQN:
    """Online + target ``RecurrentQNetwork``, ``torch.optim.Adam``, periodic target copy."""

    def __init__(
        self,
        obs_dim: int,
        num_actions: int,
        *,
        encoder_sizes: Sequence[int] = (64,),
        lstm_size: int = 64,
        gamma: float = 0.99,
        lr: float = 1e-3,
        adam_eps: float = 1e-8,
        huber_delta: float | None = 1.0,
        target_period: int = 1000,
        double_q: bool = False,
    ) -> None:
        self.q = RecurrentQNetwork(obs_dim, num_actions, encoder_sizes, lstm_size)
        self.target = copy.deepcopy(self.q)
        for p in self.target.parameters():
            p.requires_grad_(False)
        self.opt = torch.optim.Adam(self.q.parameters(), lr=lr, eps=adam_eps)
        self.gamma = gamma
        self.huber_delta = huber_delta
        self.target_period = target_period
        self.double_q = double_q
        self.steps = 0

    @classmethod
    def from_functional(cls, state: TensorDict, config, obs_shape=None) -> "ImperativeDRQN":
        """Same networks as an rlfunc DRQN ``state`` (``drqn.init``), same hyperparameters."""
        params = state["params"]
        obs_dim = params["encoder", "0", "weight"].shape[1] if config.encoder_sizes else params["lstm", "weight_ih"].shape[1]
        num_actions = params["head", "weight"].shape[0]
        agent = cls(
            obs_dim,
            num_actions,
            encoder_sizes=config.encoder_sizes,
            lstm_size=config.lstm_size,
            gamma=config.gamma,
            lr=config.lr,
            adam_eps=config.adam_eps,
            huber_delta=config.huber_delta,
            target_period=config.target_period,
            double_q=config.double_q,
        )
        if "torso" in params.keys():  # a pixel agent: the conv torso of benchmarks/baselines/conv.py first
            from benchmarks.baselines.conv import ConvTorso

            agent.q.torso = ConvTorso.from_functional(params["torso"], obs_shape)
            agent.target.torso = ConvTorso.from_functional(state["target", "torso"], obs_shape).requires_grad_(False)
            agent.opt = torch.optim.Adam(agent.q.parameters(), lr=config.lr, eps=config.adam_eps)
        agent.q.load_functional(params)
        agent.target.load_functional(state["target"])
        return agent

    def loss(self, batch: TensorDict) -> torch.Tensor:
        obs, next_obs = batch["obs"], batch["next_obs"]
        fdt = obs.dtype if obs.is_floating_point() else torch.float32  # pixel batches hold uint8 frames
        mask = batch["mask"].bool()
        a = batch["action"].long()
        r = batch["reward"].to(fdt)
        discount = self.gamma * (1.0 - batch["terminated"].to(fdt))
        seq = torch.cat([obs[:1], next_obs], dim=0)
        if self.double_q:
            q_all, _ = self.q(seq)
            q, selector = q_all[:-1], q_all[1:].detach()
        else:
            q, _ = self.q(obs)
        with torch.no_grad():
            q_next = self.target(seq)[0][1:]
            if self.double_q:
                v_next = q_next.gather(-1, selector.argmax(-1, keepdim=True)).squeeze(-1)
            else:
                v_next = q_next.max(-1).values
            target = r + discount * v_next
        q_a = q.gather(-1, a.unsqueeze(-1)).squeeze(-1)
        td = torch.where(mask, target - q_a, torch.zeros_like(q_a))
        if self.huber_delta is None:
            per_step = 0.5 * td.pow(2)
        else:
            per_step = F.huber_loss(td, torch.zeros_like(td), reduction="none", delta=self.huber_delta)
        return (per_step * mask).sum() / mask.sum().clamp(min=1)

    def update(self, batch: TensorDict) -> torch.Tensor:
        """One gradient step on a ``[T, B]`` window batch; returns the loss (detached)."""
        loss = self.loss(batch)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.steps += 1
        if self.steps % self.target_period == 0:
            self.target.load_state_dict(self.q.state_dict())
        return loss.detach()
