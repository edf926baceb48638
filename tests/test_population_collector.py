"""One vector env for every member of a population (#24 §5): member k sees, step for step, what
its single run's Collector sees: observations, episode starts, stored rows, ended episodes, env
RNG states for checkpoints, and the episodes drawn after a restore."""

import numpy as np
import pytest
import torch

from rlfunc.envs import env_fns, make_env, make_vector_env
from rlfunc.runtime.collector import Collector
from rlfunc.runtime.population_collector import PopulationCollector

SEEDS = [0, 5, 9]
ENV = "CartPole-v1"  # random actions end its episodes every ~20 steps: many resets in a short test


def _pair(num_envs: int):
    pop = PopulationCollector([env_fns(ENV, num_envs) for _ in SEEDS], vector=num_envs > 1)
    singles = [Collector(make_env(ENV) if num_envs == 1 else make_vector_env(ENV, num_envs), seed=s) for s in SEEDS]
    pop.reset(SEEDS)
    for c, s in zip(singles, SEEDS):
        c.reset(seed=s)
    return pop, singles


def _equal_rows(a, b) -> None:
    assert set(a.keys()) == set(b.keys())
    for key in a.keys():
        assert a[key].dtype == b[key].dtype, key
        assert torch.equal(a[key], b[key]), key


def _step_both(pop, singles, rng, active=None):
    """One step of every member (``active``: those that act; the others pass None) in both."""
    n = pop.num_envs
    actions = [rng.integers(0, 2, size=n) if active is None or k in active else None for k in range(len(singles))]
    for k, c in enumerate(singles):
        if actions[k] is not None:  # a finished member's envs step on (zero actions, rows dropped): not compared
            assert np.array_equal(pop.obs(k), c.obs)
            assert np.array_equal(pop.episode_start(k), c.episode_start)
    if active is None:
        assert np.array_equal(pop.all_obs(), np.stack([c.obs for c in singles]))
    rows, counts, finished = pop.step(actions)
    start = 0
    for k, c in enumerate(singles):
        if actions[k] is None:
            assert counts[k] == 0 and finished[k] == []
            continue
        want, want_finished = c.step(actions[k])
        _equal_rows(rows[start : start + counts[k]], want)
        assert finished[k] == want_finished
        assert pop.episodes[k] == c.episodes
        start += counts[k]
    assert start == rows.batch_size[0]
    return finished


@pytest.mark.parametrize("num_envs", [1, 2])
def test_members_step_as_their_single_collectors(num_envs):
    """One env per member (lazy reset: every step stores a row) and a vector env per member
    (next-step autoreset: the step after an episode ended stores none) over many episodes."""
    pop, singles = _pair(num_envs)
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(150):
        ended += sum(len(f) for f in _step_both(pop, singles, rng))
    assert ended > 3 * len(SEEDS)
    if num_envs > 1:  # a member that has finished passes None: no rows for it, the others go on as before
        for _ in range(30):
            _step_both(pop, singles, rng, active={0, 2})


@pytest.mark.parametrize("num_envs", [1, 2])
def test_checkpointed_env_rngs_restore_the_single_runs_episodes(num_envs):
    """rng_state(k) is the single Collector's rng_state (one env: before the lazy reset of an ended
    episode, so the resumed run draws the episode the uninterrupted one draws), and restore starts
    every member's next episodes as its single Collector's restore does."""
    pop, singles = _pair(num_envs)
    rng = np.random.default_rng(1)
    while not any(_step_both(pop, singles, rng)):  # stop right after an episode ended
        pass
    states = [pop.rng_state(k) for k in range(len(SEEDS))]
    assert states == [c.rng_state() for c in singles]
    expected = [c.obs for c in singles]  # one env: the ended one is reset here, from the saved RNG
    fresh = PopulationCollector([env_fns(ENV, num_envs) for _ in SEEDS], vector=num_envs > 1)
    fresh.restore(states)
    restored = [Collector(make_env(ENV) if num_envs == 1 else make_vector_env(ENV, num_envs), seed=s) for s in SEEDS]
    for c, st in zip(restored, states):
        c.restore(st)
    for k, c in enumerate(restored):
        assert np.array_equal(fresh.obs(k), c.obs)
    if num_envs == 1:  # the members whose episode had just ended draw the same next episode as before the save
        for k, c in enumerate(singles):
            if c.episode_start.all():
                assert np.array_equal(fresh.obs(k), expected[k])
    for _ in range(40):
        _step_both(fresh, restored, rng)


def test_errors_are_one_sentence():
    with pytest.raises(ValueError, match="same number"):
        PopulationCollector([env_fns(ENV, 1), env_fns(ENV, 2)], vector=True)
    with pytest.raises(ValueError, match="num_envs=1"):
        PopulationCollector([env_fns(ENV, 2)], vector=False)
    pop = PopulationCollector([env_fns(ENV, 1) for _ in SEEDS], vector=False)
    with pytest.raises(RuntimeError, match="reset"):
        pop.step([np.zeros(1, dtype=np.int64)] * len(SEEDS))
    pop.reset(SEEDS)
    with pytest.raises(ValueError, match="every member's actions"):
        pop.step([np.zeros(1, dtype=np.int64)])
    with pytest.raises(ValueError, match="at least one member"):
        pop.step([None] * len(SEEDS))
    with pytest.raises(ValueError, match="original env.num_envs"):
        pop.restore([[{}, {}]] * len(SEEDS))
