"""What a resume checks before it trains from a checkpoint, a file that may be someone else's: its
``--total-steps``, a run's relative dataset path, an edited ``config.yaml``, consent for a stored Ray
address or W&B settings, and a directory that is part of a larger run (a sweep, a population's member,
a run's checkpoints). Each refusal is one sentence saying what to do instead."""

from __future__ import annotations

import dataclasses
import numbers
import os
import re
import sys
from pathlib import Path
from typing import Any

from rlfunc.runtime.config import ConfigError, RunConfig, build_config, check_loaded_wandb, to_dict

__all__ = ["RESUME_WRITES", "refuse_relative_data_elsewhere", "refuse_edited_config_copy", "consent_to_loaded",
           "resumed_total_steps", "refuse_part_of_a_larger_run"]


def refuse_relative_data_elsewhere(run_config: RunConfig) -> None:
    """One sentence when a run stored a relative ``data.path`` (as rlfunc 0.1.0 did; runs now store it
    absolute) that is not found from here: it is relative to the directory the run was started in, and a
    resume cannot set it."""
    from rlfunc.replay.offline import DatasetNotFoundError, resolve_dataset_path

    path = run_config.data.path
    if path and not os.path.isabs(path) and not os.path.exists(path):
        try:
            resolve_dataset_path(path)  # a Minari dataset id in Minari's local store: not relative to anything
        except DatasetNotFoundError:
            raise ConfigError(
                f"This run was trained with data.path {path!r}, relative to the directory it was started in, and "
                f"there is no {path!r} here ({os.getcwd()}); run `rlfunc resume` from that directory."
            ) from None


RESUME_WRITES = ("train.total_steps", "distributed.address", "train.wandb")
"""Keys of ``config.yaml`` a resume itself may write before a checkpoint holds them (``--total-steps``,
``--address``, the W&B settings used only with consent): :func:`refuse_edited_config_copy` leaves them out."""


def refuse_edited_config_copy(run_dir: Path, stored: dict, total_steps: int | None) -> None:
    """One sentence when the run's ``config.yaml`` (a copy for people) differs from the config of the
    checkpoint a resume continues (``stored``), as after an edit: the resume trains with the checkpoint's and
    writes it over the copy, so the edit would be ignored and lost without a word. Both are compared
    through the config builder (a file an older rlfunc wrote compares equal), leaving out
    :data:`RESUME_WRITES`; an edited ``train.total_steps`` without ``total_steps`` is a line saying the
    resume does not read it. A ``config.yaml`` that is missing or holds no valid config (damaged) is the
    checkpoint's to rewrite, as before."""
    from rlfunc.runtime.plot import _flat, _run_config

    path = run_dir / "config.yaml"
    try:
        copy = _flat(to_dict(build_config(_run_config(run_dir), resolved=True)))
    except (ConfigError, ValueError, TypeError, KeyError, OSError):
        if path.is_file():
            print(f"rlfunc: {path} holds no valid config; the resume writes the checkpoint's there.", file=sys.stderr)
        return
    ours = _flat(to_dict(build_config(stored, resolved=True)))
    changed = sorted(k for k in set(copy) | set(ours) if copy.get(k) != ours.get(k)
                     and not any(k == w or k.startswith(w + ".") for w in RESUME_WRITES))
    if changed:
        shown = "; ".join(f"{k}: {copy.get(k, '(none)')} there, {ours.get(k, '(none)')} in the checkpoint"
                          for k in changed[:3])
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        raise ConfigError(
            f"{str(path)!r} differs from the checkpoint's config ({shown}{more}), which a resume trains with and "
            f"writes there: to train config.yaml's settings start a new run (rlfunc train {path} --run-dir "
            "NEW_DIR), or delete config.yaml to continue with the checkpoint's."
        )
    edited_total = copy.get("train.total_steps")
    if total_steps is None and edited_total is not None and edited_total != ours.get("train.total_steps"):
        # the path: a population has its own config.yaml and one per member
        print(f"rlfunc: {path}'s train.total_steps {edited_total} is not read by a resume, which continues to "
              f"the checkpoint's {ours.get('train.total_steps')}; pass --total-steps {edited_total} to train longer "
              "(a run a stopping rule ended stops again at once).",
              file=sys.stderr)


