"""Review of the env -> collector -> replay data path: hand-checkable toy envs.

Each toy observation is ``[episode, t]``, so a stored row that crosses a reset,
or whose ``next_obs`` is a reset observation, is visible at once.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from rlfunc.envs.pixels import PixelObservation
from rlfunc.runtime.collector import Collector
from rlfunc.runtime.learners.base import TransitionLearner
from rlfunc.runtime.population_collector import PopulationCollector


class Counter(gym.Env):
    """``obs = [episode, t]``, reward ``t``; terminates at ``t == term_at`` (if set)."""

    def __init__(self, term_at: int | None = None) -> None:
        self.observation_space = gym.spaces.Box(-1e9, 1e9, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.term_at, self.ep, self.t = term_at, -1, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.ep, self.t = self.ep + 1, 0
        return np.array([self.ep, 0], np.float32), {}

    def step(self, action):
        self.t += 1
        term = self.term_at is not None and self.t >= self.term_at
        return np.array([self.ep, self.t], np.float32), float(self.t), term, False, {}


class InPlace(Counter):
    """The same observation buffer every step, updated in place (gymnasium allows it)."""

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed)
        self.buf = obs
        return self.buf, info

    def step(self, action):
        obs, r, term, trunc, info = super().step(action)
        self.buf[:] = obs
        return self.buf, r, term, trunc, info


def _make(term_at=None, limit=None, cls=Counter):
    env = cls(term_at)
    return gym.wrappers.TimeLimit(env, limit) if limit else env


def _check_rows(rows) -> None:
    """Every row stays in one episode and ``next_obs`` is the step after ``obs`` (never a reset obs)."""
    o, no = rows["obs"], rows["next_obs"]
    assert torch.equal(o[:, 0], no[:, 0]), "a stored row crosses a reset"
    assert torch.equal(no[:, 1], o[:, 1] + 1), "next_obs is not the true next observation"


def test_single_env_rows_do_not_alias_an_in_place_observation_buffer():
    c = Collector(_make(3, cls=InPlace))
    rows = torch.cat([c.step(np.zeros(1, np.int64))[0] for _ in range(7)])
    _check_rows(rows)
    assert rows["terminated"].tolist() == [False, False, True] * 2 + [False]


def test_flags_and_returns_for_termination_truncation_and_both():
    # (term_at, limit, flags at the episode's last step, length)
    for term_at, limit, last, length in [(3, None, (True, False), 3), (None, 4, (False, True), 4), (4, 4, (True, True), 4)]:
        for n in (1, 2):
            env = _make(term_at, limit) if n == 1 else gym.vector.SyncVectorEnv([lambda: _make(term_at, limit)] * n)
            c = Collector(env, seed=0)
            out, finished = [], []
            for _ in range(3 * length + 2):
                rows, f = c.step(np.zeros(n, np.int64))
                out.append(rows)
                finished += f
            rows = torch.cat(out)
            _check_rows(rows)  # no autoreset step stored, true final observation after a truncation
            ends = rows["terminated"] | rows["truncated"]
            assert torch.equal(ends, rows["next_obs"][:, 1] == length)
            assert rows["terminated"][ends].all() == last[0] and rows["truncated"][ends].all() == last[1]
            assert finished and all(f[1:] == (length * (length + 1) / 2, length) for f in finished)
            stored = TransitionLearner._stored(rows)  # bootstrap through truncation only
            assert torch.equal(stored["terminated"].bool(), rows["terminated"])


def test_population_members_ending_at_different_times_store_no_autoreset_step():
    for vector, n in ((False, 1), (True, 1), (True, 2)):
        fns = [[(lambda k=k, i=i: _make(3 + k + i, 4 + 2 * k)) for i in range(n)] for k in range(3)]
        pc = PopulationCollector(fns, vector=vector)
        pc.reset([0, 1, 2])
        out, finished = [], [[] for _ in range(3)]
        for s in range(20):
            rows, counts, fin = pc.step([None if (k == 2 and s > 10) else np.zeros(n, np.int64) for k in range(3)])
            assert int(counts.sum()) == rows.batch_size[0]
            out.append(rows)
            for k in range(3):
                finished[k] += fin[k]
        _check_rows(torch.cat(out))
        for k in range(3):
            for i, ret, length in finished[k]:
                assert length == min(3 + k + i, 4 + 2 * k) and ret == length * (length + 1) / 2


class Rendered(gym.Env):
    """Renders ``[episode, t]`` into pixel (0, 0); reward ``t``; terminates at ``t == 5``."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, render_mode="rgb_array"):
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(0, 1, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.ep, self.t = 0, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.ep, self.t = self.ep + 1, 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(1, np.float32), float(self.t), self.t >= 5, False, {}

    def render(self):
        frame = np.ones((8, 8, 3), np.uint8)
        frame[0, 0, :2] = (self.ep, self.t)
        return frame


def test_pixels_action_repeat_sums_rewards_stops_at_the_end_and_restacks_after_reset():
    def mk():
        return PixelObservation(Rendered(), size=8, frame_stack=3, action_repeat=3)

    for n in (1, 2):
        env = mk() if n == 1 else gym.vector.SyncVectorEnv([mk] * n)
        c = Collector(env)
        rows = torch.cat([c.step(np.zeros(n, np.int64))[0] for _ in range(6)])
        ep = lambda x: x[:, 0::3, 0, 0]  # noqa: E731 -- episode of each stacked frame
        t = lambda x: x[:, 1::3, 0, 0]  # noqa: E731
        assert (ep(rows["obs"]) == ep(rows["next_obs"])[:, :1]).all(), "a frame of another episode in the stack"
        assert (ep(rows["next_obs"]) == ep(rows["next_obs"])[:, :1]).all()
        first = t(rows["obs"]).sum(1) == 0
        assert torch.equal(t(rows["next_obs"])[first], torch.tensor([[0, 0, 3]] * int(first.sum()), dtype=torch.uint8))
        assert torch.equal(t(rows["next_obs"])[~first], torch.tensor([[0, 3, 5]] * int((~first).sum()), dtype=torch.uint8))
        assert torch.equal(rows["reward"], torch.where(first, 6.0, 9.0))  # 1+2+3, then 4+5 (stopped at t = 5)
        assert torch.equal(rows["terminated"], ~first) and not rows["truncated"].any()
