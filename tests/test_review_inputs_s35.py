"""Inputs a review (session 35) found answered without a clear sentence: a plain Ctrl-C in
``rlfunc eval`` / ``rlfunc dataset collect`` printed "rlfunc: " and nothing else."""

from __future__ import annotations

import pytest

from rlfunc.runtime import cli


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["eval", "RUN", "--episodes", "3"], "rlfunc: interrupted; no result (the episodes run so far are not reported)."),
        (["dataset", "collect", "--policy", "random", "--env", "Pendulum-v1", "--steps", "10", "--out", "d.npz"],
         "rlfunc: interrupted; nothing written (d.npz holds the transitions only once collected)."),
        (["configs"], "rlfunc: interrupted."),
    ],
)
def test_a_plain_ctrl_c_says_interrupted_and_what_was_not_written(monkeypatch, capsys, argv, expected):
    def ctrl_c(args):
        raise KeyboardInterrupt  # what Python raises at a Ctrl-C: no message

    monkeypatch.setattr(cli, "_run", ctrl_c)
    assert cli.main(argv) == 130
    assert capsys.readouterr().err.strip().splitlines() == [expected]


def test_a_run_s_own_interruption_message_is_kept(monkeypatch, capsys):
    def saved(args):
        raise KeyboardInterrupt("interrupted; saved at step 7; continue with `rlfunc resume runs/x`")

    monkeypatch.setattr(cli, "_run", saved)
    assert cli.main(["eval", "RUN"]) == 130
    assert capsys.readouterr().err.strip() == "rlfunc: interrupted; saved at step 7; continue with `rlfunc resume runs/x`"


# --- rlfunc resume: a relative data.path, and an edited config.yaml -------------------------------------------------

RLPD_TINY = [
    "train.total_steps=60", "train.learning_starts=50", "train.eval_every=30", "train.eval_episodes=1",
    "train.checkpoint_every=30", "train.progress=false", "agent.hidden_sizes=[16,16]", "agent.num_critics=3",
    "agent.updates_per_step=2", "agent.batch_size=8",
]
REDQ_TINY = [
    "agent.hidden_sizes=[16,16]", "agent.num_critics=2", "agent.updates_per_step=1", "agent.batch_size=16",
    "train.total_steps=60", "train.learning_starts=30", "train.eval_every=60", "train.eval_episodes=1",
    "train.checkpoint_every=30", "train.progress=false",
]


def _sets(items):
    return [x for item in items for x in ("--set", item)]


def _stored(run, key):
    import yaml

    section, name = key.split(".")
    return yaml.safe_load((run / "config.yaml").read_text())[section][name]


def test_a_relative_data_path_is_stored_absolute_so_a_resume_elsewhere_reads_it(tmp_path, monkeypatch, capsys):
    """Before: the run stored data.path 'd.npz' as written, and `rlfunc resume` from another directory said the
    dataset did not exist and to "set data.path", which a resume cannot."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["dataset", "collect", "--policy", "random", "--env", "Pendulum-v1", "--steps", "120",
                     "--out", "d.npz"]) == 0
    assert cli.main(["train", "rlpd/pendulum", *_sets(RLPD_TINY + ["data.path=d.npz"]), "--run-dir", "run"]) == 0
    assert _stored(tmp_path / "run", "data.path") == str(tmp_path / "d.npz")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    capsys.readouterr()
    assert cli.main(["resume", "../run", "--total-steps", "90"]) == 0
    assert "env steps: 90" in capsys.readouterr().out


def test_an_older_run_s_relative_data_path_names_the_directory_to_resume_from(tmp_path, monkeypatch, capsys):
    from rlfunc.runtime.config import ConfigError, build_config
    from rlfunc.runtime.resume_checks import refuse_relative_data_elsewhere

    raw = {"algo": "rlpd", "env": {"id": "Pendulum-v1"}, "train": {"total_steps": 6000},
           "data": {"path": "d.npz"}}  # as rlfunc 0.1.0 stored it
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"trained with data.path 'd.npz', relative to the directory it was started "
                                          r"in, and there is no 'd.npz' here .*; run `rlfunc resume` from that directory"):
        refuse_relative_data_elsewhere(build_config(raw, resolved=True))
    (tmp_path / "d.npz").write_bytes(b"")
    refuse_relative_data_elsewhere(build_config(raw, resolved=True))  # found from here: the load checks the file


def test_a_minari_dataset_id_is_not_taken_for_a_relative_path(tmp_path, monkeypatch):
    """data.path may be the id of a dataset in Minari's local store (docs/datasets.md): not a path."""
    pytest.importorskip("minari")
    from rlfunc.runtime.config import ConfigError, build_config
    from rlfunc.runtime.resume_checks import refuse_relative_data_elsewhere

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "store"))
    (tmp_path / "store" / "pendulum" / "random-v0" / "data").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    raw = {"algo": "rlpd", "env": {"id": "Pendulum-v1"}, "train": {"total_steps": 6000},
           "data": {"path": "pendulum/random-v0"}}
    refuse_relative_data_elsewhere(build_config(raw, resolved=True))  # in the store: not refused
    raw["data"]["path"] = "pendulum/expert-v0"  # not in the store (nor here): a relative path, refused
    with pytest.raises(ConfigError, match=r"trained with data.path 'pendulum/expert-v0', relative to the directory"):
        refuse_relative_data_elsewhere(build_config(raw, resolved=True))


