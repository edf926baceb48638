"""R2D2 (Kapturowski et al. 2019) on CartPole-v1 in one file, at CartPole scale.

    python -m rlfunc.examples.r2d2_cartpole
    python -m rlfunc.examples.r2d2_cartpole --mask-velocity --lr-decay-updates 0 --total-steps 150000   # needs memory

Only rlfunc's pure pieces: ``r2d2.init / act / update``, the prioritized sequence
replay (stored state, burn-in) and the collector stepping a vector env whose envs are
actors with fixed epsilons. For the same seed it computes exactly what ``rlfunc train
configs/r2d2/cartpole.yaml`` computes (tests/test_examples_match_train.py).
"""

import argparse
import dataclasses
import time

import numpy as np
import torch
from tensordict import TensorDict

from rlfunc.algos import r2d2
from rlfunc.envs import build_wrappers, make_env, make_vector_env
from rlfunc.replay.prioritized import PrioritizedSequenceReplay
from rlfunc.runtime.collector import Collector
from rlfunc.runtime.perf import tune_allocator

KEYS = ("obs", "action", "reward", "next_obs", "terminated", "mask", "init_carry", "weight")


def arg(default, help):
    return dataclasses.field(default=default, metadata={"help": help})


@dataclasses.dataclass
class Args:
    env_id: str = arg("CartPole-v1", "gymnasium id: discrete actions, flat observations")
    mask_velocity: bool = arg(False, "zero CartPole's velocities: the agent must infer them")
    num_envs: int = arg(8, "actors: envs stepped together, epsilon_i = 0.4^(1 + 7 i / (N - 1))")
    seed: int = arg(0, "init uses seed, actions and sampling seed + 1, envs seed + i, evaluation seed + 10000")
    total_steps: int = arg(100_000, "environment steps (transitions, all envs together)")
    width: int = arg(64, "encoder, LSTM and dueling-head width (paper: 512)")
    burn_in: int = arg(8, "steps unrolled from the stored state before the loss (paper: 40)")
    sequence_length: int = arg(16, "trained steps per window after the burn-in (paper: 80)")
    sequence_period: int = arg(8, "a window starts every this many steps (paper: 40)")
    gamma: float = arg(0.99, "discount (paper: 0.997)")
    lr: float = arg(1e-3, "Adam learning rate (paper: 1e-4, Acme: 1e-3)")
    lr_decay_updates: int = arg(25_000, "lr falls linearly to lr / 10 over this many updates (0: constant, the paper's)")
    batch_size: int = arg(32, "windows per update (paper: 64)")
    target_period: int = arg(500, "updates between target copies (paper: 2500)")
    replay_size: int = arg(20_000, "replay capacity in windows")
    learning_starts: int = arg(250, "windows stored before the first update")
    samples_per_insert: float = arg(64.0, "rate limiter: windows sampled per window inserted")
    eval_every: int = arg(5000, "env steps between evaluations")
    eval_episodes: int = arg(10, "greedy episodes per evaluation")
    compile: bool = arg(False, "torch.compile the update (fullgraph)")
    device: str = arg("cpu", "cpu or cuda")
    threads: int = arg(1, "torch threads (0: torch's default)")


def parse_args(argv=None) -> Args:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in dataclasses.fields(Args):
        kind = {"action": argparse.BooleanOptionalAction} if f.type is bool else {"type": f.type}
        parser.add_argument("--" + f.name.replace("_", "-"), default=f.default, help=f.metadata["help"], **kind)
    return Args(**vars(parser.parse_args(argv)))


def evaluate(params, config, env, episodes: int, seed: int, device) -> float:
    """Mean return of the greedy policy; the carry (LSTM state, previous action and reward) starts at zero."""
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        carry, total, done = r2d2.initial_carry(config, 1, device=device), 0.0, False
        while not done:
            obs_t = torch.as_tensor(obs, dtype=torch.float32, device=device)[None]
            action, carry = r2d2.greedy_action(params, obs_t, carry, config=config)
            obs, reward, terminated, truncated, _ = env.step(action[0].cpu().numpy())
            carry = r2d2.prepare_carry(carry, prev_reward=torch.tensor([reward], dtype=torch.float32))
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


