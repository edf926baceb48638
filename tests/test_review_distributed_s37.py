"""Session-37 review of distributed R2D2's resume path and its ``metrics.csv`` rows (rlfunc.scale.distributed).

Each test fails on the code before its fix, except the min_replay_ratio one, which guards the first fix
(a learner that waited for the fresh actors while they waited for it). Runs in this process through
in-process Ray stand-ins (``tests/helpers_ray.py`` and two below): no Ray processes, a few seconds each.
"""

from __future__ import annotations

import json
import types

import pytest
from helpers_logs import rows
from helpers_ray import InstantRay
from test_distributed_r2d2 import _tiny

from rlfunc.runtime.checkpoint import CheckpointError, load_newest_good, meta_checksum
from rlfunc.runtime.collector import Collector
from rlfunc.runtime.config import apply_overrides, build_config
from rlfunc.scale import distributed


class StartingRay(InstantRay):
    """Actors that take ``waits`` of the learner's ``ray.wait`` calls to start (a fresh Ray process imports
    torch and makes its envs for seconds): nothing they were asked is ready before."""

    def __init__(self, waits: int) -> None:
        self.waits = waits

    def wait(self, calls, num_returns=1, timeout=None):
        if self.waits > 0:
            self.waits -= 1
            return [], list(calls)
        return list(calls), []


class FirstStep:
    """Records the learner calls when the first chunk is counted (its on_step)."""

    def __init__(self):
        self.calls = None

    def on_step(self, run):
        if self.calls is None:
            self.calls = run.learner_calls


def _trained(tmp_path, **overrides):
    """A short distributed run saved at its end; returns its run directory."""
    raw = _tiny(**{"train.total_steps": 600, "train.checkpoint_every": 600, "distributed.param_sync_steps": 64,
                   **overrides})
    distributed.DistributedTrainer(build_config(raw), tmp_path / "run", None, InstantRay()).run()
    return tmp_path / "run"


def _resumed(run_dir, ray, callbacks=(), **overrides):
    """The trainer ``rlfunc resume`` builds for ``run_dir`` (its checkpoint's config with ``overrides``), restored."""
    checkpoint, tensors, meta = load_newest_good(run_dir)
    config = build_config(apply_overrides(meta["config"], {"train.total_steps": 1200, **overrides}), resolved=True)
    trainer = distributed.DistributedTrainer(config, run_dir, list(callbacks), ray)
    trainer.restore(checkpoint, tensors, meta)
    return trainer


# ----------------------------------------------------------------------------- resume: the replay ratio


def test_a_resumed_learner_waits_for_the_fresh_actors_first_chunk(tmp_path):
    """The checkpoint restores the replay and the ratio's counters; the bound still allowed hundreds of updates
    at the save (this learner ran far below max_replay_ratio), and the resumed learner spent them on the
    restored replay while its fresh actors started: one update per wait here, 40 before the first chunk."""
    run_dir = _trained(tmp_path)
    first = FirstStep()
    trainer = _resumed(run_dir, StartingRay(40), [first])
    restored = trainer.learner_calls
    assert restored + 40 <= 0.5 * (trainer.env_step - trainer.ratio_from)  # the bound allowed them
    trainer.run(resumed=True)
    assert first.calls == restored
    assert restored < trainer.learner_calls <= 0.5 * (trainer.env_step - trainer.ratio_from)


def test_a_resumed_learner_below_min_replay_ratio_catches_up_before_the_actors_go_on(tmp_path):
    """Actors that wait for the learner (distributed.min_replay_ratio) let it update before their first chunk,
    as in the original run (the resumed learner waiting for that chunk while they wait for it stopped the run:
    "every actor waits for the learner and the learner for data")."""
    run_dir = _trained(tmp_path)
    first = FirstStep()
    trainer = _resumed(run_dir, StartingRay(3), [first], **{"distributed.min_replay_ratio": 0.2})
    restored, saved_at = trainer.learner_calls, trainer.env_step
    assert restored + 1 <= 0.2 * (saved_at - trainer.ratio_from)  # below it at the save
    trainer.run(resumed=True)
    assert first.calls + 1 > 0.2 * (saved_at - trainer.ratio_from)  # caught up before the first chunk was asked for
    assert trainer.env_step >= 1200


# ----------------------------------------------------------------------------- resume: the checkpoint's counters


@pytest.mark.parametrize("key, value", [("ratio_from", "0"), ("ratio_from", 10**9), ("param_version", -1)])
def test_edited_distributed_counters_are_one_sentence(tmp_path, key, value):
    """A meta.json edited and its checksum made again: a string ratio_from stopped the resumed run with a
    TypeError at its first update, one past the env steps kept the learner from ever updating."""
    run_dir = _trained(tmp_path)
    meta_path = next((run_dir / "checkpoints").glob("step_*/meta.json"))
    meta = json.loads(meta_path.read_text())
    meta["distributed"][key] = value
    meta["checksum"] = meta_checksum(meta)
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=rf"has an invalid distributed\.{key} \({value!r} is not a count "
                                              r"from 0 to \d+\) in meta\.json, not what rlfunc writes; use an "
                                              r"earlier checkpoint\.$"):
        _resumed(run_dir, InstantRay())


