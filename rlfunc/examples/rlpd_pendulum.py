"""RLPD (Ball et al. 2023) on Pendulum-v1 in one file: online RL with prior data.

    rlfunc dataset collect --policy random --env Pendulum-v1 --steps 5000 --out pendulum.npz
    python -m rlfunc.examples.rlpd_pendulum --data-path pendulum.npz

Only rlfunc's pure pieces: ``rlpd.init / act / draw_noise / update``, a replay
buffer, a prior dataset and the mixer that makes every mini-batch half prior
data ("symmetric sampling"). For the same seed it computes exactly what
``rlfunc train configs/rlpd/pendulum.yaml --set data.path=...`` computes
(tests/test_examples_match_train.py).
"""

import argparse
import dataclasses
import time

import numpy as np
import torch
from tensordict import TensorDict

from rlfunc.algos import rlpd
from rlfunc.envs import make_env
from rlfunc.replay.offline import MixedSampler, load_dataset
from rlfunc.replay.uniform import UniformReplay
from rlfunc.runtime.perf import tune_allocator


def arg(default, help):
    return dataclasses.field(default=default, metadata={"help": help})


@dataclasses.dataclass
class Args:
    data_path: str = arg("", "prior data: a D4RL-style .npz (rlfunc dataset collect) or a Minari directory")
    offline_ratio: float = arg(0.5, "share of every mini-batch drawn from the prior data (RLPD: 0.5)")
    pretrain_steps: int = arg(0, "updates on prior data only before the first online one (RLPD: 0)")
    env_id: str = arg("Pendulum-v1", "gymnasium id: continuous actions, flat observations")
    seed: int = arg(0, "init uses seed, actions and sampling seed + 1, env seed, evaluation seed + 10000")
    total_steps: int = arg(2000, "environment steps")
    learning_starts: int = arg(200, "env steps of uniform actions before the first update (official: 5000)")
    replay_size: int = arg(1_000_000, "online replay capacity in transitions")
    num_critics: int = arg(10, "N LayerNorm critics")
    updates_per_step: int = arg(20, "G critic updates per env step (UTD ratio)")
    batch_size: int = arg(256, "rows per mini-batch (prior + online)")
    hidden: int = arg(256, "width of both hidden layers")
    eval_every: int = arg(250, "env steps between evaluations")
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
            action = rlpd.act(params, obs_t, deterministic=True)[0].cpu().numpy()
            obs, reward, terminated, truncated, _ = env.step(action)
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


def main(args: Args) -> dict:
    if args.threads:
        torch.set_num_threads(args.threads)
    tune_allocator()
    device = torch.device(args.device)
    env, eval_env = make_env(args.env_id), make_env(args.env_id)  # actions rescaled to [-1, 1]
    config = rlpd.Config(
        num_critics=args.num_critics,
        updates_per_step=args.updates_per_step,
        batch_size=args.batch_size,
        hidden_sizes=(args.hidden, args.hidden),
    )  # every other field: the official code's default (LayerNorm critics, target entropy -|A|/2, ...)
    state = rlpd.init(config, env.observation_space, env.action_space, seed=args.seed, device=device)
    update = rlpd.make_update("step" if args.compile else "none")  # per-step compile: same numbers
    replay = UniformReplay(args.replay_size, device=device)
    gen = torch.Generator(device=device).manual_seed(args.seed + 1)  # every draw below comes from here
    act_dim = env.action_space.shape[0]
    G, B = config.updates_per_step, config.batch_size
    # Prior data is stored in the env's own action bounds; loading checks it against the env and rescales.
    native_space = make_env(args.env_id, rescale_actions=False).action_space
    dataset = None
    if args.data_path:
        dataset = load_dataset(args.data_path, env.observation_space, native_space, env_id=args.env_id, device=device)
    elif args.offline_ratio > 0:
        raise SystemExit("RLPD needs prior data: pass --data-path FILE.npz (or --offline-ratio 0 for online only).")
    sampler = MixedSampler(dataset, replay, args.offline_ratio if dataset is not None else 0.0)

    obs, _ = env.reset(seed=args.seed)
    evals, episode_returns, episode_return, metrics, pretrained = [], [], 0.0, None, 0
    start = time.monotonic()
    for step in range(1, args.total_steps + 1):
        # 1. collect: uniform actions at first, then a sample of the tanh-Gaussian policy
        if step <= args.learning_starts:
            action = torch.rand((1, act_dim), generator=gen, device=device) * 2.0 - 1.0
        else:
            obs_t = torch.as_tensor(obs, dtype=torch.float32, device=device)[None]
            noise = torch.randn((1, act_dim), generator=gen, device=device)
            action = rlpd.act(state["params"], obs_t, noise, config=config)
        action = action.cpu().numpy()
        next_obs, reward, terminated, truncated, _ = env.step(action[0])
        # 2. replay (online rows only; the prior data is never copied into it)
        row = {"obs": obs, "action": action[0], "reward": reward, "next_obs": next_obs, "terminated": terminated}
        replay.add(TensorDict({k: torch.tensor(np.asarray(v), dtype=torch.float32)[None] for k, v in row.items()}, [1]))
        obs, episode_return = next_obs, episode_return + float(reward)
        if terminated or truncated:
            obs, _ = env.reset()
            episode_returns.append(episode_return)
            episode_return = 0.0
        # 3. update: optional prior-only pre-training, then [G, B] batches of prior + online rows
        if step >= args.learning_starts:
            while dataset is not None and pretrained < args.pretrain_steps:
                batch = dataset.sample(G * B, generator=gen).reshape(G, B)
                noise = rlpd.draw_noise(config, G, B, act_dim, generator=gen, device=device)
                state, metrics = update(state, batch, noise)
                pretrained += 1
            batch = sampler.sample(G, B, generator=gen)
            noise = rlpd.draw_noise(config, G, B, act_dim, generator=gen, device=device)
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
