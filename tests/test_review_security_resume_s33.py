"""Security review (session 33) of ``rlfunc resume``: the config it runs with is read from the checkpoint's
meta.json, a file that may be someone else's (a downloaded run directory, its checksum made again).

1. A stored ``distributed.address`` was joined with no opt-in (before the tensors were checked): a
   hostile run directory made rlfunc connect to any host, send it the Ray token and unpickle its data.
   Now refused in one sentence naming the address and ``--address``; ``--address ADDR`` says where.
2. The stored ``train.wandb`` went to ``wandb.init`` as it was: ``dir`` (files anywhere) and
   ``settings: {base_url: ...}`` (the user's W&B API key sent there). Now only W&B's project, entity,
   run and labels are used on their own; other keys need ``--trust-wandb-settings``.
3. ``wandb.init`` failing (W&B's server unreachable) was a traceback and "this is a bug in rlfunc";
   now one sentence with W&B's message before any step is trained.
"""

import json
import shutil
from pathlib import Path

import pytest
from helpers_ray import InstantRay

import rlfunc
from rlfunc.runtime.checkpoint import meta_checksum
from rlfunc.runtime.cli import main
from rlfunc.runtime.config import ConfigError, apply_overrides, build_config

wandb = pytest.importorskip("wandb")

TINY = [
    "--set", "agent.hidden_sizes=[16,16]", "--set", "agent.num_critics=2", "--set", "agent.updates_per_step=1",
    "--set", "agent.batch_size=16", "--set", "train.total_steps=64", "--set", "train.learning_starts=48",
    "--set", "train.eval_every=64", "--set", "train.eval_episodes=1", "--set", "train.checkpoint_every=64",
    "--set", "train.threads=1", "--set", "train.tensorboard=false", "--set", "train.progress=false",
]


def _forge(src: Path, dst: Path, edit) -> Path:
    """A copy of the run ``src`` whose newest checkpoint's stored config ``edit`` changed, re-signed (as a
    hostile run directory can be: the checksum guards against damage, not against its author)."""
    shutil.copytree(src, dst)
    meta_path = sorted((dst / "checkpoints").glob("step_*"))[-1] / "meta.json"
    meta = json.loads(meta_path.read_text())
    edit(meta["config"])
    meta["checksum"] = meta_checksum({k: v for k, v in meta.items() if k != "checksum"})
    meta_path.write_text(json.dumps(meta))
    return dst


def _files(run: Path) -> dict[str, float]:
    return {str(p.relative_to(run)): p.stat().st_mtime_ns for p in run.rglob("*")}


# ----------------------------------------------------------------------------- 2, 3: W&B


@pytest.fixture(scope="module")
def single_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("s33") / "run"
    assert main(["train", "--run-dir", str(run), *TINY]) == 0
    return run


class _FakeRun:
    id = "abc123"

    def define_metric(self, *args, **kwargs):
        pass

    def log(self, *args, **kwargs):
        pass

    def finish(self):
        pass


@pytest.fixture
def fake_wandb(monkeypatch):
    """wandb.init recorded and answered by a fake run: nothing is written or sent."""
    calls = []

    def init(**kwargs):
        calls.append(kwargs)
        return _FakeRun()

    monkeypatch.setattr(wandb, "init", init)
    return calls


