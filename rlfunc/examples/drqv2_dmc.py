"""DrQ-v2 (Yarats et al. 2021) from pixels in one file: DeepMind Control or any rgb_array gymnasium env.

    python -m rlfunc.examples.drqv2_dmc                                    # dmc/cartpole_balance-v0 (pip install -e ".[dmc]")
    python -m rlfunc.examples.drqv2_dmc --env-id Pendulum-v1 --total-steps 20000 --stddev-duration 10000 --replay-size 100000 --eval-every 2000 --eval-episodes 5

Only rlfunc's pure pieces: ``drqv2.init / act / draw_noise / update`` and the
pixel replay (each frame stored once; frame stacks and 3-step returns assembled
at sample time). Steps are agent steps; one agent step is ``action_repeat``
frames. For the same seed it computes exactly what ``rlfunc train
configs/drqv2/cartpole_balance.yaml`` computes, and with the Pendulum-v1 flags above what
``configs/drqv2/pendulum_pixels.yaml`` computes (tests/test_examples_match_train.py).
"""

import argparse
import dataclasses
import time

import numpy as np
import torch

from rlfunc.algos import drqv2
from rlfunc.envs import build_wrappers, make_env
from rlfunc.replay.pixels import PixelReplay
from rlfunc.runtime.perf import tune_allocator


def arg(default, help):
    return dataclasses.field(default=default, metadata={"help": help})


@dataclasses.dataclass
class Args:
    env_id: str = arg("dmc/cartpole_balance-v0", "dmc/<domain>_<task>-v0, or a gymnasium id that renders rgb_array")
    size: int = arg(84, "frame height and width in pixels")
    frame_stack: int = arg(3, "frames stacked on the channel axis")
    action_repeat: int = arg(2, "env frames per agent step")
    fast_render: bool = arg(False, "DMC only: no shadows, reflections or multisampling (faster, not the paper's)")
    seed: int = arg(0, "init uses seed, actions and sampling seed + 1, env seed, evaluation seed + 10000")
    total_steps: int = arg(50_000, "agent steps (50k = 100k frames at action repeat 2)")
    learning_starts: int = arg(2000, "agent steps of uniform actions before the first update")
    replay_size: int = arg(1_000_000, "replay capacity in frames")
    batch_size: int = arg(256, "rows per update")
    lr: float = arg(1e-4, "Adam learning rate (encoder, critic, actor)")
    update_every: int = arg(2, "agent steps per update")
    channels: int = arg(32, "channels of each conv layer")
    convs: int = arg(4, "conv layers (the first with stride 2)")
    feature_dim: int = arg(50, "trunk output of actor and critic")
    hidden_dim: int = arg(1024, "width of the actor and Q-head MLPs")
    stddev_duration: int = arg(100_000, "agent steps of the exploration noise schedule 1.0 -> 0.1")
    eval_every: int = arg(5000, "agent steps between evaluations")
    eval_episodes: int = arg(10, "deterministic episodes per evaluation")
    compile: bool = arg(False, "torch.compile the update (fullgraph)")
    device: str = arg("cpu", "cpu or cuda")
    threads: int = arg(1, "torch threads (0: torch's default)")


def parse_args(argv=None) -> Args:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in dataclasses.fields(Args):
        kind = {"action": argparse.BooleanOptionalAction} if f.type is bool else {"type": f.type}
        parser.add_argument("--" + f.name.replace("_", "-"), default=f.default, help=f.metadata["help"], **kind)
    return Args(**vars(parser.parse_args(argv)))


def make_pixel_env(args: Args):
    """DMC renders its own frames; any other env goes through rlfunc's `pixels` wrapper."""
    shape = {"size": args.size, "frame_stack": args.frame_stack, "action_repeat": args.action_repeat}
    if args.env_id.startswith("dmc/"):
        return make_env(args.env_id, kwargs={**shape, "fast_render": args.fast_render})
    return make_env(args.env_id, kwargs={"render_mode": "rgb_array"}, wrappers=build_wrappers([{"pixels": shape}]))


