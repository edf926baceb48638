"""``benchmarks/run.py locomotion-data``: D4RL-style prior data for RLPD on MuJoCo, made locally.

Nothing can be downloaded here, so the datasets of D4RL's locomotion suite (Fu et al. 2020,
section 5 and appendix: "medium" is 1M steps of a SAC policy trained to about a third of the
expert's return, "expert" of a fully trained SAC policy, "medium-replay" the replay buffer of the
medium policy's training run, "medium-expert" medium and expert concatenated, "random" a uniform
policy) are made the same way, smaller, from the project's own agent:

1. **data agent**: ``rlfunc train sac/<env>`` (the REDQ paper's SAC baseline, G = 1: cheap on a
   CPU; D4RL's agents were SAC too) for ``--agent-steps`` env steps, a checkpoint every 5000
   steps, every checkpoint kept. ``--agent-algo redq`` trains ``redq/<env>`` instead, with
   ``--agent-set`` overrides (e.g. a smaller update that fits a CPU): REDQ reaches a given return
   in far fewer env steps, so on a CPU it gives a medium and an expert policy nearer D4RL's
   return levels than SAC in the same time;
2. **expert**: the last checkpoint; **medium**: the checkpoint whose evaluation return is closest
   to ``--medium-fraction`` (1/3, D4RL's) of the expert's; both collected with ``rlfunc dataset
   collect`` (``--steps`` transitions, Gaussian action noise ``--noise`` in [-1, 1] units, where
   D4RL sampled the stochastic SAC policy);
3. **medium-replay**: what the data agent's replay held when it reached the medium checkpoint,
   re-enacted: uniform actions for the agent's 5000 warm-up steps, then, for each checkpoint
   before the medium one, 5000 steps of that checkpoint at ``--replay-noise`` (the agent's
   own replay is not exported; the policy that acted in each stretch of training is);
4. **medium-expert**: medium then expert; **random**: ``--random-steps`` uniform actions;
   ``--medium-checkpoint PATH`` skips the data agent: the medium dataset comes from that policy
   checkpoint (any ``rlfunc`` training or population-member checkpoint), and only random and
   medium are made (medium-replay needs the agent's run); ``--expert-checkpoint PATH`` with it adds
   the expert dataset from that checkpoint and medium-expert (medium then expert);
5. **Minari**: the medium dataset written again as a local Minari dataset
   (``minari.create_dataset_from_buffers``, id ``rlfunc/<env>-medium-v0`` under
   ``ROOT/minari``, read back through ``rlfunc.replay.offline`` and compared with the ``.npz``).

Every ``.npz`` has the D4RL keys (``observations``, ``actions``, ``rewards``,
``next_observations``, ``terminals``, ``timeouts``; :mod:`rlfunc.runtime.dataset`); where a
collection or a mixture part ends mid-episode its last row is marked a timeout (a cut, which
bootstraps). The data stay under ``--root`` (``runs/`` is not committed); the JSON written to
``--out`` records each dataset's size, episodes, mean return of its complete episodes, SHA-256,
the exact commands, the checkpoints used and the machine. Re-running the command reuses what is
there (a finished data agent, existing datasets), so it continues after an interruption.
"""

from __future__ import annotations

