"""Review of the CUDA-graph wrapper (:mod:`rlfunc.runtime.graphs`), on CPU only.

What a recorded graph cannot take must be refused on the eager CPU path too, so that a CPU
test catches it before a GPU run does:

* a state whose tensors the wrapper's buffers do not hold (an ``hparams`` entry added after the
  wrapper was built) was copied without them: the update then ran without the setting, silently
  unlike the plain update. It is a ``ValueError`` now (a missing tensor already was one);
* an argument that is not a tensor, a TensorDict or ``None`` (a Python learning rate) crashed the
  CUDA-graph path with an ``AttributeError`` in the graph key, before the capture and its eager
  fallback, while the CPU path ran it. A recorded graph would replay the number it was recorded
  with. Both paths refuse it now with one ``TypeError``.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rlfunc.runtime.graphs import FixedStateUpdate, tensor_keys
from test_gpu_path import PROBLEMS  # tests/ is on sys.path (pytest rootdir-relative imports)


def _ptrs(td: TensorDict) -> dict:
    return {k: td.get(k).data_ptr() for k in tensor_keys(td)}


def _forced_graph_mode(fixed: FixedStateUpdate, monkeypatch) -> FixedStateUpdate:
    """``fixed`` taking its CUDA-graph branch on a CPU state (as tests/test_gpu_path.py forces it);
    a capture, if one were attempted, fails and falls back to eager."""

    def no_stream(*args, **kwargs):
        raise RuntimeError("forced capture failure")

    monkeypatch.setattr(torch.cuda, "Stream", no_stream)
    fixed.cuda_graph = True
    assert fixed.mode == "cuda_graph"
    return fixed


def test_a_state_with_tensors_the_buffers_lack_is_refused_not_dropped():
    update, problem = PROBLEMS["redq"]
    state0, inputs = problem("cpu")
    fixed = FixedStateUpdate(update, state0)  # built from a state without settings as data
    with_rate = state0.clone()
    with_rate["hparams"] = TensorDict({"critic_lr": torch.tensor(0.0)}, batch_size=[])
    plain, _ = update(with_rate, *inputs(0))  # the plain update reads the rate: the critics do not move
    for k in tensor_keys(state0["params", "critic"]):
        torch.testing.assert_close(plain["params", "critic"].get(k), state0["params", "critic"].get(k), rtol=0, atol=0)
    ptrs = _ptrs(fixed.state)
    with pytest.raises(ValueError, match=r"hparams.*critic_lr.*do not hold"):
        fixed(with_rate, *inputs(0))
    assert int(fixed.state["step"]) == 0 and _ptrs(fixed.state) == ptrs  # nothing ran, nothing was copied
    # A state with the same tensors (a checkpoint) is still copied in, and a wrapper built with the
    # setting takes it as data.
    out, _ = fixed(state0.clone(), *inputs(0))
    assert out is fixed.state and int(out["step"]) == 1
    fixed_rate = FixedStateUpdate(update, with_rate)
    out, _ = fixed_rate(with_rate.clone(), *inputs(0))
    for k in tensor_keys(plain):
        torch.testing.assert_close(out.get(k), plain.get(k), rtol=0, atol=0, msg=f"{k}")


def test_a_state_missing_a_tensor_is_still_refused():
    update, problem = PROBLEMS["drqn"]
    state0, inputs = problem("cpu")
    fixed = FixedStateUpdate(update, state0)
    with pytest.raises(ValueError, match="missing"):
        fixed(state0.exclude("step"), *inputs(0))


@pytest.mark.parametrize("graph_branch", [False, True], ids=["eager", "cuda-graph-branch"])
@pytest.mark.parametrize("bad", [0.5, 3, (torch.zeros(2),)], ids=["float", "int", "tuple"])
def test_an_argument_that_is_not_a_tensor_is_refused_on_every_path(graph_branch, bad, monkeypatch):
    update, problem = PROBLEMS["drqn"]
    state0, inputs = problem("cpu")
    (batch,) = inputs(0)

    def update_with_a_number(state, batch, lr):  # e.g. a learning rate passed as a Python float
        return update(state, batch)

    fixed = FixedStateUpdate(update_with_a_number, state0)
    if graph_branch:
        _forced_graph_mode(fixed, monkeypatch)
    with pytest.raises(TypeError, match=rf"argument 3 of the call is a {type(bad).__name__}.*as a tensor"):
        fixed(fixed.state, batch, bad)
    assert int(fixed.state["step"]) == 0
    # None and tensors pass (a 0-dim tensor is how a changing number goes in).
    fixed(fixed.state, batch, torch.tensor(0.5))
    fixed(fixed.state, batch, None)
    assert int(fixed.state["step"]) == 2


def test_a_compiled_run_lets_its_process_compile_many_configs():
    """torch's default recompile_limit (8) is a hard error under fullgraph=True: the ninth config of
    another structure compiled in one process (benchmarks/run.py learn --jobs 1, a reused Ray worker)
    crashed. A compiled learner or population update raises the process's limit; never lowers one."""
    import torch._dynamo.config as dynamo_config

    from rlfunc.algos import redq
    from rlfunc.runtime.config import TrainSection
    from rlfunc.runtime.learners.base import compiled_update
    from rlfunc.runtime.perf import RECOMPILE_LIMIT
    from rlfunc.runtime.population import population_update

    # torch's own patch() restores the limits after: pytest >= 9.2's monkeypatch deletes an attribute that was
    # not in the module's __dict__ on undo, which hides a torch config entry for the rest of the process
    for make in (lambda cfg: compiled_update(redq, cfg), lambda cfg: population_update(redq, cfg)):
        with dynamo_config.patch(recompile_limit=8, accumulated_recompile_limit=256):
            make(TrainSection(compile=False))
            assert dynamo_config.recompile_limit == 8  # eager: untouched
            make(TrainSection(compile=True))  # compiles lazily, at the first call: nothing runs here
            assert dynamo_config.recompile_limit == RECOMPILE_LIMIT and dynamo_config.accumulated_recompile_limit >= 256
            dynamo_config.recompile_limit = 500
            make(TrainSection(compile=True))
            assert dynamo_config.recompile_limit == 500


