"""Compiled and graph-captured populations (issue #24: "torch.compile(fullgraph=True) of the
vmapped update, ..., CUDA-graph capture on CUDA").

On CPU (``compile``-marked): for every algorithm in scope besides REDQ, whose test is
``test_vmapped_redq_update_compiles_fullgraph_and_matches_eager`` in tests/test_population.py
-- SAC, RLPD, DQN (DRQN's ``core="mlp"`` with one-step windows), DRQN, R2D2 and DrQ-v2 --
``torch.compile(population.vmap_update(update), fullgraph=True)`` of a 2-member population
whose members differ in settings held as data (two learning rates, and ``gamma``/``tau``/
SAC's fixed temperature where the algorithm takes them as data):

* compiles as one graph (``fullgraph=True``: a graph break raises) and is not recompiled
  when the step counters, the data and the noise change (``error_on_recompile`` after the
  first call);
* equals the eager vmapped update over 3 updates (the Q-learners' periodic target copy
  included): every metric at every update and the whole state at the end (parameters,
  targets, optimizer moments, counters, ``hparams``) to 1e-4 relative (the reason is in
  the test's docstring).

The problems are tests/test_population.py's (hidden 16, LSTM 8, 6x12x12 pixels, batch 4-8),
made smaller where the graph grows with them, so that each compile takes well under a minute
on 2 CPU cores (about 4 CPU-minutes for the file, cold cache): DRQN windows of 3, R2D2 windows
of 3 after a burn-in of 1 (2-step returns), RLPD with one critic step per update and 2 critics
(REDQ's test already compiles the ``G``-step loop of the same ``redq.update``). The host-sync
audit of these vmapped updates is ``test_a_vmapped_update_with_settings_as_data_makes_no_host_sync``
in tests/test_population.py (every algorithm).

With CUDA only (skipped here): for all seven algorithms, the vmapped update -- eager, and
compiled as a population trainer compiles it (:func:`rlfunc.runtime.population.population_update`:
REDQ, SAC and RLPD each vmapped step, the others the whole update with ``fullgraph=True``) -- recorded as one CUDA graph by
:class:`rlfunc.runtime.graphs.FixedStateUpdate`: its replays equal the eager vmapped update
over 4 updates, and replaying raises nothing under ``torch.cuda.set_sync_debug_mode("error")``.
"""

from __future__ import annotations

import dataclasses
import types

import pytest
import torch
from tensordict import TensorDict
from test_gpu_path import replay_without_sync
from test_population import PROBLEMS, SETTINGS, _assert_rel_close

from rlfunc.core import population
from rlfunc.runtime.graphs import FixedStateUpdate
from rlfunc.runtime.population import population_update

torch.set_num_threads(1)

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# the Q-learners copy their target every 2 updates here, so the copy happens inside the run
PERIOD = {"target_period": 2}
OVERRIDES = {
    "redq": {},
    "sac": {},
    "rlpd": {"updates_per_step": 1, "num_critics": 2},
    "dqn": PERIOD,
    "drqn": {"sequence_length": 3, **PERIOD},
    "r2d2": {"burn_in": 1, "sequence_length": 3, "n_step": 2, **PERIOD},
    "drqv2": {},
}
COMPILED_HERE = sorted(set(OVERRIDES) - {"redq"})  # REDQ's compiled test is in test_population.py
RTOL = 1e-4


def _problem(name: str, device: str = "cpu"):
    """Algorithm ``name``'s tiny problem and a 2-member population of it (seeds 0 and 1) whose
    members differ in the settings of ``SETTINGS[name]``, held as data in ``hparams``."""
    shared, s0, s1 = SETTINGS[name]
    problem = PROBLEMS[name](**shared, **OVERRIDES[name])
    configs = [dataclasses.replace(problem.config, **s) for s in (s0, s1)]
    pop = population.stack([problem.init(c, seed) for seed, c in enumerate(configs)])
    data = population.hparam_names(pop.get_non_tensor("config"))  # not REDQ's target entropy: a state tensor
    assert sorted(pop["hparams"].keys()) == sorted(k for k in s0 if s0[k] != s1[k] and k in data)
    return problem, pop.to(device)


def _inputs(problem, gens, device: str = "cpu") -> tuple:
    """One update's per-member batch (and noise), each member's from its own generator."""
    batch = torch.stack([problem.batch(problem.config, g) for g in gens]).to(device)
    if problem.noise is None:
        return (batch,)
    noise = population.draw_per_member(lambda g: problem.noise(problem.config, g), gens)
    return batch, noise.to(device)


def _assert_states_close(actual: TensorDict, expected: TensorDict, what: str) -> None:
    """Every tensor leaf (``hparams`` included) to ``RTOL`` of the leaf's scale; integers exactly."""
    a, e = actual.exclude("config"), expected.exclude("config")
    assert set(a.keys(True, True)) == set(e.keys(True, True)), what
    for key, value in e.items(True, True):
        _assert_rel_close(a[key].to(value.device), value, f"{what} {key}", rtol=RTOL)


