"""benchmarks/locomotion_data.py (#26): the pieces that turn ``rlfunc dataset collect`` outputs into
D4RL-style datasets -- mixtures, cut episodes, complete-episode returns, the medium checkpoint, and
the Minari copy that reads back equal to its ``.npz``. The data agent's training is ``rlfunc train``
(tested elsewhere); here the collections use a uniform policy on Hopper-v5 (mujoco extra)."""

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mujoco", reason="needs the mujoco extra: pip install -e '.[mujoco]'")

from benchmarks import locomotion_data as ld  # noqa: E402
from rlfunc.runtime.dataset import collect  # noqa: E402


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    root = tmp_path_factory.mktemp("loco")
    paths = []
    for seed, steps in ((0, 150), (1, 120)):
        out = collect(root / f"p{seed}.npz", env_id="Hopper-v5", policy="random", steps=steps, seed=seed)
        paths.append(Path(out["path"]))
        ld.cut_last_row(paths[-1])
    return paths


def test_cut_rows_and_mixtures(parts, tmp_path):
    first = ld._load(parts[0])
    assert first["terminals"][-1] or first["timeouts"][-1], "a collection that stops mid-episode ends in a cut"
    mixed = ld._load(ld.concatenate(parts, tmp_path / "mix.npz", "two parts"))
    n0 = len(first["rewards"])
    assert len(mixed["rewards"]) == 270 and str(mixed["policy"]) == "two parts"
    assert mixed["terminals"][n0 - 1] or mixed["timeouts"][n0 - 1]
    np.testing.assert_array_equal(mixed["observations"][n0:], ld._load(parts[1])["observations"])
    assert not (mixed["terminals"] & mixed["timeouts"]).any()


def test_episode_returns_keep_complete_episodes_only():
    d = {"rewards": np.ones(10, np.float32), "terminals": np.zeros(10, bool), "timeouts": np.zeros(10, bool)}
    d["terminals"][3] = True  # episode of 4 steps, terminated
    d["timeouts"][6] = True  # 3 steps, then a timeout: the time limit when limit=3, a cut when it is 1000
    d["timeouts"][9] = True  # likewise
    assert ld.episode_returns(d, limit=3).tolist() == [4.0, 3.0, 3.0]
    assert ld.episode_returns(d, limit=1000).tolist() == [4.0], "timeouts before the limit are cuts"


def test_medium_is_the_checkpoint_nearest_a_third_of_the_expert(tmp_path):
    run = tmp_path / "agent"
    (run / "checkpoints").mkdir(parents=True)
    returns = {5000: 10.0, 10000: 300.0, 15000: 900.0, 20000: 1500.0, 25000: 3000.0}
    (run / "eval.csv").write_text("step,time_s,mean_return,std_return,episodes,stop_reason\n" + "".join(
        f"{s},1,{r},0,10,\n" for s, r in returns.items()))
    for s in returns:
        (run / "checkpoints" / f"step_{s:09d}").mkdir()
    medium, expert, evals = ld.pick_checkpoints(run, 25000, 1 / 3)
    assert (medium, expert) == (15000, 25000) and evals[25000] == 3000.0
    with pytest.raises(SystemExit, match="needs evaluations and checkpoints"):
        ld.pick_checkpoints(run, 30000, 1 / 3)


def test_minari_copy_reads_back_equal(parts, tmp_path, monkeypatch):
    pytest.importorskip("minari")
    pytest.importorskip("h5py")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))  # write_minari sets it; restored after the test
    info = ld.write_minari(parts[0], "rlfunc/test-hopper-v0", tmp_path / "store", "Hopper-v5")
    assert info["transitions"] == len(ld._load(parts[0])["rewards"]) and len(info["sha256"]) == 64
    assert (tmp_path / "store" / "rlfunc" / "test-hopper-v0" / "data" / "metadata.json").is_file()


