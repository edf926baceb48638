"""Review of the benchmark timing code (session 31): structure, never timings.

* ``harness.warm_up`` times at least one call per runner, so ``--warmup 0`` cannot size a window
  at ``window_s / 1e-6`` calls; every runner gets the same warm-up calls;
* ``time_interleaved`` runs whole windows per runner, alternating A, B / B, A;
* ``update --algo drqv2`` uses the shared warm-up and times the imperative baseline without the
  parity tests' gradient copies (``ImperativeDrQV2.record_grads``), which the official update lacks.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import harness  # noqa: E402

CPU = torch.device("cpu")


def test_warm_up_with_zero_calls_still_times_one_and_sizes_a_sane_window():
    calls = {"a": 0, "b": 0}
    runners = {n: (lambda n=n: calls.__setitem__(n, calls[n] + 1)) for n in calls}
    warm = harness.warm_up(runners, 0, CPU)
    assert calls == {"a": 2, "b": 2}  # one untimed call, one timed, for both sides alike
    assert all(w > 0 for w in warm.values())
    # a window of 1 s is sized from a measured call, not from warm == 0 (-> 1,000,000 calls)
    assert all(k < 1_000_000 for k in harness.window_steps(warm, runners, 1e-3).values())


def test_warm_up_gives_every_runner_the_same_calls():
    calls = {n: 0 for n in ("imperative", "functional-eager", "functional-compiled")}
    runners = {n: (lambda n=n: calls.__setitem__(n, calls[n] + 1)) for n in calls}
    harness.warm_up(runners, 3, CPU)
    assert set(calls.values()) == {4}


def test_windows_interleave_whole_and_alternate():
    seq: list[str] = []
    runners = {n: (lambda n=n: seq.append(n)) for n in "AB"}
    times = harness.time_interleaved(runners, repeats=4, steps={"A": 2, "B": 3}, device=CPU)
    assert seq == list("AABBB" "BBBAA" "AABBB" "BBBAA")
    assert {n: len(t) for n, t in times.items()} == {"A": 4, "B": 4}


def test_drqv2_baseline_records_gradients_only_when_asked():
    from benchmarks import drqv2_bench
    from benchmarks.baselines.drqv2 import ImperativeDrQV2

    ns = argparse.Namespace(image_size=16, batch=4, act_dim=2, drqv2_hidden=16)
    drq, config, obs_space, act_space, batch, noise = drqv2_bench._problem(ns, CPU)
    state = drq.init(config, obs_space, act_space, seed=0)
    on, off = ImperativeDrQV2.from_functional_state(state), ImperativeDrQV2.from_functional_state(state)
    off.record_grads = False
    assert on.record_grads  # the parity tests' default
    m_on, m_off = on.update(batch, noise, 0), off.update(batch, noise, 0)
    assert set(on.last_grads) == {"critic", "encoder", "actor"} and off.last_grads == {}
    assert m_on == m_off  # same update either way
    for a, b in zip(on.critic.parameters(), off.critic.parameters()):
        assert torch.equal(a, b)


def test_update_drqv2_times_the_baseline_without_gradient_copies_and_warms_all_alike(monkeypatch):
    from benchmarks import drqv2_bench, run
    from benchmarks.baselines import drqv2 as base

    made: list = []
    real = base.ImperativeDrQV2.from_functional_state.__func__

    def spy(cls, state):
        agent = real(cls, state)
        made.append(agent)
        return agent

    monkeypatch.setattr(base.ImperativeDrQV2, "from_functional_state", classmethod(spy))
    monkeypatch.setattr(drqv2_bench, "env_throughput", lambda steps: {})
    monkeypatch.setattr(drqv2_bench, "replay_throughput", lambda *a, **k: {"bytes_per_transition": 0.0,
                                                                          "frame_bytes": 0, "samples_per_s": 0.0})
    monkeypatch.setattr(run, "matmul_ceiling", lambda device, **k: 1.0)
    warmed: dict = {}
    real_warm = run.warm_up

    def warm_spy(runners, calls, device, **k):
        counts = {n: 0 for n in runners}
        wrapped = {n: (lambda n=n, f=f: (counts.__setitem__(n, counts[n] + 1), f())) for n, f in runners.items()}
        out = real_warm(wrapped, calls, device, **k)
        warmed.update(counts)
        return out

    monkeypatch.setattr(run, "warm_up", warm_spy)
    args = argparse.Namespace(image_size=16, batch=4, act_dim=2, drqv2_hidden=16, device="cpu", threads=[1],
                              warmup=0, no_compile=True, repeats=2, window_s=0.001, quick=True, env_steps=1,
                              no_cudnn_benchmark=False)
    result = drqv2_bench.update_drqv2(args, run)
    timed = made[0]  # the first agent is the timed one (the second only counts FLOPs)
    assert timed.record_grads is False and timed.last_grads == {}
    assert warmed == {"imperative": 2, "functional-eager": 2}  # the shared warm-up, at least one timed call
    rows = [r for r in result["variants"] if r.get("updates_per_s")]
    assert {r["variant"] for r in rows} == {"imperative", "functional-eager"}
    assert all(len(r["ms_per_update_windows"]) == 2 for r in rows)
