"""Checkpoints: atomic, pickle-free, complete enough to continue bit-exactly."""

import json
import os

import pytest
import torch

import rlfunc
from helpers_envs import register
from rlfunc.runtime.checkpoint import CheckpointError, load_checkpoint, meta_checksum, save_checkpoint
from rlfunc.runtime.trainer import NonFiniteLossError

TINY = {
    "agent.hidden_sizes": [16, 16],
    "agent.num_critics": 3,
    "agent.updates_per_step": 2,
    "agent.batch_size": 32,
    "train.learning_starts": 300,
    "train.eval_every": 1000,
    "train.eval_episodes": 1,
    "train.checkpoint_every": 1000,
    "train.progress": False,
}


def test_save_is_atomic_and_pickle_free(tmp_path):
    from tensordict import TensorDict

    td = TensorDict({"a": torch.randn(3), "n": {"b": torch.arange(4)}}, [])
    path = save_checkpoint(tmp_path, "step_000000001", td, {"k": 1})
    assert (tmp_path / "latest").read_text().strip() == "step_000000001"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no temporary leftovers"
    files = [f for _, _, fs in os.walk(path) for f in fs]
    assert not [f for f in files if f.endswith((".pkl", ".pt", ".pickle"))]
    loaded, meta = load_checkpoint(tmp_path)
    assert torch.equal(loaded["a"], td["a"]) and meta["k"] == 1