def test_the_data_agent_is_sac_by_default_or_redq_with_overrides(tmp_path):
    """The command that trains the data agent: configs/sac/<env>.yaml (D4RL's agents were SAC), or
    --agent-algo redq with --agent-set overrides, every checkpoint kept; and the config it names parses."""
    from rlfunc.runtime.cli import build_parser

    assert ld.agent_command("hopper", tmp_path, 15000, 1)[:2] == ["train", "sac/hopper"]
    cmd = ld.agent_command("hopper", tmp_path, 30000, 1, "redq", ["agent.updates_per_step=5"])
    assert cmd[:2] == ["train", "redq/hopper"] and "--set=agent.updates_per_step=5" in cmd
    assert "--set=train.keep_checkpoints=7" in cmd and "--set=train.total_steps=30000" in cmd
    args = build_parser().parse_args(cmd)
    assert args.config == "redq/hopper"


def test_medium_data_from_a_given_policy_checkpoint(tmp_path):
    """--medium-checkpoint: no data agent; the random and medium datasets (the medium one from that
    checkpoint's policy), their Minari copy, and the JSON with the checkpoint's last evaluation."""
    import json
    import os
    import subprocess
    import sys

    import rlfunc

    res = rlfunc.train("configs/redq/hopper.yaml", {
        "train.total_steps": 300, "train.learning_starts": 100, "train.eval_every": 300, "train.eval_episodes": 1,
        "train.checkpoint_every": 300, "train.progress": False, "train.replay_size": 1000,
        "agent.hidden_sizes": [16, 16], "agent.num_critics": 2, "agent.updates_per_step": 1, "agent.batch_size": 16,
    }, run_dir=tmp_path / "agent")
    ckpt = tmp_path / "agent" / "checkpoints" / "step_000000300"
    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "data.json"
    done = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "run.py"), "locomotion-data", "--env", "hopper", "--medium-checkpoint",
         str(ckpt), "--steps", "200", "--random-steps", "100", "--root", str(tmp_path / "data"), "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=root, env=dict(os.environ, MINARI_DATASETS_PATH=str(tmp_path)))
    assert done.returncode == 0, done.stderr
    d = json.loads(out.read_text())
    assert set(d["datasets"]) == {"random", "medium"} and d["datasets"]["medium"]["transitions"] == 200
    assert d["datasets"]["medium"]["checkpoint"]["eval_return"] == res.evals[-1][1]
    assert d["agent"]["algo"] == "redq" and d["minari"]["transitions"] == 200 and "--medium-checkpoint" in d["command"]

    # --expert-checkpoint: the same call again reuses random and medium (same checksums) and adds expert
    # and medium-expert (medium then expert).
    done = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "run.py"), "locomotion-data", "--env", "hopper", "--medium-checkpoint",
         str(ckpt), "--expert-checkpoint", str(ckpt), "--steps", "200", "--random-steps", "100",
         "--root", str(tmp_path / "data"), "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=root, env=dict(os.environ, MINARI_DATASETS_PATH=str(tmp_path)))
    assert done.returncode == 0, done.stderr
    e = json.loads(out.read_text())
    assert set(e["datasets"]) == {"random", "medium", "expert", "medium-expert"}
    assert e["datasets"]["medium"]["sha256"] == d["datasets"]["medium"]["sha256"]
    assert e["datasets"]["random"]["sha256"] == d["datasets"]["random"]["sha256"]
    assert e["datasets"]["expert"]["transitions"] == 200 and e["datasets"]["medium-expert"]["transitions"] == 400
    assert e["datasets"]["expert"]["checkpoint"]["eval_return"] == res.evals[-1][1]
    assert e["agent"]["expert"]["env_step"] == 300 and "--expert-checkpoint" in e["command"]


def test_expert_checkpoint_alone_is_refused_in_one_sentence(tmp_path):
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "run.py"), "locomotion-data", "--env", "hopper", "--expert-checkpoint",
         str(tmp_path / "nowhere"), "--root", str(tmp_path / "data"), "--out", str(tmp_path / "x.json")],
        capture_output=True, text=True, timeout=120, cwd=root)
    assert done.returncode == 2 and "--expert-checkpoint needs --medium-checkpoint too" in done.stderr
    assert not (tmp_path / "x.json").exists()
