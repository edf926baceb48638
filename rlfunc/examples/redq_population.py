"""REDQ (Chen et al. 2021) on Pendulum-v1, many seeds and settings in one process, in one file.

    python -m rlfunc.examples.redq_population --seeds 0 1 2 3 --total-steps 3000
    python -m rlfunc.examples.redq_population --seeds 0 1 --critic-lrs 3e-4 1e-3   # 4 members: seeds x rates

``redq_pendulum.py`` with a member dimension: write for one, vmap for many. Each member is
built as its single run (``redq.init`` with its seed and config), the states are stacked
(``population.stack``: a leading ``[P]`` on every tensor; a learning rate that differs
between members becomes data, ``state["hparams"]``), and every env step runs one vmapped
``act``, one batched replay write and one update of all members, each member's draws from
its own generator in the single script's order. So member ``k`` computes what
``redq_pendulum --seed s_k`` computes: bit for bit with one member, to float rounding with
more (batched matrix products sum in another order; tests/test_examples_population.py).
"""

import argparse
import dataclasses
import itertools
import time

import numpy as np
import torch
from tensordict import TensorDict

from rlfunc.algos import redq
from rlfunc.core import population
from rlfunc.envs import make_env
from rlfunc.replay.population import PopulationReplay
from rlfunc.runtime.evaluate import run_episodes_together
from rlfunc.runtime.perf import tune_allocator


def arg(default, help):
    return dataclasses.field(default=default, metadata={"help": help})


@dataclasses.dataclass
class Args:
    seeds: list[int] = arg((0, 1, 2, 3), "one member per seed (times --critic-lrs); as redq_pendulum's --seed each")
    critic_lrs: list[float] = arg((3e-4,), "critic learning rates: one member per seed and rate (settings as data)")
    env_id: str = arg("Pendulum-v1", "gymnasium id: continuous actions, flat observations")
    total_steps: int = arg(3000, "environment steps per member")
    learning_starts: int = arg(1000, "env steps of uniform actions before the first update (paper: 5000)")
    replay_size: int = arg(1_000_000, "replay capacity in transitions, per member")
    num_critics: int = arg(10, "N critics in the ensemble (SAC: 2)")
    subset_size: int = arg(2, "M target critics drawn for every critic update (SAC: 2)")
    updates_per_step: int = arg(20, "G critic updates per env step, the UTD ratio (SAC: 1)")
    batch_size: int = arg(256, "rows per mini-batch")
    hidden: int = arg(256, "width of both hidden layers of actor and critics")
    eval_every: int = arg(500, "env steps between evaluations")
    eval_episodes: int = arg(5, "deterministic episodes per evaluation")
    compile: bool = arg(False, "torch.compile the vmapped critic and policy steps (fullgraph)")
    device: str = arg("cpu", "cpu or cuda")
    threads: int = arg(1, "torch threads (0: torch's default)")


def parse_args(argv=None) -> Args:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in dataclasses.fields(Args):
        if f.type is bool:
            kind = {"action": argparse.BooleanOptionalAction}
        elif f.type in (list[int], list[float]):
            kind = {"type": f.type.__args__[0], "nargs": "+"}
        else:
            kind = {"type": f.type}
        parser.add_argument("--" + f.name.replace("_", "-"), default=f.default, help=f.metadata["help"], **kind)
    return Args(**vars(parser.parse_args(argv)))


