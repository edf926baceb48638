"""Review of episode boundaries: termination vs truncation, autoreset, n-step returns, recurrent state.

The toy envs' observations encode where they are (``[tag, episode, t]``, a frame ``16 * episode + t``)
and rewards encode the step (``100 * episode + t + 1``), so every stored row, window, n-step target
and episode return below is compared with a number worked out by hand from the episode layout.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rlfunc.runtime.collector import Collector

torch.set_num_threads(1)


class StepEnv(gym.Env):
    """``obs = [tag, episode, t]``; the step from ``t`` pays ``100 * episode + t + 1``. Episode ``e``
    lasts ``lengths[e % len]`` steps and then terminates (``terminate[e % len]``) or truncates."""

    metadata = {"render_modes": []}

    def __init__(self, tag=0, lengths=(3,), terminate=(True,), discrete=True):
        self.tag, self.lengths, self.terminate = tag, list(lengths), list(terminate)
        self.observation_space = gym.spaces.Box(-1e6, 1e6, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(2) if discrete else gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.episode, self.t = -1, 0

    def _obs(self):
        return np.array([self.tag, self.episode, self.t], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode, self.t = self.episode + 1, 0
        return self._obs(), {}

    def step(self, action):
        reward = 100.0 * self.episode + self.t + 1
        self.t += 1
        done = self.t >= self.lengths[self.episode % len(self.lengths)]
        term = done and self.terminate[self.episode % len(self.terminate)]
        return self._obs(), reward, term, done and not term, {}


def _rows(rows):
    """``(env, (episode, t) of obs, (episode, t) of next_obs, reward, terminated, truncated)`` per row."""
    out = []
    for r in rows:
        o, no = r["obs"].tolist(), r["next_obs"].tolist()
        out.append((int(r["env_id"]), (int(o[1]), int(o[2])), (int(no[1]), int(no[2])), float(r["reward"]),
                    bool(r["terminated"]), bool(r["truncated"])))
    return out


# ---------------------------------------------------------------------------------------------- collector


@pytest.mark.parametrize("copy", [True, False])
def test_vector_collector_stores_the_true_next_observation_even_from_a_reused_buffer(copy):
    """Env 0 terminates after 2 steps, env 1 truncates after 3. Every row is (o_t, o_{t+1}) of one
    episode, the autoreset step is not stored, the truncated row's next_obs is the real last
    observation. ``copy=False``: gymnasium's vector env then hands out one buffer that the next step
    overwrites; the collector used to keep that buffer as the current observation, so every stored
    row read obs == next_obs."""
    venv = gym.vector.SyncVectorEnv(
        [lambda: StepEnv(0, (2,), (True,)), lambda: StepEnv(1, (3,), (False,))], copy=copy
    )
    c = Collector(venv, seed=0)
    c.reset(seed=0)
    got = [_rows(c.step(np.zeros(2, dtype=np.int64))[0]) for _ in range(5)]
    assert got == [
        [(0, (0, 0), (0, 1), 1.0, False, False), (1, (0, 0), (0, 1), 1.0, False, False)],
        [(0, (0, 1), (0, 2), 2.0, True, False), (1, (0, 1), (0, 2), 2.0, False, False)],
        [(1, (0, 2), (0, 3), 3.0, False, True)],  # env 0's autoreset step: no row
        [(0, (1, 0), (1, 1), 101.0, False, False)],  # env 1's autoreset step: no row
        [(0, (1, 1), (1, 2), 102.0, True, False), (1, (1, 0), (1, 1), 101.0, False, False)],
    ]


# ---------------------------------------------------------------------------------------------- n-step returns


def test_n_step_bootstrapped_returns_equal_a_brute_force_sum_over_padded_episode_ends():
    from rlfunc.core.returns import n_step_bootstrapped_returns

    gen = torch.Generator().manual_seed(0)
    for _ in range(60):
        T, B = int(torch.randint(1, 8, (), generator=gen)), 3
        n = int(torch.randint(1, 10, (), generator=gen))
        r = torch.randn(T, B, dtype=torch.float64, generator=gen)
        v = torch.randn(T, B, dtype=torch.float64, generator=gen)
        valid = torch.randint(1, T + 1, (B,), generator=gen)
        mask = torch.arange(T).unsqueeze(1) < valid.unsqueeze(0)
        term = torch.zeros(T, B, dtype=torch.bool)
        for b in range(B):  # the last valid step terminates or is cut (truncated / window end)
            term[valid[b] - 1, b] = bool(torch.rand((), generator=gen) < 0.5)
        d = 0.9 * (~term).double()
        got = n_step_bootstrapped_returns(r, d, v, n, mask)
        for b in range(B):
            L = int(valid[b])
            for t in range(L):
                last = min(t + n, L) - 1
                G, disc = 0.0, 1.0
                for k in range(t, last + 1):
                    G, disc = G + disc * float(r[k, b]), disc * float(d[k, b])
                G += disc * float(v[last, b])  # a truncated/cut end bootstraps from its own next value
                assert abs(G - float(got[t, b])) < 1e-9


def test_r2d2_loss_bootstraps_through_truncation_and_stops_at_termination_after_burn_in():
    """Windows cut from a vector env (env 0: 5 steps terminated, then 8 truncated; env 1: 7 truncated)
    by the sequence replay with the actor's carry before each window; every trained step's TD error
    equals h(n-step double-Q return with h^-1 bootstrap) - Q, unrolled step by step by hand from the
    stored carry, the return stopped at a termination and bootstrapped from the true last observation
    at a truncation or the window's end."""
    from rlfunc.algos import r2d2
    from rlfunc.core.returns import h, h_inv
    from rlfunc.replay.sequence import SequenceReplay

    torch.manual_seed(0)
    cfg = r2d2.Config(encoder_sizes=(8,), lstm_size=8, head_sizes=(8,), burn_in=2, sequence_length=4,
                      sequence_period=3, n_step=3, gamma=0.9)
    space = gym.spaces.Box(-1e6, 1e6, (3,), np.float32)
    state = r2d2.init(cfg, space, gym.spaces.Discrete(2), seed=0)
    params = state["params"]
    target = state["target"].apply(lambda x: x + 0.1 * torch.randn_like(x))
    venv = gym.vector.SyncVectorEnv([lambda: StepEnv(0, (5, 8), (True, False)), lambda: StepEnv(1, (7,), (False,))])
    c = Collector(venv, seed=0)
    c.reset(seed=0)
    T = cfg.burn_in + cfg.sequence_length
    rep = SequenceReplay(100, T, 2, period=cfg.sequence_period)
    carry = r2d2.initial_carry(cfg, 2)
    for _ in range(40):
        before = r2d2.prepare_carry(carry, reset=torch.as_tensor(c.episode_start))
        a, carry = r2d2.act(params, torch.as_tensor(c.obs) / 10, None, None, before, 0.5, torch.rand(2, 2))
        rows, _ = c.step(a.numpy())
        k, env = rows.batch_size[0], rows["env_id"]
        step = TensorDict({"obs": rows["obs"] / 10, "action": rows["action"].long(), "reward": rows["reward"] / 100,
                           "next_obs": rows["next_obs"] / 10, "terminated": rows["terminated"],
                           "truncated": rows["truncated"]}, [k])
        rep.add(step, r2d2.carry_to_td(before)[env], env_ids=env.numpy())
        carry = carry._replace(prev_reward=carry.prev_reward.index_put((env,), rows["reward"] / 100))
    n = len(rep)
    batch = rep.storage[:, :n].clone()
    batch["init_carry"] = rep._carry[:n].unsqueeze(0).expand(T, n)
    assert batch["terminated"].any() and batch["truncated"].any() and not batch["mask"].all()
    td = r2d2.loss(params, target, cfg, batch)[1]["td_error"]
    for w in range(n):
        L = int(batch["mask"][:, w].sum())
        ic = r2d2.carry_from_td(batch["init_carry"][0, w : w + 1])
        seq = torch.cat([batch["obs"][:1, w], batch["next_obs"][:, w]])
        prev_a = torch.cat([ic.prev_action, batch["action"][:, w]])
        prev_r = torch.cat([ic.prev_reward, batch["reward"][:, w]])

        def unroll(p):
            h_, c_, qs = ic.h, ic.c, []
            for t in range(T + 1):
                q, (h_, c_) = r2d2.q_step(p, seq[t : t + 1], r2d2.Carry(h_, c_, prev_a[t : t + 1], prev_r[t : t + 1]))
                qs.append(q[0])
            return torch.stack(qs)

        q_on, q_tg = unroll(params), unroll(target)
        for t in range(cfg.burn_in, L):
            last = min(t + cfg.n_step, L) - 1
            G, disc = 0.0, 1.0
            for j in range(t, last + 1):
                G, disc = G + disc * float(batch["reward"][j, w]), disc * cfg.gamma * (1.0 - float(batch["terminated"][j, w]))
            G += disc * float(h_inv(q_tg[last + 1][q_on[last + 1].argmax()]))
            want = float(h(torch.tensor(G))) - float(q_on[t][batch["action"][t, w]])
            assert abs(want - float(td[t - cfg.burn_in, w])) < 1e-4, (w, t)