def _tiny_run(tmp_path):
    run = tmp_path / "run"
    assert cli.main(["train", "redq/pendulum", *_sets(REDQ_TINY), "--run-dir", str(run)]) == 0
    return run


def test_an_edited_config_yaml_is_refused_not_ignored_and_written_over(tmp_path, capsys):
    """Before: `rlfunc resume` trained with the checkpoint's config and wrote it over the user's edit."""
    run = _tiny_run(tmp_path)
    path = run / "config.yaml"
    edited = path.read_text().replace("batch_size: 16", "batch_size: 64")
    assert edited != path.read_text()
    path.write_text(edited)
    capsys.readouterr()
    assert cli.main(["resume", str(run), "--total-steps", "90"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ("differs from the checkpoint's config (agent.batch_size: 64 there, 16 in the "
                              "checkpoint), which a resume trains with and writes there") in err[0]
    assert f"rlfunc train {path} --run-dir NEW_DIR" in err[0]
    assert path.read_text() == edited, "the user's edit is kept"
    path.unlink()  # the advice: the resume writes it again
    assert cli.main(["resume", str(run), "--total-steps", "90"]) == 0
    assert _stored(run, "agent.batch_size") == 16


def test_an_edited_total_steps_is_a_line_saying_to_pass_total_steps(tmp_path, capsys):
    run = _tiny_run(tmp_path)
    path = run / "config.yaml"
    path.write_text(path.read_text().replace("total_steps: 60", "total_steps: 90"))
    capsys.readouterr()
    assert cli.main(["resume", str(run)]) == 0
    captured = capsys.readouterr()
    assert (f"{path}'s train.total_steps 90 is not read by a resume, which continues to the checkpoint's 60; "
            "pass --total-steps 90 to train longer (a run a stopping rule ended stops again at once).") in captured.err
    assert cli.main(["resume", str(run), "--total-steps", "90"]) == 0, "the resume it advises"
    assert "env steps: 90" in capsys.readouterr().out


def test_a_population_s_edited_config_yaml_is_refused_too(tmp_path, capsys):
    run = tmp_path / "pop"
    assert cli.main(["train", "redq/pendulum", *_sets(REDQ_TINY), "--seeds", "0-1", "--run-dir", str(run)]) == 0
    path = run / "config.yaml"
    path.write_text(path.read_text().replace("batch_size: 16", "batch_size: 32"))
    capsys.readouterr()
    assert cli.main(["resume", str(run), "--total-steps", "90"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "differs from the checkpoint's config (agent.batch_size: 32 there, 16 in" in err[0]
    path.unlink()
    assert cli.main(["resume", str(run), "--total-steps", "90"]) == 0


@pytest.mark.parametrize("steps", ["9223372036854775808", "100000000000000000000", "1000000000001"])
def test_a_total_steps_past_a_trillion_is_a_typo(tmp_path, capsys, steps):
    """Before: 2**63 started training with an ETA of 28787647081190 h."""
    assert cli.main(["train", "--set", f"train.total_steps={steps}", "--run-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"rlfunc: error: train.total_steps must be at most 10**12 (a trillion env steps), got {steps}."]
    assert not (tmp_path / "r").exists()


def test_help_and_version_do_not_import_torch():
    """``import rlfunc`` imported torch (6-12 s here) before ``rlfunc --help`` could answer, and a Ctrl-C in
    that time was an import traceback; the top-level names are imported on first use now (PEP 562)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from rlfunc.runtime.cli import main\n"
        "for argv in (['--version'], ['--help'], ['train', '--help'], ['sweep', '--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "import gymnasium as gym\n"
        "print('torch' in sys.modules, 'MinAtar/Breakout-v0' in gym.registry)\n"
        "import rlfunc\n"
        "print(rlfunc.train.__module__, rlfunc.load.__module__, rlfunc.Callback.__name__, 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    last = out.stdout.strip().splitlines()[-2:]
    assert last == ["False True", "rlfunc.runtime.trainer rlfunc.runtime.api Callback True"], out.stdout[-500:]


def test_a_ctrl_c_while_the_parser_is_built_is_one_line(monkeypatch, capsys):
    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["train"]) == 130
    assert capsys.readouterr().err.strip().splitlines() == ["rlfunc: interrupted."]
