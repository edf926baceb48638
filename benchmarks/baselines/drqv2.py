"""Imperative DrQ-v2 baseline, written the ordinary way.

This is the official DrQ-v2 agent (facebookresearch/drqv2, ``drqv2.py`` and
``utils.py``): ``Encoder``, ``Actor`` and ``Critic`` ``nn.Module``s, a deep-
copied target critic, three ``torch.optim.Adam`` (encoder, critic, actor),
``RandomShiftsAug`` as a bilinear ``grid_sample`` on an integer grid, and
``update`` = augment -> encode (next_obs without gradient) -> critic step
(encoder and critic optimizers) -> actor step on detached features ->
soft update of the target critic.

It exists for parity tests (``tests/test_drqv2_parity.py``: same losses,
gradients and parameters as :mod:`rlfunc.algos.drqv2` for the same
parameters, batch and noise) and for speed comparison (``benchmarks/run.py
update --algo drqv2``). It is not part of the library.

Differences from the official file, none of which changes a number:

* randomness is given, not drawn: ``update(batch, noise)`` takes the noise
  TensorDict of :func:`rlfunc.algos.drqv2.draw_noise` (integer shifts for
  obs and next_obs, standard-normal draws for the target and actor
  actions), so both implementations see the same draws;
  ``TruncatedNormal.sample`` is written with the given ``eps``;
* the batch holds ``discount = gamma^n`` (0 after a termination) as the
  official replay returns it; the step for the sigma schedule is an argument;
* there is no replay buffer, logger or ``act`` with random warm-up.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from tensordict import TensorDict

__all__ = ["RandomShiftsAug", "Encoder", "Actor", "Critic", "ImperativeDrQV2", "schedule_linear"]


def weight_init(m: nn.Module) -> None:
    """Official ``utils.weight_init``."""
    if isinstance(m, nn.Linear):
        nn.init.orthogonal_(m.weight.data)
        if hasattr(m.bias, "data"):
            m.bias.data.fill_(0.0)
    elif isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
        gain = nn.init.calculate_gain("relu")
        nn.init.orthogonal_(m.weight.data, gain)
        if hasattr(m.bias, "data"):
            m.bias.data.fill_(0.0)


def schedule_linear(init: float, final: float, duration: int, step: int) -> float:
    """Official ``utils.schedule('linear(init,final,duration)', step)``."""
    mix = min(max(step / duration, 0.0), 1.0)
    return (1.0 - mix) * init + mix * final


def truncated_normal_sample(mu: torch.Tensor, std: float, eps: torch.Tensor, clip: float | None, low=-1.0, high=1.0, e=1e-6):
    """Official ``utils.TruncatedNormal.sample`` with a given standard-normal ``eps``."""
    eps = eps * std
    if clip is not None:
        eps = torch.clamp(eps, -clip, clip)
    x = mu + eps
    clamped_x = torch.clamp(x, low + e, high - e)
    return x - x.detach() + clamped_x.detach()


class RandomShiftsAug(nn.Module):
    """Official ``RandomShiftsAug``, with the integer shift given: ``shift [n, 2]`` (x, y)."""

    def __init__(self, pad: int) -> None:
        super().__init__()
        self.pad = pad

    def forward(self, x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.size()
        assert h == w
        padding = tuple([self.pad] * 4)
        x = F.pad(x, padding, "replicate")
        eps = 1.0 / (h + 2 * self.pad)
        arange = torch.linspace(-1.0 + eps, 1.0 - eps, h + 2 * self.pad, device=x.device, dtype=x.dtype)[:h]
        arange = arange.unsqueeze(0).repeat(h, 1).unsqueeze(2)
        base_grid = torch.cat([arange, arange.transpose(1, 0)], dim=2)
        base_grid = base_grid.unsqueeze(0).repeat(n, 1, 1, 1)
        shift = shift.reshape(n, 1, 1, 2).to(x.dtype)
        shift = shift * (2.0 / (h + 2 * self.pad))
        grid = base_grid + shift
        return F.grid_sample(x, grid, padding_mode="zeros", align_corners=False)


class Encoder(nn.Module):
    def __init__(self, obs_shape, channels=(32, 32, 32, 32), strides=(2, 1, 1, 1)) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = obs_shape[0]
        for c_out, s in zip(channels, strides):
            layers += [nn.Conv2d(c_in, c_out, 3, stride=s), nn.ReLU()]
            c_in = c_out
        self.convnet = nn.Sequential(*layers)
        self.apply(weight_init)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        obs = obs / 255.0 - 0.5
        h = self.convnet(obs)
        return h.view(h.shape[0], -1)


def _trunk(repr_dim: int, feature_dim: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(repr_dim, feature_dim), nn.LayerNorm(feature_dim), nn.Tanh())


def _mlp(i: int, hidden: int, o: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(i, hidden), nn.ReLU(inplace=True), nn.Linear(hidden, hidden), nn.ReLU(inplace=True), nn.Linear(hidden, o)
    )


class Actor(nn.Module):
    def __init__(self, repr_dim: int, action_dim: int, feature_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.trunk = _trunk(repr_dim, feature_dim)
        self.policy = _mlp(feature_dim, hidden_dim, action_dim)
        self.apply(weight_init)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """The mean ``mu`` (the official forward returns ``TruncatedNormal(mu, std)``)."""
        return torch.tanh(self.policy(self.trunk(obs)))


class Critic(nn.Module):
    def __init__(self, repr_dim: int, action_dim: int, feature_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.trunk = _trunk(repr_dim, feature_dim)
        self.Q1 = _mlp(feature_dim + action_dim, hidden_dim, 1)
        self.Q2 = _mlp(feature_dim + action_dim, hidden_dim, 1)
        self.apply(weight_init)

    def forward(self, obs: torch.Tensor, action: torch.Tensor):
        h = self.trunk(obs)
        h_action = torch.cat([h, action], dim=-1)
        return self.Q1(h_action), self.Q2(h_action)


def _copy_mlp(seq: nn.Sequential, params: TensorDict) -> None:
    linears = [m for m in seq if isinstance(m, nn.Linear)]
    for i, lin in enumerate(linears):
        lin.weight.copy_(params[str(i), "weight"])
        lin.bias.copy_(params[str(i), "bias"])


def _copy_trunk(seq: nn.Sequential, params: TensorDict) -> None:
    seq[0].weight.copy_(params["0", "weight"])
    seq[0].bias.copy_(params["0", "bias"])
    seq[1].weight.copy_(params["norm0", "weight"])
    seq[1].bias.copy_(params["norm0", "bias"])


class ImperativeDrQV2:
    """The official ``DrQV2Agent`` learning step (see module doc)."""

    def __init__(
        self,
        obs_shape,
        action_dim: int,
        *,
        lr: float = 1e-4,
        feature_dim: int = 50,
        hidden_dim: int = 1024,
        critic_target_tau: float = 0.01,
        stddev_schedule: tuple[float, float, int] = (1.0, 0.1, 100_000),
        stddev_clip: float = 0.3,
        pad: int = 4,
        channels=(32, 32, 32, 32),
        strides=(2, 1, 1, 1),
        device: str | torch.device = "cpu",
    ) -> None:
        self.device = torch.device(device)
        self.critic_target_tau = critic_target_tau
        self.stddev_schedule = stddev_schedule
        self.stddev_clip = stddev_clip
        self.encoder = Encoder(obs_shape, channels, strides).to(self.device)
        with torch.no_grad():
            repr_dim = self.encoder(torch.zeros(1, *obs_shape, device=self.device)).shape[-1]
        self.actor = Actor(repr_dim, action_dim, feature_dim, hidden_dim).to(self.device)
        self.critic = Critic(repr_dim, action_dim, feature_dim, hidden_dim).to(self.device)
        self.critic_target = Critic(repr_dim, action_dim, feature_dim, hidden_dim).to(self.device)
        self.critic_target.load_state_dict(self.critic.state_dict())
        self.encoder_opt = torch.optim.Adam(self.encoder.parameters(), lr=lr)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=lr)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=lr)
        self.aug = RandomShiftsAug(pad=pad)
        self.train()
        self.critic_target.train()
        self.last_grads: dict[str, dict[str, torch.Tensor]] = {}
        # Copies of every gradient for the parity tests (``last_grads``); not in the official update, so
        # ``benchmarks/run.py update --algo drqv2`` turns them off (34 extra copies per timed update).
        self.record_grads = True

    def train(self, training: bool = True) -> None:
        self.encoder.train(training)
        self.actor.train(training)
        self.critic.train(training)

    @classmethod
    def from_functional_state(cls, state: TensorDict) -> "ImperativeDrQV2":
        """Same parameters (and target) as an :func:`rlfunc.algos.drqv2.init` state."""
        cfg = state.get_non_tensor("config")
        params = state["params"]
        enc = params["encoder"]
        obs_channels = enc["0", "weight"].shape[1]
        action_dim = params["actor", "policy", "2", "weight"].shape[0]
        # spatial size is not in the parameters: infer from the trunk's input size
        repr_dim = params["actor", "trunk", "0", "weight"].shape[1]
        size = _infer_size(repr_dim, cfg.encoder_channels, cfg.encoder_strides)
        agent = cls(
            (obs_channels, size, size),
            action_dim,
            lr=cfg.lr,
            feature_dim=cfg.feature_dim,
            hidden_dim=cfg.hidden_dim,
            critic_target_tau=cfg.tau,
            stddev_schedule=(cfg.stddev_init, cfg.stddev_final, cfg.stddev_duration),
            stddev_clip=cfg.stddev_clip,
            pad=cfg.pad,
            channels=cfg.encoder_channels,
            strides=cfg.encoder_strides,
            device=state.device or "cpu",
        )
        with torch.no_grad():
            convs = [m for m in agent.encoder.convnet if isinstance(m, nn.Conv2d)]
            for i, conv in enumerate(convs):
                conv.weight.copy_(enc[str(i), "weight"])
                conv.bias.copy_(enc[str(i), "bias"])
            _copy_trunk(agent.actor.trunk, params["actor", "trunk"])
            _copy_mlp(agent.actor.policy, params["actor", "policy"])
            for module, src in ((agent.critic, params["critic"]), (agent.critic_target, state["target", "critic"])):
                _copy_trunk(module.trunk, src["trunk"])
                _copy_mlp(module.Q1, src["q"][0])
                _copy_mlp(module.Q2, src["q"][1])
        return agent

    def update_critic(self, obs, action, reward, discount, next_obs, step, next_eps):
        with torch.no_grad():
            stddev = schedule_linear(*self.stddev_schedule, step)
            mu = self.actor(next_obs)
            next_action = truncated_normal_sample(mu, stddev, next_eps, clip=self.stddev_clip)
            target_Q1, target_Q2 = self.critic_target(next_obs, next_action)
            target_V = torch.min(target_Q1, target_Q2)
            target_Q = reward + (discount * target_V)
        Q1, Q2 = self.critic(obs, action)
        critic_loss = F.mse_loss(Q1, target_Q) + F.mse_loss(Q2, target_Q)
        self.encoder_opt.zero_grad(set_to_none=True)
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        if self.record_grads:
            self.last_grads["critic"] = {n: p.grad.clone() for n, p in self.critic.named_parameters()}
            self.last_grads["encoder"] = {n: p.grad.clone() for n, p in self.encoder.named_parameters()}
        self.critic_opt.step()
        self.encoder_opt.step()
        return {
            "critic_target_q": target_Q.mean().item(),
            "critic_q1": Q1.mean().item(),
            "critic_q2": Q2.mean().item(),
            "critic_loss": critic_loss.item(),
        }

    def update_actor(self, obs, step, eps):
        stddev = schedule_linear(*self.stddev_schedule, step)
        mu = self.actor(obs)
        action = truncated_normal_sample(mu, stddev, eps, clip=self.stddev_clip)
        Q1, Q2 = self.critic(obs, action)
        Q = torch.min(Q1, Q2)
        actor_loss = -Q.mean()
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        if self.record_grads:
            self.last_grads["actor"] = {n: p.grad.clone() for n, p in self.actor.named_parameters()}
        self.actor_opt.step()
        return {"actor_loss": actor_loss.item()}

    def update(self, batch: TensorDict, noise: TensorDict, step: int) -> dict:
        obs, action = batch["obs"], batch["action"]
        reward, discount = batch["reward"].unsqueeze(-1), batch["discount"].unsqueeze(-1)
        next_obs = batch["next_obs"]
        obs = self.aug(obs.float(), noise["shift_obs"])
        next_obs = self.aug(next_obs.float(), noise["shift_next_obs"])
        obs = self.encoder(obs)
        with torch.no_grad():
            next_obs = self.encoder(next_obs)
        metrics = self.update_critic(obs, action, reward, discount, next_obs, step, noise["next_action"])
        metrics.update(self.update_actor(obs.detach(), step, noise["action"]))
        with torch.no_grad():  # official utils.soft_update_params
            for param, target_param in zip(self.critic.parameters(), self.critic_target.parameters()):
                target_param.data.copy_(self.critic_target_tau * param.data + (1 - self.critic_target_tau) * target_param.data)
        return metrics


def _infer_size(repr_dim: int, channels, strides, kernel: int = 3) -> int:
    for size in range(8, 513):
        h = size
        for s in strides:
            h = (h - kernel) // s + 1
        if h >= 1 and channels[-1] * h * h == repr_dim:
            return size
    raise ValueError(f"cannot infer the image size from {repr_dim} encoder features")
