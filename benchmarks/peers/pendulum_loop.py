"""``pendulum_train_loop_utd20`` -- environment steps per second of a whole
training loop on Pendulum-v1 at UTD 20 (batch 256, 256-256): act, env step,
store, sample, 20 critic updates (+ actor), measured after a warm-up in which
learning has started (``learning_starts`` steps of random actions, then a few
learning steps; only steps with updates are timed; each window is a segment of
``--segment-steps`` env steps). ``rlfunc`` REDQ (N=10) and SAC (N=2, G=20)
drive the runtime's own pieces (``rlfunc.runtime.trainer.Trainer``'s env,
collector and ``TransitionLearner`` with ``configs/redq/pendulum.yaml`` /
``configs/sac/pendulum.yaml`` and overrides; the loop body of
``Trainer.run`` without evaluation, logging and checkpoints); the compiled row
sets ``train.compile=true``. Stable-Baselines3 ``SAC`` (``gradient_steps=20,
train_freq=1``, same nets and batch; each window is one ``learn()`` call of
``--segment-steps`` steps). TorchRL's REDQ recipe (``sota-implementations/redq``)
is not shipped in the wheel, so the TorchRL row is a loop from its components
(``GymEnv``, ``step_and_maybe_reset``, ``ReplayBuffer(LazyTensorStorage)``,
``REDQLoss``, ``SoftUpdate``) with the same schedule as above. Caveats: SB3's
SAC updates the actor on every gradient step (rlfunc once per env step), so
per env step it does more actor work than rlfunc SAC; rlfunc samples ``G*B``
rows once per env step, SB3 and TorchRL sample ``B`` rows per update (their
usual way); ``ratio_vs_rlfunc`` divides by the best rlfunc row, which is SAC's.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from benchmarks.harness import ROOT
from benchmarks.peers.critic_update import _TorchRLSAC
from benchmarks.peers.measure import Variant, _device, _lazy_storage, _measure, _rows, _unavailable_peers


def _rlfunc_loop(config_path: str, sz: dict, args, *, compile: bool, agent: dict | None = None):
    """``setup()`` for rlfunc's training loop (the body of ``Trainer.run`` without eval/log/checkpoints)."""

    def setup():
        from rlfunc.runtime.config import apply_overrides, build_config, load_config
        from rlfunc.runtime.trainer import Trainer

        overrides = {
            "train.learning_starts": sz["loop_learning_starts"],
            "train.total_steps": 10**9,
            "train.replay_size": sz["loop_replay"],
            "train.threads": args.threads,
            "train.progress": False,
            "train.compile": compile,
            "train.device": _device(args).type,  # state, replay and sampling on the device; env on the host
            "agent.updates_per_step": sz["loop_utd"],
            "agent.batch_size": sz["loop_batch"],
            "agent.hidden_sizes": list(sz["loop_hidden"]),
            **{f"agent.{k}": v for k, v in (agent or {}).items()},
        }
        cfg = build_config(apply_overrides(load_config(ROOT / config_path), overrides))
        # Trainer creates its run directory only in run() and save(), neither of which is called here.
        trainer = Trainer(cfg, Path(tempfile.gettempdir()) / "rlfunc-peers-never-written")
        learner, collector = trainer.learner, trainer.collector
        collector.reset(seed=cfg.train.seed)

        def env_step() -> None:  # Trainer.run's loop body without logging, evaluation and checkpoints
            trainer._check_finite()  # the last step's updates (one host read per env step)
            actions = learner.explore(collector.obs, trainer.env_step, episode_start=collector.episode_start)
            rows, _ = collector.step(actions)
            learner.observe(rows)
            for _ in range(rows.batch_size[0]):
                trainer.env_step += 1
                if learner.ready(trainer.env_step):
                    trainer._learn()

        for _ in range(sz["loop_learning_starts"] + args.loop_warmup):
            env_step()
        assert trainer.learner_calls >= 1, "learning has not started after the warm-up"
        return lambda: [env_step() for _ in range(args.segment_steps)]

    return setup


def _sb3_loop(sz: dict, args):
    def setup():
        import gymnasium as gym
        from stable_baselines3 import SAC

        model = SAC(
            "MlpPolicy", gym.make("Pendulum-v1"), learning_rate=3e-4, buffer_size=sz["loop_replay"],
            learning_starts=sz["loop_learning_starts"], batch_size=sz["loop_batch"], tau=0.005, gamma=0.99,
            train_freq=1, gradient_steps=sz["loop_utd"], ent_coef="auto",
            policy_kwargs={"net_arch": list(sz["loop_hidden"])}, seed=0, device=_device(args).type, verbose=0,
        )
        torch.set_num_threads(args.threads)
        model.learn(total_timesteps=sz["loop_learning_starts"] + args.loop_warmup)
        assert model._n_updates >= 1, "SB3 has not started learning after the warm-up"
        return lambda: model.learn(total_timesteps=args.segment_steps, reset_num_timesteps=False)

    return setup


