"""Imperative RLPD baseline: the REDQ baseline with RLPD's changes, written the ordinary way.

RLPD (Ball et al., ICML 2023; official code ikostrikov/rlpd, JAX) is SAC with
a REDQ critic ensemble. This baseline reuses :mod:`benchmarks.baselines.redq`
(``N`` ``nn.Module`` critics, ``N`` ``torch.optim.Adam``, Python loops,
``.backward()``) and changes exactly what RLPD changes
(``rlpd/agents/sac/sac_learner.py``, ``rlpd/networks/mlp.py``):

* critics are ``Linear -> nn.LayerNorm(eps=1e-6) -> ReLU`` in every hidden
  layer, a plain ``Linear`` output (:class:`LayerNormMlp`); the actor has no
  LayerNorm;
* the policy's log-probability uses the exact tanh log-determinant
  ``2 (log 2 - u - softplus(-2u))`` (TFP's ``Tanh`` bijector), no epsilon;
* the critic loss is the mean over critics and rows
  (``((qs - target_q) ** 2).mean()``), not REDQ's sum over critics;
* order of one environment step (``SACLearner.update``): ``G`` critic updates
  (target subset, loss, step, polyak), **then** one actor update on the last
  mini-batch with the *updated* critics, then one temperature update with
  loss ``alpha * (entropy - target_entropy)``, where ``entropy`` is the
  actor step's ``-mean(log pi)``; target entropy ``-|A| / 2``.

Randomness is given (``update(batch, noise)`` with
:func:`rlfunc.algos.rlpd.draw_noise`'s layout), as in the REDQ baseline. Used by
``tests/test_rlpd_parity.py`` and ``benchmarks/run.py update --algo rlpd``.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from tensordict import TensorDict

from benchmarks.baselines.redq import ImperativeREDQ, TanhGaussianPolicy, _weights_init_

__all__ = ["LayerNormMlp", "ExactTanhGaussianPolicy", "ImperativeRLPD"]

_LOG_2PI = math.log(2.0 * math.pi)
_LOG_2 = math.log(2.0)


class LayerNormMlp(nn.Module):
    """RLPD critic: ``Linear -> LayerNorm -> ReLU`` per hidden layer, then ``Linear``.

    ``layers[i]`` is rlfunc's ``str(i)``, ``norms[i]`` its ``"norm" + str(i)``.
    """

    def __init__(self, sizes: Sequence[int], eps: float = 1e-6) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(sizes[i], sizes[i + 1]) for i in range(len(sizes) - 1))
        self.norms = nn.ModuleList(nn.LayerNorm(sizes[i + 1], eps=eps) for i in range(len(sizes) - 2))
        self.apply(_weights_init_)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.norms):
                x = F.relu(self.norms[i](x))
        return x


class ExactTanhGaussianPolicy(TanhGaussianPolicy):
    """Tanh-Gaussian policy whose log-probability uses the exact tanh log-det (TFP ``Tanh``)."""

    def forward(self, obs: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.trunk(obs)
        mean = self.mean(h)
        log_std = torch.clamp(self.log_std(h), self.log_std_min, self.log_std_max)
        pre_tanh = mean + torch.exp(log_std) * noise
        action = torch.tanh(pre_tanh)
        log_prob = -0.5 * noise.pow(2) - log_std - 0.5 * _LOG_2PI
        log_prob = log_prob - 2.0 * (_LOG_2 - pre_tanh - F.softplus(-2.0 * pre_tanh))
        return action, log_prob.sum(1, keepdim=True)


class ImperativeRLPD(ImperativeREDQ):
    """RLPD agent: ``N`` LayerNorm critic modules, ``N + 2`` ``torch.optim.Adam``."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        *,
        hidden_sizes: Sequence[int] = (256, 256),
        layer_norm_eps: float = 1e-6,
        target_entropy: float | None = None,
        **kwargs,
    ) -> None:
        super().__init__(
            obs_dim,
            act_dim,
            hidden_sizes=hidden_sizes,
            target_entropy=-act_dim / 2.0 if target_entropy is None else target_entropy,
            **kwargs,
        )
        import copy

        device = self.device
        p = self.policy_net
        self.policy_net = ExactTanhGaussianPolicy(obs_dim, act_dim, hidden_sizes, p.log_std_min, p.log_std_max).to(device)
        self.q_net_list = [LayerNormMlp((obs_dim + act_dim, *hidden_sizes, 1), eps=layer_norm_eps).to(device) for _ in range(self.num_Q)]
        self.q_target_net_list = [copy.deepcopy(q) for q in self.q_net_list]
        lr_pi = self.policy_optimizer.param_groups[0]["lr"]
        lr_q = self.q_optimizer_list[0].param_groups[0]["lr"]
        self.policy_optimizer = torch.optim.Adam(self.policy_net.parameters(), lr=lr_pi)
        self.q_optimizer_list = [torch.optim.Adam(q.parameters(), lr=lr_q) for q in self.q_net_list]

    # ------------------------------------------------------------------ rlfunc interop
    @classmethod
    def from_functional_state(cls, state: TensorDict) -> "ImperativeRLPD":
        """Copy parameters, target critics and ``log_alpha`` from an rlfunc RLPD state."""
        config = state.get_non_tensor("config")  # the REDQ config rlpd.init stores
        if not config.critic_layer_norm:
            raise ValueError("ImperativeRLPD has LayerNorm critics; build the state with critic_layer_norm=True.")
        params = state["params"]
        actor = params["actor"]
        agent = cls(
            actor["trunk", "0", "weight"].shape[1],
            actor["mean", "weight"].shape[0],
            hidden_sizes=tuple(config.hidden_sizes),
            layer_norm_eps=config.layer_norm_eps,
            num_critics=config.num_critics,
            subset_size=config.subset_size,
            gamma=config.gamma,
            tau=config.tau,
            actor_lr=config.actor_lr,
            critic_lr=config.critic_lr,
            alpha_lr=config.alpha_lr,
            init_alpha=config.init_alpha,
            auto_alpha=config.auto_alpha,
            target_entropy=float(state["target_entropy"]),
            backup_entropy=config.backup_entropy,
            log_std_min=config.log_std_min,
            log_std_max=config.log_std_max,
            device=params["log_alpha"].device,
        )
        with torch.no_grad():
            for i in range(config.num_critics):
                _load_ln_mlp(agent.q_net_list[i], params["critic"][i])
                _load_ln_mlp(agent.q_target_net_list[i], state["target", "critic"][i])
            for i, layer in enumerate(agent.policy_net.trunk.layers):
                layer.weight.copy_(actor["trunk", str(i), "weight"])
                layer.bias.copy_(actor["trunk", str(i), "bias"])
            for head in ("mean", "log_std"):
                getattr(agent.policy_net, head).weight.copy_(actor[head, "weight"])
                getattr(agent.policy_net, head).bias.copy_(actor[head, "bias"])
            agent.log_alpha.copy_(params["log_alpha"].reshape(1))
        agent.alpha = agent.log_alpha.detach().exp().item()
        return agent

    def params_td(self) -> TensorDict:
        td = super().params_td()
        td["critic"] = torch.stack([_ln_mlp_td(q) for q in self.q_net_list], 0)
        return td

    def target_td(self) -> TensorDict:
        return TensorDict({"critic": torch.stack([_ln_mlp_td(q) for q in self.q_target_net_list], 0)}, batch_size=[])

    def critic_grads_td(self) -> TensorDict:
        return torch.stack([_ln_mlp_td(q, grad=True) for q in self.q_net_list], 0)

    # ------------------------------------------------------------------ learning
    def critic_loss(self, obs: torch.Tensor, action: torch.Tensor, y_q: torch.Tensor) -> torch.Tensor:
        """RLPD: ``((qs - target_q) ** 2).mean()`` over critics and rows."""
        q_cat = torch.cat([q(torch.cat([obs, action], 1)) for q in self.q_net_list], dim=1)
        return ((q_cat - y_q) ** 2).mean()

    def update(self, batch: TensorDict, noise: TensorDict) -> dict[str, torch.Tensor]:
        """``G`` critic updates, then one actor and one temperature update (official order)."""
        num_update = batch.batch_size[0]
        subsets = self.subset_indices(noise["subset"])
        q_loss = None
        for i in range(num_update):
            mini = batch[i]
            y_q = self.compute_target(
                mini["next_obs"], mini["reward"], mini["terminated"], noise["next_action"][i], subsets[i]
            )
            q_loss = self.critic_loss(mini["obs"], mini["action"], y_q)
            for opt in self.q_optimizer_list:
                opt.zero_grad()
            q_loss.backward()
            for opt in self.q_optimizer_list:
                opt.step()
            with torch.no_grad():
                for q, q_targ in zip(self.q_net_list, self.q_target_net_list):
                    for p_targ, p in zip(q_targ.parameters(), q.parameters()):
                        p_targ.data.copy_(self.polyak * p_targ.data + (1 - self.polyak) * p.data)
        # actor: the critics after all G steps, on the last mini-batch
        obs = batch[num_update - 1]["obs"]
        for q in self.q_net_list:
            q.requires_grad_(False)
        a_tilda, log_prob = self.policy_net(obs, noise["action"])
        q_mean = torch.cat([q(torch.cat([obs, a_tilda], 1)) for q in self.q_net_list], 1).mean(dim=1, keepdim=True)
        policy_loss = (self.alpha * log_prob - q_mean).mean()
        self.policy_optimizer.zero_grad()
        policy_loss.backward()
        self.policy_optimizer.step()
        for q in self.q_net_list:
            q.requires_grad_(True)
        # temperature: alpha * (entropy - target), entropy of the actor step
        entropy = -log_prob.detach().mean()
        if self.auto_alpha:
            alpha_loss = self.log_alpha.exp().squeeze() * (entropy - self.target_entropy)
            self.alpha_optim.zero_grad()
            alpha_loss.backward()
            self.alpha_optim.step()
            self.alpha = self.log_alpha.detach().exp()
        else:
            alpha_loss = torch.zeros(())
        return {"critic_loss": q_loss.detach(), "actor_loss": policy_loss.detach(), "alpha_loss": alpha_loss.detach()}


def _load_ln_mlp(module: LayerNormMlp, params: TensorDict) -> None:
    for i, layer in enumerate(module.layers):
        layer.weight.copy_(params[str(i), "weight"])
        layer.bias.copy_(params[str(i), "bias"])
    for i, norm in enumerate(module.norms):
        norm.weight.copy_(params["norm" + str(i), "weight"])
        norm.bias.copy_(params["norm" + str(i), "bias"])


def _ln_mlp_td(module: LayerNormMlp, grad: bool = False) -> TensorDict:
    def get(t: torch.Tensor) -> torch.Tensor:
        if grad:
            return t.grad.detach().clone() if t.grad is not None else torch.zeros_like(t)
        return t.detach().clone()

    out = {str(i): TensorDict({"weight": get(l.weight), "bias": get(l.bias)}, []) for i, l in enumerate(module.layers)}
    for i, n in enumerate(module.norms):
        out["norm" + str(i)] = TensorDict({"weight": get(n.weight), "bias": get(n.bias)}, [])
    return TensorDict(out, batch_size=[])