# ---------------------------------------------------------------------------------------------- pixel replay


@pytest.mark.parametrize("capacity", [5, 7, 13])
def test_pixel_replay_nstep_targets_and_stacks_with_ring_wraps_match_hand_values(capacity):
    """Random episode lengths (1-8 steps), terminated or truncated, through a small ring: after every
    add, every valid start's stack, n-step reward, discount and next stack equal the hand values
    (stacks repeat the episode's first frame, windows stop at a termination with discount 0, a
    truncated episode's last n - 1 steps are no starts, no start reads an overwritten frame)."""
    from rlfunc.envs.pixels import FrameStack
    from rlfunc.replay.pixels import PixelReplay

    S, n, gamma = 3, 3, 0.5
    rep = PixelReplay(capacity, (S, 1, 1), 1, frame_stack=S, nstep=n, gamma=gamma)
    rng = np.random.default_rng(0)
    where: dict[int, tuple[int, int, int, bool]] = {}  # absolute slot of o_t -> (episode, t, length, terminated)

    def frame(e, t):
        return np.array([[[(16 * e + t) % 256]]], np.uint8)

    checked = 0
    for e in range(15):
        L, term = int(rng.integers(1, 9)), bool(rng.integers(0, 2))
        stack = FrameStack(S)
        obs, base = stack.reset(frame(e, 0)), rep._written
        for t in range(L):
            nxt = stack.push(frame(e, t + 1))
            last = t + 1 == L
            rep.add(obs, np.array([t], np.float32), float(10 * e + t + 1), nxt, last and term, last and not term)
            where[base + t] = (e, t, L, term)
            obs = nxt
            for g in range(max(0, rep._written - capacity), rep._written):
                if not rep.valid[g % capacity]:
                    continue
                ee, tt, LL, tterm = where[g]
                assert tt + n <= LL or tterm  # a truncated episode's last n - 1 steps are no starts
                assert ee < e or min(tt + n, LL) <= t + 1  # the running episode's window is complete
                b = rep.gather(torch.tensor([g]))
                m = min(n, LL - tt)
                assert b["reward"].item() == pytest.approx(sum(gamma**k * (10 * ee + tt + k + 1) for k in range(m)))
                assert b["discount"].item() == (0.0 if tterm and tt + n >= LL else gamma**n)
                nt = min(tt + n, LL)
                assert b["obs"].reshape(-1).tolist() == [(16 * ee + max(tt - j, 0)) % 256 for j in (2, 1, 0)]
                assert b["next_obs"].reshape(-1).tolist() == [(16 * ee + max(nt - j, 0)) % 256 for j in (2, 1, 0)]
                assert b["action"].item() == tt
                checked += 1
    assert checked > 50


