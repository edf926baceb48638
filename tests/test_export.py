"""``rlfunc export`` (weights-only policies), ``rlfunc.load`` of them, and ``rlfunc eval``'s
``--stochastic``, ``--device`` and ``--video`` on a tiny trained run."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import rlfunc
from rlfunc.runtime.checkpoint import load_checkpoint
from rlfunc.runtime.cli import main

SAC = {
    "agent.hidden_sizes": [64, 64],
    "agent.batch_size": 32,
    "train.total_steps": 300,
    "train.learning_starts": 100,
    "train.eval_every": 300,
    "train.eval_episodes": 1,
    "train.checkpoint_every": 300,
    "train.progress": False,
}


def _bytes(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())


def _first_frame(video) -> np.ndarray:
    import imageio.v3 as iio  # moviepy's own reader (imageio + imageio-ffmpeg come with it)

    return iio.imread(video, index=0)


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rlfunc: error: "), err
    return err[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("sac") / "run"
    rlfunc.train("configs/sac/pendulum.yaml", overrides=SAC, run_dir=run)
    return run


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("export") / "policy"
    assert main(["export", str(trained), "--out", str(out)]) == 0
    return out


def test_export_is_the_parameters_only_and_much_smaller(trained, exported):
    (ckpt,) = [p for p in exported.iterdir() if p.is_dir()]
    assert ckpt.name == "step_000000300" and (exported / "latest").read_text().strip() == ckpt.name
    tensors, meta = load_checkpoint(exported)  # the same verified format
    assert set(tensors.keys()) == {"state"} and set(tensors["state"].keys()) == {"params"}
    assert meta["weights_only"] is True and meta["algo"] == "sac" and meta["env_step"] == 300
    assert meta["action_low"] == [-2.0] and meta["obs_shape"] == [3]
    assert "env_rng" not in meta and meta["exported_from"] == "step_000000300"
    full = _bytes(trained / "checkpoints" / "step_000000300")
    small = _bytes(ckpt)
    # No targets, Adam moments, replay or generators: here (300 transitions of replay) under a third of
    # the checkpoint; the replay, which the export never holds, grows with every step of a real run.
    assert small * 3 < full, (small, full)
    params_bytes = sum(t.numel() * t.element_size() for t in tensors["state", "params"].values(True, True))
    assert small < params_bytes + 20_000, (small, params_bytes)  # the parameters and a small meta.json


def test_an_export_loads_and_acts_as_its_run(trained, exported):
    from_run, from_export = rlfunc.load(trained), rlfunc.load(exported)
    obs = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    np.testing.assert_array_equal(from_run.predict(obs)[0], from_export.predict(obs)[0])
    a = rlfunc.evaluate(trained, episodes=2)["returns"]
    b = rlfunc.evaluate(exported, episodes=2)["returns"]
    assert a == b


def test_eval_reads_an_export_and_resume_refuses_it(exported, capsys):
    before = sorted(p.relative_to(exported) for p in exported.rglob("*"))
    assert main(["eval", str(exported), "--episodes", "1"]) == 0
    assert "mean return" in capsys.readouterr().out
    assert main(["resume", str(exported)]) == 2
    line = _one_error_line(capsys)
    assert "weights only" in line and "resume the run directory" in line
    assert sorted(p.relative_to(exported) for p in exported.rglob("*")) == before, "nothing written into the export"


def test_resume_refuses_an_export_placed_in_a_run(trained, exported, tmp_path, capsys):
    """An export copied into a run's checkpoints/ as its newest checkpoint is refused by the trainer, too."""
    run = Path(shutil.copytree(trained, tmp_path / "run"))
    shutil.copytree(exported / "step_000000300", run / "checkpoints" / "step_000000999")
    (run / "checkpoints" / "latest").write_text("step_000000999\n")
    assert main(["resume", str(run), "--total-steps", "400"]) == 2
    assert "weights only" in _one_error_line(capsys)


