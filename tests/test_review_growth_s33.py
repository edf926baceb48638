"""Long-run resource growth review (s33): what stays bounded as a run goes on, and what does not.

Cheap checks only: tiny nets, a replay that is full early, and evaluations, checkpoints and logs every few
steps, so each periodic path runs many times within a short run. Each test compares two run lengths
(or two sample points in one run).
"""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
import torch
from tensordict import TensorDict

import rlfunc

TINY_SAC = {
    "train.threads": 1,
    "train.progress": False,
    "train.learning_starts": 50,
    "train.replay_size": 100,
    "train.eval_every": 50,
    "train.eval_episodes": 1,
    "train.checkpoint_every": 50,
    "train.log_every": 10,
    "train.keep_checkpoints": 2,
    "agent.hidden_sizes": [8, 8],
    "agent.batch_size": 8,
}


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _files(path) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), path) for d, _, fs in os.walk(path) for f in fs)


class _Sampler:
    """A callback recording the trainer's containers and the process's fds/threads at two env steps."""

    def __init__(self, steps: tuple[int, ...]) -> None:
        self.steps, self.seen = steps, {}

    def on_step(self, trainer):
        if trainer.env_step in self.steps:
            self.seen[trainer.env_step] = {
                "recent": len(trainer._recent_returns),
                "unchecked": len(trainer._unchecked),
                "callbacks": len(trainer.callbacks),
                "fds": _fds(),
                "threads": threading.active_count(),
                "files": _files(trainer.run_dir),
                "checkpoints": sorted(p.name for p in trainer.ckpt_dir.glob("step_*")),
                "evals": len(trainer.evals),
                "hidden": [p.name for p in trainer.ckpt_dir.iterdir() if p.name.startswith(".")],
            }


def test_single_run_containers_fds_threads_and_files_stay_bounded(tmp_path):
    """SAC, 600 env steps with an evaluation, a checkpoint and a best/ write every 50 and a log row every
    10: the recent-returns list, the unchecked-finiteness queue, the callbacks, the open fds, the threads
    and the number of files in the run directory are the same at step 300 and step 600; only
    ``train.keep_checkpoints`` checkpoints are on disk and no temporary file is left. ``evals`` grows
    by one (step, return) pair per evaluation (small, intended)."""
    sampler = _Sampler((300, 600))
    res = rlfunc.train("configs/sac/pendulum.yaml", overrides={**TINY_SAC, "train.total_steps": 600},
                       run_dir=tmp_path / "run", callbacks=[sampler])
    a, b = sampler.seen[300], sampler.seen[600]
    assert a["recent"] <= 11 and b["recent"] <= 11  # trimmed to the last 10 at every log row (+ 1 between rows)
    assert b["unchecked"] <= 1 and a["unchecked"] <= 1
    assert a["callbacks"] == b["callbacks"]
    assert a["fds"] == b["fds"] and a["threads"] == b["threads"]
    assert len(a["files"]) == len(b["files"])  # checkpoints rotate; logs are appended to, not multiplied
    assert len(b["checkpoints"]) == 2 and not b["hidden"]
    assert b["evals"] - a["evals"] == 6  # one pair per evaluation: small and intended
    assert len(res.evals) == 12
    assert not [f for f in _files(tmp_path / "run") if ".tmp-" in f or ".old-" in f]
    best = [p for p in (tmp_path / "run" / "best").iterdir() if p.name.startswith("step_")]
    assert len(best) == 1  # best/ keeps one policy however many evaluations improved


def test_finished_runs_leave_no_fds_or_threads_behind(tmp_path):
    """A process that trains run after run (a notebook, a sweep's worker): no fd or thread per run."""
    kw = {**TINY_SAC, "train.total_steps": 60, "train.eval_every": 30, "train.checkpoint_every": 30}
    rlfunc.train("configs/sac/pendulum.yaml", overrides=kw, run_dir=tmp_path / "r0")
    fds, threads = _fds(), threading.active_count()
    for i in range(1, 4):
        rlfunc.train("configs/sac/pendulum.yaml", overrides=kw, run_dir=tmp_path / f"r{i}")
    assert _fds() == fds
    assert threading.active_count() <= threads