def test_missing_and_corrupt_checkpoints_give_clear_errors(tmp_path):
    with pytest.raises(CheckpointError, match="No run or checkpoint"):
        load_checkpoint(tmp_path / "nowhere")
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        load_checkpoint(tmp_path)
    from tensordict import TensorDict

    path = save_checkpoint(tmp_path, "step_000000002", TensorDict({"a": torch.ones(2)}, []), {})
    (path / "meta.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="corrupt"):
        load_checkpoint(path)
    (path / "meta.json").write_text(json.dumps({"format_version": 1}))
    for f in (path / "tensors").iterdir():
        if f.is_file():
            f.unlink()
    with pytest.raises(CheckpointError, match="corrupt"):
        load_checkpoint(path)


def test_resume_continues_exactly(tmp_path):
    # 300 learning steps before the checkpoint and 600 after it: enough updates for any state that the
    # checkpoint missed (optimizer moments, RNGs, replay rows, counters) to show in the weights
    HALVES = {"train.eval_every": 600, "train.checkpoint_every": 600}
    straight = rlfunc.train(None, overrides={**TINY, "train.total_steps": 1200, **HALVES}, run_dir=tmp_path / "straight")
    first = rlfunc.train(None, overrides={**TINY, "train.total_steps": 600, **HALVES}, run_dir=tmp_path / "split")
    assert first.env_steps == 600
    # The checkpoint records the run's wall time; pretend the first part took 10^5 s so that
    # the resumed part's clock visibly continues from it.
    meta_path = tmp_path / "split" / "checkpoints" / "step_000000600" / "meta.json"
    meta_first = json.loads(meta_path.read_text())
    assert 0 < meta_first["wall_s"] <= first.wall_s
    edited = {**meta_first, "wall_s": 1e5}
    edited["checksum"] = meta_checksum(edited)  # an edit must re-sign meta.json, or the checkpoint is refused
    meta_path.write_text(json.dumps(edited))
    resumed = rlfunc.resume(tmp_path / "split", total_steps=1200)
    assert resumed.env_steps == 1200
    a, meta_a = load_checkpoint(straight.run_dir)
    b, meta_b = load_checkpoint(resumed.run_dir)
    assert meta_a["env_step"] == meta_b["env_step"] == 1200
    assert meta_a["updates"] == meta_b["updates"]
    for key in a["state"].keys(True, True):
        assert torch.equal(a["state"][key], b["state"][key]), key
    assert torch.equal(a["replay", "storage", "obs"], b["replay", "storage", "obs"])
    # eval.csv of the resumed run continues the first part, its time_s too
    rows = [line.split(",") for line in (tmp_path / "split" / "eval.csv").read_text().splitlines()]
    time_col = rows[0].index("time_s")
    assert [int(r[0]) for r in rows[1:]] == [600, 1200]
    assert float(rows[1][time_col]) < 1e5 < float(rows[2][time_col])
    assert 1e5 < resumed.wall_s and 1e5 < meta_b["wall_s"]


def test_trained_agent_loads_and_evaluates(tmp_path):
    res = rlfunc.train(None, overrides={**TINY, "train.total_steps": 400}, run_dir=tmp_path / "r")
    policy = rlfunc.load(res.run_dir)
    import numpy as np

    a = policy.act(np.zeros(3, dtype=np.float32))
    assert a.shape == (1,) and -2.0 <= float(a[0]) <= 2.0  # Pendulum's native bounds
    out = rlfunc.evaluate(res.run_dir, episodes=1)
    assert np.isfinite(out["mean"]) and len(out["returns"]) == 1


def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(tmp_path):
    register()
    overrides = {
        **TINY,
        "env.id": "rlfunc_test/Counting-v0",
        "env.kwargs": {"term_at": 50, "nan_reward_after": 1500},
        "train.total_steps": 3000,
        "train.learning_starts": 100,
        "train.eval_every": 500,
        "train.checkpoint_every": 500,
    }
    with pytest.raises(NonFiniteLossError, match="non-finite"):
        rlfunc.train(None, overrides=overrides, run_dir=tmp_path / "nan")
    tensors, meta = load_checkpoint(tmp_path / "nan")
    assert meta["env_step"] == 1500
    for v in tensors["state"].values(True, True):
        if v.is_floating_point():
            assert torch.isfinite(v).all()


def test_crash_saves_progress(tmp_path, monkeypatch):
    from rlfunc.runtime import learners

    calls = {"n": 0}
    real = learners.TransitionLearner.learn

    def flaky(self):
        calls["n"] += 1
        if calls["n"] == 150:
            raise KeyboardInterrupt
        return real(self)

    monkeypatch.setattr(learners.TransitionLearner, "learn", flaky)
    with pytest.raises(KeyboardInterrupt):
        rlfunc.train(None, overrides={**TINY, "train.total_steps": 1000}, run_dir=tmp_path / "crash")
    _, meta = load_checkpoint(tmp_path / "crash")
    assert meta["env_step"] == 300 + 149


def test_existing_run_dir_is_not_overwritten(tmp_path):
    rlfunc.train(None, overrides={**TINY, "train.total_steps": 300, "train.checkpoint_every": 100}, run_dir=tmp_path / "x")
    from rlfunc.runtime.config import ConfigError

    with pytest.raises(ConfigError, match="rlfunc resume"):
        rlfunc.train(None, overrides={**TINY, "train.total_steps": 300}, run_dir=tmp_path / "x")


def test_sigterm_saves_progress(tmp_path):
    """`kill`, `timeout` or a scheduler's SIGTERM saves the run like any other crash (exit status 143)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    run_dir = tmp_path / "term"
    code = (
        "import torch, rlfunc; torch.set_num_threads(1); "
        f"rlfunc.train(None, overrides={dict(TINY, **{'train.total_steps': 100_000, 'train.checkpoint_every': 100_000})!r}, "
        f"run_dir={str(run_dir)!r})"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 240
        metrics = run_dir / "metrics.csv"
        while time.monotonic() < deadline and proc.poll() is None:
            if metrics.exists() and len(metrics.read_text().splitlines()) >= 3:  # header + 2 rows: learning
                break
            time.sleep(0.5)
        assert proc.poll() is None, "the run ended before it could be stopped"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 128 + signal.SIGTERM
    finally:
        proc.kill()
    _, meta = load_checkpoint(run_dir)
    assert meta["env_step"] > 300  # saved on the way out, past the random phase