@pytest.mark.parametrize("stored, named", [
    ({"project": "x", "mode": "offline", "dir": "/tmp/elsewhere-s33"}, "train.wandb.dir"),
    ({"project": "x", "settings": {"base_url": "http://attacker.invalid"}}, "train.wandb.settings"),
    ({"project": "x", "sync_tensorboard": True}, "train.wandb.sync_tensorboard"),
])
def test_stored_wandb_keys_that_redirect_wandb_are_refused_without_consent(
        single_run, tmp_path, fake_wandb, capsys, stored, named):
    run = _forge(single_run, tmp_path / "run", lambda c: c["train"].update(wandb=stored))
    before = _files(run)
    assert main(["resume", str(run), "--total-steps", "80"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and named in err and "--trust-wandb-settings" in err, err
    assert fake_wandb == [] and _files(run) == before  # refused before anything was done
    with pytest.raises(ConfigError, match="trust_wandb_settings=True"):
        rlfunc.resume(run, total_steps=80)
    assert fake_wandb == []


def test_harmless_wandb_keys_resume_without_a_flag_and_the_others_with_it(single_run, tmp_path, fake_wandb, capsys):
    own = {"project": "x", "entity": "me", "group": "g", "tags": ["a"], "notes": "n", "job_type": "train",
           "mode": "offline", "name": "run1"}
    run = _forge(single_run, tmp_path / "own", lambda c: c["train"].update(wandb=own))
    assert main(["resume", str(run), "--total-steps", "80"]) == 0, capsys.readouterr().err
    assert len(fake_wandb) == 1 and fake_wandb[0]["project"] == "x" and fake_wandb[0]["dir"] == str(run)

    elsewhere = tmp_path / "wandb-elsewhere"
    stored = {"project": "x", "mode": "offline", "dir": str(elsewhere)}
    run = _forge(single_run, tmp_path / "trusted", lambda c: c["train"].update(wandb=stored))
    assert main(["resume", str(run), "--total-steps", "80", "--trust-wandb-settings"]) == 0, capsys.readouterr().err
    assert len(fake_wandb) == 2 and fake_wandb[1]["dir"] == str(elsewhere)


def test_wandb_init_failing_is_one_sentence_before_training(single_run, tmp_path, monkeypatch, capsys):
    def unreachable(**kwargs):
        raise wandb.errors.CommError("failed to reach the W&B server at https://api.wandb.ai")

    monkeypatch.setattr(wandb, "init", unreachable)
    fresh = tmp_path / "fresh"
    assert main(["train", "--run-dir", str(fresh), *TINY, "--set", "train.wandb={project: x}"]) == 2
    err = capsys.readouterr().err.strip()
    assert "bug in rlfunc" not in err and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "failed to reach the W&B server" in err and "--set train.wandb=null" in err, err
    assert not list(fresh.rglob("step_*"))  # nothing was trained

    run = _forge(single_run, tmp_path / "run", lambda c: c["train"].update(wandb={"project": "x"}))
    before = {k: v for k, v in _files(run).items() if k.startswith("checkpoints")}
    assert main(["resume", str(run), "--total-steps", "80"]) == 2
    err = capsys.readouterr().err.strip()
    assert "bug in rlfunc" not in err and len(err.splitlines()) == 1, err
    assert "CommError" in err and "WANDB_MODE=offline" in err, err
    assert {k: v for k, v in _files(run).items() if k.startswith("checkpoints")} == before  # the checkpoint is kept


# ----------------------------------------------------------------------------- 1: distributed.address

DIST = {
    "algo": "r2d2",
    "env": {"id": "CartPole-v1", "wrappers": ["mask_velocity"]},
    "distributed": {"actors": 2, "envs_per_actor": 2, "param_sync_steps": 50, "param_sync_updates": 2,
                    "max_replay_ratio": 0.05, "min_replay_ratio": 0.04},
    "train": {"total_steps": 400, "learning_starts": 8, "replay_size": 500, "eval_every": 100000,
              "eval_episodes": 1, "checkpoint_every": 100000, "log_every": 200, "threads": 1,
              "tensorboard": False, "progress": False, "seed": 3},
    "agent": {"encoder_sizes": [16], "lstm_size": 16, "head_sizes": [16], "burn_in": 2, "sequence_length": 4,
              "sequence_period": 2, "batch_size": 8, "target_period": 50},
}
STORED = "ray://203.0.113.9:10001"  # TEST-NET-3: nothing answers there


@pytest.fixture(scope="module")
def distributed_run(tmp_path_factory):
    """A tiny distributed R2D2 run trained on an in-process Ray, its checkpoint's config naming a cluster."""
    pytest.importorskip("ray")
    from rlfunc.scale import distributed

    run = tmp_path_factory.mktemp("s33d") / "run"
    distributed.DistributedTrainer(build_config(DIST), run, None, InstantRay()).run()
    src = run.parent / "src"
    run.rename(src)
    return _forge(src, run, lambda c: c["distributed"].update(address=STORED))


class _Stop(Exception):
    pass


@pytest.fixture
def no_network(monkeypatch):
    """rlfunc.scale.sweep's ways to a cluster recorded; connect answers per ``answer`` (default: stop)."""
    import importlib

    sweep = importlib.import_module("rlfunc.scale.sweep")  # the module (rlfunc.scale.sweep is also a function's name)
    calls = []
    state = {"answer": None}

    def record(name):
        def fn(address=None, *args, **kwargs):
            calls.append((name, address))
            if name == "connect":
                if state["answer"] is None:
                    raise _Stop(address)
                return state["answer"], False
        return fn

    for name in ("connect", "_check_reachable", "_prepare_join"):
        monkeypatch.setattr(sweep, name, record(name))
    return calls, state


def test_a_stored_address_is_refused_without_contacting_it(distributed_run, no_network, capsys):
    calls, _ = no_network
    before = _files(distributed_run)
    assert main(["resume", str(distributed_run)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"this run was trained on the Ray cluster at '{STORED}'" in err and f"--address '{STORED}'" in err, err
    assert "--address local" in err, err
    assert calls == [] and _files(distributed_run) == before
    with pytest.raises(ConfigError, match="address= in rlfunc.resume"):
        rlfunc.resume(distributed_run)
    assert calls == []


def test_auto_stored_is_refused_as_a_remote_address(distributed_run, tmp_path, no_network):
    calls, _ = no_network
    run = _forge(distributed_run, tmp_path / "auto", lambda c: c["distributed"].update(address="auto"))
    with pytest.raises(ConfigError, match="--address 'auto'"):
        rlfunc.resume(run)
    assert calls == []


def test_the_given_address_is_the_one_joined(distributed_run, tmp_path, no_network):
    calls, _ = no_network
    run = _forge(distributed_run, tmp_path / "given", lambda c: None)
    given = "ray://198.51.100.7:10001"
    with pytest.raises(_Stop):
        rlfunc.resume(run, address=given)
    assert ("connect", given) in calls and all(address == given for _, address in calls), calls
    calls.clear()
    assert main(["resume", str(run), "--address", given]) == 1  # the sentinel stopped it where it joins
    assert ("connect", given) in calls and STORED not in [a for _, a in calls], calls


def test_a_process_already_in_ray_resumes_its_own_run(distributed_run, tmp_path, no_network, monkeypatch):
    """A sweep's Ray task resuming its run (a retry): Ray is initialized there, so connect joins nothing and
    the stored address is not refused (tests/test_sweep*.py run such retries on a real Ray)."""
    ray = pytest.importorskip("ray")

    calls, _ = no_network
    run = _forge(distributed_run, tmp_path / "sweep", lambda c: None)
    with pytest.raises(ConfigError, match="--address"):  # a process not in Ray: refused
        rlfunc.resume(run)
    assert calls == []
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    with pytest.raises(_Stop):
        rlfunc.resume(run)
    assert ("connect", STORED) in calls


def test_address_local_resumes_on_a_ray_of_its_own(distributed_run, tmp_path, no_network, capsys):
    calls, state = no_network
    state["answer"] = InstantRay()
    run = _forge(distributed_run, tmp_path / "local", lambda c: None)
    assert main(["resume", str(run), "--address", "local", "--total-steps", "600"]) == 0, capsys.readouterr().err
    assert ("connect", None) in calls and STORED not in [a for _, a in calls], calls
    meta = json.loads((sorted((run / "checkpoints").glob("step_*"))[-1] / "meta.json").read_text())
    assert meta["env_step"] >= 600 and meta["config"]["distributed"]["address"] is None


def test_address_for_a_single_process_run_is_one_sentence(single_run, tmp_path, capsys):
    run = _forge(single_run, tmp_path / "run", lambda c: None)
    assert main(["resume", str(run), "--address", "local"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no distributed section" in err, err
