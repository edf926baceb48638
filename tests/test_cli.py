"""The ``rlfunc`` command line, end to end on tiny settings."""

import subprocess
import sys

from rlfunc.runtime.cli import main

TINY = [
    "--set", "agent.hidden_sizes=[16,16]",
    "--set", "agent.num_critics=2",
    "--set", "agent.updates_per_step=1",
    "--set", "agent.batch_size=32",
    "--set", "train.learning_starts=100",
    "--set", "train.eval_every=200",
    "--set", "train.eval_episodes=1",
    "--set", "train.checkpoint_every=200",
    "--set", "train.progress=false",
]


def test_train_eval_resume_plot(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "configs/sac/pendulum.yaml", "--run-dir", str(run), "--set", "train.total_steps=400", *TINY]) == 0
    out = capsys.readouterr().out
    assert "final eval return" in out
    assert (run / "config.yaml").exists() and (run / "metrics.csv").exists() and (run / "eval.csv").exists()
    header = (run / "metrics.csv").read_text().splitlines()[0]
    assert "critic_loss" in header and "steps_per_s" in header
    assert main(["eval", str(run), "--episodes", "1"]) == 0
    assert "mean return" in capsys.readouterr().out
    assert main(["resume", str(run), "--total-steps", "600"]) == 0
    assert "env steps: 600" in capsys.readouterr().out
    png = tmp_path / "curves.png"
    assert main(["plot", str(run), str(run), "--out", str(png)]) == 0
    assert png.stat().st_size > 1000


def test_bad_input_is_one_clear_line(tmp_path, capsys):
    assert main(["train", "--set", "agent.num_critic=3", "--run-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "did you mean 'num_critics'" in err[0]
    assert main(["train", "--set", "env.id=CartPole-v1", "--run-dir", str(tmp_path / "r")]) == 2
    assert "continuous 1-D Box action space" in capsys.readouterr().err
    assert main(["eval", str(tmp_path / "missing")]) == 2
    assert "No run or checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "r" / "checkpoints").exists(), "nothing is trained before the error"


def test_console_script_help():
    out = subprocess.run([sys.executable, "-m", "rlfunc.runtime.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "train" in out.stdout and "resume" in out.stdout


def test_progress_line_never_shows_nan(capsys):
    """The tqdm line: no rate before any step of the phase (n/a, not 0 with ETA nan), no ETA during the warm-up."""
    from rlfunc.runtime.run_log import Progress

    progress = Progress(True, 400, 0, "drqv2 dmc/cartpole_balance-v0")
    progress.update(0, None, force=True)
    progress.update(100, None, force=True)
    progress.learning_started(100)
    progress.update(400, 135.4, force=True)
    progress.close()
    err = capsys.readouterr().err
    assert "nan" not in err.lower()
    assert "0/400 [" in err and "warm-up n/a steps/s | ETA after warm-up | eval n/a" in err
    assert "100/400 [" in err and "ETA after warm-up" in err
    assert "400/400 [" in err and "done | eval 135.4" in err
