"""Review of the subcommands' own arguments (not config overrides): ``eval``/``dataset collect
--seed`` beyond train.seed's range, ``export --out`` that cannot be written, ``dataset collect
--out``/``--noise`` (an existing dataset overwritten, a bad --out found only after collecting,
--noise ignored with the random policy), ``resume`` of a population's member or a sweep's directory,
``train --seeds/--grid/--vectorize`` beside a ``--set`` of the same population key, and ``sweep
--out`` naming the sweep's plan or another file, and empty paths (an unset shell variable) read as the
current directory. Ray is never started: every sweep probe is refused
before it (and its start is replaced by an error here, in case it were not)."""

from __future__ import annotations

import errno
import hashlib
import json
from pathlib import Path

import pytest

import rlfunc
from rlfunc.runtime.cli import main
from test_run_surface import TINY as RUN_SURFACE_TINY

TINY = {**RUN_SURFACE_TINY, "train.total_steps": 200, "train.eval_every": 200, "train.checkpoint_every": 200}
TINY_SET = [a for k, v in TINY.items() for a in ("--set", f"{k}={json.dumps(v)}")]


def snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` (or ``root`` itself) and a digest of its bytes."""
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def refusal(capsys, usage: bool = False) -> str:
    """stderr's one line (the CLI's refusals: ``rlfunc: error: ...``), or with ``usage`` argparse's
    last line after its usage lines."""
    err = capsys.readouterr().err.strip().splitlines()
    assert err and "Traceback" not in "\n".join(err)
    assert usage or len(err) == 1, err
    return err[-1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny REDQ run and a tiny population of 2 (trained once for the module)."""
    root = tmp_path_factory.mktemp("cli_args")
    rlfunc.train(None, overrides=TINY, run_dir=root / "run")
    from rlfunc.runtime.population import train

    train(None, overrides=TINY, run_dir=root / "pop", seeds="0-1")
    return root


@pytest.fixture
def no_ray(monkeypatch):
    """Starting Ray is an error here (the sweep probes must be refused before it)."""
    import importlib

    sweep_module = importlib.import_module("rlfunc.scale.sweep")

    def refuse(*args, **kwargs):
        raise AssertionError("the probe reached Ray")

    run_entries = sweep_module.run_entries

    def without_ray(plan, todo, *args, **kwargs):  # nothing to train (a finished sweep): no Ray
        if todo:
            refuse()
        return run_entries(plan, todo, *args, **kwargs)

    monkeypatch.setattr(sweep_module, "connect", refuse)
    monkeypatch.setattr(sweep_module, "run_entries", without_ray)
    return sweep_module


# --------------------------------------------------------------------------------------------- --seed


def test_a_seed_beyond_train_seeds_range_is_refused_by_eval_and_collect(runs, tmp_path, capsys):
    """eval --stochastic --seed 10**23 ended in "Overflow when unpacking long long" (torch's generator);
    dataset collect took any size. Both now take train.seed's range, [0, 2**32 - 1]."""
    with pytest.raises(SystemExit) as exc:
        main(["eval", str(runs / "run"), "--episodes", "1", "--stochastic", "--seed", str(10**23)])
    assert exc.value.code == 2
    line = refusal(capsys, usage=True)
    assert "argument --seed: expected an integer in [0, 2**32 - 1], got '100000000000000000000000'" in line
    out = tmp_path / "d.npz"
    with pytest.raises(SystemExit) as exc:
        main(["dataset", "collect", "--env", "Pendulum-v1", "--policy", "random", "--steps", "5",
              "--seed", str(2**32), "--out", str(out)])
    assert exc.value.code == 2
    assert "argument --seed: expected an integer in [0, 2**32 - 1], got '4294967296'" in refusal(capsys, usage=True)
    assert not out.exists()
    assert main(["eval", str(runs / "run"), "--episodes", "1", "--stochastic", "--seed", str(2**32 - 1)]) == 0


# --------------------------------------------------------------------------------------------- export


def test_export_to_a_place_that_cannot_be_written_is_a_sentence_about_the_export(runs, tmp_path, capsys):
    """It said "no earlier checkpoint exists; ... then `rlfunc resume` the run" (the trainer's advice)."""
    blocker = tmp_path / "afile"
    blocker.write_text("mine")
    before = snapshot(runs / "run")
    assert main(["export", str(runs / "run"), "--out", str(blocker / "sub")]) == 2
    line = refusal(capsys)
    assert line == (f"rlfunc: error: Cannot write the export to {str(blocker / 'sub')!r} (Not a directory); "
                    "pass --out a new directory in a place you can write to.")
    assert blocker.read_text() == "mine" and snapshot(runs / "run") == before


def test_an_export_the_disk_cannot_hold_leaves_no_directory_behind(runs, tmp_path, capsys, monkeypatch):
    from rlfunc.runtime import checkpoint

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(checkpoint, "_write_bytes", full)
    out = tmp_path / "exp"
    assert main(["export", str(runs / "run"), "--out", str(out)]) == 2
    line = refusal(capsys)
    assert line == (f"rlfunc: error: Cannot write the export to {str(out)!r} (the disk is full); "
                    "free space and export again.")
    assert not out.exists()


# ---------------------------------------------------------------------------------- dataset collect


def test_collect_never_overwrites_an_existing_dataset(tmp_path, capsys):
    """An RLPD run records its dataset's SHA-256 and resume refuses a changed file: overwriting it
    (as collect did, silently) stranded that run."""
    out = tmp_path / "prior.npz"
    out.write_bytes(b"the user's data")
    assert main(["dataset", "collect", "--env", "Pendulum-v1", "--policy", "random", "--steps", "5",
                 "--out", str(out)]) == 2
    assert refusal(capsys) == (
        f"rlfunc: error: --out {str(out)!r} already exists; pass a new file name (a dataset is never "
        "overwritten: runs trained on it check its SHA-256 when they resume)."
    )
    assert out.read_bytes() == b"the user's data"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prior.npz"]


@pytest.mark.parametrize("bad", ["afile/data.npz", "data.NPZ"])
def test_collect_checks_out_before_any_env_step(runs, tmp_path, capsys, monkeypatch, bad):
    """A --out whose directory is a file, or without the .npz suffix, was found by write_npz only
    after every step was collected (``--steps 1000000``: all of it lost)."""
    import rlfunc.envs

    def no_env(*args, **kwargs):
        raise AssertionError("an env was made before --out was checked")

    monkeypatch.setattr(rlfunc.envs, "make_env", no_env)
    (tmp_path / "afile").write_text("mine")
    out = tmp_path / bad
    assert main(["dataset", "collect", "--checkpoint", str(runs / "run"), "--steps", "1000000",
                 "--out", str(out)]) == 2
    line = refusal(capsys)
    if bad.startswith("afile"):
        assert line == (f"rlfunc: error: --out {str(out)!r} cannot be written ({str(tmp_path / 'afile')!r} is not a "
                        "writable directory); pick another --out.")
    else:
        assert line == f"rlfunc: error: Dataset output must end in .npz, got {str(out)!r}."
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"] and (tmp_path / "afile").read_text() == "mine"


@pytest.mark.parametrize("source", [["--env", "Pendulum-v1"], ["--checkpoint", "RUN", "--policy", "random"]])
def test_collect_refuses_noise_with_the_random_policy(runs, tmp_path, capsys, source):
    """--noise was ignored (and recorded as 0) when the actions were uniform."""
    source = [str(runs / "run") if a == "RUN" else a for a in source]
    out = tmp_path / "d.npz"
    assert main(["dataset", "collect", *source, "--noise", "0.3", "--steps", "5", "--out", str(out)]) == 2
    assert refusal(capsys) == (
        "rlfunc: error: --noise 0.3 perturbs a checkpoint's actions, but --policy random samples uniform actions; "
        "drop --noise, or collect with --checkpoint RUN_OR_CKPT and the checkpoint policy."
    )
    assert not out.exists()


# --------------------------------------------------------------------------------------------- resume


def test_resume_of_a_member_or_a_sweep_names_what_to_resume(runs, tmp_path, capsys):
    """A member was described as an export's weights-only policy; a sweep's directory as a run
    without checkpoints."""
    before = snapshot(runs / "pop")
    member = runs / "pop" / "member-1"
    assert main(["resume", str(member), "--total-steps", "400"]) == 2
    parent = str((runs / "pop").resolve())
    assert refusal(capsys) == (
        f"rlfunc: error: {str(member)!r} is member 1 of the population in {parent!r}, which resumes as a whole "
        f"(a member's own checkpoints hold its weights only); run `rlfunc resume {parent}`."
    )
    assert snapshot(runs / "pop") == before
    sweep_dir = tmp_path / "sw"
    sweep_dir.mkdir()
    (sweep_dir / "sweep.json").write_text("{}")
    assert main(["resume", str(sweep_dir)]) == 2
    assert refusal(capsys) == (
        f"rlfunc: error: {str(sweep_dir)!r} is a sweep's directory; continue the sweep with "
        f"`rlfunc sweep --resume {sweep_dir}`, or resume one of its runs' directories."
    )
    import rlfunc  # the same sentences from Python: the check lives in rlfunc.resume, not the CLI
    from rlfunc.runtime.config import ConfigError

    for path, start in ((member, f"{str(member)!r} is member 1"), (sweep_dir, f"{str(sweep_dir)!r} is a sweep's")):
        with pytest.raises(ConfigError) as err:
            rlfunc.resume(path)
        assert str(err.value).startswith(start)
    assert snapshot(runs / "pop") == before


# ---------------------------------------------------------------------------------------------- train


@pytest.mark.parametrize(
    "flag, setting",
    [
        (["--seeds", "0-1"], "train.population.seeds=[5]"),
        (["--grid", "agent.critic_lr=1e-3,2e-3"], "train.population={grid: {agent.critic_lr: [1]}}"),
        (["--vectorize", "loop", "--seeds", "0-1"], "train.population.vectorize=vmap"),
    ],
)
def test_train_refuses_a_population_flag_beside_a_set_of_the_same_key(tmp_path, capsys, flag, setting):
    """The flag won and the --set was ignored without a word (from Python too: the check is in train)."""
    key = flag[0][2:]
    run_dir = tmp_path / "r"
    from rlfunc.runtime.config import ConfigError, parse_overrides
    from rlfunc.runtime.population import train

    with pytest.raises(ConfigError, match=rf"^--{key} and --set train\.population\.{key} both set"):
        train(None, overrides=parse_overrides([setting]), run_dir=run_dir,
              **{"seeds": "0-1" if "--seeds" in flag else None, "grid": [flag[1]] if key == "grid" else None,
                 "vectorize": "loop" if key == "vectorize" else None})
    assert main(["train", *flag, "--set", setting, *TINY_SET, "--run-dir", str(run_dir)]) == 2
    assert refusal(capsys) == (
        f"rlfunc: error: --{key} and --set train.population.{key} both set the population's {key}; give it once "
        "(drop one of them)."
    )
    assert not run_dir.exists()


# ---------------------------------------------------------------------------------------------- sweep


def finished_sweep(tmp_path: Path, sweep_module) -> Path:
    """A sweep of one tiny run, planned, written and trained here (no Ray)."""
    overrides = [f"{k}={json.dumps(v)}" for k, v in TINY.items()]
    plan = sweep_module.plan_sweep(None, "0", [], overrides, sweep_dir=tmp_path / "sw")
    sweep_module.write_plan(plan)
    sweep_module.train_or_continue(plan, plan["runs"][0])
    return Path(plan["sweep_dir"])


def test_sweep_out_may_not_name_the_plan_the_config_or_another_file(tmp_path, capsys, no_ray):
    """--out SWEEP_DIR/sweep.json replaced the plan with the results (`--resume` then refused the sweep);
    any other existing file (a run's eval.csv, the config) was overwritten too."""
    sweep_dir = finished_sweep(tmp_path, no_ray)
    before = snapshot(sweep_dir)
    capsys.readouterr()
    plan = sweep_dir / "sweep.json"
    assert main(["sweep", "--resume", str(sweep_dir), "--out", str(plan)]) == 2
    assert refusal(capsys) == (
        f"rlfunc: error: --out {str(plan)!r} is the sweep's plan sweep.json, which `rlfunc sweep --resume` reads; "
        f"give the results another name, e.g. {str(sweep_dir / 'results.json')!r}."
    )
    eval_csv = sweep_dir / "g0-s0" / "eval.csv"
    assert main(["sweep", "--resume", str(sweep_dir), "--out", str(eval_csv)]) == 2
    assert refusal(capsys) == (
        f"rlfunc: error: --out {str(eval_csv)!r} already exists and is not a results JSON of an earlier "
        "`rlfunc sweep`; pick a new file name (nothing else is overwritten)."
    )
    config = tmp_path / "c.yaml"
    import yaml

    from rlfunc.runtime.config import DEFAULT_CONFIG

    text = yaml.safe_dump(DEFAULT_CONFIG)  # a config that builds: the refusal is about --out alone
    config.write_text(text)
    assert main(["sweep", str(config), "--sweep-dir", str(tmp_path / "new"), "--out", str(config)]) == 2
    assert refusal(capsys) == (
        f"rlfunc: error: --out {str(config)!r} is the config file the sweep reads; give the results another name."
    )
    assert main(["sweep", "--sweep-dir", str(tmp_path / "new"), "--out", str(tmp_path / "new" / "sweep.json")]) == 2
    assert "is the sweep's plan sweep.json" in refusal(capsys)
    assert snapshot(sweep_dir) == before and config.read_text() == text
    assert not (tmp_path / "new").exists()


def test_sweep_out_may_replace_an_earlier_results_json(tmp_path):
    from rlfunc.scale.sweep import results_path

    earlier = tmp_path / "results.json"
    earlier.write_text(json.dumps({"machine": {}, "runs": [], "summary": {}, "settings": {}, "failed": {}}))
    assert results_path(tmp_path, str(earlier)) == earlier  # a re-run's own JSON: allowed
    assert results_path(tmp_path, str(tmp_path / "new.json")) == tmp_path / "new.json"


# ------------------------------------------------------------------------------------ empty paths


@pytest.mark.parametrize(
    "argv, name",
    [
        (["train", "--run-dir", "", *TINY_SET], "--run-dir"),
        (["resume", ""], "RUN_DIR"),
        (["eval", "", "--episodes", "1"], "PATH"),
        (["export", "RUN", "--out", ""], "--out"),
        (["dataset", "collect", "--checkpoint", "", "--steps", "3", "--out", "d.npz"], "--checkpoint"),
    ],
)
def test_an_empty_path_is_refused_not_read_as_the_current_directory(runs, tmp_path, capsys, monkeypatch, argv, name):
    """``--run-dir "$UNSET"`` trained a run into the current directory, ``export --out ''`` exported into
    it, and ``resume ''``/``eval ''`` used the run there."""
    work = tmp_path / "cwd"
    work.mkdir()
    if argv[0] in ("resume", "eval"):  # the current directory is a run: '' would have resumed it
        rlfunc.train(None, overrides=TINY, run_dir=work / "r")
        monkeypatch.chdir(work / "r")
    else:
        monkeypatch.chdir(work)
    before = snapshot(work)
    names = sorted(p.name for p in work.iterdir())
    capsys.readouterr()
    argv = [str(runs / "run") if a == "RUN" else a for a in argv]
    assert main(argv) == 2
    assert refusal(capsys) == f"rlfunc: error: {name} is empty; pass a path (an unset shell variable?)."
    assert snapshot(work) == before and sorted(p.name for p in work.iterdir()) == names