def consent_to_loaded(run_config: RunConfig, address: str | None = None, trust_wandb_settings: bool = False) -> RunConfig:
    """The config a resume runs with, from ``run_config`` read from a checkpoint (a file that may be someone
    else's), or one sentence before anything is done: a stored ``distributed.address`` is joined only when the
    user passes ``address`` (:func:`rlfunc.scale.distributed.resume_address`, which also spells
    ``"local"``), which replaces it; ``address`` for a run without a ``distributed`` section is refused; a
    stored ``train.wandb`` with keys beyond :data:`~rlfunc.runtime.config.LOADED_WANDB_KEYS` needs
    ``trust_wandb_settings`` (:func:`~rlfunc.runtime.config.check_loaded_wandb`)."""
    if not isinstance(trust_wandb_settings, bool):
        raise ConfigError(f"trust_wandb_settings must be True or False, got {trust_wandb_settings!r}.")
    d = run_config.distributed
    if d is None and address is not None:
        raise ConfigError(
            f"--address {address!r} sets where a distributed run's Ray runs, and this {run_config.algo} run trains "
            "in one process (no distributed section); resume it without --address."
        )
    if d is not None:
        from rlfunc.scale.distributed import resume_address

        chosen = resume_address(d.address, address)
        if chosen != d.address:
            run_config = dataclasses.replace(run_config, distributed=dataclasses.replace(d, address=chosen))
    check_loaded_wandb(run_config.train.wandb, trust_wandb_settings)
    return run_config


def resumed_total_steps(total_steps: Any, meta: dict) -> int:
    """``total_steps`` of a resume as an int not below the env steps the checkpoint (``meta``) has, else one
    sentence (checked before the config is rebuilt, whose own checks would name other keys first)."""
    if isinstance(total_steps, bool) or not isinstance(total_steps, numbers.Integral):
        raise ConfigError(f"--total-steps must be a whole number of env steps, got {total_steps!r}.")
    have = meta.get("env_step", 0)  # not a count (an edited meta.json): the restore refuses it in its own words
    if type(have) is int and int(total_steps) < have:
        raise ConfigError(
            f"--total-steps {total_steps} is below the {meta.get('env_step')} env steps the run already has; pass a larger number."
        )
    return int(total_steps)


def refuse_part_of_a_larger_run(run_dir: Path) -> None:
    """A sweep's directory, a population's member or a run's ``checkpoints/`` (or one checkpoint in it)
    passed to resume: one sentence naming what to resume instead (a member was described as an export's
    weights-only policy, a sweep directory and a run's checkpoints as having no checkpoints)."""
    from rlfunc.runtime.population import is_population_run

    if (run_dir / "sweep.json").is_file() and not (run_dir / "checkpoints").exists():
        raise ConfigError(
            f"{str(run_dir)!r} is a sweep's directory; continue the sweep with `rlfunc sweep --resume {run_dir}`, "
            "or resume one of its runs' directories."
        )
    here = run_dir.resolve()
    owner = here.parent if here.name == "checkpoints" else (
        here.parent.parent if here.parent.name == "checkpoints" and (here / "meta.json").exists() else None)
    if owner is not None and (owner / "checkpoints").is_dir() and (owner / "config.yaml").is_file():
        refuse_part_of_a_larger_run(owner)  # a member's checkpoints: the population is what resumes
        raise ConfigError(
            f"{str(run_dir)!r} {'holds the checkpoints' if here.name == 'checkpoints' else 'is a checkpoint'} of the run "
            f"in {str(owner)!r}, which resumes from its newest checkpoint "
            f"that verifies; run `rlfunc resume {owner}`."
        )
    member = re.fullmatch(r"member-(\d+)", run_dir.resolve().name)
    parent = run_dir.resolve().parent
    if member and is_population_run(parent):
        raise ConfigError(
            f"{str(run_dir)!r} is member {member.group(1)} of the population in {str(parent)!r}, which resumes as a "
            f"whole (a member's own checkpoints hold its weights only); run `rlfunc resume {parent}`."
        )