# --------------------------------------------------------------------------- compiled (CPU)
@pytest.mark.compile
@pytest.mark.parametrize("name", COMPILED_HERE)
def test_compiled_vmapped_update_is_one_graph_and_equals_eager(name):
    """``torch.compile(vmap_update(update), fullgraph=True)``: one graph for 2 members with two
    learning rates (and ``gamma``/``tau``/fixed temperature where taken as data), not recompiled
    as the steps advance, equal to the eager vmapped update over 3 updates to 1e-4 relative.

    Why 1e-4 and not the 1e-5 of the eager population tests: compiled, Adam is the traced
    out-of-place arithmetic with its bias corrections in float32 (``1 - 0.999^t`` loses ~1e-5
    of its value to cancellation at small ``t``), as the compiled single-member update always
    has; eagerly the vmapped Adam is the fused kernel, which computes them in float64 (SAC's
    ``exp_avg_sq`` differs by ~2e-5 relative after 3 updates). Inductor also fuses and
    reorders float32 sums. REDQ's compiled test uses the same bound for the same reason."""
    problem, pop = _problem(name)
    eager = population.vmap_update(problem.module.update)
    torch._dynamo.reset()
    compiled = torch.compile(population.vmap_update(problem.module.update), fullgraph=True)
    a, b = pop, pop.clone()
    gens = [torch.Generator().manual_seed(10 + k) for k in (0, 1)]
    for i in range(3):
        args = _inputs(problem, gens)
        if problem.prepare:  # DrQ-v2: the agent step its sigma schedule reads
            a, b = problem.prepare(a, i), problem.prepare(b, i)
        a, ma = eager(a, *args)
        with torch._dynamo.config.patch(error_on_recompile=i > 0):
            b, mb = compiled(b, *args)
        assert set(mb.keys(True, True)) == set(ma.keys(True, True))
        for key, value in ma.items(True, True):
            assert value.shape[:1] == (2,), key  # one metric per member
            _assert_rel_close(mb[key], value, f"{name} update {i} {key}", rtol=RTOL)
    _assert_states_close(b, a, f"{name} compiled vs eager after 3 updates:")
    for key, value in pop["hparams"].items():  # the settings as data come out as they went in
        assert torch.equal(b["hparams", key], value), key
    assert b.get_non_tensor("config") == pop.get_non_tensor("config")


# --------------------------------------------------------------------------- CUDA graphs (CUDA only)
def _graph_replays_equal_eager(name: str, compiled: bool, device: str = "cuda", cuda_graph: bool = True):
    """The vmapped update (compiled or not) behind :class:`FixedStateUpdate` (graph-captured on
    CUDA) against the plain eager vmapped update, 4 updates on the same inputs; returns the
    wrapper and the inputs of a further update."""
    problem, pop = _problem(name, device)
    eager = population.vmap_update(problem.module.update)
    update = population.vmap_update(problem.module.update)
    if compiled:  # what a population trainer compiles (REDQ, SAC, RLPD: each vmapped step, train.compile_mode=step)
        torch._dynamo.reset()
        update = population_update(problem.module, types.SimpleNamespace(compile=True, compile_mode="step"))
    fixed = FixedStateUpdate(update, pop, cuda_graph=cuda_graph)
    a, b = pop, fixed.state
    gens = [torch.Generator().manual_seed(20 + k) for k in (0, 1)]
    for i in range(4):
        args = _inputs(problem, gens, device)
        if problem.prepare:  # a new agent step: a new state, copied into the fixed buffers by the call
            a, b = problem.prepare(a, i), problem.prepare(b.clone(), i)
        a, ma = eager(a, *args)
        b, mb = fixed(b, *args)
        assert b is fixed.state
        for key, value in ma.items(True, True):
            _assert_rel_close(mb[key], value, f"{name} update {i} {key}", rtol=RTOL)
    _assert_states_close(b, a, f"{name} graph replay vs eager after 4 updates:")
    return fixed, _inputs(problem, gens, device)


@needs_cuda
@pytest.mark.parametrize(
    "compiled", [False, pytest.param(True, marks=pytest.mark.compile)], ids=["eager", "compiled"]
)
@pytest.mark.parametrize("name", sorted(OVERRIDES))
def test_cuda_graph_of_the_vmapped_update_replays_what_eager_computes_without_a_sync(name, compiled):
    fixed, args = _graph_replays_equal_eager(name, compiled)
    assert fixed.mode == "cuda_graph" and len(fixed._graphs) == 1, fixed.fallback_reason
    step = fixed.state["step"].clone()
    replay_without_sync(fixed, args, 3)
    assert torch.equal(fixed.state["step"], step + 3)
