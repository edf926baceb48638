"""``redq_critic_update`` / ``sac_critic_update`` -- critic updates per second of
REDQ (N=10 critics, target subset M=2) and SAC (N=2, M=2), Hopper shapes (obs
11, action 3), MLP 256-256, batch 256, G=20 critic updates and one actor and
temperature update per environment step, on pre-sampled batches (no replay):
``rlfunc`` eager (``redq.update``, default ``ensemble_mode``) and compiled
(``redq.make_update("step")``); the imperative baseline
(``benchmarks/baselines/redq.py``: N modules, N+2 Adams, Python loops);
TorchRL ``REDQLoss`` / ``SACLoss`` with a ``ProbabilisticActor`` (``MLP`` ->
``NormalParamExtractor`` -> ``TanhNormal``) and a ``ValueOperator`` MLP critic,
``torch.optim.Adam`` per parameter group and ``SoftUpdate``, eager and under
``torch.compile`` (one compiled function for the critic-only step, one for the
last step of the G; backward and the optimizer step break the graph there).
Caveats: TorchRL's loss computes the actor and temperature losses in *every*
forward (its design), so to keep REDQ's schedule (actor once per G) it
back-propagates only ``loss_qvalue`` for G-1 of the G steps and wastes the
actor forward there; TorchRL's REDQ *recipe* updates the actor on every critic
step instead (more work per env step, not what REDQ does). TorchRL draws its
randomness inside the loss, rlfunc and the baseline take pre-drawn noise.
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.peers.measure import Variant, _device, _measure, _rows, _unavailable_peers
from benchmarks.update_bench import _redq_problem


def _torchrl_actor_critic(obs: int, act: int, hidden: tuple[int, ...], low: float = -1.0, high: float = 1.0,
                          device: torch.device = torch.device("cpu")):
    """TorchRL modules equivalent to rlfunc's REDQ nets: tanh-Gaussian actor, MLP critic on concat(obs, action).

    Built on the CPU and moved to ``device`` here, before a loss wraps them (TorchRL's losses
    take their device, e.g. ``log_alpha``'s, from the modules' parameters)."""
    from tensordict.nn import NormalParamExtractor, TensorDictModule
    from torch import nn
    from torchrl.data import Bounded
    from torchrl.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator

    spec = Bounded(torch.full((act,), low), torch.full((act,), high), (act,),
                   device=None if device.type == "cpu" else device)
    actor_net = nn.Sequential(
        MLP(in_features=obs, out_features=2 * act, num_cells=list(hidden), activation_class=nn.ReLU),
        NormalParamExtractor(scale_mapping="exp"),  # log-std head, as rlfunc's (no clamp: speed-neutral)
    )
    actor = ProbabilisticActor(
        TensorDictModule(actor_net, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"], spec=spec, distribution_class=TanhNormal,
        distribution_kwargs={"low": low, "high": high}, return_log_prob=True,
    )
    critic = ValueOperator(
        MLP(in_features=obs + act, out_features=1, num_cells=list(hidden), activation_class=nn.ReLU),
        in_keys=["observation", "action"],
    )
    return actor.to(device), critic.to(device), spec


class _TorchRLSAC:
    """TorchRL ``REDQLoss`` (N > 2) or ``SACLoss`` (N = 2) with Adam per group and ``SoftUpdate``.

    :meth:`env_step` runs REDQ's schedule over ``G`` mini-batches: ``loss_qvalue``
    only for the first ``G - 1`` (critic Adam), all three losses on the last
    (critic, actor and temperature Adams); a soft target update after each.
    """

    def __init__(self, obs: int, act: int, hidden, critics: int, subset: int, *, compile: bool,
                 low: float = -1.0, high: float = 1.0, device: torch.device = torch.device("cpu")) -> None:
        from torchrl.objectives import REDQLoss, SACLoss, SoftUpdate

        actor, critic, spec = _torchrl_actor_critic(obs, act, hidden, low, high, device)
        self.actor = actor
        if critics == 2 and subset == 2:
            self.loss = SACLoss(actor, critic, num_qvalue_nets=2, loss_function="l2", action_spec=spec)
        else:
            self.loss = REDQLoss(actor, critic, num_qvalue_nets=critics, sub_sample_len=subset,
                                 loss_function="l2", action_spec=spec)
        self.loss.make_value_estimator(gamma=0.99)
        if device.type != "cpu":
            self.loss.to(device)  # anything the loss created off its modules' device (a no-op on CPU)
        self.updater = SoftUpdate(self.loss, tau=0.005)
        self.critic_opt = torch.optim.Adam(list(self.loss.qvalue_network_params.values(True, True)), lr=3e-4)
        self.actor_opt = torch.optim.Adam(list(self.loss.actor_network_params.values(True, True)), lr=3e-4)
        self.alpha_opt = torch.optim.Adam([self.loss.log_alpha], lr=3e-4)
        self.critic_update = torch.compile(self._critic_update) if compile else self._critic_update
        self.full_update = torch.compile(self._full_update) if compile else self._full_update

    def _critic_update(self, td) -> None:
        out = self.loss(td)
        out["loss_qvalue"].backward()
        self.critic_opt.step()
        self.critic_opt.zero_grad(set_to_none=True)
        self.updater.step()

    def _full_update(self, td) -> None:
        out = self.loss(td)
        (out["loss_qvalue"] + out["loss_actor"] + out["loss_alpha"]).backward()
        for opt in (self.critic_opt, self.actor_opt, self.alpha_opt):
            opt.step()
            opt.zero_grad(set_to_none=True)
        self.updater.step()

    def env_step(self, batches) -> None:
        """``batches``: a sequence of ``G`` TorchRL transition TensorDicts of batch ``[B]``."""
        G = len(batches)
        for g in range(G - 1):
            self.critic_update(batches[g])
        self.full_update(batches[G - 1])


def _torchrl_batch(batch):
    """rlfunc's ``[G, B]`` transition batch in TorchRL's layout (``next`` sub-TensorDict, trailing 1-dims)."""
    from tensordict import TensorDict

    term = batch["terminated"].bool().unsqueeze(-1)
    return TensorDict(
        {
            "observation": batch["obs"],
            "action": batch["action"],
            "next": {
                "observation": batch["next_obs"],
                "reward": batch["reward"].unsqueeze(-1),
                "done": term,
                "terminated": term,
            },
        },
        batch_size=batch.batch_size,
    )


def task_critic_update(task: str, args, sz: dict) -> list[dict]:
    from benchmarks.baselines.redq import ImperativeREDQ

    critics, subset = (sz["redq_critics"], sz["redq_subset"]) if task == "redq_critic_update" else (2, 2)
    G, B, H = sz["utd"], sz["batch"], tuple(sz["hidden"])
    ns = argparse.Namespace(obs_dim=sz["obs"], act_dim=sz["act"], utd=G, batch=B, critics=critics,
                            subset=subset, hidden=list(H))
    device = _device(args)
    redq, config, obs_space, act_space, batch, noise = _redq_problem(ns, device)
    mode = redq.Config().ensemble_mode
    problem = {"critics": critics, "subset": subset, "utd": G, "batch": B, "hidden": list(H),
               "obs_dim": sz["obs"], "act_dim": sz["act"],
               "work_per_call": f"{G} critic updates (target, N-critic fwd/bwd, Adam, polyak) + 1 actor + 1 temperature update",
               "data": "pre-sampled [G, B] batch; no replay"}

    def functional(fn):
        def setup():
            holder = {"state": redq.init(config(mode), obs_space, act_space, seed=0, device=device)}

            def step() -> None:
                holder["state"], _ = fn(holder["state"], batch, noise)

            return step

        return setup

    def imperative():
        # built on the state's device (ImperativeREDQ.from_functional_state reads it off the critic)
        agent = ImperativeREDQ.from_functional_state(redq.init(config(mode), obs_space, act_space, seed=0, device=device))
        return lambda: agent.update(batch, noise)

    name = "REDQLoss" if task == "redq_critic_update" else "SACLoss"

    def torchrl_setup(compiled: bool):
        def setup():
            trl = _TorchRLSAC(sz["obs"], sz["act"], H, critics, subset, compile=compiled, device=device)
            tb = _torchrl_batch(batch)  # on the batch's device
            batches = [tb[g] for g in range(G)]
            return lambda: trl.env_step(batches)

        return setup

    variants = [
        Variant("rlfunc", f"eager (redq.update, ensemble_mode={mode})", functional(redq.update), units=G,
                ensemble_mode=mode),
    ]
    if not args.no_compile:
        variants.append(Variant("rlfunc", "compiled (redq.make_update('step'))", functional(redq.make_update("step")),
                                units=G, compiled=True, ensemble_mode=mode))
    variants.append(Variant("imperative", "benchmarks/baselines/redq.py (N nn.Modules, N+2 Adams)", imperative, units=G))
    missing = _unavailable_peers(("torchrl",))
    variants.append(Variant("torchrl", f"{name} eager", torchrl_setup(False), units=G, unavailable=missing.get("torchrl")))
    if not args.no_compile:
        variants.append(Variant("torchrl", f"{name} + backward + Adam, torch.compile", torchrl_setup(True), units=G,
                                unavailable=missing.get("torchrl"), compiled=True))
    variants.append(Variant("stable-baselines3", "SAC.train (not measured here)", units=G,
                            unavailable="SB3 has no REDQ and no update on given batches; see pendulum_train_loop_utd20"
                            if task == "redq_critic_update" else
                            "SB3's SAC.train samples its own replay inside; compared in pendulum_train_loop_utd20"))
    _measure(variants, args)
    return _rows(task, "critic updates/s", problem, variants, args.threads, _device(args).type)
