"""Long-run resource hygiene: what a run, a resume, an evaluation or an interrupted save leaves held
or on disk must not grow with the number of runs, resumes, calls or checkpoints.

Every run here is tiny (the embedded REDQ/Pendulum with 8-unit critics, batch 8, a few dozen steps);
the checks are of what is held or written afterwards, never of time.
"""

from __future__ import annotations

import csv
import fcntl
import os
import threading
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

import rlfunc
from rlfunc.runtime import checkpoint as ckpt_mod
from rlfunc.runtime.checkpoint import LOCK_FILE, checkpoint_name, load_checkpoint, save_checkpoint
from rlfunc.runtime.trainer import RunInterrupted

TINY = {
    "agent.hidden_sizes": [8, 8],
    "agent.num_critics": 2,
    "agent.updates_per_step": 1,
    "agent.batch_size": 8,
    "train.replay_size": 400,
    "train.learning_starts": 20,
    "train.eval_every": 40,
    "train.eval_episodes": 1,
    "train.checkpoint_every": 30,
    "train.log_every": 10,
    "train.progress": False,
    "train.total_steps": 60,
}


def _fds() -> dict[str, str]:
    """This process's open file descriptors -> what they point to."""
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            out[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed by now
            pass
    return out


def _fds_under(path: Path) -> list[str]:
    root = os.path.realpath(path)
    return sorted(t for t in _fds().values() if t.startswith(root + os.sep))


def _held(run_dir: Path) -> bool:
    """Whether anything (this process included: flock locks belong to an open file description) holds
    ``run_dir``'s lock, i.e. whether `rlfunc resume run_dir` in another process would be refused."""
    fd = os.open(run_dir / LOCK_FILE, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases the probe's own lock
    return False


def _threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.is_alive()}


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


needs_proc = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc/self/fd")


# -- the run directory's lock ends with the run ------------------------------------------------------


@needs_proc
def test_train_releases_the_run_directory_lock_and_its_descriptor(tmp_path):
    """`rlfunc.train` took the run directory's lock (prepare_run_dir) and never released it: the
    process kept one descriptor per run it had trained, and the finished run stayed locked until the
    process ended, so `rlfunc resume RUN` from a shell was refused ("in use by another rlfunc
    process") while the notebook or sweep worker (Ray reuses task processes) that trained it lived."""
    before_fds, before_threads = set(_fds().values()), _threads()
    runs = [tmp_path / f"run{i}" for i in range(3)]
    for run in runs:
        rlfunc.train(None, overrides=TINY, run_dir=run)
    for run in runs:
        assert not _fds_under(run), f"descriptors still open in {run}: {_fds_under(run)}"
        assert not _held(run), f"{run} is still locked after its run ended"
    assert not {os.path.realpath(r) for r in runs} & set(ckpt_mod._LOCKS)
    assert set(_fds().values()) <= before_fds | {"/dev/null"}, "a descriptor per run stays open"
    assert _threads() <= before_threads, f"threads left running: {_threads() - before_threads}"
    # and resuming the finished runs (another process would now be allowed to) releases it again
    rlfunc.resume(runs[0], total_steps=90)
    assert not _held(runs[0]) and not _fds_under(runs[0])


@needs_proc
def test_a_crashed_run_releases_its_lock(tmp_path):
    """A run that ends with an error (a callback's, here; a non-finite loss, a full disk) releases the
    lock too: a sweep's retry of it in another worker process resumes instead of being refused."""

    class Crash(rlfunc.Callback):
        def on_step(self, run):
            if run.env_step == 45:
                raise RuntimeError("boom")

    run = tmp_path / "run"
    with pytest.raises(RuntimeError, match="boom"):
        rlfunc.train(None, overrides=TINY, run_dir=run, callbacks=[Crash()])
    assert not _held(run) and not _fds_under(run)
    assert load_checkpoint(run)[1]["env_step"] == 45  # saved on the way out, loadable


@needs_proc
def test_population_releases_the_run_directory_lock(tmp_path):
    run = tmp_path / "pop"
    rlfunc.train(None, overrides={**TINY, "train.population": {"seeds": [0, 1]}}, run_dir=run)
    assert not _held(run), "the population's run directory is still locked after it ended"
    assert not _fds_under(run)


# -- many resumes, loads and evaluations in one process --------------------------------------------


@needs_proc
def test_resumes_loads_and_evaluations_hold_nothing_and_stay_bounded(tmp_path):
    """Resumes (one of them interrupted by Ctrl-C between checkpoints), loads and evaluations in one
    process: no descriptor or thread is left behind, checkpoints/ and best/ stay bounded, no temporary
    entry is left, and the CSV logs hold each step once (a resumed part never repeats a row)."""
    run = tmp_path / "run"
    rlfunc.train(None, overrides=TINY, run_dir=run)
    base_fds, base_threads = set(_fds().values()), _threads()

    class CtrlC(rlfunc.Callback):
        def on_step(self, run_):
            if run_.env_step == 75:  # between checkpoints, logs and evaluations
                raise KeyboardInterrupt

    with pytest.raises(RunInterrupted):
        rlfunc.resume(run, total_steps=120, callbacks=[CtrlC()])
    total = 120
    for _ in range(3):
        total += 30
        rlfunc.resume(run, total_steps=total)
    for _ in range(5):
        policy = rlfunc.load(run)
        policy.act(torch.zeros(3).numpy())
        del policy
    for _ in range(2):
        rlfunc.evaluate(run, episodes=1)
    assert set(_fds().values()) <= base_fds and _threads() <= base_threads
    assert not _held(run)

    ckpts = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert len([c for c in ckpts if c.startswith("step_")]) <= 2, ckpts  # train.keep_checkpoints (2)
    assert len([c for c in (run / "best").iterdir() if c.name.startswith("step_")]) <= 1
    for d in (run, run / "checkpoints", run / "best"):
        stray = [p.name for p in d.iterdir() if p.name.startswith(".") and p.name != LOCK_FILE]
        assert not stray, f"temporary entries left in {d}: {stray}"
    metrics, evals = _rows(run / "metrics.csv"), _rows(run / "eval.csv")
    for rows, name in ((metrics, "metrics.csv"), (evals, "eval.csv")):
        steps = [int(r["step"]) for r in rows]
        assert steps == sorted(set(steps)), f"{name} repeats or reorders rows across resumes: {steps}"
    assert [int(r["step"]) for r in metrics] == list(range(10, total + 1, 10))
    # one event file per process session (train, the interrupted resume, three resumes), no more
    assert len(list(run.glob("events.out.tfevents.*"))) == 5


@needs_proc
def test_a_resumed_run_does_not_keep_the_loaded_checkpoint_alive(tmp_path, monkeypatch):
    """The learner copies the replay out of the loaded checkpoint into buffers allocated at capacity;
    `resume` kept the loaded tensors referenced for the whole resumed run: one replay more in memory
    than a fresh run holds (measured: a 131 MB replay, RSS 708 MB after the first checkpoint of a
    resumed run against 581 MB for the fresh run that wrote it)."""
    import gc
    import weakref

    from rlfunc.runtime import trainer as trainer_mod

    run = tmp_path / "run"
    rlfunc.train(None, overrides=TINY, run_dir=run)
    refs = []
    real = trainer_mod.load_newest_good

    def load(*args, **kwargs):
        found = real(*args, **kwargs)
        refs.append(weakref.ref(found[1]["replay", "storage", "obs"]))
        return found

    monkeypatch.setattr(trainer_mod, "load_newest_good", load)
    alive = []

    class Look(rlfunc.Callback):
        def on_step(self, run_):
            if not alive:
                gc.collect()
                alive.append(refs[0]() is not None)

    rlfunc.resume(run, total_steps=90, callbacks=[Look()])
    assert alive == [False], "the loaded checkpoint's replay is still referenced while the resumed run trains"


# -- an interrupted save --------------------------------------------------------------------------------


def _tiny(value: float) -> TensorDict:
    return TensorDict({"a": torch.full((4,), value)}, batch_size=[])


def _interrupt_rename(monkeypatch, prefix: str, exc: BaseException) -> None:
    """Ctrl-C (or SIGTERM's SystemExit) at the rename of a temporary entry whose name starts with ``prefix``."""
    real = os.replace

    def replace(src, dst, *args, **kwargs):
        if Path(src).name.startswith(prefix) and ".tmp-" in Path(src).name:
            raise exc
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(ckpt_mod.os, "replace", replace)


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(143)], ids=["ctrl-c", "sigterm"])
def test_interrupted_replacement_puts_the_previous_checkpoint_back(tmp_path, monkeypatch, exc):
    """Rewriting a checkpoint of the same step (the final save of a run after its last evaluation) moves
    the old one aside first; an interrupt before the new one was renamed into place left the old one
    only as `.step_*.old-PID`: `rlfunc.load`/`rlfunc eval` then took an older checkpoint (or found none),
    and a full copy stayed on disk beside the way-out save until the next resume."""
    save_checkpoint(tmp_path, checkpoint_name(1), _tiny(1.0), {"x": 1})
    save_checkpoint(tmp_path, checkpoint_name(2), _tiny(2.0), {"x": 2})
    _interrupt_rename(monkeypatch, ".step_", exc)
    with pytest.raises(type(exc)):
        save_checkpoint(tmp_path, checkpoint_name(2), _tiny(3.0), {"x": 3})
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step_000000001", "step_000000002"]
    tensors, meta = load_checkpoint(tmp_path)
    assert meta["x"] == 2 and float(tensors["a"][0]) == 2.0  # the previous checkpoint of step 2, in place


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(143)], ids=["ctrl-c", "sigterm"])
def test_interrupted_latest_update_leaves_no_temporary_file(tmp_path, monkeypatch, exc):
    save_checkpoint(tmp_path, checkpoint_name(1), _tiny(1.0), {"x": 1})
    _interrupt_rename(monkeypatch, ".latest", exc)
    with pytest.raises(type(exc)):
        save_checkpoint(tmp_path, checkpoint_name(2), _tiny(2.0), {"x": 2})
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step_000000001", "step_000000002"]
    assert load_checkpoint(tmp_path)[1]["x"] == 2  # complete, written after what `latest` names: the head


