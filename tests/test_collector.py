"""The collector stores terminated/truncated correctly and never the autoreset step."""

import gymnasium as gym
import numpy as np

from helpers_envs import CountingEnv
from rlfunc.runtime.collector import Collector


def test_single_env_terminated_and_truncated():
    env = CountingEnv(term_at=None, trunc_at=3)
    col = Collector(env, seed=0)
    col.reset(seed=0)
    rows = [col.step(np.zeros((1, 1)))[0] for _ in range(7)]
    trunc = [bool(r["truncated"][0]) for r in rows]
    term = [bool(r["terminated"][0]) for r in rows]
    assert trunc == [False, False, True, False, False, True, False]
    assert not any(term)
    # next_obs of the truncated step is the real final obs, not the reset obs
    assert rows[2]["next_obs"][0].tolist() == [0.0, 3.0]
    assert rows[3]["obs"][0].tolist() == [1.0, 0.0]

    env = CountingEnv(term_at=2)
    col = Collector(env)
    col.reset(seed=0)
    r1, r2 = col.step(np.zeros((1, 1)))[0], col.step(np.zeros((1, 1)))[0]
    assert not bool(r1["terminated"][0]) and bool(r2["terminated"][0])
    assert col.episodes == 1


def test_vector_env_next_step_autoreset_is_not_stored():
    envs = gym.vector.SyncVectorEnv([lambda: CountingEnv(term_at=2), lambda: CountingEnv(term_at=3)])
    col = Collector(envs)
    col.reset(seed=0)
    stored = []
    for _ in range(6):
        rows, _ = col.step(np.zeros((2, 1), dtype=np.float32))
        stored.extend(zip(rows["env_id"].tolist(), rows["obs"].tolist(), rows["next_obs"].tolist(), rows["terminated"].tolist()))
    for env_id, obs, next_obs, _ in stored:
        # every stored transition stays inside one episode: same episode id, t -> t+1
        assert obs[0] == next_obs[0], (env_id, obs, next_obs)
        assert next_obs[1] == obs[1] + 1
    env0 = [s for s in stored if s[0] == 0]
    # env 0: episode of 2 steps, one autoreset step skipped, 2 steps -> 4 stored of 6 calls
    assert len(env0) == 4
    assert [s[3] for s in env0] == [False, True, False, True]
    env1 = [s for s in stored if s[0] == 1]
    assert len(env1) == 5  # 3 steps, skip 1, 2 more


def test_episode_returns_reported():
    col = Collector(CountingEnv(term_at=3))
    col.reset(seed=0)
    finished = []
    for _ in range(3):
        finished += col.step(np.zeros((1, 1)))[1]
    assert finished == [(0, 6.0, 3)]


def test_episode_start_flags():
    col = Collector(CountingEnv(term_at=2))
    col.reset(seed=0)
    starts = []
    for _ in range(4):
        starts.append(bool(col.episode_start[0]))
        col.step(np.zeros((1, 1)))
    assert starts == [True, False, True, False]
    envs = gym.vector.SyncVectorEnv([lambda: CountingEnv(term_at=2)])
    col = Collector(envs)
    col.reset(seed=0)
    starts = []
    for _ in range(6):
        starts.append(bool(col.episode_start[0]))
        col.step(np.zeros((1, 1), dtype=np.float32))
    # step 2 is the autoreset step: its returned obs starts episode 2
    assert starts == [True, False, False, True, False, False]
