"""Imperative R2D2 baseline, written the ordinary way.

R2D2 (Kapturowski et al. 2019) as one would write its learner in plain
PyTorch: an ``nn.Module`` recurrent Q-network (``nn.Linear`` + ReLU encoder,
one-hot previous action and ``tanh`` previous reward concatenated to the
features as Acme's ``OAREmbedding``, ``nn.LSTM``, dueling ``nn.Sequential``
heads), a deep-copied target network, ``torch.optim.Adam`` and one update as
``zero_grad`` / ``backward`` / ``step``. The loss is written out directly:

* both networks start from the stored state; the online network's burn-in
  runs under ``torch.no_grad()`` (the paper's stop-gradient), the target
  network is unrolled over burn-in and trained steps in one ``nn.LSTM`` call;
* n-step double-Q targets with value rescaling ``h`` / ``h^-1`` (``h^-1`` in
  float64, the textbook closed form), built with a Python loop over time and
  over the n steps: the sum stops at a termination and is cut short at the end
  of the valid part of the window, bootstrapping from the last valid step;
* ``0.5 * sum_t td^2`` over valid trained steps, times the importance weight,
  averaged over the batch; priorities ``0.9 max |td| + 0.1 mean |td|``;
* the target copied every ``target_period`` updates.

It exists for **parity tests** (``tests/test_r2d2_parity.py``: same loss,
gradients and priorities as :func:`rlfunc.algos.r2d2.loss` for the same
parameters and batch) and for the **speed comparison** of ``benchmarks/run.py
update --algo r2d2``. It is not part of the library.
"""

from __future__ import annotations

import copy
from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from tensordict import TensorDict

__all__ = ["R2D2Network", "ImperativeR2D2", "h", "h_inv"]