def _torchrl_loop(sz: dict, args, critics: int, subset: int):
    def setup():
        from torchrl.data import LazyTensorStorage, ReplayBuffer
        from torchrl.envs import ExplorationType, GymEnv, set_exploration_type

        device = _device(args)
        env = GymEnv("Pendulum-v1", device=device)  # gymnasium steps on the host; TorchRL moves each step to device
        env.set_seed(0)
        spec = env.action_spec
        low, high = float(spec.space.low.min()), float(spec.space.high.max())
        obs_dim = env.observation_spec["observation"].shape[-1]
        trl = _TorchRLSAC(obs_dim, spec.shape[-1], tuple(sz["loop_hidden"]), critics, subset, compile=False,
                          low=low, high=high, device=device)
        rb = ReplayBuffer(storage=_lazy_storage(LazyTensorStorage, sz["loop_replay"], device), batch_size=sz["loop_batch"])
        G = sz["loop_utd"]
        state = {"td": env.reset(), "steps": 0}

        def env_step() -> None:
            td = state["td"]
            if state["steps"] < sz["loop_learning_starts"]:
                td = env.rand_action(td)
            else:
                with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
                    td = trl.actor(td)
            out, state["td"] = env.step_and_maybe_reset(td)
            rb.add(out.exclude("loc", "scale", "action_log_prob", "sample_log_prob"))
            state["steps"] += 1
            if state["steps"] >= sz["loop_learning_starts"]:
                trl.env_step([rb.sample() for _ in range(G)])

        for _ in range(sz["loop_learning_starts"] + args.loop_warmup):
            env_step()
        return lambda: [env_step() for _ in range(args.segment_steps)]

    return setup


def task_pendulum_loop(task: str, args, sz: dict) -> list[dict]:
    G = sz["loop_utd"]
    problem = {"env": "Pendulum-v1", "utd": G, "batch": sz["loop_batch"], "hidden": list(sz["loop_hidden"]),
               "learning_starts": sz["loop_learning_starts"], "warmup_learning_steps": args.loop_warmup,
               "segment_env_steps": args.segment_steps,
               "work_per_env_step": f"act + env step + store + sample + {G} critic updates (+ actor, temperature)"}
    missing = _unavailable_peers(("torchrl", "stable-baselines3"))
    redq_n, redq_m = sz["redq_critics"], sz["redq_subset"]
    problem["redq_critics"], problem["redq_subset"] = redq_n, redq_m
    redq_agent = {"num_critics": redq_n, "subset_size": redq_m}
    device = _device(args)
    on_dev = device.type != "cpu"
    if on_dev:
        problem["env_on"] = "host (gymnasium Pendulum-v1 steps on the CPU for every library)"
    sb3_note = {"note": f"SB3 SAC with device='{device.type}': networks and updates on {device.type}; its ReplayBuffer "
                        f"stores numpy arrays on the host and copies every sampled batch to {device.type} "
                        "(SB3's real behaviour, measured as is)"} if on_dev else {}
    trl_note = {"note": f"GymEnv(device='{device.type}') steps gymnasium on the host and moves each step to "
                        f"{device.type}; LazyTensorStorage(device='{device.type}'); loss and modules on {device.type}"
                } if on_dev else {}
    rl_note = {"note": f"train.device={device.type}: state, replay and sampling on {device.type}; env on the host"
               } if on_dev else {}
    variants = [
        Variant("rlfunc", f"REDQ N={redq_n} eager (configs/redq/pendulum.yaml)",
                _rlfunc_loop("configs/redq/pendulum.yaml", sz, args, compile=False, agent=redq_agent), units=args.segment_steps,
                algo="redq", critics=redq_n, **rl_note),
        Variant("rlfunc", "SAC N=2 eager (configs/sac/pendulum.yaml, updates_per_step=G)",
                _rlfunc_loop("configs/sac/pendulum.yaml", sz, args, compile=False), units=args.segment_steps,
                algo="sac", critics=2, **rl_note),
    ]
    if not args.no_compile:
        variants.append(Variant("rlfunc", f"REDQ N={redq_n} compiled (train.compile=true, compile_mode=step)",
                                _rlfunc_loop("configs/redq/pendulum.yaml", sz, args, compile=True, agent=redq_agent),
                                units=args.segment_steps, compiled=True, algo="redq", critics=redq_n, **rl_note))
    variants += [
        Variant("stable-baselines3", f"SAC N=2 (gradient_steps={G}, train_freq=1)", _sb3_loop(sz, args),
                units=args.segment_steps, unavailable=missing.get("stable-baselines3"), algo="sac", critics=2, **sb3_note),
        Variant("torchrl", f"REDQ N={redq_n} loop from components (recipe not shipped in the wheel)",
                _torchrl_loop(sz, args, redq_n, redq_m), units=args.segment_steps,
                unavailable=missing.get("torchrl"), algo="redq", critics=redq_n, **trl_note),
    ]
    _measure(variants, args, fixed_steps=True)
    return _rows(task, "env steps/s", problem, variants, args.threads, _device(args).type)
