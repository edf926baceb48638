"""Review of bad inputs (session 31), each read otherwise or broken later before: now one sentence before
training (or, for ``plot``, the intended figure). A config file (or ``--set`` value) naming a key twice,
whose first occurrence PyYAML dropped; YAML 1.1's numbers without a dot (``-1e1``) in
``agent.target_entropy`` and ``agent.lr_schedule`` refused as "not a number";
``env.kwargs.max_episode_steps`` of ``500.0`` (accepted, then refused by gymnasium's TimeLimit) and
``.inf`` (a traceback); ``dataset collect --steps`` beyond memory (collected until memory ran out);
``plot`` of one run given twice (averaged as two seeds; now plotted once, with a warning); RLPD's
``data.offline_ratio`` rounding to no prior (or no online) rows of ``agent.batch_size``; ``resume`` of
a checkpoint whose meta.json counters were edited and re-signed (``Value out of range: ...`` from
TensorBoard, or a string count read as a number); ``--set train.seed`` beside ``--seeds`` (ignored)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rlfunc.runtime.checkpoint import meta_checksum
from rlfunc.runtime.cli import main
from rlfunc.runtime.config import ConfigError, apply_overrides, build_config, load_config, parse_overrides

TINY = ["--set", "algo=sac", "--set", "agent.hidden_sizes=[8]", "--set", "agent.batch_size=8",
        "--set", "train.total_steps=20", "--set", "train.learning_starts=10", "--set", "train.eval_every=20",
        "--set", "train.eval_episodes=1", "--set", "train.checkpoint_every=20", "--set", "train.progress=false",
        "--set", "train.threads=1", "--set", "train.tensorboard=true", "--set", "env.kwargs.max_episode_steps=10"]


def refusal(capsys) -> str:
    """stderr's one line (``rlfunc: error: ...``), no traceback."""
    err = capsys.readouterr().err.strip().splitlines()
    assert err and "Traceback" not in "\n".join(err)
    assert len(err) == 1, err
    return err[0]


def built(*sets: str):
    return build_config(apply_overrides(load_config(None), parse_overrides(list(sets))))


def test_a_key_given_twice_in_a_config_file_or_set_value_is_refused(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("algo: sac\nenv: {id: Pendulum-v1}\ntrain:\n  total_steps: 300\ntrain:\n  seed: 3\n")
    twice = r"line 5, column 1 \(the key 'train' is given twice in one mapping\); fix the file\.$"
    with pytest.raises(ConfigError, match=twice):
        load_config(path)
    assert main(["train", str(path), "--run-dir", str(tmp_path / "run")]) == 2
    assert "the key 'train' is given twice" in refusal(capsys)
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match="the key 'kind' is given twice"):
        parse_overrides(["agent.lr_schedule={kind: cosine, kind: linear}"])
    merged = tmp_path / "m.yaml"  # a YAML merge key is not a key given twice: the later key overrides it
    merged.write_text("algo: sac\nenv: {id: Pendulum-v1}\ntrain:\n  <<: {total_steps: 300}\n  total_steps: 400\n")
    assert load_config(merged)["train"] == {"total_steps": 400}


def test_yaml11_numbers_without_a_dot_are_numbers_in_target_entropy_and_lr_schedule():
    cfg = built("algo=sac", "agent.target_entropy=-1e1",
                "agent.lr_schedule={kind: cosine, decay_updates: 1e5, end_factor: 1e-2}")
    assert cfg.agent.target_entropy == -10.0
    assert (cfg.agent.lr_schedule.decay_updates, cfg.agent.lr_schedule.end_factor) == (100000, 0.01)
    assert built("algo=sac", "agent.target_entropy=mbpo").agent.target_entropy == "mbpo"


def test_max_episode_steps_is_an_integer_and_infinity_is_one_sentence():
    for value in ("500.0", "5e2"):
        steps = built("algo=sac", f"env.kwargs.max_episode_steps={value}").env.kwargs["max_episode_steps"]
        assert steps == 500 and type(steps) is int  # gymnasium's TimeLimit refuses 500.0
    for value in (".inf", ".nan"):
        with pytest.raises(ConfigError, match=r"env\.kwargs\.max_episode_steps must be a positive integer"):
            built("algo=sac", f"env.kwargs.max_episode_steps={value}")


def test_dataset_collect_refuses_more_steps_than_memory_holds_before_any_step(tmp_path, capsys, monkeypatch):
    import rlfunc.runtime.memory as memory

    monkeypatch.setattr(memory, "_host_available", lambda: 1_000_000)
    out = tmp_path / "d.npz"
    argv = ["dataset", "collect", "--env", "Pendulum-v1", "--policy", "random", "--steps", "20000", "--out", str(out)]
    assert main(argv) == 2
    line = refusal(capsys)
    assert line.startswith("rlfunc: error: --steps=20000 needs ") and line.endswith("; lower --steps.")
    assert not out.exists()


def _fake_run(d: Path) -> Path:
    d.mkdir()
    (d / "config.yaml").write_text("algo: sac\nenv: {id: Pendulum-v1}\n")
    (d / "eval.csv").write_text("step,time_s,mean_return,std_return,episodes\n100,0.0,1.0,0.0,1\n200,0.0,2.0,0.0,1\n")
    return d


