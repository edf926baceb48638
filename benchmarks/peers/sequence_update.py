"""``sequence_update`` -- DRQN updates per second: batch 32 windows of 10 steps,
64-unit ReLU encoder, LSTM 128, obs 4, 2 actions, Huber TD loss, Adam, target
copy period 1000: ``rlfunc`` ``drqn.update`` eager and compiled
(``torch.compile(fullgraph=True)``), the imperative baseline
(``benchmarks/baselines/drqn.py``, ``nn.LSTM``), TorchRL ``DQNLoss`` over
``TensorDictSequential(encoder, LSTMModule(default_recurrent_mode=True), head,
QValueModule)`` with ``HardUpdate``, eager and compiled. Caveats: TorchRL's
batch is batch-major ``[B, T]`` with ``is_init`` and zero stored recurrent
states, has no padding mask (the same padded windows are fed, unmasked) and
its target unroll covers T steps (rlfunc's T + 1).
"""

from __future__ import annotations

import numpy as np
import torch

from benchmarks.peers.measure import Variant, _device, _measure, _rows, _unavailable_peers
from benchmarks.update_bench import drqn_batch


class _TorchRLDRQN:
    """TorchRL DQN on an LSTM: encoder -> ``LSTMModule`` (recurrent mode) -> head -> ``QValueModule``; ``DQNLoss``."""

    def __init__(self, sz: dict, *, compile: bool, device: torch.device = torch.device("cpu")) -> None:
        from tensordict.nn import TensorDictModule, TensorDictSequential
        from torch import nn
        from torchrl.data import OneHot
        from torchrl.modules import LSTMModule, QValueModule
        from torchrl.objectives import DQNLoss, HardUpdate

        O, A, E, H = sz["drqn_obs"], sz["drqn_actions"], sz["drqn_encoder"], sz["drqn_lstm"]
        enc = TensorDictModule(nn.Sequential(nn.Linear(O, E), nn.ReLU()), in_keys=["observation"], out_keys=["embed"])
        lstm = LSTMModule(input_size=E, hidden_size=H, in_key="embed", out_key="features", default_recurrent_mode=True)
        head = TensorDictModule(nn.Linear(H, A), in_keys=["features"], out_keys=["action_value"])
        spec = OneHot(A, device=None if device.type == "cpu" else device)
        policy = TensorDictSequential(enc, lstm, head, QValueModule(spec=spec)).to(device)  # before the loss wraps it
        self.loss = DQNLoss(policy, action_space=spec, delay_value=True, loss_function="smooth_l1")
        self.loss.make_value_estimator(gamma=0.99)
        if device.type != "cpu":
            self.loss.to(device)
        self.updater = HardUpdate(self.loss, value_network_update_interval=1000)
        self.opt = torch.optim.Adam(self.loss.parameters(), lr=1e-3)
        self.update = torch.compile(self._update) if compile else self._update

    def _update(self, td) -> None:
        out = self.loss(td)
        out["loss"].backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.updater.step()

    @staticmethod
    def batch(batch, sz: dict):
        """rlfunc's time-major window batch as TorchRL's batch-major ``[B, T]`` one, zero stored states."""
        from tensordict import TensorDict

        T, B, A, H = sz["drqn_window"], sz["drqn_batch"], sz["drqn_actions"], sz["drqn_lstm"]

        def bm(x):
            return x.transpose(0, 1).contiguous()

        is_init = torch.zeros(B, T, 1, dtype=torch.bool)
        is_init[:, 0] = True
        zeros = torch.zeros(B, T, 1, H)
        term = bm(batch["terminated"]).unsqueeze(-1)
        return TensorDict(
            {
                "observation": bm(batch["obs"]),
                "action": torch.nn.functional.one_hot(bm(batch["action"]), A),
                "is_init": is_init,
                "recurrent_state_h": zeros,
                "recurrent_state_c": zeros.clone(),
                "next": {
                    "observation": bm(batch["next_obs"]),
                    "reward": bm(batch["reward"]).unsqueeze(-1),
                    "is_init": torch.zeros(B, T, 1, dtype=torch.bool),
                    "recurrent_state_h": zeros.clone(),
                    "recurrent_state_c": zeros.clone(),
                    "done": term,
                    "terminated": term.clone(),
                },
            },
            batch_size=[B, T],
        )


def task_sequence_update(task: str, args, sz: dict) -> list[dict]:
    import gymnasium as gym

    from benchmarks.baselines.drqn import ImperativeDRQN
    from rlfunc.algos import drqn

    T, B, O, A = sz["drqn_window"], sz["drqn_batch"], sz["drqn_obs"], sz["drqn_actions"]
    config = drqn.Config(lstm_size=sz["drqn_lstm"], sequence_length=T, batch_size=B, encoder_sizes=(sz["drqn_encoder"],))
    obs_space = gym.spaces.Box(-np.inf, np.inf, (O,), np.float32)
    act_space = gym.spaces.Discrete(A)
    device = _device(args)
    batch_host = drqn_batch(T, B, O, A)  # built on the CPU (seeded), then moved
    batch = batch_host if device.type == "cpu" else batch_host.to(device)
    problem = {"batch": B, "window": T, "lstm_size": sz["drqn_lstm"], "encoder_sizes": [sz["drqn_encoder"]],
               "obs_dim": O, "num_actions": A, "work_per_call": "1 update: online + target unroll, Huber TD, Adam, target copy",
               "data": "pre-sampled window batch with padded tails; no replay"}

    def functional(fn):
        def setup():
            holder = {"state": drqn.init(config, obs_space, act_space, seed=0, device=device)}

            def step() -> None:
                holder["state"], _ = fn(holder["state"], batch)

            return step

        return setup

    def imperative():
        agent = ImperativeDRQN.from_functional(drqn.init(config, obs_space, act_space, seed=0), config)
        if device.type != "cpu":  # as `update --algo drqn`: modules moved in place (Adam keeps the same Parameters)
            agent.q.to(device)
            agent.target.to(device)
        return lambda: agent.update(batch)

    def torchrl_setup(compiled: bool):
        def setup():
            trl = _TorchRLDRQN(sz, compile=compiled, device=device)
            tb = _TorchRLDRQN.batch(batch_host, sz)
            tb = tb if device.type == "cpu" else tb.to(device)
            return lambda: trl.update(tb)

        return setup

    missing = _unavailable_peers(("torchrl",))
    variants = [Variant("rlfunc", "eager (drqn.update)", functional(drqn.update))]
    if not args.no_compile:
        variants.append(Variant("rlfunc", "compiled (torch.compile(drqn.update, fullgraph=True))",
                                functional(torch.compile(drqn.update, fullgraph=True)), compiled=True))
    variants.append(Variant("imperative", "benchmarks/baselines/drqn.py (nn.LSTM, torch.optim.Adam)", imperative))
    variants.append(Variant("torchrl", "DQNLoss on LSTMModule, eager", torchrl_setup(False),
                            unavailable=missing.get("torchrl")))
    if not args.no_compile:
        variants.append(Variant("torchrl", "DQNLoss on LSTMModule + backward + Adam, torch.compile", torchrl_setup(True),
                                unavailable=missing.get("torchrl"), compiled=True))
    variants.append(Variant("stable-baselines3", "-", unavailable="SB3 has no recurrent off-policy (DRQN/R2D2) learner"))
    _measure(variants, args)
    return _rows(task, "updates/s", problem, variants, args.threads, _device(args).type)
