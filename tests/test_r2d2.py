"""R2D2 pure pieces: loss by hand, burn-in (no loss, no gradient), stored state, acting, update, compile."""

import gymnasium as gym
import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rlfunc.algos import r2d2
from rlfunc.core import returns

torch.set_num_threads(1)

OBS = gym.spaces.Box(-1.0, 1.0, (2,))
ACT = gym.spaces.Discrete(3)
BURN, TRAIN = 2, 4
L = BURN + TRAIN


def _tiny(**overrides):
    values = dict(
        encoder_sizes=(4,),
        lstm_size=3,
        head_sizes=(5,),
        burn_in=BURN,
        sequence_length=TRAIN,
        sequence_period=2,
        n_step=2,
        gamma=0.9,
        target_period=3,
        batch_size=3,
    )
    values.update(overrides)
    return r2d2.Config(**values)


def _batch(B=3, seed=0, H=3, A=3, O=2):
    """[L=6, B] windows: col 0 runs on, col 1 terminates at t=3, col 2 is truncated at t=4; zero padding after."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(L, B, O, generator=g)
    next_obs = torch.randn(L, B, O, generator=g)
    next_obs[:-1] = obs[1:]
    terminated = torch.zeros(L, B, dtype=torch.bool)
    truncated = torch.zeros(L, B, dtype=torch.bool)
    mask = torch.ones(L, B, dtype=torch.bool)
    if B > 1:
        terminated[3, 1] = True
        mask[4:, 1] = False
    if B > 2:
        truncated[4, 2] = True
        mask[5:, 2] = False
    batch = TensorDict(
        {
            "obs": obs,
            "next_obs": next_obs,
            "action": torch.randint(A, (L, B), generator=g),
            "reward": 2 * torch.randn(L, B, generator=g),
            "terminated": terminated,
            "truncated": truncated,
            "mask": mask,
        },
        batch_size=[L, B],
    )
    for key in ("obs", "next_obs", "action", "reward", "terminated", "truncated"):
        x = batch[key]
        batch[key] = torch.where(mask.view(L, B, *([1] * (x.dim() - 2))), x, torch.zeros_like(x))
    init = TensorDict(
        {
            "h": 0.5 * torch.randn(B, H, generator=g),
            "c": 0.5 * torch.randn(B, H, generator=g),
            "prev_action": torch.randint(A, (B,), generator=g),
            "prev_reward": torch.randn(B, generator=g),
        },
        [B],
    )
    batch["init_carry"] = init.unsqueeze(0).expand(L, B)
    w = torch.rand(B, generator=g) + 0.1
    batch["weight"] = (w / w.max()).unsqueeze(0).expand(L, B)
    return batch


def _modules(p):
    """nn modules holding the functional parameters (the imperative way, for the hand computation)."""
    enc = nn.Linear(*p["encoder", "0", "weight"].shape[::-1])
    cell = nn.LSTMCell(p["lstm", "weight_ih"].shape[1], p["lstm", "weight_hh"].shape[1])
    value = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 1))
    adv = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 3))
    with torch.no_grad():
        enc.weight.copy_(p["encoder", "0", "weight"])
        enc.bias.copy_(p["encoder", "0", "bias"])
        for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(cell, n).copy_(p["lstm", n])
        for mod, key in ((value, "value"), (adv, "advantage")):
            for i, layer in ((0, mod[0]), (1, mod[2])):
                layer.weight.copy_(p["head", key, str(i), "weight"])
                layer.bias.copy_(p["head", key, str(i), "bias"])
    return enc, cell, value, adv


def _hand_loss(state, batch, gamma=0.9, n=2, eps=1e-3):
    """Per-sequence, per-step loops with nn modules: the paper's description, written plainly."""
    online, target = _modules(state["params"]), _modules(state["target"])
    _, B = batch.batch_size

    def step(mods, x, pa, pr, h, c):
        enc, cell, value, adv = mods
        inp = torch.cat([torch.relu(enc(x)), nn.functional.one_hot(pa, 3).float(), torch.tanh(pr).reshape(1)])
        h, c = cell(inp[None], (h, c))
        a = adv(h)[0]
        return value(h)[0] + a - a.mean(), h, c

    total, prios = 0.0, []
    for b in range(B):
        xs = [batch["obs"][0, b]] + [batch["next_obs"][t, b] for t in range(L)]
        pas = [batch["init_carry", "prev_action"][0, b]] + [batch["action"][t, b] for t in range(L)]
        prs = [batch["init_carry", "prev_reward"][0, b]] + [batch["reward"][t, b] for t in range(L)]
        h0, c0 = batch["init_carry", "h"][0, b][None], batch["init_carry", "c"][0, b][None]
        # online: burn-in without gradient, then the trained part
        h, c = h0, c0
        with torch.no_grad():
            for s in range(BURN):
                _, h, c = step(online, xs[s], pas[s], prs[s], h, c)
        q_on = {}
        for s in range(BURN, L + 1):
            q_on[s], h, c = step(online, xs[s], pas[s], prs[s], h, c)
        # target: its own unroll from the same stored state
        q_tg = {}
        with torch.no_grad():
            h, c = h0, c0
            for s in range(L + 1):
                q, h, c = step(target, xs[s], pas[s], prs[s], h, c)
                q_tg[s] = q
        seq_loss, tds = 0.0, []
        for s in range(BURN, L):
            if not batch["mask"][s, b]:
                continue
            g_sum, disc, last = 0.0, 1.0, s
            for k in range(n):
                sk = s + k
                if sk >= L or not batch["mask"][sk, b]:
                    break
                g_sum = g_sum + disc * float(batch["reward"][sk, b])
                disc = disc * gamma * (1.0 - float(batch["terminated"][sk, b]))
                last = sk
            boot = q_tg[last + 1][int(torch.argmax(q_on[last + 1]))]
            y = returns.h(torch.tensor(g_sum) + disc * returns.h_inv(boot, eps), eps)
            td = y.detach() - q_on[s][int(batch["action"][s, b])]
            seq_loss = seq_loss + 0.5 * td**2
            tds.append(float(td.detach().abs()))
        total = total + batch["weight"][0, b] * seq_loss
        prios.append(0.9 * max(tds) + 0.1 * sum(tds) / len(tds))
    return total / B, torch.tensor(prios), online


