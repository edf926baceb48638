"""Review of the public API's input checks (session 33).

* ``redq.act`` (and ``rlpd.act``, SAC through it) took float64 ``noise`` for float32 parameters and
  returned float64 actions (the noise promoted the action), and noise of another shape broadcast
  silently; ``drqv2.act`` checked the shape but took any floating dtype. Both now refuse noise that
  is not in the parameters' dtype with one sentence, as ``redq.act`` already refused such an ``obs``
  (shape and dtype only, skipped under ``torch.compile``: no host sync).
* Every replay constructor took ``capacity=2.5`` as 2 (``int()``) and ``"3"`` was a raw ``TypeError``
  from ``"3" < 1``. One shared check (:func:`rlfunc.replay._layout.check_capacity`) now refuses a
  non-integer or too small capacity, a bool included, naming the class and the argument. A whole float
  such as ``3.0`` is refused too: the run config already turns YAML's ``1e6`` / ``500.0`` into an int
  before a replay is built, and the Python API's other counts (``Config`` fields, ``Policy.seed``,
  ``evaluate(episodes=)``) refuse floats, so the replays do as well.
* ``Policy.predict`` / ``act`` answered a NaN or infinite observation with a NaN action; R2D2's
  ``predict`` state carries the previous actions (``state[2]``), and one out of ``[0, n_actions)`` was a
  silent all-zero one-hot (``1.5`` silently 1). Both now one sentence (host-side, at the runtime boundary).
* ``rlfunc.evaluate(policy, device="gpu")`` ignored the bad device when given a Policy; now the one
  device check (:func:`rlfunc.runtime.api.check_device`) refuses it, as it does for a path.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlfunc
from rlfunc.algos import drqv2, r2d2, redq, rlpd
from rlfunc.replay.frame_sequence import FrameSequenceReplay
from rlfunc.replay.pixels import PixelReplay
from rlfunc.replay.population import PopulationReplay
from rlfunc.replay.sequence import SequenceReplay
from rlfunc.replay.sumtree import SumTree
from rlfunc.replay.population_pixels import PopulationPixelReplay
from rlfunc.replay.population_sequence import PopulationPrioritizedSequenceReplay, PopulationSequenceReplay
from rlfunc.replay.population_sumtree import PopulationSumTree
from rlfunc.replay.prioritized import PrioritizedSequenceReplay
from rlfunc.replay.sequence import SequenceReplay
from rlfunc.replay.sumtree import SumTree
from rlfunc.replay.uniform import UniformReplay
from rlfunc.runtime.policy import Policy

VEC = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
BOX = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


def _one_sentence(exc: pytest.ExceptionInfo, *fragments: str) -> None:
    msg = str(exc.value)
    assert msg.count("\n") == 0 and msg.endswith("."), msg
    for f in fragments:
        assert f in msg, msg


# -- 1. act's noise: the parameters' dtype and the action's shape -------------------------------------
@pytest.mark.parametrize("module", [redq, rlpd])
def test_redq_and_rlpd_act_refuse_noise_of_another_dtype_or_shape(module):
    config = module.Config(hidden_sizes=(8,), num_critics=2) if module is redq else module.Config(hidden_sizes=(8,))
    params = module.init(config, VEC, BOX, seed=0)["params"]
    obs = torch.zeros(4, 3)
    with pytest.raises(ValueError) as exc:  # was: float64 actions
        module.act(params, obs, torch.randn(4, 2, dtype=torch.float64), config=config)
    _one_sentence(exc, "act", "noise", "torch.float32", "torch.float64")
    with pytest.raises(ValueError) as exc:  # was: one env's draw broadcast to all four
        module.act(params, obs, torch.randn(1, 2), config=config)
    _one_sentence(exc, "noise", "[4, 2]", "[1, 2]")
    noise = torch.randn(4, 2, generator=torch.Generator().manual_seed(0))
    action = module.act(params, obs, noise, config=config)
    assert action.dtype == torch.float32 and action.shape == (4, 2)
    assert module.act(params, obs[0], noise[0], config=config).shape == (2,)  # unbatched, as documented
    # deterministic actions take no noise, so any is ignored
    assert module.act(params, obs, torch.randn(4, 2, dtype=torch.float64), deterministic=True, config=config).dtype == torch.float32


def test_drqv2_act_refuses_noise_of_another_dtype():
    config = drqv2.Config(encoder_channels=(4,), encoder_strides=(2,), feature_dim=8, hidden_dim=16, pad=1, frame_stack=2)
    params = drqv2.init(config, gym.spaces.Box(0, 255, (6, 12, 12), np.uint8), BOX, seed=0)["params"]
    obs = torch.randint(256, (4, 6, 12, 12), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError) as exc:  # was: float64 actions
        drqv2.act(params, obs, torch.randn(4, 2, dtype=torch.float64), config=config)
    _one_sentence(exc, "drqv2.act", "noise", "torch.float32", "torch.float64")
    assert drqv2.act(params, obs, torch.randn(4, 2), config=config).dtype == torch.float32


def test_redq_act_noise_check_keeps_act_compilable_and_vmappable():
    config = redq.Config(hidden_sizes=(8,), num_critics=2)
    params = redq.init(config, VEC, BOX, seed=0)["params"]
    obs, noise = torch.randn(4, 3), torch.randn(4, 2)
    eager = redq.act(params, obs, noise, config=config)
    compiled = torch.compile(lambda p, o, n: redq.act(p, o, n, config=config), fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(params, obs, noise), eager)
    stacked = torch.stack([params, params])  # a population's act: vmapped over members, per-member shapes
    out = torch.vmap(lambda p, o, n: redq.act(p, o, n, config=config))(stacked, obs.expand(2, 4, 3), noise.expand(2, 4, 2))
    torch.testing.assert_close(out[1], eager)


# -- 2. replay capacities -------------------------------------------------------------------------------
REPLAYS = {
    "UniformReplay": lambda c: UniformReplay(c),
    "SequenceReplay": lambda c: SequenceReplay(c, 2),
    "PrioritizedSequenceReplay": lambda c: PrioritizedSequenceReplay(c, 2),
    "FrameSequenceReplay": lambda c: FrameSequenceReplay(c, 2),
    "PixelReplay": lambda c: PixelReplay(c, (3, 8, 8), 2, frame_stack=1),
    "PopulationReplay": lambda c: PopulationReplay(2, c),
    "PopulationSequenceReplay": lambda c: PopulationSequenceReplay(c, 2, members=2),
    "PopulationPrioritizedSequenceReplay": lambda c: PopulationPrioritizedSequenceReplay(c, 2, members=2),
    "PopulationPixelReplay": lambda c: PopulationPixelReplay(c, (3, 8, 8), 2, members=2, frame_stack=1),
    "SumTree": lambda c: SumTree(c),
    "PopulationSumTree": lambda c: PopulationSumTree(2, c),
}


@pytest.mark.parametrize("bad", [2.5, "3", True, 0, -4, 3.0, None])
@pytest.mark.parametrize("name", sorted(REPLAYS))
def test_replays_refuse_a_capacity_that_is_not_a_positive_integer(name, bad):
    """2.5 was truncated to 2 and "3" a raw TypeError; 3.0 is refused like 2.5 (see the module docstring)."""
    with pytest.raises(ValueError) as exc:
        REPLAYS[name](bad)
    _one_sentence(exc, f"{name}: capacity must be an integer of at least", repr(bad))


@pytest.mark.parametrize("name", sorted(REPLAYS))
def test_replays_take_python_numpy_and_tensor_integers(name):
    for good in (6, np.int64(6), torch.tensor(6)):
        replay = REPLAYS[name](good)
        assert type(replay.capacity) is int and replay.capacity == 6


def test_frame_sequence_replay_refuses_a_fractional_frame_capacity():
    with pytest.raises(ValueError) as exc:  # was: int(40.5) frames
        FrameSequenceReplay(4, 2, frame_capacity=40.5)
    _one_sentence(exc, "FrameSequenceReplay: frame_capacity must be an integer", "40.5")
    assert FrameSequenceReplay(4, 2, frame_capacity=40).frame_capacity == 40


# -- 3. predict's observations and R2D2's state -------------------------------------------------------
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_predict_and_act_refuse_a_non_finite_observation(bad):
    config = redq.Config(hidden_sizes=(8,), num_critics=2)
    policy = Policy("redq", redq.init(config, VEC, BOX, seed=0)["params"], config, BOX.low, BOX.high, (3,))
    obs = np.zeros((2, 3), np.float32)
    obs[1, 2] = bad
    for call in (lambda o: policy.predict(o), lambda o: policy.act(o), lambda o: policy.predict(torch.as_tensor(o))):
        with pytest.raises(ValueError) as exc:  # was: a NaN action for env 1
            call(obs)
        _one_sentence(exc, "Observation holds 1 NaN or infinite value", "finite observations")
    action, _ = policy.predict(np.zeros((2, 3), np.float32))
    assert np.isfinite(action).all()


def _r2d2_policy():
    config = r2d2.Config(encoder_sizes=(8,), lstm_size=8, head_sizes=(8,), burn_in=1, sequence_length=3, sequence_period=1)
    params = r2d2.init(config, VEC, gym.spaces.Discrete(3), seed=0)["params"]
    return Policy("r2d2", params, config, None, None, (3,))


@pytest.mark.parametrize("prev_action", [[0, 3], [-1, 0], [1.5, 0.0]])
def test_r2d2_predict_refuses_previous_actions_out_of_range(prev_action):
    """R2D2's predict state is (h, c, prev_action, prev_reward): the user passes the previous actions back,
    and 3 of 3 actions (or -1) was an all-zero one-hot, 1.5 silently action 1."""
    policy = _r2d2_policy()
    obs = np.zeros((2, 3), np.float32)
    _, state = policy.predict(obs)
    bad = (state[0], state[1], np.asarray(prev_action), state[3])
    with pytest.raises(ValueError) as exc:
        policy.predict(obs, bad, reward=np.zeros(2))
    _one_sentence(exc, "state[2]", "action indices from 0 to 2")
    ok = (state[0], state[1], np.array([2, 0]), state[3])
    action, new = policy.predict(obs, ok, reward=np.zeros(2))
    assert action.shape == (2,) and new[2].dtype == np.int64


def test_r2d2_predict_refuses_a_non_finite_state_or_reward():
    policy = _r2d2_policy()
    obs = np.zeros((2, 3), np.float32)
    _, state = policy.predict(obs)
    h = state[0].copy()
    h[0, 0] = np.nan
    with pytest.raises(ValueError) as exc:  # was: NaN Q-values, an arbitrary argmax
        policy.predict(obs, (h, *state[1:]), reward=np.zeros(2))
    _one_sentence(exc, "state[0] holds NaN or infinite values")
    with pytest.raises(ValueError) as exc:
        policy.predict(obs, state, reward=np.array([0.0, np.nan]))
    _one_sentence(exc, "reward must be finite")


# -- 4. evaluate's device with a Policy --------------------------------------------------------------
@pytest.mark.parametrize("device", ["gpu", "cuda:99", 3])
def test_evaluate_refuses_a_bad_device_with_a_policy(device):
    config = redq.Config(hidden_sizes=(8,), num_critics=2)
    policy = Policy("redq", redq.init(config, VEC, BOX, seed=0)["params"], config, BOX.low, BOX.high, (3,))
    try:  # an int is an index on the build's accelerator (a CUDA build of torch: cuda:3), else no device
        cuda_index = device != "gpu" and torch.device(device).type == "cuda"
    except (RuntimeError, TypeError, ValueError):
        cuda_index = False
    if cuda_index and not torch.cuda.is_available():
        fragment = "CUDA is not available"
    elif cuda_index:
        fragment = "does not exist"
    else:
        fragment = "device must be a torch device"
    with pytest.raises(ValueError) as exc:  # was: ignored (then "This policy does not know its env")
        rlfunc.evaluate(policy, episodes=1, env_id="Pendulum-v1", device=device)
    _one_sentence(exc, fragment)


# -- the replays' other counts go through the same check ----------------------------------------------------------


@pytest.mark.parametrize("make, name", [
    (lambda: SequenceReplay(8, "4"), "sequence_length"),
    (lambda: SequenceReplay(8, 4, 2.5), "num_envs"),
    (lambda: SequenceReplay(8, 4, period=True), "period"),
    (lambda: SumTree(8, fanout=0), "fanout"),
    (lambda: PopulationReplay("2", 8), "members"),
    (lambda: PixelReplay(16, (3, 8, 8), 1, frame_stack=1, nstep=1.5), "nstep"),
])
def test_replay_counts_besides_capacity_are_one_sentence(make, name):
    with pytest.raises(ValueError, match=rf"{name} must be an integer of at least 1, got "):
        make()