# ---------------------------------------------------------------------------------------------- recurrent acting


@pytest.mark.parametrize("num_envs", [1, 3])
def test_r2d2_actor_carry_is_zero_exactly_at_episode_starts_and_windows_store_their_own_episodes_state(num_envs):
    """Counting env (obs ``[episode, t]``, reward ``t``), truncated at t = 9, one env (lazy reset) or a
    vector env (next-step autoreset): the carry each env acts from is zero (LSTM state, previous
    action and reward) exactly where its observation is an episode's first, and every stored window
    is consecutive steps of one episode, bootstrapping (not terminated) at the truncation, with the
    carry before its first step (previous reward = t - 1's reward = t)."""
    from helpers_envs import register
    from rlfunc.envs import env_spaces, make_env, make_vector_env
    from rlfunc.runtime.config import apply_overrides, build_config, load_config
    from rlfunc.runtime.registry import get_algo

    register()
    sets = {
        "agent.lstm_size": 8, "agent.encoder_sizes": [8], "agent.head_sizes": [8], "agent.burn_in": 2,
        "agent.sequence_length": 4, "agent.sequence_period": 3, "agent.batch_size": 4, "train.learning_starts": 10,
        "train.replay_size": 200, "train.progress": False, "train.compile": False, "env.num_envs": num_envs,
        "env.id": "rlfunc_test/Counting-v0", "env.kwargs": {"term_at": None, "trunc_at": 9, "discrete": True},
        "env.wrappers": [],
    }
    cfg = build_config(apply_overrides(load_config("configs/r2d2/cartpole_novel.yaml"), sets))
    env = make_env(cfg.env.id, kwargs=cfg.env.kwargs) if num_envs == 1 else make_vector_env(cfg.env.id, num_envs, kwargs=cfg.env.kwargs)
    learner = get_algo(cfg.algo).make_learner(cfg, *env_spaces(env))
    c = Collector(env, seed=0)
    c.reset(seed=0)
    env_step = 0
    for _ in range(60):
        obs, start = c.obs, c.episode_start
        assert np.array_equal(start, obs[:, 1] == 0)  # a vector env's autoreset step shows the last obs, not a start
        actions = learner.explore(obs, env_step, episode_start=start)
        before = learner._carry_before
        for i in range(num_envs):
            zero = not before.h[i].any() and not before.c[i].any() and before.prev_action[i] == 0 and before.prev_reward[i] == 0
            assert zero == bool(start[i])
        rows, _ = c.step(actions)
        learner.observe(rows)
        env_step += rows.batch_size[0]
    rb = learner.replay
    st, carry = rb.storage, rb._carry
    assert len(rb) >= 10
    for w in range(len(rb)):
        L = int(st["mask"][:, w].sum())
        ep, t = st["obs"][:L, w, 0], st["obs"][:L, w, 1]
        assert (ep == ep[0]).all() and torch.equal(t, t[0] + torch.arange(L, dtype=t.dtype))
        assert torch.equal(st["next_obs"][:L, w, 1], t + 1) and (st["next_obs"][:L, w, 0] == ep[0]).all()
        assert not st["terminated"][:, w].any()
        assert torch.equal(st["truncated"][:L, w], t + 1 == 9)
        assert float(carry["prev_reward"][w]) == float(t[0])
        assert bool(carry["h"][w].any()) == bool(t[0] > 0)


