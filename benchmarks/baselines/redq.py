"""Imperative REDQ baseline, written the ordinary way.

This is REDQ (Chen et al., ICLR 2021) as the official code writes it
(watchernyu/REDQ, ``redq/algos/redq_sac.py`` and ``redq/algos/core.py``):
``N`` separate ``nn.Module`` critics, ``N`` target critics (deep copies), ``N``
``torch.optim.Adam`` critic optimizers, a tanh-Gaussian policy module with its
own Adam, and ``log_alpha`` with its Adam; one environment step's worth of
learning is a Python loop over ``G`` critic updates, each with Python loops
over the critics, ``.backward()`` and ``optimizer.step()``.

It exists for two reasons only: **parity tests** (``tests/test_redq_parity.py``
proves that :mod:`rlfunc.algos.redq` computes the same losses, gradients and
updated parameters for the same parameters, batch and noise) and **speed
comparison** (``benchmarks/run.py update`` reports the functional update's
throughput as a ratio to this one, measured in the same process). It is not
part of the library.

Differences from the official file, none of which changes a number:

* randomness is given, not drawn: ``update(batch, noise)`` takes the batch
  ``[G, B]`` and the noise TensorDict of :func:`rlfunc.algos.redq.draw_noise`
  (``next_action [G, B, A]``, ``subset [G, N]`` whose ``M`` largest entries
  pick the target subset, ``action [B, A]``), so both implementations see the
  same draws; there is no replay buffer;
* the log-probability is written with the given standard-normal noise,
  ``-noise^2/2 - log_std - log(2 pi)/2 - log(1 - a^2 + 1e-6)``, which is
  ``Normal(mean, std).log_prob(mean + std * noise)`` of the official code
  rearranged (same value and gradients up to float rounding);
* the official code back-propagates the policy loss *after* the critic
  optimizers have stepped, through a graph that saved the critics' weights;
  current PyTorch rejects that (a saved tensor was modified in place). Here
  the policy loss is back-propagated *before* the critic steps, with the
  critics frozen (``requires_grad_(False)``), which gives the gradients the
  official code intended: those of the critics as they were when the policy
  loss was computed. The policy optimizer still steps after the critics;
* ``terminated`` (not ``done``) masks the bootstrap: time-limit truncation
  bootstraps (the official code's 2021 fix).

The temperature ``alpha`` used in the target and in the policy loss is
``exp(log_alpha)`` as it was at the start of the environment step (the
official ``self.alpha``, refreshed after each temperature step).
"""

from __future__ import annotations

import copy
import math
from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from tensordict import TensorDict

__all__ = ["Mlp", "TanhGaussianPolicy", "ImperativeREDQ"]

_LOG_2PI = math.log(2.0 * math.pi)
ACTION_BOUND_EPSILON = 1e-6


def _weights_init_(m: nn.Module) -> None:
    # official ``weights_init_``: xavier-uniform weights (gain 1), zero bias
    if isinstance(m, nn.Linear):
        nn.init.xavier_uniform_(m.weight, gain=1)
        nn.init.constant_(m.bias, 0)


class Mlp(nn.Module):
    """Linear/ReLU MLP; ``layers[i]`` is linear layer ``i`` (rlfunc key ``str(i)``).

    ``activate_last=True`` puts a ReLU after the last layer too (the policy trunk).
    """

    def __init__(self, sizes: Sequence[int], activate_last: bool = False) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(sizes[i], sizes[i + 1]) for i in range(len(sizes) - 1))
        self.activate_last = activate_last
        self.apply(_weights_init_)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = len(self.layers)
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < n - 1 or self.activate_last:
                x = F.relu(x)
        return x