# ----------------------------------------------------------------------------- metrics.csv rows


class ParallelRay(InstantRay):
    """Actors that collect side by side on a fake clock (``now[0]``, seconds; :func:`actor_clock` moves it on
    while one collects): a call starts when its actor is free and the learner's clock has reached it, and is
    ready once that clock reaches its end. Each ``wait`` takes the learner 1 ms; one that may block jumps to the
    first call ready. Actors of equal speed finish together, so their chunks arrive in one wait."""

    class Ref:
        def __init__(self, value, ready_at):
            self.value, self.ready_at = value, ready_at

    def __init__(self, now: list[float]) -> None:
        self.now = now

    def handle(self, actor):
        now = self.now

        class Handle:
            def __init__(self):
                self.actor, self.free_at = actor, now[0]
                handle = self

                class Collect:
                    def remote(self, *args):
                        learner_now = now[0]
                        now[0] = max(learner_now, handle.free_at)
                        value = handle.actor.collect(*args)
                        handle.free_at, now[0] = now[0], learner_now
                        return ParallelRay.Ref(value, handle.free_at)

                class Info:
                    def remote(self):
                        return ParallelRay.Ref(handle.actor.info(), now[0])

                self.collect, self.info = Collect(), Info()

        return Handle()

    def wait(self, calls, num_returns=1, timeout=None):
        self.now[0] += 0.001
        if timeout != 0 and not any(c.ready_at <= self.now[0] for c in calls):
            self.now[0] = min(c.ready_at for c in calls)
        ready = [c for c in calls if c.ready_at <= self.now[0]]
        return ready, [c for c in calls if c not in ready]


@pytest.fixture
def actor_clock(monkeypatch):
    """``time.time`` of the actors and the rate window on a clock that moves on 1 ms per env step collected
    (the actors run in this process, one after another): 1000 env steps per second, whatever the machine."""
    now = [1000.0]
    real_step = Collector.step

    def step(self, actions):
        out = real_step(self, actions)
        now[0] += 0.001 * out[0].batch_size[0]
        return out

    clock = types.SimpleNamespace(time=lambda: now[0], monotonic=distributed.time.monotonic,
                                  process_time=distributed.time.process_time, sleep=distributed.time.sleep)
    monkeypatch.setattr(Collector, "step", step)
    monkeypatch.setattr(distributed, "time", clock)
    real_window = distributed.RateWindow
    monkeypatch.setattr(distributed, "RateWindow", lambda **kw: real_window(clock=clock.time, **kw))
    return now


def test_rows_of_chunks_that_arrive_together_have_the_actors_rate(tmp_path, actor_clock):
    """Two actors of 1000 env steps per second each finish their chunks together, and with log_every below a
    chunk each crosses a log step: the second row's window ran from the first row to its chunk's arrival, in
    the same wait, so it had a whole chunk's steps over nothing (rates of billions of steps per second)."""
    raw = _tiny(**{"train.total_steps": 1200, "train.log_every": 50, "distributed.param_sync_steps": 64})
    distributed.DistributedTrainer(build_config(raw), tmp_path / "run", None, ParallelRay(actor_clock)).run()
    logged = rows(tmp_path / "run" / "metrics.csv")
    rates = [(r["step"], float(r["steps_per_s"])) for r in logged]
    assert len(rates) >= 15
    # The first row's window ends before actor 1's first chunk arrived: the steps arrived over the time since
    # the actors started (actor 0's rate). The last rows' actors idle, asked only the steps still missing.
    assert 900 <= rates[0][1] <= 2100, rates
    assert all(1900 <= rate <= 2100 for _, rate in rates[1:-1]), rates
    assert 500 <= rates[-1][1] <= 2100, rates


def test_resuming_a_run_that_has_all_its_steps_starts_no_actor(tmp_path, monkeypatch):
    """`rlfunc resume` of a finished run (or one given --total-steps it already has) started every actor --
    a Ray process importing torch and making its envs, seconds each, CPUs held on a cluster -- then killed
    them with nothing asked."""
    run_dir = _trained(tmp_path)
    started = []
    real = distributed.ActorProcess.__init__
    monkeypatch.setattr(distributed.ActorProcess, "__init__", lambda self, *a: started.append(a) or real(self, *a))
    trainer = _resumed(run_dir, InstantRay(), **{"train.total_steps": 600})
    result = trainer.run(resumed=True)
    assert started == [] and result.env_steps == trainer.env_step >= 600
