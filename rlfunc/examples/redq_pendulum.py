"""REDQ (Chen et al. 2021) on Pendulum-v1 in one file.

    python -m rlfunc.examples.redq_pendulum --total-steps 3000
    python -m rlfunc.examples.redq_pendulum --num-critics 2 --updates-per-step 1   # SAC

Only rlfunc's pure pieces: ``redq.init / act / draw_noise / update`` and a
replay buffer. Copy this file and change the loss (``rlfunc.algos.redq``). For
the same seed it computes exactly what ``rlfunc train configs/redq/pendulum.yaml``
computes (tests/test_examples_match_train.py).
"""

import argparse
import dataclasses
import time

import numpy as np
import torch
from tensordict import TensorDict

from rlfunc.algos import redq
from rlfunc.envs import make_env
from rlfunc.replay.uniform import UniformReplay
from rlfunc.runtime.perf import tune_allocator


def arg(default, help):
    return dataclasses.field(default=default, metadata={"help": help})


@dataclasses.dataclass
class Args:
    env_id: str = arg("Pendulum-v1", "gymnasium id: continuous actions, flat observations")
    seed: int = arg(0, "init uses seed, actions and sampling seed + 1, env seed, evaluation seed + 10000")
    total_steps: int = arg(3000, "environment steps")
    learning_starts: int = arg(1000, "env steps of uniform actions before the first update (paper: 5000)")
    replay_size: int = arg(1_000_000, "replay capacity in transitions")
    num_critics: int = arg(10, "N critics in the ensemble (SAC: 2)")
    subset_size: int = arg(2, "M target critics drawn for every critic update (SAC: 2)")
    updates_per_step: int = arg(20, "G critic updates per env step, the UTD ratio (SAC: 1)")
    batch_size: int = arg(256, "rows per mini-batch")
    critic_lr: float = arg(3e-4, "Adam learning rate of the critic ensemble (the official code's)")
    hidden: int = arg(256, "width of both hidden layers of actor and critics")
    eval_every: int = arg(500, "env steps between evaluations")
    eval_episodes: int = arg(5, "deterministic episodes per evaluation")
    compile: bool = arg(False, "torch.compile each critic and policy step (fullgraph)")
    device: str = arg("cpu", "cpu or cuda")
    threads: int = arg(1, "torch threads (0: torch's default)")


def parse_args(argv=None) -> Args:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in dataclasses.fields(Args):
        kind = {"action": argparse.BooleanOptionalAction} if f.type is bool else {"type": f.type}
        parser.add_argument("--" + f.name.replace("_", "-"), default=f.default, help=f.metadata["help"], **kind)
    return Args(**vars(parser.parse_args(argv)))


def evaluate(params, env, episodes: int, seed: int, device) -> float:
    """Mean return of the deterministic policy ``tanh(mean)``; episode i starts from reset(seed + i)."""
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        total, done = 0.0, False
        while not done:
            obs_t = torch.as_tensor(obs, dtype=torch.float32, device=device)[None]
            action = redq.act(params, obs_t, deterministic=True)[0].cpu().numpy()
            obs, reward, terminated, truncated, _ = env.step(action)
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


def main(args: Args) -> dict:
    if args.threads:
        torch.set_num_threads(args.threads)
    tune_allocator()  # pure updates allocate new buffers every step: keep freed memory in the process
    device = torch.device(args.device)
    env, eval_env = make_env(args.env_id), make_env(args.env_id)  # actions rescaled to [-1, 1]
    config = redq.Config(
        num_critics=args.num_critics,
        subset_size=args.subset_size,
        updates_per_step=args.updates_per_step,
        batch_size=args.batch_size,
        critic_lr=args.critic_lr,
        hidden_sizes=(args.hidden, args.hidden),
    )  # every other field: the official code's default
    state = redq.init(config, env.observation_space, env.action_space, seed=args.seed, device=device)
    update = redq.make_update("step" if args.compile else "none")  # same numbers either way
    replay = UniformReplay(args.replay_size, device=device)
    gen = torch.Generator(device=device).manual_seed(args.seed + 1)  # every draw below comes from here
    act_dim = env.action_space.shape[0]
    G, B = config.updates_per_step, config.batch_size

    obs, _ = env.reset(seed=args.seed)
    evals, episode_returns, episode_return, metrics = [], [], 0.0, None
    start = time.monotonic()
    for step in range(1, args.total_steps + 1):
        # 1. collect: uniform actions at first, then a sample of the tanh-Gaussian policy
        if step <= args.learning_starts:
            action = torch.rand((1, act_dim), generator=gen, device=device) * 2.0 - 1.0
        else:
            obs_t = torch.as_tensor(obs, dtype=torch.float32, device=device)[None]
            noise = torch.randn((1, act_dim), generator=gen, device=device)
            action = redq.act(state["params"], obs_t, noise, config=config)
        action = action.cpu().numpy()
        next_obs, reward, terminated, truncated, _ = env.step(action[0])
        # 2. replay: `terminated` stops the bootstrap; a time-limit truncation does not
        row = {"obs": obs, "action": action[0], "reward": reward, "next_obs": next_obs, "terminated": terminated}
        replay.add(TensorDict({k: torch.tensor(np.asarray(v), dtype=torch.float32)[None] for k, v in row.items()}, [1]))
        obs, episode_return = next_obs, episode_return + float(reward)
        if terminated or truncated:
            obs, _ = env.reset()
            episode_returns.append(episode_return)
            episode_return = 0.0
        # 3. update: G * B rows sampled at once, one pure update for G critic steps + 1 policy step
        if step >= args.learning_starts:
            batch = replay.sample(G * B, generator=gen).reshape(G, B)
            noise = redq.draw_noise(config, G, B, act_dim, generator=gen, device=device)
            state, metrics = update(state, batch, noise)
        # 4. evaluate
        if step % args.eval_every == 0 or step == args.total_steps:
            evals.append((step, evaluate(state["params"], eval_env, args.eval_episodes, args.seed + 10_000, device)))
            losses = "" if metrics is None else f" critic_loss {float(metrics['critic_loss']):.3f}"
            recent = np.mean(episode_returns[-5:]) if episode_returns else float("nan")
            print(f"step {step}  eval {evals[-1][1]:.1f}  train {recent:.1f}{losses}  "
                  f"{step / (time.monotonic() - start):.1f} steps/s", flush=True)
    return {"state": state, "evals": evals}


if __name__ == "__main__":
    main(parse_args())