def test_export_refusals_are_one_line(trained, exported, tmp_path, capsys):
    assert main(["export", str(trained), "--out", str(exported)]) == 2
    assert "not empty" in _one_error_line(capsys)
    assert main(["export", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    assert "No run or checkpoint" in _one_error_line(capsys)
    assert not (tmp_path / "o").exists()


def test_export_of_a_recurrent_discrete_policy(tmp_path):
    """R2D2: num_actions travels with the export; predict's (h, c, prev_action, prev_reward) state works from it."""
    run = tmp_path / "r2d2"
    rlfunc.train(
        "configs/r2d2/cue_memory.yaml",
        overrides={
            "agent.lstm_size": 8, "agent.encoder_sizes": [8], "agent.head_sizes": [8], "agent.batch_size": 8,
            "agent.samples_per_insert": 4, "env.num_envs": 2, "train.total_steps": 600, "train.eval_every": 600,
            "train.eval_episodes": 1, "train.checkpoint_every": 600, "train.progress": False,
        },
        run_dir=run,
    )
    out = rlfunc.runtime.api.export(run, tmp_path / "exp")
    meta = json.loads((out / "meta.json").read_text())
    assert meta["num_actions"] == 2 and meta["weights_only"] is True
    policy = rlfunc.load(tmp_path / "exp")
    obs = np.zeros((3, 3), dtype=np.float32)
    action, state = policy.predict(obs, episode_start=np.ones(3, bool))
    action2, _ = policy.predict(obs, state, episode_start=np.zeros(3, bool), reward=np.ones(3))
    assert action.shape == action2.shape == (3,) and len(state) == 4
    np.testing.assert_array_equal(rlfunc.load(run).predict(obs)[0], action)


def test_eval_stochastic_is_reproducible_and_differs(trained, capsys):
    assert main(["eval", str(trained), "--episodes", "1", "--stochastic"]) == 0
    first = capsys.readouterr().out
    assert "(stochastic)" in first
    assert main(["eval", str(trained), "--episodes", "1", "--stochastic"]) == 0
    assert capsys.readouterr().out == first  # seeded by --seed
    det = rlfunc.evaluate(trained, episodes=1)["returns"]
    sto = rlfunc.evaluate(trained, episodes=1, stochastic=True)["returns"]
    assert det != sto


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_eval_device_that_is_not_here_is_one_line(trained, capsys):
    assert main(["eval", str(trained), "--device", "cuda"]) == 2
    assert "CUDA is not available" in _one_error_line(capsys)
    assert main(["eval", str(trained), "--device", "tpu9"]) == 2
    assert "device" in _one_error_line(capsys).lower()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_eval_on_cuda_matches_cpu(trained):
    cpu = rlfunc.evaluate(trained, episodes=1)["returns"]
    gpu = rlfunc.evaluate(trained, episodes=1, device="cuda")["returns"]
    assert rlfunc.load(trained, device="cuda").params.device.type == "cuda"
    np.testing.assert_allclose(cpu, gpu, rtol=1e-3)


def test_eval_records_video(trained, tmp_path, capsys):
    pytest.importorskip("moviepy", reason='recording needs moviepy (pip install -e ".[video]")')
    videos = tmp_path / "videos"
    assert main(["eval", str(trained), "--episodes", "2", "--video", str(videos)]) == 0
    assert "wrote 2 video(s)" in capsys.readouterr().out
    files = sorted(videos.glob("*.mp4"))
    assert [f.name for f in files] == ["sac-Pendulum-v1-episode-0.mp4", "sac-Pendulum-v1-episode-1.mp4"]
    assert all(f.stat().st_size > 1000 for f in files)
    assert _first_frame(files[0]).shape == (500, 500, 3)  # Pendulum's own rgb_array render
    (tmp_path / "afile").write_text("x")
    assert main(["eval", str(trained), "--video", str(tmp_path / "afile")]) == 2
    assert "is a file" in _one_error_line(capsys)


def test_eval_video_of_an_env_that_cannot_render_is_one_line(tmp_path):
    pytest.importorskip("moviepy", reason='recording needs moviepy (pip install -e ".[video]")')
    from rlfunc.algos import drqn
    from rlfunc.envs import make_env
    from rlfunc.runtime.config import build_config
    from rlfunc.runtime.policy import Policy

    config = build_config({"algo": "drqn", "env": {"id": "rlfunc/CueMemory-v0"}})
    env = make_env("rlfunc/CueMemory-v0")
    params = drqn.init(config.agent, env.observation_space, env.action_space)["params"]
    env.close()
    policy = Policy("drqn", params, config.agent, None, None, env.observation_space.shape)
    policy.run_config = config
    with pytest.raises(ValueError, match="cannot render rgb_array frames") as info:
        rlfunc.evaluate(policy, episodes=1, video_dir=tmp_path / "v")
    assert "\n" not in str(info.value) and not (tmp_path / "v").exists()


def _untrained_policy(raw: dict):
    """The policy an untrained run of ``raw`` would save (init parameters), with its run config."""
    from rlfunc.envs import build_wrappers, make_env
    from rlfunc.runtime.config import build_config
    from rlfunc.runtime.policy import Policy
    from rlfunc.runtime.registry import get_algo

    cfg = build_config(raw)
    env = make_env(cfg.env.id, kwargs=cfg.env.kwargs, wrappers=build_wrappers(cfg.env.wrappers), rescale_actions=False)
    obs_space, native = env.observation_space, env.action_space
    env.close()
    box = type(native)(-1.0, 1.0, native.shape, np.float32)
    params = get_algo(cfg.algo).algo.init(cfg.agent, obs_space, box, seed=0)["params"]
    policy = Policy(cfg.algo, params, cfg.agent, native.low, native.high, obs_space.shape)
    policy.run_config = cfg
    return policy


@pytest.mark.parametrize("env", ["Hopper-v5", "dmc/cartpole_balance-v0"])
def test_eval_records_mujoco_and_dmc_videos_headless(env, tmp_path):
    """MuJoCo renders without a display (EGL or OSMesa chosen as for the DMC pixel envs)."""
    pytest.importorskip("moviepy", reason='recording needs moviepy (pip install -e ".[video]")')
    pytest.importorskip("mujoco", reason="needs the mujoco or dmc extra")
    from rlfunc.envs.dmc import select_gl_backend

    try:
        select_gl_backend()
    except RuntimeError as exc:  # no libEGL / libOSMesa on this machine
        pytest.skip(str(exc))
    if env.startswith("dmc/"):
        pytest.importorskip("dm_control", reason="dm-control not installed: pip install -e '.[dmc]'")
        raw = {"algo": "drqv2", "env": {"id": env, "kwargs": {"size": 32, "action_repeat": 8, "fast_render": True}},
               "train": {"learning_starts": 0}, "agent": {"hidden_dim": 16, "feature_dim": 8}}
    else:
        raw = {"algo": "redq", "env": {"id": env}, "train": {"learning_starts": 0}, "agent": {"hidden_sizes": [16, 16]}}
    out = rlfunc.evaluate(_untrained_policy(raw), episodes=1, video_dir=tmp_path / "videos")
    (video,) = out["videos"]
    assert Path(video).name.startswith(f"{raw['algo']}-") and Path(video).stat().st_size > 1000
    assert _first_frame(video).mean() > 10, "a black video: MuJoCo rendered without a GL context"