def test_a_capture_the_update_invalidates_restores_the_stream_and_names_the_update_error(monkeypatch):
    """torch.cuda.graph's __exit__ ends the capture before it leaves the capture stream; where ending it
    raises (the update invalidated the capture, e.g. with a host sync), the process stayed on the capture
    stream and the warning named capture_end's error. Emulated on CPU: the CUDA calls are stand-ins that
    behave as torch 2.13's do in that case."""
    import contextlib

    events = []

    class Stream:
        def wait_stream(self, other):
            pass

    class Graph:
        def __enter__(self):
            events.append("capture stream")
            return self

        def __exit__(self, *exc):  # capture_end raises, and the stream context is never left
            raise RuntimeError("operation failed due to a previous error during capture")

    previous = Stream()
    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: previous)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: None)
    monkeypatch.setattr(torch.cuda, "graph", lambda g: Graph())
    def set_stream(s):  # back on the stream the capture started from
        events.append(("set_stream", s is previous))
        events.remove("capture stream")

    monkeypatch.setattr(torch.cuda, "set_stream", set_stream)
    update, problem = PROBLEMS["drqn"]
    state0, inputs = problem("cpu")
    calls = []

    def syncing_update(state, *args):
        calls.append(1)
        if "capture stream" in events:  # legal in the warm-up, not while capturing
            raise RuntimeError("operation not permitted when stream is capturing")
        return update(state, *args)

    fixed = FixedStateUpdate(syncing_update, state0)
    fixed.cuda_graph = True
    with pytest.warns(RuntimeWarning, match="capture failed"):
        fixed(fixed.state, *inputs(0))
    assert "not permitted when stream is capturing" in fixed.fallback_reason
    assert ("set_stream", True) in events and fixed.mode == "eager"
    fixed(fixed.state, *inputs(1))  # the eager fallback runs off the capture stream