class TanhGaussianPolicy(nn.Module):
    """Official ``TanhGaussianPolicy``: ReLU trunk, separate mean and log-std heads."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_sizes: Sequence[int],
        log_std_min: float = -20.0,
        log_std_max: float = 2.0,
    ) -> None:
        super().__init__()
        self.trunk = Mlp((obs_dim, *hidden_sizes), activate_last=True)
        self.mean = nn.Linear(hidden_sizes[-1], act_dim)
        self.log_std = nn.Linear(hidden_sizes[-1], act_dim)
        self.log_std_min = log_std_min
        self.log_std_max = log_std_max
        self.apply(_weights_init_)

    def forward(self, obs: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised sample from standard-normal ``noise``: ``(action [B, A], log_prob [B, 1])``."""
        h = self.trunk(obs)
        mean = self.mean(h)
        log_std = torch.clamp(self.log_std(h), self.log_std_min, self.log_std_max)
        std = torch.exp(log_std)
        pre_tanh = mean + std * noise
        action = torch.tanh(pre_tanh)
        log_prob = -0.5 * noise.pow(2) - log_std - 0.5 * _LOG_2PI
        log_prob = log_prob - torch.log(1 - action.pow(2) + ACTION_BOUND_EPSILON)
        return action, log_prob.sum(1, keepdim=True)


