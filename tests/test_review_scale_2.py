"""Second review of the Ray scale-out (``rlfunc sweep``, distributed R2D2): what the first missed.

* ``rlfunc sweep --out`` naming a directory trained every run and then failed to write the JSON (a
  sentence about a temporary file); ``--out x.png`` wrote the JSON and then the PNG over it. Both are
  one sentence before Ray starts now.
* ``--gpus -1`` (or NaN) was taken as no GPU; ``--gpus 1e-5`` and ``distributed.actor_cpus=1e-5`` (below
  Ray's 0.0001) reached Ray, which refused them in its own words after it had started (and, for
  ``rlfunc train``, after the run directory was written). One sentence before Ray starts now.
* ``rlfunc train`` of a distributed config started Ray before refusing a run directory that holds a run
  or a ``train.device`` without a device, and such a refusal left an empty run directory behind.
* A distributed run ended up to ``envs_per_actor - 1`` steps past ``train.total_steps`` per *call* in
  flight (two queued per actor), not per actor as documented: 405 of 400 with one actor of 4 envs.
* A distributed run stopped during an evaluation (Ctrl-C, SIGTERM) and resumed never ran that
  evaluation: chunks cross ``train.eval_every`` between its multiples, and the single run's test for a
  cut-off evaluation asked for the multiple itself.

The tests that start Ray (loopback, no dashboard, 2 CPUs) are in the xdist group "ray" and shut it down.
"""

import os
import sys

import pytest
import yaml

ray = pytest.importorskip("ray")

from rlfunc.runtime.cli import main  # noqa: E402
from test_sweep import bounded  # noqa: E402,F401 -- each test within 150 s, no Ray left running (autouse)

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

TINY = {
    "algo": "sac",
    "env": {"id": "Pendulum-v1"},
    "train": {"total_steps": 300, "learning_starts": 100, "eval_every": 150, "eval_episodes": 1,
              "checkpoint_every": 150, "log_every": 100, "threads": 1, "tensorboard": False},
    "agent": {"hidden_sizes": [16, 16], "batch_size": 32},
}

DISTRIBUTED = {
    "algo": "r2d2",
    "env": {"id": "CartPole-v1", "wrappers": ["mask_velocity"]},
    "distributed": {"actors": 1, "envs_per_actor": 2, "param_sync_steps": 50, "param_sync_updates": 2,
                    "max_replay_ratio": 0.5},
    "train": {"total_steps": 400, "learning_starts": 8, "replay_size": 300, "eval_every": 400, "eval_episodes": 1,
              "checkpoint_every": 400, "log_every": 100, "threads": 1, "tensorboard": False, "compile": False,
              "progress": False},
    "agent": {"encoder_sizes": [16], "lstm_size": 16, "head_sizes": [16], "burn_in": 2, "sequence_length": 4,
              "sequence_period": 2, "batch_size": 8, "target_period": 50},
}


def _write(tmp_path, name, raw):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw))
    return path


def _with(raw, **sections):
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    for section, values in sections.items():
        out[section] = {**out.get(section, {}), **values}
    return out