# ---------------------------------------------------------------------------------------------- evaluation


def test_lockstep_evaluation_counts_each_episode_with_time_limits_and_staggered_ends():
    """Three envs whose episodes end at different steps (termination, truncation by the env, by a
    TimeLimit wrapper): each env's returns are its own episodes' sums, reset between episodes; an env
    that has run its episodes leaves the batch."""
    from rlfunc.runtime.evaluate import run_episodes, run_episodes_together

    def ret(e, L):
        return float(sum(100 * e + t + 1 for t in range(L)))

    envs = [gym.wrappers.TimeLimit(StepEnv(0, (2, 9), (True, False)), 4), StepEnv(1, (5, 1, 3), (False, True, True)),
            StepEnv(2, (1,), (True,))]
    running_sizes = []

    def act(obs, running):
        assert obs.shape == (len(running), 1, 3)
        assert [int(o[0, 0]) for o in obs] == list(running)
        running_sizes.append(len(running))
        return np.zeros((len(running), 1), dtype=np.int64)

    got = run_episodes_together(act, envs, 3, [0, 10, 20])
    assert got == [[ret(0, 2), ret(1, 4), ret(2, 2)], [ret(0, 5), ret(1, 1), ret(2, 3)], [ret(0, 1), ret(1, 1), ret(2, 1)]]
    assert running_sizes == [3, 3, 3, 2, 2, 2, 2, 2, 1]  # env 2 done after 3 steps, env 0 after 8, env 1 after 9

    class Recorder:
        def __init__(self):
            self.resets, self.rewards = 0, []

        def reset(self, n):
            self.resets += 1

        def act_normalized(self, obs, deterministic=None):
            return 0

        def observe_reward(self, r):
            self.rewards.append(r)

    p = Recorder()
    assert run_episodes(p, gym.wrappers.TimeLimit(StepEnv(0, (2, 9), (True, False)), 4), 3, seed=0) == [
        ret(0, 2), ret(1, 4), ret(2, 2)
    ]
    assert p.resets == 3 and len(p.rewards) == 8