def main(args: Args) -> dict:
    if args.threads:
        torch.set_num_threads(args.threads)
    tune_allocator()  # pure updates allocate new buffers every step: keep freed memory in the process
    device = torch.device(args.device)
    members = list(itertools.product(args.seeds, args.critic_lrs))  # (seed, critic_lr) of each member
    P = len(members)
    envs = [make_env(args.env_id) for _ in members]  # actions rescaled to [-1, 1]
    eval_envs = [make_env(args.env_id) for _ in members]
    base = redq.Config(num_critics=args.num_critics, subset_size=args.subset_size,  # others: the official defaults
                       updates_per_step=args.updates_per_step, batch_size=args.batch_size,
                       hidden_sizes=(args.hidden, args.hidden))
    # 1. the population: each member built as its single run, then stacked (critic_lr, where it differs: data)
    spaces = envs[0].observation_space, envs[0].action_space
    state = population.stack([redq.init(dataclasses.replace(base, critic_lr=lr), *spaces, seed=seed, device=device)
                              for seed, lr in members])
    config = state["config"]  # static, kept once: shapes, G, B (member 0's; the same for every member)
    # the single update, vmapped over members (run directly for one member: its single run's numbers); to
    # compile, REDQ's G-step loop runs once for all members with each step vmapped (the same numbers): its two
    # steps compile in seconds, where compiling the whole vmapped update unrolls all G steps (minutes)
    update = redq.make_population_update("step") if args.compile else population.vmap_update(redq.update)
    act = population.vmap(lambda params, obs, noise: redq.act(params, obs, noise, config=config))
    replay = PopulationReplay(P, args.replay_size, device=device)
    gens = [torch.Generator(device=device).manual_seed(seed + 1) for seed, _ in members]  # member k's draws
    act_dim = spaces[1].shape[0]
    G, B = config.updates_per_step, config.batch_size
    print(f"{P} members (seed, critic_lr): " + ", ".join(f"({s}, {lr:g})" for s, lr in members), flush=True)

    obs = np.stack([env.reset(seed=seed)[0] for env, (seed, _) in zip(envs, members)])
    evals, metrics = [], None
    start = time.monotonic()
    for step in range(1, args.total_steps + 1):
        # 2. collect: every member acts at once (uniform actions at first), each with its own noise
        if step <= args.learning_starts:
            action = population.draw_per_member(
                lambda g: torch.rand((1, act_dim), generator=g, device=device) * 2.0 - 1.0, gens)
        else:
            obs_t = torch.as_tensor(obs, dtype=torch.float32, device=device)[:, None]  # [P, 1, O]
            noise = population.draw_per_member(lambda g: torch.randn((1, act_dim), generator=g, device=device), gens)
            action = act(state["params"], obs_t, noise)
        action = action.cpu().numpy()[:, 0]  # [P, A]
        steps = [env.step(a) for env, a in zip(envs, action)]
        next_obs = np.stack([s[0] for s in steps])
        # 3. replay: each member's row into its own buffer, one write for all
        rows = {"obs": obs, "action": action, "reward": [s[1] for s in steps], "next_obs": next_obs,
                "terminated": [s[2] for s in steps]}  # `terminated` stops the bootstrap; a truncation does not
        replay.add_rows([1] * P, TensorDict({k: torch.tensor(np.asarray(v), dtype=torch.float32)
                                             for k, v in rows.items()}, [P]))
        obs = next_obs
        for k, (env, s) in enumerate(zip(envs, steps)):
            if s[2] or s[3]:  # terminated or truncated
                obs[k] = env.reset()[0]
        # 4. update: every member's G * B rows from its own generator, one update of all members
        if step >= args.learning_starts:
            batch = replay.sample(G * B, gens).reshape(P, G, B)
            noise = population.draw_per_member(
                lambda g: redq.draw_noise(config, G, B, act_dim, generator=g, device=device), gens)
            state, metrics = update(state, batch, noise)
        # 5. evaluate: each member's own deterministic policy, all eval envs stepped together
        if step % args.eval_every == 0 or step == args.total_steps:
            params = [population.member(state, k)["params"] for k in range(P)]

            def greedy(obs_rows, running, params=params):
                return torch.stack([
                    redq.act(params[i], torch.as_tensor(o, dtype=torch.float32, device=device), deterministic=True)
                    for i, o in zip(running, obs_rows)
                ]).cpu().numpy()

            seeds = [seed + 10_000 for seed, _ in members]
            returns = run_episodes_together(greedy, eval_envs, args.eval_episodes, seeds)
            evals.append((step, [float(np.mean(r)) for r in returns]))
            losses = "" if metrics is None else f"  critic_loss {metrics['critic_loss'].mean():.3f} (mean)"
            print(f"step {step}  eval " + " ".join(f"{r:.1f}" for r in evals[-1][1]) + f"{losses}  "
                  f"{step * P / (time.monotonic() - start):.1f} env steps/s in all", flush=True)
    return {"state": state, "evals": evals, "members": members}


if __name__ == "__main__":
    main(parse_args())
