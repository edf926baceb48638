"""benchmarks/learn_minatar.py run --extend-from: a longer budget starts from a copy of the finished
shorter run (kept as it was) and resumes it, instead of training from scratch."""

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("minatar")

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("learn_minatar_under_test", ROOT / "benchmarks" / "learn_minatar.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_extend_resumes_to_the_new_budget_and_keeps_the_source(tmp_path, monkeypatch):
    from rlfunc.scale.results import collected_run

    lm = _module()
    monkeypatch.setattr(lm, "RUNS", tmp_path)
    monkeypatch.setitem(lm.BUDGET, "steps", 25_000)
    monkeypatch.setitem(lm.OVERRIDES, "dqn", [
        "train.learning_starts=64", "train.eval_every=1000", "train.eval_episodes=1", "train.checkpoint_every=1000",
        "train.replay_size=1000", "env.num_envs=2", "agent.eps_decay_steps=500", "train.progress=false",
        "agent.batch_size=8", "agent.train_every=16"])
    assert lm.run(["dqn_breakout"], [0], 1000) == 0
    short = tmp_path / "dqn_breakout-1k-s0"
    before = (short / "eval.csv").read_text()
    assert collected_run(short)["env_steps"] == 1000

    assert lm.run(["dqn_breakout"], [0], 2000, extend_from=1000) == 0
    long = tmp_path / "dqn_breakout-2k-s0"
    rec = collected_run(long)
    assert rec["env_steps"] == 2000 and rec["complete"]
    assert [s for s, _ in rec["evals"]] == [1000, 2000]  # the first 1000 steps were not trained again
    assert (long / "eval.csv").read_text().startswith(before)
    assert (short / "eval.csv").read_text() == before  # the source is kept as it was
    # a second call finds both budgets done and trains nothing
    assert lm.run(["dqn_breakout"], [0], 2000, extend_from=1000) == 0
    assert collected_run(long)["evals"] == rec["evals"]
    with pytest.raises(ValueError, match="must be below"):
        lm.extend("dqn_breakout", 0, 1000, 2000)