# -- external loggers -------------------------------------------------------------------------------


def test_a_logger_that_fails_to_start_closes_those_opened_before_it(tmp_path, monkeypatch):
    """W&B refusing its settings (wandb.init raises) left the TensorBoard writer opened just before it
    running: one writer thread (and its event file) more per failed attempt in the process."""
    pytest.importorskip("wandb")  # train.wandb is refused as a config without it
    from rlfunc.runtime import trainer as trainer_mod

    class Refused:
        def __init__(self, *args, **kwargs):
            raise RuntimeError("wandb refused its settings")

    monkeypatch.setattr(trainer_mod, "WandbLog", Refused)
    before = _threads()
    for i in range(2):
        with pytest.raises(RuntimeError, match="wandb refused"):
            rlfunc.train(None, overrides={**TINY, "train.wandb": {"mode": "offline"}}, run_dir=tmp_path / f"run{i}")
    assert _threads() <= before, f"threads left running: {_threads() - before}"


def test_a_resumed_population_does_not_keep_the_loaded_checkpoint_alive(tmp_path, monkeypatch):
    """The same for ``rlfunc resume`` of a population: its replays copy the loaded tensors, which
    stayed referenced by ``population.resume`` for the whole resumed run."""
    import gc
    import weakref

    from rlfunc.runtime import checkpoint as checkpoint_mod
    from rlfunc.runtime import population as population_mod

    run = tmp_path / "pop"
    rlfunc.train(None, overrides={**TINY, "train.population": {"seeds": [0, 1]}}, run_dir=run)
    refs, alive = [], []
    real_load, real_run = checkpoint_mod.load_newest_good, population_mod.PopulationTrainer.run

    def load(*args, **kwargs):
        found = real_load(*args, **kwargs)
        refs.append(weakref.ref(found[1]["replay", "storage", "obs"]))
        return found

    def run_(self, *args, **kwargs):
        gc.collect()
        alive.append(refs[0]() is not None)
        return real_run(self, *args, **kwargs)

    monkeypatch.setattr(checkpoint_mod, "load_newest_good", load)
    monkeypatch.setattr(population_mod.PopulationTrainer, "run", run_)
    rlfunc.resume(run, total_steps=90)
    assert alive == [False], "the loaded checkpoint's replay is still referenced while the resumed population trains"