def test_plot_draws_a_run_given_twice_once(tmp_path, capsys):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.axes

    run = _fake_run(tmp_path / "a")
    other = _fake_run(tmp_path / "b")
    out = tmp_path / "p.png"
    drawn = []
    real_plot = matplotlib.axes.Axes.plot

    def spy(self, *args, **kwargs):
        drawn.append(kwargs.get("label"))
        return real_plot(self, *args, **kwargs)

    matplotlib.axes.Axes.plot = spy
    try:
        assert main(["plot", str(run), str(other), str(run) + "/", "--out", str(out)]) == 0
    finally:
        matplotlib.axes.Axes.plot = real_plot
    assert drawn == ["sac Pendulum-v1 (n=2)"] and out.exists()  # not a third seed
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rlfunc: warning: the run ") and "is given twice" in err[0]


@pytest.mark.parametrize(("batch", "ratio", "words"), [
    (1, 0.5, "rounds to 0 prior rows per mini-batch, so the prior data would never be sampled"),
    (4, 0.9, "rounds to 4 prior rows of 4 per mini-batch, so the online replay would never be sampled"),
])
def test_rlpd_offline_ratio_that_rounds_to_no_rows_of_one_source_is_refused(batch, ratio, words):
    sets = ["algo=rlpd", "data.path=prior.npz", f"agent.batch_size={batch}", f"data.offline_ratio={ratio}"]
    with pytest.raises(ConfigError, match=rf"^data\.offline_ratio={ratio} of agent\.batch_size={batch} {words}; "):
        built(*sets)
    built("algo=rlpd", "data.path=prior.npz", "agent.batch_size=2")  # 1 prior row and 1 online row


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny single run and a tiny population of two, each with a checkpoint."""
    root = tmp_path_factory.mktemp("runs")
    assert main(["train", *TINY, "--run-dir", str(root / "single")]) == 0
    assert main(["train", *TINY, "--seeds", "0-1", "--run-dir", str(root / "pop")]) == 0
    return root


def _edited(trained: Path, tmp_path: Path, name: str, edit) -> Path:
    run = tmp_path / name
    shutil.copytree(trained / name, run)
    meta_path = run / "checkpoints" / "step_000000020" / "meta.json"
    meta = json.loads(meta_path.read_text())
    edit(meta)
    meta["checksum"] = meta_checksum(meta)  # re-signed: only its values say it was edited
    meta_path.write_text(json.dumps(meta))
    return run


@pytest.mark.parametrize(("value", "total"), [(10**30, []), ("20", []), (20.0, []), ("abc", ["--total-steps", "40"])])
def test_resume_refuses_edited_counters_of_a_single_run(trained, tmp_path, capsys, value, total):
    run = _edited(trained, tmp_path, "single", lambda m: m.update(env_step=value))
    assert main(["resume", str(run), *total]) == 2
    line = refusal(capsys)
    assert "has an invalid env_step (" in line
    assert line.endswith("in meta.json, not what rlfunc writes; use an earlier checkpoint.")


def test_resume_refuses_a_populations_env_steps_beyond_int64(trained, tmp_path, capsys):
    big = 10**19 - 1  # 19 digits, as a checkpoint name's; past the int64 steps the logs count in

    def edit(meta):
        meta.update(env_steps=[big, big], env_step=big, round_start=big)

    run = _edited(trained, tmp_path, "pop", edit)
    assert main(["resume", str(run)]) == 2
    assert "has an invalid env_steps (one count from 0 to 9223372036854775806 per member)" in refusal(capsys)


def test_set_train_seed_beside_seeds_is_refused(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", *TINY, "--set", "train.seed=5", "--seeds", "0-1", "--run-dir", str(run)]) == 2
    assert refusal(capsys) == ("rlfunc: error: --set train.seed is not used beside --seeds, which gives each member "
                               "its seed; drop --set train.seed.")
    assert not run.exists()


@pytest.mark.parametrize("value", [1e9, 1.0])
def test_tanh_epsilon_of_1_or_more_is_one_sentence(value):
    """``agent.tanh_epsilon=1e9`` was accepted: ``log(1 - a^2 + eps)`` then no longer stands for the tanh
    log-determinant; only 0 and negatives (and, by the shared check, NaN and inf) were refused."""
    from rlfunc.algos import redq

    with pytest.raises(ValueError, match=r"^tanh_epsilon must be above 0 and below 1 \(REDQ's 1e-6\) or null"):
        redq.Config(tanh_epsilon=value)
    assert redq.Config(tanh_epsilon=0.5).tanh_epsilon == 0.5


def test_plot_out_below_a_file_names_the_file(tmp_path):
    """``rlfunc plot RUN --out notes.txt/curves.png`` said "File exists; check the path" (mkdir's words)."""
    from rlfunc.runtime.plot import plot_path

    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match=r"^--out .* has '.*notes\.txt', a file, as a folder; pass a path inside a folder\.$"):
        plot_path(tmp_path / "notes.txt" / "sub" / "curves.png")
    assert plot_path(tmp_path / "new" / "curves.png") == tmp_path / "new" / "curves.png"


def test_a_grid_value_naming_a_key_twice_is_refused():
    """``--grid`` values are read by the config files' loader too, which refuses a key given twice."""
    from rlfunc.runtime.config import ConfigError
    from rlfunc.runtime.specs import parse_grid

    with pytest.raises(ConfigError, match=r"is not valid YAML"):
        parse_grid(["agent.lr_schedule={decay_updates: 10, decay_updates: 20}"])