def test_loss_priorities_and_gradients_equal_a_hand_computation():
    config = _tiny()
    state = r2d2.init(config, OBS, ACT, seed=0)
    state["target"] = r2d2.init(config, OBS, ACT, seed=1)["params"]  # an independent target network
    batch = _batch()
    seq = torch.cat([batch["obs"][:1], batch["next_obs"]])
    prev = (torch.cat([batch["init_carry", "prev_action"][:1], batch["action"]]), torch.cat([batch["init_carry", "prev_reward"][:1], batch["reward"]]))
    start = (batch["init_carry", "h"][0], batch["init_carry", "c"][0])
    q_on, _ = r2d2.q_unroll(state["params"], seq, *prev, start)
    q_tg, _ = r2d2.q_unroll(state["target"], seq, *prev, start)
    assert (q_on.argmax(-1) != q_tg.argmax(-1))[BURN + 1 :].any(), "double-Q selection must matter in this test"
    grads, (value, aux) = torch.func.grad_and_value(r2d2.loss, has_aux=True)(
        state["params"], state["target"], config, batch
    )
    expected, prios, (enc, cell, vmod, amod) = _hand_loss(state, batch)
    torch.testing.assert_close(value, expected.detach().reshape(()), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(aux["priorities"], prios, rtol=1e-5, atol=1e-6)
    assert aux["td_error"].shape == (TRAIN, 3) and float(aux["td_error"][3, 2]) == 0.0  # padding
    expected.backward()
    torch.testing.assert_close(grads["encoder", "0", "weight"], enc.weight.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(grads["lstm", "weight_hh"], cell.weight_hh.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(grads["head", "advantage", "1", "weight"], amod[2].weight.grad, rtol=1e-4, atol=1e-6)


def _burned_in_reference(config, state, batch):
    """The trained part alone, started from the burned-in state (computed separately, as a constant)."""
    B = batch.batch_size[1]
    seq = torch.cat([batch["obs"][:1], batch["next_obs"]])
    prev_a = torch.cat([batch["init_carry", "prev_action"][:1], batch["action"]])
    prev_r = torch.cat([batch["init_carry", "prev_reward"][:1], batch["reward"]])
    start = (batch["init_carry", "h"][0], batch["init_carry", "c"][0])
    with torch.no_grad():
        _, (h, c) = r2d2.q_unroll(state["params"], seq[:BURN], prev_a[:BURN], prev_r[:BURN], start)
    part = batch[BURN:].clone()
    carry = TensorDict({"h": h, "c": c, "prev_action": batch["action"][BURN - 1], "prev_reward": batch["reward"][BURN - 1]}, [B])
    part["init_carry"] = carry.unsqueeze(0).expand(TRAIN, B)
    return _tiny(burn_in=0), part


def test_burn_in_carries_no_loss_and_no_gradient_through_the_state():
    config = _tiny()
    state = r2d2.init(config, OBS, ACT, seed=3)  # target == online, so both burn in to the same state
    batch = _batch(seed=1)
    grad = torch.func.grad_and_value(r2d2.loss, has_aux=True)
    g_full, (l_full, aux_full) = grad(state["params"], state["target"], config, batch)
    ref_config, part = _burned_in_reference(config, state, batch)
    g_ref, (l_ref, aux_ref) = grad(state["params"], state["target"], ref_config, part)
    torch.testing.assert_close(l_full, l_ref)
    torch.testing.assert_close(aux_full["priorities"], aux_ref["priorities"])
    for k in g_full.keys(include_nested=True, leaves_only=True):
        torch.testing.assert_close(g_full[k], g_ref[k], msg=f"gradient {k}")
    # Acme's variant back-propagates through the burn-in unroll: same loss, other gradients
    acme = _tiny(burn_in_stop_gradient=False)
    g_acme, (l_acme, _) = grad(state["params"], state["target"], acme, batch)
    torch.testing.assert_close(l_acme, l_full)
    assert not torch.allclose(g_acme["lstm", "weight_hh"], g_full["lstm", "weight_hh"])


def test_perturbing_burn_in_rewards_and_actions_leaves_the_loss_unchanged():
    """Without the previous-action/reward inputs, burn-in rewards and actions reach nothing."""
    config = _tiny(action_input=False, reward_input=False)
    state = r2d2.init(config, OBS, ACT, seed=4)
    batch = _batch(seed=2)
    base, aux = r2d2.loss(state["params"], state["target"], config, batch)
    junk = batch.clone()
    junk["reward"][:BURN] = 1e4
    junk["action"][:BURN] = (batch["action"][:BURN] + 1) % 3
    value, aux2 = r2d2.loss(state["params"], state["target"], config, junk)
    assert torch.equal(value, base) and torch.equal(aux["priorities"], aux2["priorities"])
    trained = batch.clone()
    trained["reward"][BURN] += 1.0
    assert not torch.equal(r2d2.loss(state["params"], state["target"], config, trained)[0], base)
    # with the inputs on, burn-in rewards only shape the start state: still no TD error on burn-in steps
    assert aux["td_error"].shape[0] == TRAIN


def test_terminated_steps_stop_truncated_ones_bootstrap_and_padding_is_inert():
    config = _tiny()
    state = r2d2.init(config, OBS, ACT, seed=5)
    batch = _batch(seed=3)
    _, aux = r2d2.loss(state["params"], state["target"], config, batch)
    junk = batch.clone()
    pad = ~batch["mask"]
    junk["obs"][pad] = 50.0
    junk["next_obs"][pad] = -50.0
    junk["reward"][pad] = 1e6
    junk["action"][pad] = 2
    junk["terminated"][pad] = True
    torch.testing.assert_close(r2d2.loss(state["params"], state["target"], config, junk)[0], r2d2.loss(state["params"], state["target"], config, batch)[0])
    # column 1 terminates at absolute step 3 (trained step 1): its TD target there is just h(r)
    seq = torch.cat([batch["obs"][:1], batch["next_obs"]])
    prev_a = torch.cat([batch["init_carry", "prev_action"][:1], batch["action"]])
    prev_r = torch.cat([batch["init_carry", "prev_reward"][:1], batch["reward"]])
    start = (batch["init_carry", "h"][0], batch["init_carry", "c"][0])
    q, _ = r2d2.q_unroll(state["params"], seq, prev_a, prev_r, start)
    q_sa = q[3, 1, batch["action"][3, 1]]
    torch.testing.assert_close(aux["td_error"][1, 1], returns.h(batch["reward"][3, 1]) - q_sa)


def test_update_steps_adam_copies_target_and_returns_priorities():
    config = _tiny(target_period=3)
    state = r2d2.init(config, OBS, ACT, seed=0)
    batch = _batch()
    first_target = state["target"].clone()
    for k in range(1, 7):
        _, aux = r2d2.loss(state["params"], state["target"], config, batch)
        state, metrics = r2d2.update(state, batch)
        torch.testing.assert_close(metrics["priorities"], aux["priorities"])
        assert int(state["step"]) == k
        same = (state["target"] == state["params"]).all()
        if k % 3 == 0:
            assert same
            copied = state["target"].clone()
        else:
            assert not same
            assert (state["target"] == (first_target if k < 3 else copied)).all()
    assert metrics["priorities"].shape == (3,)
    assert all(v.dim() == 0 for k, v in metrics.items() if k != "priorities")
    assert set(metrics.keys()) >= {"loss", "q", "td_abs", "grad_norm", "priority_mean"}


def test_importance_weights_scale_each_sequence():
    config = _tiny()
    state = r2d2.init(config, OBS, ACT, seed=1)
    batch = _batch()
    w = torch.tensor([1.0, 0.0, 0.5])
    batch["weight"] = w.unsqueeze(0).expand(L, 3)
    per_seq = []
    for b in range(3):
        one = batch[:, b : b + 1].clone()
        one["weight"] = torch.ones(L, 1)
        per_seq.append(r2d2.loss(state["params"], state["target"], config, one)[0])
    expected = (w * torch.stack(per_seq)).mean()
    torch.testing.assert_close(r2d2.loss(state["params"], state["target"], config, batch)[0], expected)
    del batch["weight"]  # no weights: all ones
    torch.testing.assert_close(r2d2.loss(state["params"], state["target"], config, batch)[0], torch.stack(per_seq).mean())


def test_stored_state_is_the_actors_state_before_the_first_observation():
    """Drive the replay with r2d2.act: each window's stored carry is the carry the actor used at its first step."""
    from rlfunc.replay.prioritized import PrioritizedSequenceReplay

    config = _tiny(burn_in=2, sequence_length=3, sequence_period=2)
    params = r2d2.init(config, OBS, ACT, seed=0)["params"]
    n, lengths = 2, (9, 7)
    rb = PrioritizedSequenceReplay(64, 5, num_envs=n, **{k: v for k, v in r2d2.replay_kwargs(config, 64).items() if k == "period"})
    g = torch.Generator().manual_seed(0)
    carry = r2d2.initial_carry(config, n)
    prev_a, prev_r = torch.zeros(n, dtype=torch.int64), torch.zeros(n)
    reset = torch.ones(n, dtype=torch.bool)
    eps = r2d2.actor_epsilons(n)
    obs = torch.randn(n, 2, generator=g)
    t = [0] * n
    used, actor_q = {}, {}
    for s in range(40):
        carry_t = r2d2.prepare_carry(carry, prev_a, prev_r, reset)
        q, _ = r2d2.q_step(params, obs, carry_t)
        action, carry = r2d2.act(params, obs, prev_a, prev_r, carry, eps, r2d2.draw_act_noise(n, generator=g), reset)
        reward = action.float() - 1.0 + 0.1 * obs[:, 0]
        t = [x + 1 for x in t]
        end = torch.tensor([t[e] == lengths[e] for e in range(n)])
        next_obs = torch.randn(n, 2, generator=g)
        step_id = torch.tensor([1000 * e + s for e in range(n)])
        for e in range(n):
            used[int(step_id[e])] = r2d2.carry_to_td(carry_t)[e]
            actor_q[int(step_id[e])] = q[e]
        rb.add(
            TensorDict(
                {
                    "obs": obs,
                    "action": action,
                    "reward": reward,
                    "next_obs": next_obs,
                    "terminated": end & torch.tensor([True, False]),
                    "truncated": end & torch.tensor([False, True]),
                    "step_id": step_id,
                },
                [n],
            ),
            carry=r2d2.carry_to_td(carry_t),
        )
        t = [0 if bool(end[e]) else t[e] for e in range(n)]
        prev_a, prev_r, reset = action, reward, end
        obs = torch.where(end.unsqueeze(-1), torch.randn(n, 2, generator=g), next_obs)
    batch = rb.sample(32, generator=g)
    seq = torch.cat([batch["obs"][:1], batch["next_obs"]])
    prev_a = torch.cat([batch["init_carry", "prev_action"][:1], batch["action"]])
    prev_r = torch.cat([batch["init_carry", "prev_reward"][:1], batch["reward"]])
    q_replay, _ = r2d2.q_unroll(params, seq, prev_a, prev_r, (batch["init_carry", "h"][0], batch["init_carry", "c"][0]))
    for b in range(32):
        first = int(batch["step_id"][0, b])
        stored = batch["init_carry"][0, b]
        for k in ("h", "c", "prev_action", "prev_reward"):
            assert torch.equal(stored[k], used[first][k]), k
        if int(batch["episode_start"][0, b]) == 0:  # an episode start: the zero state, action 0, reward 0
            assert not stored["h"].any() and int(stored["prev_action"]) == 0 and float(stored["prev_reward"]) == 0
        for s in range(int(batch["mask"][:, b].sum())):  # re-unrolling from the stored state reproduces the actor
            torch.testing.assert_close(q_replay[s, b], actor_q[int(batch["step_id"][s, b])], rtol=1e-5, atol=1e-6)


def test_act_is_epsilon_greedy_per_env_and_resets_the_carry():
    config = _tiny()
    params = r2d2.init(config, OBS, ACT, seed=0)["params"]
    obs = torch.randn(5, 2)
    carry = r2d2.initial_carry(config, 5)
    q, (h, _) = r2d2.q_step(params, obs, carry)
    noise = torch.stack([torch.full((5,), 0.5), torch.tensor([0.0, 0.34, 0.5, 0.99, 0.2])])
    greedy, new = r2d2.act(params, obs, None, None, carry, 0.0, noise)
    assert torch.equal(greedy, q.argmax(-1)) and torch.equal(new.prev_action, greedy)
    torch.testing.assert_close(new.h, h)
    random, _ = r2d2.act(params, obs, None, None, carry, 1.0, noise)
    assert random.tolist() == [0, 1, 1, 2, 0]
    per_env = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0])  # actor_epsilons-style per-env rates
    mixed, _ = r2d2.act(params, obs, None, None, carry, per_env, noise)
    assert mixed.tolist() == [0, int(greedy[1]), 1, int(greedy[3]), int(greedy[4])]
    # previous action and reward are inputs; reset zeroes them with the LSTM state
    pa, pr = torch.tensor([2, 1, 0, 2, 1]), torch.tensor([1.0, -2.0, 0.5, 3.0, 0.0])
    q_prev, _ = r2d2.q_step(params, obs, r2d2.Carry(carry.h, carry.c, pa, pr))
    assert not torch.allclose(q_prev, q)
    busy = r2d2.Carry(torch.ones(5, 3), torch.ones(5, 3), pa, pr)
    reset = torch.tensor([True, False, True, False, False])
    prepared = r2d2.prepare_carry(busy, reset=reset)
    assert not prepared.h[reset].any() and not prepared.prev_action[reset].any() and not prepared.prev_reward[reset].any()
    assert torch.equal(prepared.prev_action[~reset], pa[~reset])
    a_reset, c_reset = r2d2.act(params, obs, None, None, busy, 0.0, noise, reset=reset)
    a_zero, c_zero = r2d2.act(params, obs, None, None, r2d2.initial_carry(config, 5), 0.0, noise)
    torch.testing.assert_close(c_reset.h[reset], c_zero.h[reset])
    assert torch.equal(a_reset[reset], a_zero[reset])
    # the Policy's calling convention: initial_carry(config, n, device=...), greedy_action(..., config=...)
    pc = r2d2.initial_carry(config, 5, device="cpu")
    a_pol, pc = r2d2.greedy_action(params, obs, pc, config=config)
    assert torch.equal(a_pol, greedy) and torch.equal(pc.prev_action, greedy)
    a_pol2, _ = r2d2.greedy_action(params, obs, pc, config=config)
    a_act2, _ = r2d2.act(params, obs, None, None, pc, 0.0, noise)
    assert torch.equal(a_pol2, a_act2)
    a_eval, _ = r2d2.greedy_action(params, obs, pc, config=_tiny(eval_epsilon=1.0), noise=noise)
    assert a_eval.tolist() == [0, 1, 1, 2, 0]  # eval_epsilon > 0: epsilon-greedy from the given noise
    td = r2d2.carry_to_td(pc)
    assert td.batch_size == (5,) and all(torch.equal(x, y) for x, y in zip(r2d2.carry_from_td(td), pc))


def test_actor_epsilons_follow_ape_x():
    eps = r2d2.actor_epsilons(8)
    expected = torch.tensor([0.4 ** (1 + 7 * i / 7) for i in range(8)])
    torch.testing.assert_close(eps, expected)
    import numpy as np

    torch.testing.assert_close(r2d2.actor_epsilons(256), torch.from_numpy(np.logspace(1, 8, 256, base=0.4)).float())
    torch.testing.assert_close(r2d2.actor_epsilons(1), torch.tensor([0.4]))
    with pytest.raises(ValueError, match="at least 1"):
        r2d2.actor_epsilons(0)


def test_dueling_head_and_input_options():
    params = r2d2.init(_tiny(), OBS, ACT, seed=0)["params"]
    h = torch.randn(4, 3)
    v = nn.functional.linear(torch.relu(nn.functional.linear(h, params["head", "value", "0", "weight"], params["head", "value", "0", "bias"])), params["head", "value", "1", "weight"], params["head", "value", "1", "bias"])
    a = nn.functional.linear(torch.relu(nn.functional.linear(h, params["head", "advantage", "0", "weight"], params["head", "advantage", "0", "bias"])), params["head", "advantage", "1", "weight"], params["head", "advantage", "1", "bias"])
    torch.testing.assert_close(r2d2._head(params, h), v + a - a.mean(-1, keepdim=True))
    plain = r2d2.init(_tiny(dueling=False, action_input=False, reward_input=True), OBS, ACT, seed=0)["params"]
    assert set(plain["head"].keys()) == {"q"} and plain["lstm", "weight_ih"].shape[1] == 4 + 1
    carry = r2d2.initial_carry(_tiny(), 4)
    q, _ = r2d2.q_step(plain, torch.randn(4, 2), carry)
    assert q.shape == (4, 3)
    no_enc = r2d2.init(_tiny(encoder_sizes=()), OBS, ACT, seed=0)["params"]
    assert no_enc["lstm", "weight_ih"].shape[1] == 2 + 3 + 1
    assert r2d2.q_step(no_enc, torch.randn(4, 2), carry)[0].shape == (4, 3)


def test_learns_on_a_fixed_batch():
    config = _tiny(lstm_size=3, lr=1e-2, target_period=1000)
    state = r2d2.init(config, OBS, ACT, seed=0)
    batch = _batch(seed=4)
    state, first = r2d2.update(state, batch)
    for _ in range(60):
        state, metrics = r2d2.update(state, batch)
    assert float(metrics["loss"]) < 0.5 * float(first["loss"])


def test_prioritized_replay_round_trip_writes_priorities_back():
    """replay.sample -> update -> replay.update_priorities, with the replay built from replay_kwargs."""
    from rlfunc.replay.prioritized import PrioritizedSequenceReplay

    config = _tiny()
    rb = PrioritizedSequenceReplay(num_envs=2, **r2d2.replay_kwargs(config, 50))
    assert rb.capacity == 50
    g = torch.Generator().manual_seed(0)
    carry = r2d2.carry_to_td(r2d2.initial_carry(config, 2))
    for s in range(30):
        obs = torch.randn(2, 2, generator=g)
        end = torch.tensor([s % 11 == 10, s % 8 == 7])
        rb.add(
            TensorDict(
                {
                    "obs": obs,
                    "action": torch.randint(3, (2,), generator=g),
                    "reward": obs[:, 0],
                    "next_obs": torch.randn(2, 2, generator=g),
                    "terminated": end,
                    "truncated": torch.zeros(2, dtype=torch.bool),
                },
                [2],
            ),
            carry=carry.apply(lambda x: x + 0.1 * s if x.is_floating_point() else x),
        )
    state = r2d2.init(config, OBS, ACT, seed=0)
    batch = rb.sample(config.batch_size, generator=g)
    before = rb.tree.leaves.clone()
    state, metrics = r2d2.update(state, batch)
    rows = batch["window"][0]
    rb.update_priorities(rows, metrics["priorities"])
    torch.testing.assert_close(rb.priorities(rows).float(), metrics["priorities"], rtol=1e-6, atol=1e-7)
    assert not torch.equal(rb.tree.leaves, before)
    assert torch.isfinite(metrics["loss"]) and 0 < float(metrics["valid_fraction"]) <= 1


def test_config_and_batch_errors():
    with pytest.raises(ValueError, match="Discrete action space"):
        r2d2.init(_tiny(), OBS, gym.spaces.Box(-1.0, 1.0, (2,)))
    with pytest.raises(ValueError, match="at least 2 actions"):
        r2d2.init(_tiny(), OBS, gym.spaces.Discrete(1))
    with pytest.raises(ValueError, match="sequence_period"):
        r2d2.Config(burn_in=2, sequence_length=3, sequence_period=6)
    with pytest.raises(ValueError, match="initial_state"):
        r2d2.Config(initial_state="random")
    state = r2d2.init(_tiny(), OBS, ACT)
    with pytest.raises(ValueError, match=r"burn_in \+ sequence_length"):
        r2d2.update(state, _batch()[:5])
    with pytest.raises(ValueError, match=r"\[T, B\]"):
        r2d2.update(state, _batch()[0])
    no_carry = _batch()
    del no_carry["init_carry"]
    with pytest.raises(KeyError, match="init_carry"):
        r2d2.update(state, no_carry)
    zeros = _tiny(initial_state="zeros")
    r2d2.loss(state["params"], state["target"], zeros, no_carry)  # the zero start needs no stored state
    kw = r2d2.replay_kwargs(r2d2.Config(), 100_000)
    assert kw["capacity"] == 100_000 and kw["sequence_length"] == 120 and kw["period"] == 40 and kw["priority_exponent"] == 0.9
    defaults = r2d2.Config()
    assert (defaults.n_step, defaults.gamma, defaults.lr, defaults.adam_eps, defaults.target_period) == (5, 0.997, 1e-4, 1e-3, 2500)
    assert (defaults.lstm_size, defaults.batch_size, defaults.importance_exponent, defaults.rescale_eps) == (512, 64, 0.6, 1e-3)


@pytest.mark.compile
def test_update_compiles_fullgraph_and_matches_eager():
    config = _tiny(target_period=2)
    state = r2d2.init(config, OBS, ACT, seed=0)
    batches = [_batch(seed=s) for s in range(3)]
    compiled = torch.compile(r2d2.update, fullgraph=True)
    s_eager, s_comp = state, state.clone()
    for b in batches:
        s_eager, m_eager = r2d2.update(s_eager, b)
        s_comp, m_comp = compiled(s_comp, b)
    for k in ("loss", "q", "td_abs", "grad_norm", "priorities"):
        torch.testing.assert_close(m_comp[k], m_eager[k], rtol=1e-4, atol=1e-5)
    for k in s_eager.keys(include_nested=True, leaves_only=True):
        torch.testing.assert_close(s_comp[k], s_eager[k], rtol=1e-4, atol=1e-5)
    assert int(s_comp["step"]) == 3


def test_lr_decay_option_is_linear_in_updates_and_moves_params_by_the_scheduled_rate():
    """``lr_decay_updates`` (shared with DRQN via ``_qstate``): lr -> lr_end linearly, then constant."""
    from rlfunc.algos._qstate import q_learning_rate

    config = _tiny(lr=1e-3, lr_decay_updates=4, lr_end=2e-4)
    got = [float(q_learning_rate(config, torch.tensor(s))) for s in (0, 2, 4, 9)]
    assert got == pytest.approx([1e-3, 6e-4, 2e-4, 2e-4])
    assert q_learning_rate(_tiny(lr=1e-3), torch.tensor(7)) == 1e-3  # default: constant, the paper's
    # Adam's first step moves every parameter by about lr (sign of the gradient):
    # the decayed run's first step uses lr(0) = lr, its fifth lr_end.
    state = r2d2.init(config, OBS, ACT, seed=0)
    metrics = []
    for _ in range(5):
        state, m = r2d2.update(state, _batch())
        metrics.append(float(m["lr"]))
    assert metrics == pytest.approx([1e-3, 8e-4, 6e-4, 4e-4, 2e-4])
    with pytest.raises(ValueError, match="lr_end"):
        _tiny(lr=1e-3, lr_decay_updates=10, lr_end=2e-3)
    with pytest.raises(ValueError, match="lr_decay_updates"):
        _tiny(lr_decay_updates=-1)