import argparse
import csv
import os
import shlex
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ENVS = {"hopper": "Hopper-v5", "walker2d": "Walker2d-v5", "ant": "Ant-v5", "humanoid": "Humanoid-v5"}
CHECKPOINT_EVERY = 5000  # the sac/<env> configs' checkpoint_every and eval_every, and their learning_starts


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", choices=sorted(ENVS), default="hopper", help="MuJoCo task (configs/sac/<env>.yaml trains the data agent)")
    p.add_argument("--root", type=Path, default=None, help="where the agent run and the datasets go (default runs/locomotion_data/<env>)")
    p.add_argument("--agent-steps", type=int, default=40_000, help="env steps of the data agent (a multiple of 5000)")
    p.add_argument("--agent-algo", choices=("sac", "redq"), default="sac",
                   help="the data agent's packaged config: configs/<algo>/<env>.yaml (default sac, as D4RL)")
    p.add_argument("--agent-set", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override of the data agent (repeatable; recorded in the JSON)")
    p.add_argument("--medium-checkpoint", type=Path, default=None,
                   help="collect the medium dataset from this policy checkpoint instead of training a data agent "
                        "(random and medium only, unless --expert-checkpoint is given too)")
    p.add_argument("--expert-checkpoint", type=Path, default=None,
                   help="with --medium-checkpoint: collect the expert dataset from this policy checkpoint and "
                        "make medium-expert too")
    p.add_argument("--medium-fraction", type=float, default=1 / 3, help="medium: the checkpoint nearest this fraction of the expert's return")
    p.add_argument("--steps", type=int, default=25_000, help="transitions in the medium and expert datasets")
    p.add_argument("--random-steps", type=int, default=10_000, help="transitions in the random dataset")
    p.add_argument("--noise", type=float, default=0.1, help="action noise std of the medium and expert collections")
    p.add_argument("--replay-noise", type=float, default=0.3, help="action noise std of the medium-replay collections")
    p.add_argument("--threads", type=int, default=1, help="torch threads of the data agent")
    p.add_argument("--out", type=Path, default=None, help="JSON (default benchmarks/results/locomotion_data_<env>.json)")
    p.add_argument("--note", default=None, help="free text stored in the JSON")


def _rlfunc(args: list[str], log: list[str]) -> None:
    """Run ``rlfunc ARGS`` (this Python's), recording the command; a failure stops with its exit code."""
    cmd = ["rlfunc", *args]
    log.append(shlex.join(cmd))
    print("$", log[-1], flush=True)
    out = subprocess.run([sys.executable, "-m", "rlfunc.runtime.cli", *args], check=False)
    if out.returncode != 0:
        raise SystemExit(f"locomotion-data: `{log[-1]}` failed with exit code {out.returncode}.")


def _evals(run_dir: Path) -> dict[int, float]:
    with open(run_dir / "eval.csv", newline="") as f:
        return {int(r["step"]): float(r["mean_return"]) for r in csv.DictReader(f)}


def _checkpoint(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"step_{step:09d}"


def agent_command(env: str, run_dir: Path, steps: int, threads: int, algo: str = "sac", sets: list[str] = ()) -> list[str]:
    """The ``rlfunc`` arguments that train the data agent (every checkpoint kept)."""
    keep = steps // CHECKPOINT_EVERY + 1
    return ["train", f"{algo}/{env}", "--run-dir", str(run_dir), *(f"--set={kv}" for kv in sets),
            f"--set=train.total_steps={steps}", f"--set=train.keep_checkpoints={keep}", f"--set=train.threads={threads}",
            "--set=train.progress=false"]


def train_agent(env: str, root: Path, steps: int, threads: int, log: list[str], algo: str = "sac",
                sets: list[str] = ()) -> tuple[Path, bool]:
    """The data agent's run directory trained to ``steps``, and whether it was there already (its
    checkpoint at ``steps`` exists: nothing is trained)."""
    run_dir = root / "agent"
    if _checkpoint(run_dir, steps).is_dir() and steps in _evals(run_dir):
        return run_dir, True
    if (run_dir / "config.yaml").is_file():
        _rlfunc(["resume", str(run_dir), "--total-steps", str(steps)], log)
    else:
        _rlfunc(agent_command(env, run_dir, steps, threads, algo, sets), log)
    return run_dir, False


def pick_checkpoints(run_dir: Path, steps: int, fraction: float) -> tuple[int, int, dict[int, float]]:
    """``(medium_step, expert_step, evals)``: the expert is the last checkpoint; the medium one is the
    trained checkpoint (after the warm-up, before the expert) whose evaluation is nearest ``fraction``
    of the expert's (D4RL: about a third)."""
    evals = _evals(run_dir)
    candidates = [s for s in evals if CHECKPOINT_EVERY < s < steps and _checkpoint(run_dir, s).is_dir()]
    if steps not in evals or not candidates:
        raise SystemExit(f"locomotion-data: {run_dir} needs evaluations and checkpoints every {CHECKPOINT_EVERY} steps "
                         f"up to {steps}; train it with --agent-steps {steps} (2 x {CHECKPOINT_EVERY} at least).")
    goal = fraction * evals[steps]
    medium = min(candidates, key=lambda s: (abs(evals[s] - goal), s))
    return medium, steps, evals


def _load(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def concatenate(parts: list[Path], out: Path, policy: str) -> Path:
    """One ``.npz`` of the parts' rows in order; each part's last row becomes a timeout (a cut) unless
    it terminated. Metadata: the first part's env and bounds; ``policy`` says what the mixture is."""
    from rlfunc.replay.offline import write_npz

    loaded = [_load(p) for p in parts]
    rows = ("observations", "actions", "rewards", "next_observations", "terminals", "timeouts")
    arrays = {k: np.concatenate([d[k] for d in loaded]) for k in rows}
    ends = np.cumsum([len(d["rewards"]) for d in loaded]) - 1
    arrays["timeouts"][ends] |= ~arrays["terminals"][ends]
    first = loaded[0]
    arrays.update(env_id=first["env_id"], action_low=first["action_low"], action_high=first["action_high"],
                  policy=np.asarray(policy), noise=np.asarray(np.nan, dtype=np.float32))
    return write_npz(out, arrays)


def cut_last_row(path: Path) -> None:
    """Mark a collection's last row a timeout when it ended mid-episode (D4RL's convention for a cut)."""
    from rlfunc.replay.offline import write_npz

    d = _load(path)
    if not (d["terminals"][-1] or d["timeouts"][-1]):
        d["timeouts"][-1] = True
        write_npz(path, d)


def episode_returns(d: dict[str, np.ndarray], limit: int = 1000) -> np.ndarray:
    """Returns of the complete episodes: each collection starts at a reset, so the rows between two
    ends (a terminal or timeout row) are one episode; it is complete when it terminated or ran to the
    env's ``limit`` steps, and cut (left out) when a collection or mixture part stopped it earlier."""
    ends = np.flatnonzero(d["terminals"] | d["timeouts"])
    starts = np.r_[0, ends[:-1] + 1].astype(int)
    out = [float(d["rewards"][a:b + 1].astype(np.float64).sum()) for a, b in zip(starts, ends)
           if d["terminals"][b] or b - a + 1 >= limit]
    return np.asarray(out)


def describe(path: Path) -> dict:
    """Size, complete episodes and their mean return (:func:`episode_returns`), SHA-256 of the file."""
    from rlfunc.replay.offline import dataset_checksum

    d = _load(path)
    returns = episode_returns(d)
    stats = {"mean_return": None, "min_return": None, "max_return": None}
    if returns.size:
        stats = {"mean_return": float(returns.mean()), "min_return": float(returns.min()),
                 "max_return": float(returns.max())}
    return {
        "file": str(path),
        "transitions": int(len(d["rewards"])),
        "episodes_complete": int(returns.size),
        **stats,
        "terminals": int(d["terminals"].sum()),
        "timeouts": int(d["timeouts"].sum()),
        "bytes": path.stat().st_size,
        "sha256": dataset_checksum(path),
        "policy": str(d["policy"]) if "policy" in d else None,
    }


def write_minari(npz: Path, dataset_id: str, store: Path, env_id: str, algo: str = "sac") -> dict:
    """The ``.npz`` as a local Minari dataset (one episode buffer per episode; the last row of a cut
    episode carries ``truncations``), read back with :func:`rlfunc.replay.offline.read_minari` and
    compared with the ``.npz`` row for row."""
    import gymnasium as gym
    import minari
    from minari.data_collector import EpisodeBuffer

    from rlfunc.replay.offline import dataset_checksum, read_minari

    d = _load(npz)
    ends = np.flatnonzero(d["terminals"] | d["timeouts"])
    if ends.size == 0 or ends[-1] != len(d["rewards"]) - 1:
        raise SystemExit(f"locomotion-data: {npz} must end with a terminal or a timeout row to split into episodes.")
    buffers, start = [], 0
    for k, end in enumerate(ends):
        sl = slice(start, end + 1)
        buffers.append(EpisodeBuffer(
            id=k, observations=np.concatenate([d["observations"][sl], d["next_observations"][end:end + 1]]),
            actions=d["actions"][sl], rewards=d["rewards"][sl], terminations=d["terminals"][sl],
            truncations=d["timeouts"][sl], infos={}))
        start = end + 1
    os.environ["MINARI_DATASETS_PATH"] = str(store)
    target = store / dataset_id
    if target.exists():
        import shutil

        shutil.rmtree(target)
    env = gym.make(env_id)
    with warnings.catch_warnings():  # Minari's advice to name a code permalink, an author e-mail, an eval env
        warnings.simplefilter("ignore", UserWarning)
        minari.create_dataset_from_buffers(dataset_id, buffers, env=env, algorithm_name=f"rlfunc {algo} (locomotion-data)",
                                           author="rlfunc benchmarks/locomotion_data.py", data_format="hdf5",
                                           description=f"{npz.name} as a Minari dataset")
    back, info = read_minari(target)
    same = all(np.array_equal(back[k], d[k]) for k in ("observations", "actions", "rewards", "next_observations",
                                                        "terminals", "timeouts"))
    if not same:
        raise SystemExit(f"locomotion-data: the Minari dataset {target} does not read back as {npz}.")
    return {"id": dataset_id, "path": str(target), "store": str(store), "episodes": len(buffers),
            "transitions": int(len(back["rewards"])), "reads_back_equal_to": str(npz),
            "sha256": dataset_checksum(target)}


def run(args: argparse.Namespace, bench) -> int:
    """Make the datasets (module doc); ``bench`` is ``benchmarks/run.py`` (machine info, JSON writer)."""
    import torch

    if args.agent_steps % CHECKPOINT_EVERY or args.agent_steps < 3 * CHECKPOINT_EVERY:
        print(f"--agent-steps must be a multiple of {CHECKPOINT_EVERY} and at least {3 * CHECKPOINT_EVERY}.", file=sys.stderr)
        return 2
    env_id = ENVS[args.env]
    root = (args.root or bench.ROOT / "runs" / "locomotion_data" / args.env).resolve()
    root.mkdir(parents=True, exist_ok=True)
    machine = bench.machine_info(torch.device("cpu"), allocator_tuned=False)
    t0 = time.perf_counter()
    log: list[str] = []
    if args.expert_checkpoint is not None and args.medium_checkpoint is None:
        print("--expert-checkpoint needs --medium-checkpoint too (without both, the data agent's run gives both).",
              file=sys.stderr)
        return 2
    if args.medium_checkpoint is not None:
        return _from_checkpoint(args, bench, env_id, root, machine, t0)
    agent, reused = train_agent(args.env, root, args.agent_steps, args.threads, log, args.agent_algo, args.agent_set)
    medium, expert, evals = pick_checkpoints(agent, args.agent_steps, args.medium_fraction)
    print(f"data agent {agent}: expert = step {expert} (eval {evals[expert]:.1f}), "
          f"medium = step {medium} (eval {evals[medium]:.1f})", flush=True)
    name = args.env
    paths = {k: root / f"{name}-{k}.npz" for k in ("random", "medium", "expert", "medium-replay", "medium-expert")}
    commands: dict[str, list[str]] = {}

    def collect(key: str, out: Path, steps: int, seed: int, checkpoint: Path | None, noise: float) -> Path:
        return _collect(key, out, steps, seed, checkpoint, noise, env_id, commands)

    collect("random", paths["random"], args.random_steps, 1, None, 0.0)
    collect("medium", paths["medium"], args.steps, 2, _checkpoint(agent, medium), args.noise)
    collect("expert", paths["expert"], args.steps, 3, _checkpoint(agent, expert), args.noise)
    parts = [collect("medium-replay", root / "parts" / "replay-warmup.npz", CHECKPOINT_EVERY, 100, None, 0.0)]
    for step in range(CHECKPOINT_EVERY, medium, CHECKPOINT_EVERY):
        parts.append(collect("medium-replay", root / "parts" / f"replay-{step:06d}.npz", CHECKPOINT_EVERY,
                             100 + step // CHECKPOINT_EVERY, _checkpoint(agent, step), args.replay_noise))
    if not paths["medium-replay"].is_file():
        concatenate(parts, paths["medium-replay"],
                    f"medium-replay: uniform warm-up, then checkpoints {CHECKPOINT_EVERY}..{medium - CHECKPOINT_EVERY} "
                    f"of {agent} at noise {args.replay_noise}")
    if not paths["medium-expert"].is_file():
        concatenate([paths["medium"], paths["expert"]], paths["medium-expert"], "medium-expert: medium then expert")
    commands["medium-replay"].append("then concatenated in this order (benchmarks/locomotion_data.py: concatenate)")
    commands["medium-expert"] = ["medium then expert, concatenated (benchmarks/locomotion_data.py: concatenate)"]
    datasets = {k: {**describe(p), "commands": commands.get(k, [])} for k, p in paths.items()}
    datasets["medium"]["checkpoint"] = {"step": medium, "eval_return": evals[medium]}
    datasets["expert"]["checkpoint"] = {"step": expert, "eval_return": evals[expert]}
    datasets["medium-replay"]["checkpoints"] = list(range(CHECKPOINT_EVERY, medium, CHECKPOINT_EVERY))
    minari_info = write_minari(paths["medium"], f"rlfunc/{name}-medium-v0", root / "minari", env_id, args.agent_algo)
    result = {
        "machine": machine,
        "env": env_id,
        "agent": {
            "run_dir": str(agent),
            "config": f"configs/{args.agent_algo}/{args.env}.yaml",
            "overrides": list(args.agent_set),
            "command": shlex.join(["rlfunc", *agent_command(args.env, agent, args.agent_steps, args.threads,
                                                            args.agent_algo, args.agent_set)]),
            "commands_run_now": log,
            "reused": reused,
            "env_steps": args.agent_steps,
            "evals": [[s, r] for s, r in sorted(evals.items()) if s <= args.agent_steps],
        },
        "datasets": datasets,
        "minari": minari_info,
        "settings": {
            "agent_steps": args.agent_steps, "agent_algo": args.agent_algo, "medium_fraction": args.medium_fraction, "steps": args.steps,
            "random_steps": args.random_steps, "noise": args.noise, "replay_noise": args.replay_noise,
            "mean_return": MEAN_RETURN,
            "wall_s": time.perf_counter() - t0,
        },
    }
    return _write(args, bench, result)


MEAN_RETURN = ("mean return of the episodes that began in the file and ended by termination or the env's "
               "1000-step limit (cut episodes left out)")


def _write(args: argparse.Namespace, bench, result: dict) -> int:
    """``result`` (with ``--note``) to ``--out`` or ``locomotion_data_<env>.json``, and a summary printed."""
    if args.note:
        result["note"] = args.note
    out = args.out or bench.RESULTS_DIR / f"locomotion_data_{args.env}.json"
    bench.write_json(out, result)
    for k, v in result["datasets"].items():
        ret = "n/a" if v["mean_return"] is None else f"{v['mean_return']:.1f}"
        print(f"  {k:14s} {v['transitions']:7d} transitions, {v['episodes_complete']:4d} episodes, mean return {ret}")
    m = result["minari"]
    print(f"  minari {m['id']} ({m['episodes']} episodes) under {m['store']}")
    print(f"wrote {out}")
    return 0


def _collect(key: str, out: Path, steps: int, seed: int, checkpoint: Path | None, noise: float, env_id: str,
             commands: dict[str, list[str]]) -> Path:
    """``rlfunc dataset collect`` into ``out`` (kept if it is there: a re-run reuses it); the command is
    recorded either way."""
    src = ["--checkpoint", str(checkpoint), "--noise", str(noise)] if checkpoint else ["--env", env_id, "--policy", "random"]
    cmd = ["dataset", "collect", *src, "--steps", str(steps), "--seed", str(seed), "--out", str(out)]
    if out.is_file():
        commands.setdefault(key, []).append(shlex.join(["rlfunc", *cmd]))
        return out
    _rlfunc(cmd, commands.setdefault(key, []))
    cut_last_row(out)
    return out


def _checkpoint_info(checkpoint: Path) -> dict:
    """The policy checkpoint's algorithm, env step and last evaluation (loading verifies it: a damaged or
    foreign file stops here)."""
    from rlfunc.runtime.checkpoint import load_checkpoint

    _, meta = load_checkpoint(checkpoint)
    evals = meta.get("evals") or []
    return {"path": str(checkpoint), "algo": meta.get("algo"), "env_step": meta.get("env_step"),
            "eval_return": evals[-1][1] if evals else None, "evals": evals}


def _from_checkpoint(args: argparse.Namespace, bench, env_id: str, root: Path, machine: dict, t0: float) -> int:
    """``--medium-checkpoint`` (and ``--expert-checkpoint``): the random dataset, the medium one from the
    given policy checkpoint (its last evaluation recorded), with an expert checkpoint the expert and
    medium-expert datasets too, the medium data's Minari copy and the JSON."""
    medium = _checkpoint_info(args.medium_checkpoint.resolve())
    expert = _checkpoint_info(args.expert_checkpoint.resolve()) if args.expert_checkpoint is not None else None
    commands: dict[str, list[str]] = {}
    keys = ("random", "medium") + (("expert", "medium-expert") if expert else ())
    paths = {k: root / f"{args.env}-{k}.npz" for k in keys}
    _collect("random", paths["random"], args.random_steps, 1, None, 0.0, env_id, commands)
    _collect("medium", paths["medium"], args.steps, 2, Path(medium["path"]), args.noise, env_id, commands)
    if expert:
        _collect("expert", paths["expert"], args.steps, 3, Path(expert["path"]), args.noise, env_id, commands)
        if not paths["medium-expert"].is_file():
            concatenate([paths["medium"], paths["expert"]], paths["medium-expert"], "medium-expert: medium then expert")
        commands["medium-expert"] = ["medium then expert, concatenated (benchmarks/locomotion_data.py: concatenate)"]
    datasets = {k: {**describe(p), "commands": commands.get(k, [])} for k, p in paths.items()}
    datasets["medium"]["checkpoint"] = {k: v for k, v in medium.items() if k != "evals"}
    if expert:
        datasets["expert"]["checkpoint"] = {k: v for k, v in expert.items() if k != "evals"}
    minari_info = write_minari(paths["medium"], f"rlfunc/{args.env}-medium-v0", root / "minari", env_id,
                               str(medium["algo"] or "policy"))
    agent = {"checkpoint": medium["path"], "algo": medium["algo"], "env_step": medium["env_step"], "evals": medium["evals"]}
    if expert:
        agent["expert"] = {"checkpoint": expert["path"], "algo": expert["algo"], "env_step": expert["env_step"],
                           "evals": expert["evals"]}
    result = {
        "machine": machine,
        "env": env_id,
        "agent": agent,
        "datasets": datasets,
        "minari": minari_info,
        "settings": {"medium_checkpoint": medium["path"], "expert_checkpoint": expert["path"] if expert else None,
                     "steps": args.steps, "random_steps": args.random_steps, "noise": args.noise,
                     "mean_return": MEAN_RETURN,
                     "wall_s": time.perf_counter() - t0},
        "command": "python benchmarks/run.py locomotion-data " + " ".join(shlex.quote(a) for a in sys.argv[2:]),
    }
    return _write(args, bench, result)


def register(bench) -> None:
    """Add ``locomotion-data`` to ``benchmarks/run.py`` (``bench`` is that module)."""
    bench.subcommand("locomotion-data", "D4RL-style prior data for RLPD on MuJoCo, made locally (module doc)",
                     configure)(lambda args: run(args, bench))


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run it as: python benchmarks/run.py locomotion-data --env hopper")
