"""Review of what the public docstrings claim, checked from a researcher's script (session 32).

* ``UniformReplay.add`` / ``SequenceReplay.add`` / ``PopulationReplay.add_rows``: rows whose keys,
  per-row shapes or dtypes differ from the first add's were taken silently -- a missing key left
  the slot's old value in place (sampled as data), a new key grew the storage with zeros in every
  other slot -- or failed deep inside tensor indexing. Now one ``ValueError`` sentence, nothing written.
* ``drqv2.act``: ``noise`` is documented ``[B, A]``; noise drawn for another batch (``[1, A]`` for
  ``B`` envs) broadcast silently, every env taking the same draw.
* ``r2d2.act``: a carry for another number of envs was torch's ``RuntimeError`` from ``torch.cat``
  deep inside the embedding; now one sentence naming the carry (DRQN's act already said so).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rlfunc.algos import drqn, drqv2, r2d2
from rlfunc.replay.population import PopulationReplay
from rlfunc.replay.sequence import SequenceReplay
from rlfunc.replay.uniform import UniformReplay


def _one_sentence(exc: pytest.ExceptionInfo, *fragments: str) -> None:
    msg = str(exc.value)
    assert msg.count("\n") == 0 and msg.endswith("."), msg
    for f in fragments:
        assert f in msg, msg


def _rows(**values) -> TensorDict:
    n = next(iter(values.values())).shape[0]
    return TensorDict(values, batch_size=[n])


@pytest.mark.parametrize(
    "later, fragment",
    [
        ({"y": torch.tensor([5.0])}, "lack ['x']"),  # was: size 3, x of the new slot stale, storage grew 'y'
        ({"x": torch.tensor([5.0]), "y": torch.tensor([5.0])}, "have keys ['y']"),
        ({"x": torch.tensor([5])}, "torch.int64"),
        ({"x": torch.ones(1, 2)}, "per-row shape [2]"),
    ],
)
def test_uniform_replay_refuses_rows_of_another_layout_and_writes_nothing(later, fragment):
    replay = UniformReplay(3)
    replay.add(_rows(x=torch.tensor([1.0, 2.0])))
    with pytest.raises(ValueError) as exc:
        replay.add(_rows(**later))
    _one_sentence(exc, "UniformReplay.add", fragment)
    assert len(replay) == 2 and list(replay.storage.keys()) == ["x"]
    assert replay.storage["x"].tolist() == [1.0, 2.0, 0.0]
    replay.add(_rows(x=torch.tensor([3.0])))  # the layout of the first add still goes in
    assert len(replay) == 3 and replay.storage["x"].tolist() == [1.0, 2.0, 3.0]


def _step(**values) -> TensorDict:
    return TensorDict({"terminated": torch.tensor([False]), "truncated": torch.tensor([False]), **values}, [1])


@pytest.mark.parametrize(
    "later, fragment",
    [
        ({"y": torch.tensor([2.0])}, "lack ['x']"),
        ({"x": torch.tensor([[2.0, 3.0]])}, "per-row shape [2]"),
    ],
)
def test_sequence_replay_refuses_steps_of_another_layout(later, fragment):
    replay = SequenceReplay(4, 2, 1)
    replay.add(_step(x=torch.tensor([1.0])))
    with pytest.raises(ValueError) as exc:
        replay.add(_step(**later))
    _one_sentence(exc, "SequenceReplay.add", fragment)
    assert "y" not in replay.storage.keys()
    replay.add(_step(x=torch.tensor([2.0])))
    assert len(replay) == 1 and replay.sample(1)["x"][:, 0].tolist() == [1.0, 2.0]


def test_sequence_replay_refuses_a_carry_of_another_layout():
    replay = SequenceReplay(4, 2, 1)
    replay.add(_step(x=torch.tensor([1.0])), carry={"h": torch.zeros(1, 3)})
    with pytest.raises(ValueError) as exc:
        replay.add(_step(x=torch.tensor([2.0])), carry={"h": torch.zeros(1, 4)})
    _one_sentence(exc, "carry", "per-row shape [4]")


def test_population_replay_refuses_rows_of_another_layout():
    replay = PopulationReplay(2, 3)
    replay.add_rows([1, 1], _rows(x=torch.tensor([1.0, 2.0])))
    with pytest.raises(ValueError) as exc:
        replay.add_rows([1, 0], _rows(y=torch.tensor([3.0])))
    _one_sentence(exc, "PopulationReplay.add", "lack ['x']")
    assert replay.sizes == [1, 1]


def _drqv2():
    config = drqv2.Config(encoder_channels=(4,), encoder_strides=(2,), feature_dim=8, hidden_dim=16, pad=1, frame_stack=2)
    state = drqv2.init(config, gym.spaces.Box(0, 255, (6, 12, 12), np.uint8), gym.spaces.Box(-1, 1, (2,)), seed=0)
    return config, state["params"]


def test_drqv2_act_refuses_noise_drawn_for_another_batch():
    config, params = _drqv2()
    obs = torch.randint(256, (4, 6, 12, 12), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError) as exc:  # was: [4, 2] actions, all four envs with the one draw
        drqv2.act(params, obs, torch.zeros(1, 2), config=config)
    _one_sentence(exc, "drqv2.act", "noise", "[B, A] = [4, 2]", "[1, 2]")
    noise = torch.randn(4, 2, generator=torch.Generator().manual_seed(1))
    assert drqv2.act(params, obs, noise, config=config).shape == (4, 2)
    one = drqv2.act(params, obs[0], noise[0], config=config)  # unbatched obs and noise [A], as before
    assert one.shape == (2,) and torch.equal(one, drqv2.act(params, obs[:1], noise[:1], config=config)[0])


def test_r2d2_act_refuses_a_carry_for_another_number_of_envs():
    config = r2d2.Config(encoder_sizes=(8,), lstm_size=8, head_sizes=(8,), burn_in=1, sequence_length=3, sequence_period=1)
    params = r2d2.init(config, gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3), seed=0)["params"]
    with pytest.raises(ValueError) as exc:  # was: RuntimeError "Sizes of tensors must match ..."
        r2d2.act(params, torch.zeros(3, 4), None, None, r2d2.initial_carry(config, 2), 0.0)
    _one_sentence(exc, "carry.prev_action", "[B] = [3]", "[2]")
    action, carry = r2d2.act(params, torch.zeros(1, 4), None, None, r2d2.initial_carry(config, 1), 0.0)
    assert action.shape == (1,) and carry.h.shape == (1, 8)


def test_documented_purity_and_metrics_of_the_recurrent_updates():
    """Claims that held (kept as a regression check): ``update`` leaves the state (values and
    storage, optimizer moments included) and the batch untouched, gives bit-identical results
    twice, and returns the documented metrics (R2D2's now list ``lr``)."""
    T, B = 4, 8
    gen = torch.Generator().manual_seed(0)
    config = r2d2.Config(encoder_sizes=(8,), lstm_size=8, head_sizes=(8,), burn_in=1, sequence_length=3,
                         sequence_period=1, n_step=2, target_period=1)
    state = r2d2.init(config, gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), seed=0)
    state, _ = r2d2.update(state, _window(config, T, B, gen))  # non-zero Adam moments
    batch = _window(config, T, B, gen)
    before = {k: (v.clone(), v.data_ptr()) for k, v in (*state.items(True, True), *batch.items(True, True))}
    s1, m1 = r2d2.update(state, batch)
    s2, m2 = r2d2.update(state, batch)
    for key, (value, ptr) in before.items():
        src = state if key in state.keys(True, True) else batch
        assert torch.equal(src[key], value) and src[key].data_ptr() == ptr, key
    assert all(torch.equal(s1[k], s2[k]) for k in s1.keys(True, True))
    assert set(m1.keys()) == {"loss", "q", "td_abs", "valid_fraction", "grad_norm", "lr", "priority_mean", "priorities"}
    assert m1["priorities"].shape == (B,) and all(m1[k].dim() == 0 for k in m1.keys() if k != "priorities")
    dconfig = drqn.Config(encoder_sizes=(8,), lstm_size=8, sequence_length=T)
    dstate = drqn.init(dconfig, gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), seed=0)
    _, dm = drqn.update(dstate, batch.exclude("init_carry", "weight"))
    assert set(dm.keys()) == {"loss", "q", "td_abs", "valid_fraction", "grad_norm", "lr"}