def _one_sentence(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("rlfunc: error: "), err
    return err.removeprefix("rlfunc: error: ")


# ----------------------------------------------------------------------------- refused before Ray starts


def test_an_out_that_cannot_take_the_json_is_one_sentence_before_ray_starts(tmp_path, capsys):
    tiny = _write(tmp_path, "tiny.yaml", TINY)
    (tmp_path / "outdir").mkdir()
    cases = [
        (tmp_path / "outdir", f"--out {str(tmp_path / 'outdir')!r} is a directory; give the JSON's file name, "
                              f"e.g. {str(tmp_path / 'outdir' / 'results.json')!r}."),
        (tmp_path / "r.png", f"--out {str(tmp_path / 'r.png')!r} names the PNG the sweep writes beside its JSON; "
                             f"give the JSON a .json name, e.g. {str(tmp_path / 'r.json')!r}."),
        (tmp_path / "tiny.yaml" / "x.json", f"--out {str(tmp_path / 'tiny.yaml' / 'x.json')!r} cannot be written "
                                            f"({str(tmp_path / 'tiny.yaml')!r} is not a writable directory); pick another --out."),
    ]
    for out, sentence in cases:
        assert main(["sweep", str(tiny), "--sweep-dir", str(tmp_path / "sw"), "--out", str(out)]) == 2
        assert _one_sentence(capsys) == sentence
        assert not (tmp_path / "sw").exists() and not ray.is_initialized()


def test_resume_with_an_out_that_names_the_png_is_refused_before_the_json_is_overwritten(tmp_path, capsys):
    """A finished sweep (no Ray needed to continue it): the JSON used to be written to r.png, then the PNG
    over it."""
    from rlfunc.scale.sweep import plan_sweep, write_plan

    plan = plan_sweep(_write(tmp_path, "tiny.yaml", TINY), "0", None, None, tmp_path / "sw")
    write_plan(plan)
    assert main(["sweep", "--resume", str(tmp_path / "sw"), "--out", str(tmp_path / "r.png")]) == 2
    assert "names the PNG the sweep writes beside its JSON" in _one_sentence(capsys)
    assert not (tmp_path / "r.png").exists() and not ray.is_initialized()


@pytest.mark.parametrize("args, sentence", [
    (["--gpus", "-1"], "--gpus must be a number of GPUs >= 0, got -1.0."),
    (["--gpus", "nan"], "--gpus must be a number of GPUs >= 0, got nan."),
    (["--gpus", "0.00001"], "--gpus 1e-05 is below 0.0001, the smallest amount Ray schedules; give 0 or at least 0.0001."),
    (["DIST", "--set", "distributed.actor_cpus=0.00001"],
     "distributed.actor_cpus=1e-05 is below 0.0001, the smallest amount Ray schedules; give at least 0.0001."),
    (["DIST", "--set", "distributed.actor_gpus=0.00001"],
     "distributed.actor_gpus=1e-05 is below 0.0001, the smallest amount Ray schedules; give 0 or at least 0.0001."),
])
def test_sweep_resource_amounts_ray_cannot_schedule_are_one_sentence_before_ray_starts(tmp_path, capsys, args,
                                                                                        sentence):
    config = _write(tmp_path, "tiny.yaml", TINY)
    if args[0] == "DIST":
        config, args = _write(tmp_path, "d.yaml", DISTRIBUTED), args[1:]
    assert main(["sweep", str(config), "--sweep-dir", str(tmp_path / "sw"), *args]) == 2
    assert _one_sentence(capsys) == sentence
    assert not (tmp_path / "sw").exists() and not ray.is_initialized()


def test_distributed_train_refusals_come_before_ray_and_leave_no_run_directory(tmp_path, capsys):
    import torch

    config = _write(tmp_path, "d.yaml", DISTRIBUTED)
    run_dir = tmp_path / "run"
    assert main(["train", str(config), "--run-dir", str(run_dir), "--set", "distributed.actor_cpus=0.00001"]) == 2
    assert _one_sentence(capsys) == ("distributed.actor_cpus=1e-05 is below 0.0001, the smallest amount Ray schedules; "
                                     "give at least 0.0001.")
    assert not run_dir.exists() and not ray.is_initialized()
    if not torch.cuda.is_available():
        assert main(["train", str(config), "--run-dir", str(run_dir), "--set", "train.device=cuda"]) == 2
        assert "CUDA is not available here" in _one_sentence(capsys)
        assert not run_dir.exists(), "a refused run leaves no directory (it left one holding only the lock file)"
        assert not ray.is_initialized()
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("algo: r2d2\n")  # another run lives here
    assert main(["train", str(config), "--run-dir", str(run_dir)]) == 2
    assert "already holds a run" in _one_sentence(capsys)
    assert not ray.is_initialized(), "refused before Ray started"


# ----------------------------------------------------------------------------- on a local Ray


@pytest.fixture
def ray_local():
    ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False, num_cpus=2,
             log_to_driver=False, configure_logging=False)
    try:
        yield ray
    finally:
        ray.shutdown()


