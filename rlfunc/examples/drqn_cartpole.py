"""DRQN (Hausknecht & Stone 2015) on CartPole-v1 without velocities, in one file.

    python -m rlfunc.examples.drqn_cartpole --total-steps 150000
    python -m rlfunc.examples.drqn_cartpole --no-mask-velocity        # fully observed CartPole

Only rlfunc's pure pieces: ``drqn.init / act / epsilon / update``, the sequence
replay, and the collector that steps a gymnasium vector env without storing the
step that crosses an autoreset. For the same seed it computes exactly what
``rlfunc train configs/drqn/cartpole_novel.yaml`` computes
(tests/test_examples_match_train.py).
"""

import argparse
import dataclasses
import time

import numpy as np
import torch
from tensordict import TensorDict

from rlfunc.algos import drqn
from rlfunc.envs import build_wrappers, make_env, make_vector_env
from rlfunc.replay.sequence import SequenceReplay
from rlfunc.runtime.collector import Collector
from rlfunc.runtime.perf import tune_allocator


def arg(default, help):
    return dataclasses.field(default=default, metadata={"help": help})


@dataclasses.dataclass
class Args:
    env_id: str = arg("CartPole-v1", "gymnasium id: discrete actions, flat observations")
    mask_velocity: bool = arg(True, "zero CartPole's velocities: the agent must infer them (needs memory)")
    num_envs: int = arg(8, "envs stepped together (a gymnasium vector env when > 1)")
    seed: int = arg(0, "init uses seed, actions and sampling seed + 1, envs seed + i, evaluation seed + 10000")
    total_steps: int = arg(150_000, "environment steps (transitions, all envs together)")
    sequence_length: int = arg(20, "T: steps per replayed window (paper: 10)")
    sequence_period: int = arg(20, "a window starts every this many steps of an episode")
    n_step: int = arg(5, "return length inside the window (beyond the paper, whose target is one-step: 1)")
    encoder_size: int = arg(128, "units of the ReLU layer before the LSTM")
    lstm_size: int = arg(128, "LSTM units")
    batch_size: int = arg(16, "windows per update")
    lr: float = arg(1e-3, "Adam learning rate")
    lr_decay_updates: int = arg(74_000, "lr falls linearly to lr / 10 over this many updates (0: constant, the paper's)")
    gamma: float = arg(0.995, "discount (paper: 0.99)")
    target_period: int = arg(250, "updates between target copies")
    double_q: bool = arg(True, "double Q-learning target (an option; the paper uses the plain max)")
    max_grad_norm: float = arg(10.0, "global-norm gradient clipping (0: off)")
    eps_decay_steps: int = arg(15_000, "env steps of the linear epsilon decay 1.0 -> 0.05")
    learning_starts: int = arg(2000, "env steps before the first update")
    train_every: int = arg(2, "env steps per update")
    replay_size: int = arg(5000, "replay capacity in windows")
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
    """Mean return of the greedy policy; the LSTM state starts from zeros in every episode."""
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        carry, total, done = drqn.initial_carry(config, 1, device=device), 0.0, False
        while not done:
            obs_t = torch.as_tensor(obs, dtype=torch.float32, device=device)[None]
            action, carry = drqn.greedy_action(params, obs_t, carry, config=config)
            obs, reward, terminated, truncated, _ = env.step(action[0].cpu().numpy())
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


def main(args: Args) -> dict:
    if args.threads:
        torch.set_num_threads(args.threads)
    tune_allocator()
    device = torch.device(args.device)
    wrappers = build_wrappers(["mask_velocity"] if args.mask_velocity else [])
    n = args.num_envs
    env = make_env(args.env_id, wrappers=wrappers) if n == 1 else make_vector_env(args.env_id, n, wrappers=wrappers)
    eval_env = make_env(args.env_id, wrappers=wrappers)
    obs_space, act_space = eval_env.observation_space, eval_env.action_space
    config = drqn.Config(
        sequence_length=args.sequence_length, sequence_period=args.sequence_period, lstm_size=args.lstm_size,
        encoder_sizes=(args.encoder_size,), batch_size=args.batch_size, lr=args.lr, target_period=args.target_period,
        double_q=args.double_q, max_grad_norm=args.max_grad_norm or None, eps_decay_steps=args.eps_decay_steps,
        n_step=args.n_step, gamma=args.gamma,
        lr_schedule={"kind": "linear", "decay_updates": args.lr_decay_updates, "end_factor": 0.1} if args.lr_decay_updates else None,
    )  # every other field: the module's default (zero-state windows, Huber)
    state = drqn.init(config, obs_space, act_space, seed=args.seed, device=device)
    update = torch.compile(drqn.update, fullgraph=True) if args.compile else drqn.update
    replay = SequenceReplay(args.replay_size, config.sequence_length, n, period=config.sequence_period, device=device)
    gen = torch.Generator(device=device).manual_seed(args.seed + 1)  # every draw below comes from here
    carry = drqn.initial_carry(config, n, device=device)  # one LSTM state per env
    collector = Collector(env, seed=args.seed)
    collector.reset(seed=args.seed)

    step, evals, episode_returns, metrics = 0, [], [], None
    start = time.monotonic()
    while step < args.total_steps:
        # 1. collect: epsilon-greedy from each env's LSTM state, zeroed where an episode starts
        obs = torch.as_tensor(collector.obs, dtype=torch.float32, device=device)
        reset = torch.as_tensor(collector.episode_start, device=device)
        noise = drqn.draw_act_noise(n, generator=gen, device=device)
        action, carry = drqn.act(state["params"], obs, carry, drqn.epsilon(config, step), noise, reset=reset)
        rows, finished = collector.step(action.cpu().numpy())
        episode_returns += [ret for _, ret, _ in finished]
        # 2. replay: windows of T steps inside one episode (padded and masked at its end)
        k = rows.batch_size[0]
        transition = TensorDict({
            "obs": rows["obs"].float(), "action": rows["action"].to(torch.int64).reshape(k),
            "reward": rows["reward"].float().reshape(k), "next_obs": rows["next_obs"].float(),
            "terminated": rows["terminated"].bool().reshape(k), "truncated": rows["truncated"].bool().reshape(k),
        }, batch_size=[k]).to(device)
        replay.add(transition, env_ids=rows["env_id"].numpy())
        for _ in range(k):
            step += 1
            # 3. update: one gradient step on [T, B] windows every `train_every` env steps
            if step >= args.learning_starts and step % args.train_every == 0 and len(replay) > 0:
                batch = replay.sample(config.batch_size, generator=gen)
                state, metrics = update(state, batch.select("obs", "action", "reward", "next_obs", "terminated", "mask"))
            # 4. evaluate
            if step % args.eval_every == 0 or step == args.total_steps:
                evals.append((step, evaluate(state["params"], config, eval_env, args.eval_episodes, args.seed + 10_000, device)))
                loss = "" if metrics is None else f" loss {float(metrics['loss']):.4f}"
                recent = np.mean(episode_returns[-10:]) if episode_returns else float("nan")
                print(f"step {step}  eval {evals[-1][1]:.1f}  train {recent:.1f}  "
                      f"epsilon {float(drqn.epsilon(config, step)):.2f}{loss}  "
                      f"{step / (time.monotonic() - start):.0f} steps/s", flush=True)
            if step >= args.total_steps:
                break
    return {"state": state, "evals": evals}


if __name__ == "__main__":
    main(parse_args())