def _window(config, T, B, gen):
    return TensorDict({
        "obs": torch.randn(T, B, 4, generator=gen), "action": torch.randint(2, (T, B), generator=gen),
        "reward": torch.randn(T, B, generator=gen), "next_obs": torch.randn(T, B, 4, generator=gen),
        "terminated": torch.zeros(T, B, dtype=torch.bool), "mask": torch.ones(T, B, dtype=torch.bool),
        "init_carry": r2d2.carry_to_td(r2d2.initial_carry(config, B)).expand(T, B).clone(),
        "weight": torch.rand(B, generator=gen).expand(T, B).clone(),
    }, batch_size=[T, B])


def test_a_frame_replay_refuses_a_mismatched_add_before_writing_its_frames():
    """FrameSequenceReplay wrote an add's frames to its ring before SequenceReplay.add refused the rows
    (another key or dtype): the refused add left frames no window reads. It is refused first now."""
    from rlfunc.replay.frame_sequence import FrameSequenceReplay

    r = FrameSequenceReplay(8, 2, num_envs=1, frame_capacity=64)

    def step(**extra):
        td = {"obs": torch.zeros(1, 3), "next_obs": torch.ones(1, 3), "action": torch.zeros(1, dtype=torch.int64),
              "reward": torch.zeros(1), "terminated": torch.zeros(1, dtype=torch.bool),
              "truncated": torch.zeros(1, dtype=torch.bool), **extra}
        return TensorDict(td, batch_size=[1])

    r.add(step())
    written = r._frames_written
    with pytest.raises(ValueError, match="SequenceReplay.add: the added rows"):
        r.add(step(bonus=torch.zeros(1)))
    with pytest.raises(ValueError, match="dtype"):
        r.add(step(reward=torch.zeros(1, dtype=torch.float64)))
    assert r._frames_written == written  # nothing entered the ring
    r.add(step())
    assert r._frames_written == written + 1