def test_a_checkpoint_of_the_replay_does_not_copy_its_storage():
    """``state_dict`` of the CPU replays returns views of the filled part (as ``nn.Module.state_dict``
    does), which the checkpoint writes before training goes on: it cloned the storage, so every save
    held a second copy of the replay (measured: RSS 444 -> 581 MB at a run's first checkpoint with a
    131 MB replay, kept for the rest of the run as the allocator does not trim)."""
    from rlfunc.replay.population import PopulationReplay
    from rlfunc.replay.sequence import SequenceReplay
    from rlfunc.replay.uniform import UniformReplay

    def shares(view: torch.Tensor, live: torch.Tensor) -> bool:
        return view.untyped_storage().data_ptr() == live.untyped_storage().data_ptr()

    rows = TensorDict({"obs": torch.randn(5, 3), "reward": torch.randn(5)}, batch_size=[5])
    uniform = UniformReplay(8)
    uniform.add(rows)
    assert shares(uniform.state_dict()["storage", "obs"], uniform._storage["obs"])
    population = PopulationReplay(members=2, capacity=8)
    population.add(0, rows)
    population.add(1, rows[:3])
    assert shares(population.state_dict()["storage", "obs"], population._storage["obs"])
    assert shares(population.member(1).state_dict()["storage", "obs"], population._storage["obs"])
    sequence = SequenceReplay(30, 4, num_envs=1, period=2)
    for t in range(9):
        sequence.add(TensorDict({"obs": torch.full((1, 2), float(t)), "action": torch.zeros(1, dtype=torch.long),
                                 "reward": torch.ones(1), "next_obs": torch.ones(1, 2),
                                 "terminated": torch.tensor([t == 8]), "truncated": torch.zeros(1, dtype=torch.bool)}, [1]))
    assert len(sequence) > 0
    assert shares(sequence.state_dict()["storage", "obs"], sequence._storage["obs"])
    again = UniformReplay(8)
    again.load_state_dict(uniform.state_dict())  # a restored buffer owns its storage
    assert not shares(again._storage["obs"], uniform._storage["obs"])
    assert torch.equal(again.sample(4, torch.Generator().manual_seed(0))["obs"],
                       uniform.sample(4, torch.Generator().manual_seed(0))["obs"])