def h(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """Value rescaling ``sign(x)(sqrt(|x| + 1) - 1) + eps x`` (Pohlen et al. 2018)."""
    return torch.sign(x) * (torch.sqrt(x.abs() + 1.0) - 1.0) + eps * x


def h_inv(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """Inverse of :func:`h`, in float64: ``sign(x)(((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1)``."""
    y = x.double()
    out = torch.sign(y) * (((torch.sqrt(1.0 + 4.0 * eps * (y.abs() + 1.0 + eps)) - 1.0) / (2.0 * eps)) ** 2 - 1.0)
    return out.to(x.dtype)


def _mlp(sizes: Sequence[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class R2D2Network(nn.Module):
    """Encoder MLP (ReLU after every layer) -> [features, one-hot a_prev, tanh r_prev] -> ``nn.LSTM`` -> dueling head."""

    def __init__(
        self,
        obs_dim: int,
        num_actions: int,
        encoder_sizes: Sequence[int] = (512,),
        lstm_size: int = 512,
        head_sizes: Sequence[int] = (512,),
    ) -> None:
        super().__init__()
        self.num_actions = num_actions
        sizes = (obs_dim, *encoder_sizes)
        self.encoder = nn.ModuleList(nn.Linear(sizes[i], sizes[i + 1]) for i in range(len(sizes) - 1))
        self.torso: nn.Module | None = None  # set by from_functional for a pixel agent (ConvTorso)
        self.lstm = nn.LSTM(sizes[-1] + num_actions + 1, lstm_size)  # time-major [T, B, in]
        self.value = _mlp((lstm_size, *head_sizes, 1))
        self.advantage = _mlp((lstm_size, *head_sizes, num_actions))

    def forward(self, obs, prev_action, prev_reward, carry):
        """``obs [T, B, O]``, ``prev_action/prev_reward [T, B]``, ``carry (h, c)`` each ``[B, H]``
        -> ``(q [T, B, A], (h, c) each [B, H])``."""
        x = obs if self.torso is None else self.torso(obs)  # benchmarks/baselines/conv.py (pixel agents)
        for layer in self.encoder:
            x = F.relu(layer(x))
        x = torch.cat([x, F.one_hot(prev_action.long(), self.num_actions).to(x.dtype), torch.tanh(prev_reward).unsqueeze(-1)], -1)
        hs, (h_n, c_n) = self.lstm(x, (carry[0].unsqueeze(0), carry[1].unsqueeze(0)))
        adv = self.advantage(hs)
        q = self.value(hs) + adv - adv.mean(-1, keepdim=True)
        return q, (h_n[0], c_n[0])

    def load_functional(self, params: TensorDict) -> "R2D2Network":
        """Copy rlfunc R2D2 ``params`` (encoder / lstm / head.value / head.advantage) into this module."""
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
            for stream in ("value", "advantage"):
                linears = [m for m in getattr(self, stream) if isinstance(m, nn.Linear)]
                for i, layer in enumerate(linears):
                    layer.weight.copy_(params["head", stream, str(i), "weight"])
                    layer.bias.copy_(params["head", stream, str(i), "bias"])
        return self

    def functional_grads(self) -> TensorDict:
        """This module's ``.grad``s laid out as rlfunc's params TensorDict."""
        enc = {str(i): {"weight": m.weight.grad, "bias": m.bias.grad} for i, m in enumerate(self.encoder)}
        lstm = {name: getattr(self.lstm, f"{name}_l0").grad for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}
        head = {
            stream: {
                str(i): {"weight": m.weight.grad, "bias": m.bias.grad}
                for i, m in enumerate(x for x in getattr(self, stream) if isinstance(x, nn.Linear))
            }
            for stream in ("value", "advantage")
        }
        out = TensorDict({"encoder": enc, "lstm": lstm, "head": head}, batch_size=[])
        if self.torso is not None:
            out["torso"] = self.torso.functional_grads()
        return out


class ImperativeR2D2:
    """Online + target :class:`R2D2Network`, ``torch.optim.Adam``, periodic target copy."""

    def __init__(
        self,
        obs_dim: int,
        num_actions: int,
        *,
        encoder_sizes: Sequence[int] = (512,),
        lstm_size: int = 512,
        head_sizes: Sequence[int] = (512,),
        burn_in: int = 40,
        gamma: float = 0.997,
        n_step: int = 5,
        rescale_eps: float = 1e-3,
        lr: float = 1e-4,
        adam_eps: float = 1e-3,
        target_period: int = 2500,
        priority_eta: float = 0.9,
    ) -> None:
        self.q = R2D2Network(obs_dim, num_actions, encoder_sizes, lstm_size, head_sizes)
        self.target = copy.deepcopy(self.q)
        for p in self.target.parameters():
            p.requires_grad_(False)
        self.opt = torch.optim.Adam(self.q.parameters(), lr=lr, eps=adam_eps)
        self.burn_in, self.gamma, self.n_step, self.rescale_eps = burn_in, gamma, n_step, rescale_eps
        self.target_period, self.priority_eta = target_period, priority_eta
        self.steps = 0

    @classmethod
    def from_functional(cls, state: TensorDict, config, obs_shape=None) -> "ImperativeR2D2":
        """Same networks as an rlfunc R2D2 ``state`` (``r2d2.init``, dueling, both extra inputs), same hyperparameters."""
        if not (config.dueling and config.action_input and config.reward_input and config.value_rescaling):
            raise ValueError("The imperative baseline implements the default R2D2 network and target only.")
        params = state["params"]
        num_actions = params["head", "advantage", str(len(config.head_sizes)), "weight"].shape[0]
        agent = cls(
            params["encoder", "0", "weight"].shape[1] if config.encoder_sizes
            else params["lstm", "weight_ih"].shape[1] - num_actions - 1,
            num_actions,
            encoder_sizes=config.encoder_sizes,
            lstm_size=config.lstm_size,
            head_sizes=config.head_sizes,
            burn_in=config.burn_in,
            gamma=config.gamma,
            n_step=config.n_step,
            rescale_eps=config.rescale_eps,
            lr=config.lr,
            adam_eps=config.adam_eps,
            target_period=config.target_period,
            priority_eta=config.priority_eta,
        )
        if "torso" in params.keys():  # a pixel agent: the conv torso of benchmarks/baselines/conv.py first
            from benchmarks.baselines.conv import ConvTorso

            agent.q.torso = ConvTorso.from_functional(params["torso"], obs_shape)
            agent.target.torso = ConvTorso.from_functional(state["target", "torso"], obs_shape).requires_grad_(False)
            agent.opt = torch.optim.Adam(agent.q.parameters(), lr=config.lr, eps=config.adam_eps)
        agent.q.load_functional(params)
        agent.target.load_functional(state["target"])
        return agent

    def _targets(self, r, discount, v, valid_len):
        """n-step returns ``[T, B]`` with a loop over time and over the n steps.

        ``r, discount, v [T, B]``: reward, ``gamma * (1 - terminated)`` and the
        bootstrap value after each trained step; ``valid_len [B]``: valid steps.
        """
        T, B = r.shape
        out = torch.zeros_like(r)
        for t in range(T):
            ret = torch.zeros(B, dtype=r.dtype, device=r.device)
            scale = torch.ones(B, dtype=r.dtype, device=r.device)
            last = torch.full((B,), t, dtype=torch.long, device=r.device)
            for k in range(self.n_step):
                inside = (t + k < valid_len) & (t + k < T)
                idx = min(t + k, T - 1)
                ret = ret + torch.where(inside, scale * r[idx], torch.zeros_like(ret))
                scale = torch.where(inside, scale * discount[idx], scale)
                last = torch.where(inside, torch.full_like(last, idx), last)
            boot = v.gather(0, last.unsqueeze(0)).squeeze(0)
            out[t] = ret + scale * boot
        return out

    def loss(self, batch: TensorDict) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss, priorities [B])`` on a ``[burn_in + L, B]`` window batch."""
        burn = self.burn_in
        obs, next_obs = batch["obs"], batch["next_obs"]
        fdt = obs.dtype if obs.is_floating_point() else torch.float32  # pixel batches hold uint8 frames
        T_all, B = batch["mask"].shape
        action = batch["action"].long()
        reward = batch["reward"].to(fdt)
        init = batch["init_carry"][0]
        seq = torch.cat([obs[:1], next_obs], 0)  # o_0, o_1, ..., o_L
        prev_a = torch.cat([init["prev_action"].long().unsqueeze(0), action], 0)
        prev_r = torch.cat([init["prev_reward"].to(fdt).unsqueeze(0), reward], 0)
        start = (init["h"], init["c"])

        carry = start
        if burn > 0:
            with torch.no_grad():
                _, carry = self.q(seq[:burn], prev_a[:burn], prev_r[:burn], start)
        q_online, _ = self.q(seq[burn:], prev_a[burn:], prev_r[burn:], carry)  # [L + 1, B, A]
        with torch.no_grad():
            q_target, _ = self.target(seq, prev_a, prev_r, start)
            q_target = q_target[burn:]
            a_star = q_online[1:].argmax(-1, keepdim=True)
            v = q_target[1:].gather(-1, a_star).squeeze(-1)
            v = h_inv(v, self.rescale_eps)
            mask = batch["mask"][burn:].bool()
            discount = self.gamma * (1.0 - batch["terminated"][burn:].to(fdt))
            targets = h(self._targets(reward[burn:], discount, v, mask.sum(0)), self.rescale_eps)
        q_a = q_online[:-1].gather(-1, action[burn:].unsqueeze(-1)).squeeze(-1)
        td = torch.where(mask, targets - q_a, torch.zeros_like(q_a))
        weight = batch["weight"][0].to(td.dtype) if "weight" in batch.keys() else torch.ones(B, device=td.device)
        loss = (weight * 0.5 * td.pow(2).sum(0)).mean()
        abs_td = td.detach().abs()
        priorities = self.priority_eta * abs_td.max(0).values + (1 - self.priority_eta) * abs_td.sum(0) / mask.sum(0).clamp(min=1)
        return loss, priorities

    def update(self, batch: TensorDict) -> tuple[torch.Tensor, torch.Tensor]:
        """One gradient step; returns ``(loss, priorities)`` (detached)."""
        loss, priorities = self.loss(batch)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.steps += 1
        if self.steps % self.target_period == 0:
            self.target.load_state_dict(self.q.state_dict())
        return loss.detach(), priorities
