"""Make prior data without downloading any: ``rlfunc dataset collect``.

``collect`` runs a trained agent (a run directory or checkpoint) or a
uniformly random policy in an env and writes the transitions as a D4RL-style
``.npz`` (:mod:`rlfunc.replay.offline` reads it back):

* ``observations``, ``next_observations`` ``[N, *obs]`` float32;
* ``actions [N, A]`` float32 **in the env's own action bounds** (what the env
  was stepped with; D4RL and Minari store actions the same way);
* ``rewards [N]`` float32; ``terminals [N]`` bool (termination: no
  bootstrap); ``timeouts [N]`` bool (time-limit truncation: bootstrap);
* metadata: ``env_id``, ``env_kwargs`` and ``env_wrappers`` (the env's config
  as JSON text: an RLPD run refuses data made in an env configured otherwise),
  ``action_low``, ``action_high`` (the bounds the actions are in), ``policy``
  (what produced them), ``noise``.

Only the first episode's reset is seeded (``seed``); later episodes continue
the env's own random stream, as gymnasium intends, so collections with
different seeds do not share episodes (seeding every reset with ``seed + i``
made episode ``i + 1`` of seed ``s`` episode ``i`` of seed ``s + 1``) and never
reach the seeds of a run's evaluation episodes.

With a checkpoint the action is the agent's deterministic action plus
Gaussian noise of standard deviation ``noise`` in the policy's normalised
``[-1, 1]`` units, clipped to ``[-1, 1]`` and mapped to the env's bounds
(``noise=0.1`` on Pendulum is 0.2 N m on its ``[-2, 2]`` torque).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["collect"]


def collect(
    out: str | Path,
    *,
    checkpoint: str | Path | None = None,
    env_id: str | None = None,
    steps: int = 10_000,
    noise: float = 0.0,
    policy: str = "checkpoint",
    seed: int = 0,
    allow_import: str | list[str] | tuple[str, ...] = (),
) -> dict[str, Any]:
    """Collect ``steps`` transitions into ``out`` (``.npz``); returns a summary dict.

    ``policy="checkpoint"`` needs ``checkpoint`` (its env, kwargs and wrappers
    are used; ``env_id`` may repeat its id); ``policy="random"`` needs
    ``env_id`` (or a checkpoint to take the env, kwargs and wrappers from) and
    samples actions uniformly in the env's bounds. ``env_id`` may be
    gymnasium's ``module:Env-v0`` (the module is imported first, so it can
    register the id); an env without Box observations and actions is refused
    in one sentence (``--env`` applies no wrappers). ``noise`` applies to the checkpoint policy only
    (with ``policy="random"`` it is refused). ``out`` must be a new ``.npz`` in a writable place, checked
    before any env step; an existing file is refused, never replaced.

    With ``checkpoint``, its env is made from the checkpoint's config, a file that may be someone
    else's: under :func:`rlfunc.envs.factory.from_loaded_file`, a module that config names is imported
    only if it is already imported, is the module of ``env_id`` (the caller's own), or is named in
    ``allow_import`` (``--allow-import MODULE``).
    """
    if checkpoint is None:
        return _collect(out, None, env_id, steps, noise, policy, seed)
    from rlfunc.envs import split_env_id
    from rlfunc.envs.factory import allow_import_list, from_loaded_file

    allowed = allow_import_list(allow_import)
    if env_id and split_env_id(env_id)[0]:
        allowed.append(split_env_id(env_id)[0])  # a module the caller typed in env_id is theirs
    with from_loaded_file(allowed):
        return _collect(out, checkpoint, env_id, steps, noise, policy, seed)


def _check_out(out: str | Path) -> None:
    """``out`` as a new ``.npz`` in a directory this process may write, else one ``ValueError`` sentence.
    An existing file is never replaced: an RLPD run records its dataset's SHA-256 and ``rlfunc resume``
    refuses a changed file, so overwriting it would strand that run."""
    import os

    path = Path(out)
    if path.suffix != ".npz":
        raise ValueError(f"Dataset output must end in .npz, got {str(path)!r}.")
    if os.path.lexists(path):
        raise ValueError(
            f"--out {str(path)!r} already exists; pass a new file name (a dataset is never overwritten: runs "
            "trained on it check its SHA-256 when they resume)."
        )
    from rlfunc.runtime.checkpoint import unwritable_parent

    parent = unwritable_parent(path)
    if parent is not None:
        raise ValueError(
            f"--out {str(path)!r} cannot be written ({str(parent)!r} is not a writable directory); pick another --out."
        )


def _check_memory(steps: int, env, env_id: str) -> None:
    """``steps`` transitions fit in memory, else one sentence before any env step: they are held until the
    ``.npz`` is written (a typo such as ``--steps 99999999999999`` used to collect until memory ran out,
    losing everything). Per transition: its arrays in the lists (obs shared with the previous next obs,
    each a numpy array object of ~112 bytes beside its data; 200k Pendulum steps took 616 bytes each at
    their peak), then stacked (obs and next obs, action, reward, two flags)."""
    from rlfunc.runtime.memory import Need, require_memory

    obs = int(np.prod(env.observation_space.shape))
    act = int(np.prod(env.action_space.shape))
    per = 4 * (3 * obs + 2 * act) + 600
    require_memory(
        [Need(f"--steps={steps}", steps * per, f"the transitions of {env_id} held until the .npz is written "
              f"(about {per} bytes each)", "lower --steps")],
        "cpu",
    )


def _collect(out, checkpoint, env_id, steps, noise, policy, seed) -> dict[str, Any]:
    """:func:`collect`'s body (``checkpoint``'s env under :func:`~rlfunc.envs.factory.from_loaded_file`)."""
    import gymnasium as gym

    from rlfunc.envs import build_wrappers, make_env, split_env_id
    from rlfunc.replay.offline import write_npz

    if steps < 1:
        raise ValueError(f"--steps must be at least 1, got {steps}.")
    if not 0 <= noise < float("inf"):  # NaN fails this too: it would step the env with NaN actions
        raise ValueError(f"--noise must be a finite number >= 0, got {noise}.")
    if policy not in ("checkpoint", "random"):
        raise ValueError(f"--policy must be 'checkpoint' or 'random', got {policy!r}.")
    if policy == "random" and noise > 0:
        raise ValueError(
            f"--noise {noise} perturbs a checkpoint's actions, but --policy random samples uniform actions; "
            "drop --noise, or collect with --checkpoint RUN_OR_CKPT and the checkpoint policy."
        )
    _check_out(out)  # before any env step: a bad --out used to be found only after collecting every step
    agent = None
    env_kwargs: dict = {}
    wrappers: list = []
    if checkpoint is not None:
        from rlfunc.runtime.api import load

        agent = load(checkpoint)
        trained_env = agent.run_config.env
        if env_id is not None and split_env_id(env_id)[1] != split_env_id(trained_env.id)[1]:
            raise ValueError(
                f"The checkpoint was trained on {trained_env.id!r}, not {env_id!r}; drop --env or pass its own env."
            )
        env_id = trained_env.id
        env_kwargs, wrappers = dict(trained_env.kwargs), list(trained_env.wrappers)
    elif policy == "checkpoint":
        raise ValueError("Pass --checkpoint RUN_OR_CKPT (a trained run), or --policy random with --env ID.")
    if env_id is None:
        raise ValueError("Pass --env ID (or a --checkpoint whose env to use).")
    env = make_env(env_id, kwargs=env_kwargs, wrappers=build_wrappers(wrappers), rescale_actions=False)
    if not isinstance(env.observation_space, gym.spaces.Box) or not isinstance(env.action_space, gym.spaces.Box):
        what = type(env.observation_space).__name__, type(env.action_space).__name__
        env.close()
        raise ValueError(
            f"Environment {env_id!r} has {what[0]} observations and {what[1]} actions, but a dataset holds Box "
            "observations and Box actions; train a run whose env.wrappers adapt it (e.g. flatten) and collect with "
            "--checkpoint RUN (its wrappers are used, with --policy random too)."
        )
    try:
        _check_memory(steps, env, env_id)
    except BaseException:
        env.close()
        raise
    space = env.action_space
    low = np.asarray(space.low, dtype=np.float64)
    high = np.asarray(space.high, dtype=np.float64)
    # the env steps with actions of its own dtype, clipped to its exact bounds (float32 of a float64 space's 0.1 is
    # 0.10000000149, outside it); the dataset stores them as float32
    env_dtype = space.dtype if np.issubdtype(space.dtype, np.floating) else np.dtype(np.float32)
    rng = np.random.default_rng(seed)
    env.action_space.seed(seed)

    obs_l, act_l, rew_l, next_l, term_l, trunc_l = [], [], [], [], [], []
    returns: list[float] = []
    obs = np.array(env.reset(seed=seed)[0], dtype=np.float32, copy=True)  # an env may update its array in place
    ep_return = 0.0
    for _ in range(steps):
        if policy == "random":
            action = np.asarray(env.action_space.sample(), dtype=np.float64)
        else:
            a = np.asarray(agent.act_normalized(np.asarray(obs)), dtype=np.float64)
            if noise > 0:
                a = a + noise * rng.standard_normal(a.shape)
            a = np.clip(a, -1.0, 1.0)
            action = np.clip(low + (a + 1.0) * 0.5 * (high - low), low, high)
        next_obs, reward, terminated, truncated, _ = env.step(action.astype(env_dtype))
        action = action.astype(np.float32)
        next_obs = np.array(next_obs, dtype=np.float32, copy=True)  # before the next step overwrites it
        obs_l.append(obs)
        act_l.append(action)
        rew_l.append(float(reward))
        next_l.append(next_obs)
        term_l.append(bool(terminated))
        trunc_l.append(bool(truncated))
        ep_return += float(reward)
        obs = next_obs
        if terminated or truncated:
            returns.append(ep_return)
            ep_return = 0.0
            obs = np.array(env.reset()[0], dtype=np.float32, copy=True)
    env.close()
    source = "random" if policy == "random" else f"checkpoint {checkpoint}"
    arrays = {
        "observations": np.stack(obs_l),
        "actions": np.stack(act_l),
        "rewards": np.asarray(rew_l, dtype=np.float32),
        "next_observations": np.stack(next_l),
        "terminals": np.asarray(term_l, dtype=bool),
        "timeouts": np.asarray(trunc_l, dtype=bool),
        "env_id": np.asarray(env_id),
        "env_kwargs": np.asarray(json.dumps(env_kwargs, sort_keys=True, default=str)),
        "env_wrappers": np.asarray(json.dumps(list(wrappers), sort_keys=True, default=str)),
        "action_low": low.astype(np.float32),
        "action_high": high.astype(np.float32),
        "policy": np.asarray(source),
        "noise": np.asarray(noise if policy != "random" else 0.0, dtype=np.float32),
    }
    path = write_npz(out, arrays)
    return {
        "path": str(path),
        "env_id": env_id,
        "transitions": steps,
        "episodes": len(returns),
        "mean_return": float(np.mean(returns)) if returns else None,
        "policy": source,
        "noise": noise,
    }