# ---------------------------------------------------------------------------------------------- found, not fixed here


class _InPlaceBox(gym.Env):
    """Continuous toy env that returns one float32 buffer, updated in place (gymnasium warns but allows it)."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(-1e9, 1e9, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.buf, self.ep, self.t = np.zeros(2, np.float32), -1, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.ep, self.t = self.ep + 1, 0
        self.buf[:] = (self.ep, 0)
        return self.buf, {}

    def step(self, action):
        self.t += 1
        self.buf[:] = (self.ep, self.t)
        return self.buf, 1.0, False, self.t >= 4, {}


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_dataset_collect_stores_the_true_observations_of_an_in_place_env(tmp_path):
    from rlfunc.runtime.dataset import collect

    if "rlfunc_review/InPlaceBox-v0" not in gym.registry:
        gym.register("rlfunc_review/InPlaceBox-v0", entry_point=_InPlaceBox)
    collect(str(tmp_path / "d.npz"), env_id="rlfunc_review/InPlaceBox-v0", steps=6, policy="random")
    d = np.load(tmp_path / "d.npz")
    assert d["observations"].tolist() == [[0, 0], [0, 1], [0, 2], [0, 3], [1, 0], [1, 1]]
    assert d["next_observations"].tolist() == [[0, 1], [0, 2], [0, 3], [0, 4], [1, 1], [1, 2]]
    assert d["timeouts"].tolist() == [False, False, False, True, False, False]


@pytest.mark.parametrize("population", [False, True], ids=["single", "population"])
def test_a_resumed_vector_env_run_ends_where_the_uninterrupted_one_does(tmp_path, population):
    """With ``env.num_envs > 1`` a resume from an episode boundary was not bit-exact (24 parameter tensors
    differed, the first replay row after the resume): the uninterrupted run's next step is the autoreset
    step, whose act spends the policy's draws, and the resumed run reset at once and skipped it."""
    import rlfunc
    from rlfunc.runtime.checkpoint import load_checkpoint

    config = {
        "algo": "dqn",
        "env": {"id": "rlfunc/CueMemory-v0", "num_envs": 2, "kwargs": {"delay": 5}},  # every episode: 6 steps
        "train": {"total_steps": 240, "learning_starts": 36, "replay_size": 500, "eval_every": 120, "eval_episodes": 1,
                  "checkpoint_every": 120, "log_every": 60, "progress": False, "tensorboard": False, "threads": 1},
        "agent": {"encoder_sizes": [16], "batch_size": 8, "target_period": 10, "eps_decay_steps": 200, "train_every": 2},
    }
    if population:  # two members, each with its two envs in the population's one vector env
        config["train"]["population"] = {"seeds": [0, 1]}
    straight, cut = tmp_path / "straight", tmp_path / "cut"
    rlfunc.train(config, run_dir=straight)
    rlfunc.train({**config, "train": {**config["train"], "total_steps": 120}}, run_dir=cut)
    rlfunc.resume(cut, total_steps=240)
    a, b = load_checkpoint(straight / "checkpoints" / "step_000000240")[0], load_checkpoint(cut / "checkpoints" / "step_000000240")[0]
    keys = set(a.keys(True, True))
    assert keys == set(b.keys(True, True))
    assert [k for k in sorted(keys, key=str) if not torch.equal(a[k], b[k])] == []