def evaluate(params, config, env, episodes: int, seed: int, device) -> float:
    """Mean return of the policy mean (no noise); episode i starts from reset(seed + i)."""
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        total, done = 0.0, False
        while not done:
            obs_t = torch.as_tensor(obs, dtype=torch.float32, device=device)[None]
            action = drqv2.act(params, obs_t, deterministic=True, config=config)[0].cpu().numpy()
            obs, reward, terminated, truncated, _ = env.step(action)
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


def main(args: Args) -> dict:
    if args.threads:
        torch.set_num_threads(args.threads)
    tune_allocator()
    device = torch.device(args.device)
    env, eval_env = make_pixel_env(args), make_pixel_env(args)  # uint8 [3 * frame_stack, size, size]
    config = drqv2.Config(
        batch_size=args.batch_size, lr=args.lr, update_every=args.update_every,
        encoder_channels=(args.channels,) * args.convs, encoder_strides=(2,) + (1,) * (args.convs - 1),
        feature_dim=args.feature_dim, hidden_dim=args.hidden_dim, stddev_duration=args.stddev_duration,
        frame_stack=args.frame_stack,
    )  # every other field: the official code's default
    state = drqv2.init(config, env.observation_space, env.action_space, seed=args.seed, device=device)
    update = torch.compile(drqv2.update, fullgraph=True) if args.compile else drqv2.update
    act_dim = env.action_space.shape[0]
    replay = PixelReplay(args.replay_size, env.observation_space.shape, act_dim, frame_stack=config.frame_stack,
                         nstep=config.nstep, gamma=config.gamma, device=device)
    gen = torch.Generator(device=device).manual_seed(args.seed + 1)  # every draw below comes from here

    obs, _ = env.reset(seed=args.seed)
    evals, episode_returns, episode_return, metrics = [], [], 0.0, None
    start = time.monotonic()
    for step in range(1, args.total_steps + 1):
        t = step - 1  # the agent step being taken (the official loop's global_step)
        # 1. act: uniform actions at first, then mean + sigma(t) * noise (unclipped)
        if t < args.learning_starts:
            action = torch.rand((1, act_dim), generator=gen, device=device) * 2.0 - 1.0
        else:
            noise = torch.randn((1, act_dim), generator=gen, device=device)
            obs_t = torch.as_tensor(obs, device=device)[None]
            action = drqv2.act(state["params"], obs_t, noise, config=config, step=t)
        action = action.cpu().numpy()
        # 2. update before the env step, as the official loop does (act, update, env.step): every
        #    `update_every` agent steps on the t steps stored so far; sigma is read from state["agent_step"]
        if t >= args.learning_starts and t % config.update_every == 0 and len(replay) > 0:
            state["agent_step"] = torch.tensor(t, dtype=torch.int64, device=device)
            batch = replay.sample(config.batch_size, generator=gen)
            noise = drqv2.draw_noise(config, config.batch_size, act_dim, generator=gen, device=device)
            state, metrics = update(state, batch, noise)
        next_obs, reward, terminated, truncated, _ = env.step(action[0])
        # 3. replay: the newest frame only; n-step windows never cross an episode end
        replay.add(obs, action[0], reward, next_obs, terminated, truncated)
        obs, episode_return = next_obs, episode_return + float(reward)
        if terminated or truncated:
            obs, _ = env.reset()
            episode_returns.append(episode_return)
            episode_return = 0.0
        # 4. evaluate
        if step % args.eval_every == 0 or step == args.total_steps:
            evals.append((step, evaluate(state["params"], config, eval_env, args.eval_episodes, args.seed + 10_000, device)))
            losses = "" if metrics is None else f" critic_loss {float(metrics['critic_loss']):.3f}"
            recent = np.mean(episode_returns[-5:]) if episode_returns else float("nan")
            print(f"step {step} (frames {step * args.action_repeat})  eval {evals[-1][1]:.1f}  train {recent:.1f}"
                  f"{losses}  {step / (time.monotonic() - start):.1f} steps/s", flush=True)
    return {"state": state, "evals": evals}


if __name__ == "__main__":
    main(parse_args())