class ImperativeREDQ:
    """REDQ agent with ``N`` critic modules and ``N + 2`` ``torch.optim.Adam``.

    Build it fresh (:meth:`__init__`) or from an rlfunc state
    (:meth:`from_functional_state`); call :meth:`update` once per environment
    step; read parameters back in rlfunc's layout with :meth:`params_td` /
    :meth:`target_td`.
    """

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        *,
        hidden_sizes: Sequence[int] = (256, 256),
        num_critics: int = 10,
        subset_size: int = 2,
        gamma: float = 0.99,
        tau: float = 0.005,
        lr: float = 3e-4,
        actor_lr: float | None = None,
        critic_lr: float | None = None,
        alpha_lr: float | None = None,
        init_alpha: float = 1.0,
        auto_alpha: bool = True,
        target_entropy: float | None = None,
        backup_entropy: bool = True,
        log_std_min: float = -20.0,
        log_std_max: float = 2.0,
        device: torch.device | str = "cpu",
    ) -> None:
        self.obs_dim, self.act_dim = obs_dim, act_dim
        self.num_Q = num_critics
        self.num_min = subset_size
        self.gamma = gamma
        self.polyak = 1.0 - tau  # official: target <- polyak * target + (1 - polyak) * online
        self.auto_alpha = auto_alpha
        self.backup_entropy = backup_entropy
        self.target_entropy = float(-act_dim if target_entropy is None else target_entropy)
        self.device = torch.device(device)

        self.policy_net = TanhGaussianPolicy(obs_dim, act_dim, hidden_sizes, log_std_min, log_std_max).to(device)
        self.q_net_list: list[Mlp] = []
        self.q_target_net_list: list[Mlp] = []
        for _ in range(num_critics):
            q = Mlp((obs_dim + act_dim, *hidden_sizes, 1)).to(device)
            self.q_net_list.append(q)
            self.q_target_net_list.append(copy.deepcopy(q))
        self.policy_optimizer = torch.optim.Adam(self.policy_net.parameters(), lr=actor_lr or lr)
        self.q_optimizer_list = [
            torch.optim.Adam(q.parameters(), lr=critic_lr or lr) for q in self.q_net_list
        ]
        self.log_alpha = torch.full((1,), math.log(init_alpha), device=device, requires_grad=True)
        self.alpha_optim = torch.optim.Adam([self.log_alpha], lr=alpha_lr or lr)
        self.alpha = init_alpha
        self.mse_criterion = nn.MSELoss()

    # ------------------------------------------------------------------ rlfunc interop
    @classmethod
    def from_functional_state(cls, state: TensorDict) -> "ImperativeREDQ":
        """Copy parameters, target critics and ``log_alpha`` from an rlfunc REDQ state.

        Optimizers start fresh, which equals the fresh Adam state of
        :func:`rlfunc.algos.redq.init` (only compare right after ``init``).
        """
        config = state.get_non_tensor("config")
        params = state["params"]
        actor = params["actor"]
        critic = params["critic"]
        obs_dim = actor["trunk", "0", "weight"].shape[1]
        act_dim = actor["mean", "weight"].shape[0]
        agent = cls(
            obs_dim,
            act_dim,
            hidden_sizes=tuple(config.hidden_sizes),
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
            device=critic.device if critic.device is not None else "cpu",
        )
        if config.critic_layer_norm:
            raise ValueError("The imperative REDQ baseline has no LayerNorm critics; use critic_layer_norm=False.")
        with torch.no_grad():
            for i in range(config.num_critics):
                _load_mlp(agent.q_net_list[i], critic[i])
                _load_mlp(agent.q_target_net_list[i], state["target", "critic"][i])
            _load_mlp(agent.policy_net.trunk, actor["trunk"])
            for head in ("mean", "log_std"):
                getattr(agent.policy_net, head).weight.copy_(actor[head, "weight"])
                getattr(agent.policy_net, head).bias.copy_(actor[head, "bias"])
            agent.log_alpha.copy_(params["log_alpha"].reshape(1))
        agent.alpha = agent.log_alpha.detach().exp().item()
        return agent

    def params_td(self) -> TensorDict:
        """``{"actor", "critic" [N], "log_alpha"}`` in rlfunc's ``state["params"]`` layout (copies)."""
        p = self.policy_net
        actor = TensorDict(
            {
                "trunk": _mlp_td(p.trunk),
                "mean": TensorDict({"weight": p.mean.weight.detach().clone(), "bias": p.mean.bias.detach().clone()}, []),
                "log_std": TensorDict(
                    {"weight": p.log_std.weight.detach().clone(), "bias": p.log_std.bias.detach().clone()}, []
                ),
            },
            batch_size=[],
        )
        return TensorDict(
            {
                "actor": actor,
                "critic": torch.stack([_mlp_td(q) for q in self.q_net_list], 0),
                "log_alpha": self.log_alpha.detach().clone().reshape(()),
            },
            batch_size=[],
        )

    def target_td(self) -> TensorDict:
        """``{"critic" [N]}`` in rlfunc's ``state["target"]`` layout (copies)."""
        return TensorDict({"critic": torch.stack([_mlp_td(q) for q in self.q_target_net_list], 0)}, batch_size=[])

    def critic_grads_td(self) -> TensorDict:
        """The critics' ``.grad`` as a stacked ``[N]`` TensorDict (rlfunc critic layout)."""
        return torch.stack([_mlp_td(q, grad=True) for q in self.q_net_list], 0)

    # ------------------------------------------------------------------ learning
    def compute_target(
        self,
        next_obs: torch.Tensor,
        reward: torch.Tensor,
        terminated: torch.Tensor,
        next_action_noise: torch.Tensor,
        sample_idxs: Sequence[int],
    ) -> torch.Tensor:
        """Official ``get_redq_q_target_no_grad`` (mode ``'min'``): ``y [B, 1]``.

        ``sample_idxs``: the ``M`` target critics of this update (:meth:`subset_indices`).
        """
        with torch.no_grad():
            a_tilda_next, log_prob_a_tilda_next = self.policy_net(next_obs, next_action_noise)
            q_prediction_next_list = []
            for sample_idx in sample_idxs:
                q_prediction_next = self.q_target_net_list[sample_idx](torch.cat([next_obs, a_tilda_next], 1))
                q_prediction_next_list.append(q_prediction_next)
            q_prediction_next_cat = torch.cat(q_prediction_next_list, 1)
            min_q, _ = torch.min(q_prediction_next_cat, dim=1, keepdim=True)
            next_q = min_q - self.alpha * log_prob_a_tilda_next if self.backup_entropy else min_q
            rews = reward.reshape(-1, 1)
            not_done = 1 - terminated.reshape(-1, 1).to(min_q.dtype)
            return rews + self.gamma * not_done * next_q

    def subset_indices(self, subset_noise: torch.Tensor) -> list[list[int]] | list[int]:
        """Target-critic indices from uniform noise ``[N]`` or ``[G, N]``: the ``M`` largest entries.

        The official code draws them on the host (``np.random.choice``); so does
        this, once per environment step.
        """
        return torch.topk(subset_noise, self.num_min, dim=-1).indices.tolist()

    def critic_loss(self, obs: torch.Tensor, action: torch.Tensor, y_q: torch.Tensor) -> torch.Tensor:
        """Official ``q_loss_all``: ``MSELoss(q_cat [B, N], y expanded) * N``."""
        q_prediction_list = []
        for q_i in range(self.num_Q):
            q_prediction_list.append(self.q_net_list[q_i](torch.cat([obs, action], 1)))
        q_prediction_cat = torch.cat(q_prediction_list, dim=1)
        y_q = y_q.expand((-1, self.num_Q)) if y_q.shape[1] == 1 else y_q
        return self.mse_criterion(q_prediction_cat, y_q) * self.num_Q

    def update(self, batch: TensorDict, noise: TensorDict) -> dict[str, torch.Tensor]:
        """One environment step of learning: ``G`` critic updates, one actor and temperature update.

        ``batch`` has batch size ``[G, B]`` (``obs``, ``action``, ``reward``,
        ``next_obs``, ``terminated``), ``noise`` is
        :func:`rlfunc.algos.redq.draw_noise`'s layout. The order is the
        official ``REDQSACAgent.train`` with ``utd_ratio = policy_update_delay = G``.
        """
        num_update = batch.batch_size[0]
        obs_all, act_all = batch["obs"], batch["action"]
        next_obs_all, rew_all, term_all = batch["next_obs"], batch["reward"], batch["terminated"]
        next_noise, subset_noise, act_noise = noise["next_action"], noise["subset"], noise["action"]
        sample_idxs_all = self.subset_indices(subset_noise)
        policy_loss = alpha_loss = q_loss_all = None
        for i_update in range(num_update):
            obs_tensor, acts_tensor = obs_all[i_update], act_all[i_update]
            # Q loss
            y_q = self.compute_target(
                next_obs_all[i_update], rew_all[i_update], term_all[i_update],
                next_noise[i_update], sample_idxs_all[i_update],
            )
            q_loss_all = self.critic_loss(obs_tensor, acts_tensor, y_q)
            for q_i in range(self.num_Q):
                self.q_optimizer_list[q_i].zero_grad()
            q_loss_all.backward()

            last = i_update == num_update - 1
            if last:
                # policy loss with the critics as they are before this step's update
                for q in self.q_net_list:
                    q.requires_grad_(False)
                a_tilda, log_prob_a_tilda = self.policy_net(obs_tensor, act_noise)
                q_a_tilda_list = []
                for sample_idx in range(self.num_Q):
                    q_a_tilda_list.append(self.q_net_list[sample_idx](torch.cat([obs_tensor, a_tilda], 1)))
                q_a_tilda_cat = torch.cat(q_a_tilda_list, 1)
                ave_q = torch.mean(q_a_tilda_cat, dim=1, keepdim=True)
                policy_loss = (self.alpha * log_prob_a_tilda - ave_q).mean()
                self.policy_optimizer.zero_grad()
                policy_loss.backward()
                for q in self.q_net_list:
                    q.requires_grad_(True)
                # alpha loss
                if self.auto_alpha:
                    alpha_loss = -(self.log_alpha * (log_prob_a_tilda + self.target_entropy).detach()).mean()
                    self.alpha_optim.zero_grad()
                    alpha_loss.backward()
                    self.alpha_optim.step()
                else:
                    alpha_loss = torch.zeros(())

            for q_i in range(self.num_Q):
                self.q_optimizer_list[q_i].step()
            if last:
                self.policy_optimizer.step()
            # polyak averaged Q target networks
            with torch.no_grad():
                for q_i in range(self.num_Q):
                    for p_targ, p in zip(self.q_target_net_list[q_i].parameters(), self.q_net_list[q_i].parameters()):
                        p_targ.data.copy_(self.polyak * p_targ.data + (1 - self.polyak) * p.data)
        if self.auto_alpha:
            # official: self.alpha = self.log_alpha.cpu().exp().item(); kept on device (no host sync)
            self.alpha = self.log_alpha.detach().exp()
        return {
            "critic_loss": q_loss_all.detach() / self.num_Q,
            "actor_loss": policy_loss.detach(),
            "alpha_loss": alpha_loss.detach(),
        }


def _load_mlp(module: Mlp, params: TensorDict) -> None:
    for i, layer in enumerate(module.layers):
        layer.weight.copy_(params[str(i), "weight"])
        layer.bias.copy_(params[str(i), "bias"])


def _mlp_td(module: Mlp, grad: bool = False) -> TensorDict:
    def get(t: torch.Tensor) -> torch.Tensor:
        if grad:
            return t.grad.detach().clone() if t.grad is not None else torch.zeros_like(t)
        return t.detach().clone()

    return TensorDict(
        {str(i): TensorDict({"weight": get(l.weight), "bias": get(l.bias)}, []) for i, l in enumerate(module.layers)},
        batch_size=[],
    )