def test_population_containers_and_files_stay_bounded(tmp_path):
    """A 2-member population, many evaluations/checkpoints: each member's recent returns are trimmed,
    the unchecked queue is emptied, the run directory's file count and the process's fds/threads are the
    same at two points, and each member keeps one policy in member-k/checkpoints."""
    from rlfunc.runtime import population as popmod

    seen = {}
    orig = popmod.PopulationTrainer._finish_round

    def wrapped(self, progress, last):
        out = orig(self, progress, last)
        s = min(self.env_steps)
        if s in (200, 400) and s not in seen:
            seen[s] = (max(map(len, self._recent)), len(self._unchecked), _fds(), threading.active_count(),
                       len(_files(self.run_dir)), sum(map(len, self.evals)))
        return out

    popmod.PopulationTrainer._finish_round = wrapped
    try:
        rlfunc.train("configs/sac/pendulum.yaml", overrides={**TINY_SAC, "train.total_steps": 400,
                     "train.population": {"seeds": [0, 1]}}, run_dir=tmp_path / "pop")
    finally:
        popmod.PopulationTrainer._finish_round = orig
    a, b = seen[200], seen[400]
    assert a[0] <= 11 and b[0] <= 11 and a[1] == 0 and b[1] == 0
    assert a[2:5] == b[2:5]
    assert b[5] - a[5] == 2 * 4  # one pair per member per evaluation: small and intended
    for k in range(2):
        assert len(list((tmp_path / "pop" / f"member-{k}" / "checkpoints").glob("step_*"))) == 1
    assert len(list((tmp_path / "pop" / "checkpoints").glob("step_*"))) == 2


def test_compiled_update_does_not_recompile_as_steps_go_on(tmp_path):
    """``train.compile``: the env step, update count and schedules reach the update as tensors, so dynamo
    compiles the update once and not again as steps, evaluations and checkpoints go on."""
    from torch._dynamo.utils import counters

    graphs = {}

    class Probe:
        def on_step(self, trainer):
            if trainer.env_step in (150, 300):
                graphs[trainer.env_step] = counters["stats"]["unique_graphs"]

    kw = {**TINY_SAC, "train.total_steps": 300, "train.compile": True, "train.eval_every": 100,
          "train.checkpoint_every": 100}
    rlfunc.train("configs/sac/pendulum.yaml", overrides=kw, run_dir=tmp_path / "c", callbacks=[Probe()])
    assert graphs[150] >= 1 and graphs[150] == graphs[300]


def test_rate_window_keeps_a_fixed_number_of_pauses():
    """The distributed learner's ``RateWindow`` keeps its 16 newest pauses, not one per evaluation/checkpoint."""
    from rlfunc.scale.distributed import RateWindow

    t = [0.0]
    w = RateWindow(clock=lambda: t[0])
    for _ in range(500):
        with w.off_the_clock():
            t[0] += 1.0
    assert len(w.pauses) == RateWindow.KEPT_PAUSES


def test_csv_log_holds_no_rows_once_columns_are_known(tmp_path):
    """``CsvLog`` appends each row to the file (opened and closed per row: no fd kept) and holds rows back
    only until the first complete row."""
    from rlfunc.runtime.run_log import CsvLog

    log = CsvLog(tmp_path / "m.csv")
    fds = _fds()
    for i in range(5):
        log.write({"step": i}, complete=False)
    log.write({"step": 5, "loss": 1.0})
    for i in range(6, 300):
        log.write({"step": i, "loss": 1.0})
    assert log._pending == [] and _fds() == fds
    assert len((tmp_path / "m.csv").read_text().splitlines()) == 301


# -- confirmed unbounded growth -------------------------------------------------------------------


def _outbox_feed(outbox, rng, steps, n=2):
    for _ in range(steps):
        obs = torch.as_tensor(rng.integers(0, 256, (n, 1, 4, 4), dtype=np.uint8))
        nxt = torch.as_tensor(rng.integers(0, 256, (n, 1, 4, 4), dtype=np.uint8))
        td = TensorDict({"obs": obs, "next_obs": nxt, "action": torch.zeros(n, dtype=torch.int64),
                         "reward": torch.zeros(n), "terminated": torch.zeros(n, dtype=torch.bool),
                         "truncated": torch.zeros(n, dtype=torch.bool)}, batch_size=[n])
        outbox.add(td, None, env_ids=np.arange(n))


def _source_entries(chunks: int) -> tuple[int, int]:
    from rlfunc.replay.frame_sequence import FrameSequenceReplay, PrioritizedFrameSequenceReplay, outbox_frame_capacity

    rng = np.random.default_rng(0)
    learner = PrioritizedFrameSequenceReplay(20, 4, 1, period=2, frame_envs=2)
    outbox = FrameSequenceReplay(10, 4, 2, period=2, frame_capacity=outbox_frame_capacity(10, 4, 2))
    for _ in range(chunks):
        _outbox_feed(outbox, rng, 8)
        windows = outbox.drain()
        first, frames = outbox.drain_frames()
        learner.add_chunk(("actor", 1), first, frames, windows, torch.rand(windows.batch_size[0]) + 0.5)
    return len(learner._sources[("actor", 1)][0]), learner.frame_capacity


def test_frame_replay_chunk_map_is_bounded_by_the_ring():
    short, ring = _source_entries(20)
    long, _ = _source_entries(80)
    # 16 frames per chunk: the ring (92 frames) holds about 6 chunks' frames; entries are kept for two rings
    assert long <= max(short, 2 * ring // 16 + 2)