class _Keep:
    def __init__(self):
        self.runs = []

    def on_end(self, run, reason):
        self.runs.append(run)


@pytest.mark.xdist_group("ray")
def test_a_distributed_run_ends_at_most_envs_per_actor_minus_1_steps_past_total_steps(ray_local, tmp_path):
    """One actor of 4 envs asked 49 steps a call collects up to 52; with two calls queued the run ended up to
    6 steps past total_steps (405 of 400 seen), not the documented 3."""
    import rlfunc

    keep = _Keep()
    raw = _with(DISTRIBUTED, distributed={"envs_per_actor": 4, "param_sync_steps": 49})
    result = rlfunc.train(raw, run_dir=tmp_path / "run", callbacks=[keep])
    run = keep.runs[0]
    assert 400 <= result.env_steps <= 400 + 3
    assert result.env_steps == run.env_step == sum(c[2] for c in run.chunks)
    assert run.learner.replay.windows_added == sum(c[3] for c in run.chunks)
    assert 0 < run.learner_calls <= 0.5 * (run.env_step - run.ratio_from)


@pytest.mark.xdist_group("ray")
def test_an_evaluation_cut_off_by_a_stop_is_run_on_resume(ray_local, tmp_path, monkeypatch):
    """The first evaluation (due once a chunk passes step 200) is interrupted; the run is saved at that step
    and its resume evaluates there first, as a single run's resume does (it went on to the next one)."""
    import rlfunc
    import rlfunc.runtime.trainer as trainer
    from rlfunc.runtime.checkpoint import load_checkpoint

    real = trainer.run_episodes

    def interrupted(*args, **kwargs):
        monkeypatch.setattr(trainer, "run_episodes", real)
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer, "run_episodes", interrupted)
    raw = _with(DISTRIBUTED, train={"total_steps": 600, "eval_every": 200, "checkpoint_every": 10_000})
    with pytest.raises(KeyboardInterrupt, match="interrupted; saved at step"):
        rlfunc.train(raw, run_dir=tmp_path / "run")
    _, meta = load_checkpoint(tmp_path / "run")
    stopped = meta["env_step"]
    assert 200 <= stopped < 400 and meta["evals"] == []
    result = rlfunc.resume(tmp_path / "run")
    steps = [int(line.split(",")[0]) for line in (tmp_path / "run" / "eval.csv").read_text().splitlines()[1:]]
    assert steps[0] == stopped, steps
    assert [s // 200 for s in steps] == [1, 2, 3] and steps[-1] == result.env_steps >= 600


@pytest.mark.parametrize("key, value, sentence", [
    ("actor_cpus", 0.00001, "distributed.actor_cpus=1e-05 is below 0.0001, the smallest amount Ray schedules; give at least 0.0001."),
    ("actor_gpus", 0.00001,
     "distributed.actor_gpus=1e-05 is below 0.0001, the smallest amount Ray schedules; give 0 or at least 0.0001."),
    ("actor_gpus", -1.0, "distributed.actor_gpus must be a number of GPUs >= 0, got -1.0."),
])
def test_the_distributed_section_itself_refuses_amounts_ray_cannot_schedule(key, value, sentence):
    """Refused where the section is built (a script building a RunConfig, ``rlfunc resume``, a sweep's
    plan), not only by the CLI's check before Ray starts."""
    from rlfunc.runtime.config import ConfigError, DistributedSection

    with pytest.raises(ConfigError) as err:
        DistributedSection(**{key: value})
    assert str(err.value) == sentence


def test_a_sweep_without_a_config_plans_the_embedded_default_as_rlfunc_train_does(tmp_path):
    """``rlfunc sweep --seeds 0-1`` (no CONFIG) refused every run with 'algo is missing'; its help says the
    config works as for ``rlfunc train``, which trains the embedded default (REDQ on Pendulum)."""
    from rlfunc.runtime.config import DEFAULT_CONFIG
    from rlfunc.scale.sweep import plan_sweep

    plan = plan_sweep(None, "0-1", None, {"train.total_steps": 3000}, tmp_path / "sw")
    assert [r["seed"] for r in plan["runs"]] == [0, 1]
    assert plan["raw_config"]["algo"] == DEFAULT_CONFIG["algo"] == "redq"
    assert plan["raw_config"]["env"]["id"] == DEFAULT_CONFIG["env"]["id"]
    assert not ray.is_initialized()


def test_a_population_sweep_plans_one_population_per_grid_point_and_trains_it_as_ordinary_member_runs(tmp_path):
    """``rlfunc sweep --population``: each grid point's seeds are one population entry (one task); its
    records are the members' run directories with their grid values. The task body runs here in-process
    (no Ray), as a Ray worker runs it."""
    from rlfunc.scale.sweep import entry_finished, plan_sweep, train_or_continue, write_plan

    config = _write(tmp_path, "tiny.yaml", TINY)
    plan = plan_sweep(config, "0-1", ["agent.actor_lr=3e-4,1e-3"], None, tmp_path / "sw", population=True)
    assert [(r["name"], r["members"], r["seeds"]) for r in plan["runs"]] == [
        ("g0-actor_lr=0.0003-pop", 2, [0, 1]), ("g1-actor_lr=0.001-pop", 2, [0, 1])]
    write_plan(plan)
    entry = plan["runs"][1]
    records = train_or_continue(plan, entry)
    assert entry_finished(plan, entry)
    assert [r["name"] for r in records] == ["g1-actor_lr=0.001-pop/member-0", "g1-actor_lr=0.001-pop/member-1"]
    assert all(r["grid"] == {"agent.actor_lr": 0.001} and r["env_steps"] == 300 for r in records)
    member = yaml.safe_load((tmp_path / "sw" / entry["name"] / "member-1" / "config.yaml").read_text())
    assert member["train"]["seed"] == 1 and member["agent"]["actor_lr"] == 0.001
    assert not ray.is_initialized()


@pytest.mark.parametrize("args, sentence", [
    (["--set", "train.population.seeds=[0,1]"],
     "rlfunc sweep makes its runs from --seeds and --grid, so train.population is not used; drop it, and pass "
     "--population to train each grid point's seeds as one population."),
    (["--population", "--resume", "SW"],
     "--resume continues the stored plan; drop CONFIG, --seeds, --grid, --set, --sweep-dir and --population."),
])
def test_sweep_population_refusals_are_one_sentence_before_ray(tmp_path, capsys, args, sentence):
    config = _write(tmp_path, "tiny.yaml", TINY)
    if "--resume" in args:
        from rlfunc.scale.sweep import plan_sweep, write_plan

        write_plan(plan_sweep(config, "0", None, None, tmp_path / "sw"))
        cmd = ["sweep", *[str(tmp_path / "sw") if a == "SW" else a for a in args]]
    else:
        cmd = ["sweep", str(config), "--sweep-dir", str(tmp_path / "sw2"), *args]
    assert main(cmd) == 2
    assert _one_sentence(capsys) == sentence
    assert not (tmp_path / "sw2").exists() and not ray.is_initialized()


def test_a_population_sweep_of_a_config_populations_do_not_train_is_refused_naming_the_way_out(tmp_path):
    from rlfunc.runtime.config import ConfigError
    from rlfunc.scale.sweep import plan_sweep

    with pytest.raises(ConfigError, match=r"\(drop --population to train each seed as its own run\)\.$"):
        plan_sweep(_write(tmp_path, "d.yaml", DISTRIBUTED), "0-1", None, None, tmp_path / "sw", population=True)