def main(args: Args) -> dict:
    if args.threads:
        torch.set_num_threads(args.threads)
    tune_allocator()
    device, n = torch.device(args.device), args.num_envs
    wrappers = build_wrappers(["mask_velocity"] if args.mask_velocity else [])
    env = make_env(args.env_id, wrappers=wrappers) if n == 1 else make_vector_env(args.env_id, n, wrappers=wrappers)
    eval_env = make_env(args.env_id, wrappers=wrappers)
    config = r2d2.Config(
        encoder_sizes=(args.width,), lstm_size=args.width, head_sizes=(args.width,), burn_in=args.burn_in,
        sequence_length=args.sequence_length, sequence_period=args.sequence_period, gamma=args.gamma, lr=args.lr,
        lr_schedule={"kind": "linear", "decay_updates": args.lr_decay_updates, "end_factor": 0.1} if args.lr_decay_updates else None,
        batch_size=args.batch_size, target_period=args.target_period, samples_per_insert=args.samples_per_insert,
    )  # every other field: the paper's / Acme's default (n = 5 double Q with value rescaling, ...)
    state = r2d2.init(config, eval_env.observation_space, eval_env.action_space, seed=args.seed, device=device)
    update = torch.compile(r2d2.update, fullgraph=True) if args.compile else r2d2.update
    replay = PrioritizedSequenceReplay(num_envs=n, device=device, **r2d2.replay_kwargs(config, args.replay_size))
    gen = torch.Generator(device=device).manual_seed(args.seed + 1)  # every draw below comes from here
    carry = r2d2.initial_carry(config, n, device=device)  # (h, c, previous action, previous reward) per env
    epsilons = r2d2.actor_epsilons(n, config.epsilon_base, config.epsilon_alpha).to(device)
    collector = Collector(env, seed=args.seed)
    collector.reset(seed=args.seed)

    step, updates, evals, episode_returns, metrics = 0, 0, [], [], None
    start = time.monotonic()
    while step < args.total_steps:
        # 1. collect: the carry before this step (zeroed at an episode start) is stored with the step
        obs = torch.as_tensor(collector.obs, dtype=torch.float32, device=device)
        before = r2d2.prepare_carry(carry, reset=torch.as_tensor(collector.episode_start, device=device))
        noise = r2d2.draw_act_noise(n, generator=gen, device=device)
        action, carry = r2d2.act(state["params"], obs, None, None, before, epsilons, noise)
        rows, finished = collector.step(action.cpu().numpy())
        episode_returns += [ret for _, ret, _ in finished]
        # 2. replay: windows of burn_in + sequence_length steps with the carry before their first step
        k, env_ids = rows.batch_size[0], rows["env_id"].to(device)
        transition = TensorDict({
            "obs": rows["obs"].float(), "action": rows["action"].to(torch.int64).reshape(k),
            "reward": rows["reward"].float().reshape(k), "next_obs": rows["next_obs"].float(),
            "terminated": rows["terminated"].bool().reshape(k), "truncated": rows["truncated"].bool().reshape(k),
        }, batch_size=[k]).to(device)
        replay.add(transition, r2d2.carry_to_td(before)[env_ids], env_ids=rows["env_id"].numpy())
        prev_reward = carry.prev_reward.index_put((env_ids,), transition["reward"])  # input at the next step
        carry = carry._replace(prev_reward=prev_reward)
        for _ in range(k):
            step += 1
            # 3. update, as often as Acme's rate limiter allows (at most once per env step)
            allowed = args.samples_per_insert * (replay.windows_added - args.learning_starts) + args.batch_size
            if len(replay) >= max(args.learning_starts, 1) and (updates + 1) * args.batch_size <= allowed:
                batch = replay.sample(args.batch_size, generator=gen)
                state, metrics = update(state, batch.select(*KEYS))
                replay.update_priorities(batch["window"][0], metrics.pop("priorities"))
                updates += 1
            # 4. evaluate
            if step % args.eval_every == 0 or step == args.total_steps:
                evals.append((step, evaluate(state["params"], config, eval_env, args.eval_episodes, args.seed + 10_000, device)))
                loss = "" if metrics is None else f" loss {float(metrics['loss']):.4f}"
                recent = np.mean(episode_returns[-10:]) if episode_returns else float("nan")
                print(f"step {step}  eval {evals[-1][1]:.1f}  train {recent:.1f}  updates {updates}{loss}  "
                      f"{step / (time.monotonic() - start):.0f} steps/s", flush=True)
            if step >= args.total_steps:
                break
    return {"state": state, "evals": evals}


if __name__ == "__main__":
    main(parse_args())