def test_a_new_run_inside_another_runs_directory_is_refused_in_one_sentence(tmp_path):
    """``--run-dir RUN/checkpoints`` trained a run nested in another's: ``rlfunc eval RUN/checkpoints``
    then read the nested run instead of RUN's newest checkpoint."""
    from rlfunc.runtime.config import ConfigError

    run = tmp_path / "run"
    rlfunc.train(None, overrides=TINY, run_dir=run)
    before = sorted(p.name for p in (run / "checkpoints").iterdir())
    for inner in (run / "checkpoints" / "nested", run / "sub" / "deeper"):
        with pytest.raises(ConfigError) as err:
            rlfunc.train(None, overrides=TINY, run_dir=inner)
        assert str(err.value) == (
            f"Run directory {str(inner)!r} is inside the run directory {str(run)!r}, whose own files and commands "
            "(resume, eval, checkpoint clean-up) it would mix with; pass a --run-dir outside it.")
        assert not inner.exists()
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == before


def test_the_last_step_is_saved_once_after_the_final_evaluation(tmp_path):
    """With ``total_steps`` a multiple of ``checkpoint_every`` but not of ``eval_every`` the last step was
    written twice: the periodic save, then again after the final evaluation (replay and all)."""
    saves = []

    class Count(rlfunc.Callback):
        def on_checkpoint(self, run, path):
            saves.append(Path(path).name)

    rlfunc.train(None, overrides={**TINY, "train.total_steps": 60, "train.checkpoint_every": 30, "train.eval_every": 40},
                 run_dir=tmp_path / "run", callbacks=[Count()])
    assert saves == ["step_000000030", "step_000000060"]
    rows = _rows(tmp_path / "run" / "eval.csv")
    assert [int(r["step"]) for r in rows] == [40, 60]  # the final evaluation is in the one last checkpoint
    meta = load_checkpoint(tmp_path / "run" / "checkpoints" / "step_000000060")[1]
    assert [s for s, _ in meta["evals"]] == [40, 60]
