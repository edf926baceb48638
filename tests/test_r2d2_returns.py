"""R2D2 pieces of rlfunc.core.returns: h / h^-1, n-step returns, transformed double-Q targets, priorities."""

import pytest
import torch

from rlfunc.core import returns

torch.set_num_threads(1)


def _wide(dtype=torch.float32):
    mag = torch.logspace(-6, 6, 3001, dtype=dtype)
    return torch.cat([-mag.flip(0), torch.zeros(1, dtype=dtype), mag])


def test_h_and_h_inv_round_trip_over_a_wide_range():
    x = _wide()
    for f, g in ((returns.h, returns.h_inv), (returns.h_inv, returns.h)):
        torch.testing.assert_close(f(g(x)), x, rtol=2e-6, atol=1e-12)  # measured ~4e-7 in float32
    x64 = _wide(torch.float64)
    torch.testing.assert_close(returns.h(returns.h_inv(x64)), x64, rtol=1e-13, atol=1e-300)
    # the definitions, in float64: h(x) = sign(x)(sqrt(|x|+1) - 1) + eps x, rlax's signed_parabolic
    eps = 1e-3
    torch.testing.assert_close(returns.h(x64), torch.sign(x64) * (torch.sqrt(x64.abs() + 1) - 1) + eps * x64)
    z = torch.sqrt(1 + 4 * eps * (eps + 1 + x64.abs())) / 2 / eps - 1 / 2 / eps
    big = x64.abs() > 1e-2  # where the textbook form itself is accurate
    torch.testing.assert_close(returns.h_inv(x64)[big], (torch.sign(x64) * (z * z - 1))[big], rtol=1e-9, atol=0)
    # eps is a parameter; eps = 0 is sign(y)((|y|+1)^2 - 1)
    y = torch.tensor([-3.0, 0.5, 2.0], dtype=torch.float64)
    torch.testing.assert_close(returns.h_inv(y, eps=0.0), torch.sign(y) * ((y.abs() + 1) ** 2 - 1))
    torch.testing.assert_close(returns.h(returns.h_inv(y, eps=0.01), eps=0.01), y)


def _hand_sequence():
    """[T=5, B=3]: col 0 runs on, col 1 terminates at t=2, col 2 is truncated at t=1; then padding."""
    r_t = torch.tensor([[1.0, 1.0, 1.0], [2.0, 2.0, 2.0], [3.0, 3.0, 7.0], [4.0, 9.0, 7.0], [5.0, 9.0, 7.0]])
    discount_t = torch.tensor([[0.5, 0.5, 0.5], [0.5, 0.5, 0.5], [0.5, 0.0, 0.5], [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]])
    v_t = torch.tensor([[10.0, 10.0, 10.0], [20.0, 20.0, 20.0], [30.0, 30.0, 77.0], [40.0, 99.0, 77.0], [50.0, 99.0, 77.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 0, 0]], dtype=torch.bool)
    return r_t, discount_t, v_t, mask


def test_n_step_returns_equal_a_hand_computation():
    r_t, discount_t, v_t, mask = _hand_sequence()
    got = returns.n_step_bootstrapped_returns(r_t, discount_t, v_t, 3, mask)
    col0 = [
        1 + 0.5 * 2 + 0.25 * 3 + 0.125 * 30,
        2 + 0.5 * 3 + 0.25 * 4 + 0.125 * 40,
        3 + 0.5 * 4 + 0.25 * 5 + 0.125 * 50,
        4 + 0.5 * 5 + 0.25 * 50,  # the sequence ends: bootstrap from its last value
        5 + 0.5 * 50,
    ]
    col1 = [1 + 0.5 * 2 + 0.25 * 3, 2 + 0.5 * 3, 3.0]  # terminated at t=2: no bootstrap after it
    col2 = [1 + 0.5 * 2 + 0.25 * 20, 2 + 0.5 * 20]  # truncated at t=1: bootstrap from v_1
    torch.testing.assert_close(got[:, 0], torch.tensor(col0))
    torch.testing.assert_close(got[:3, 1], torch.tensor(col1))
    torch.testing.assert_close(got[:2, 2], torch.tensor(col2))
    # padding never leaks into valid steps
    junk = (r_t.clone(), discount_t.clone(), v_t.clone())
    for x in junk:
        x[~mask] = 1e6
    torch.testing.assert_close(returns.n_step_bootstrapped_returns(*junk, 3, mask)[mask], got[mask])
    # n = 1 is the one-step target; n >= T sums the whole sequence
    torch.testing.assert_close(returns.n_step_bootstrapped_returns(r_t, discount_t, v_t, 1), r_t + discount_t * v_t)
    full = returns.n_step_bootstrapped_returns(r_t[:, :1], discount_t[:, :1], v_t[:, :1], 9)
    torch.testing.assert_close(full[0, 0], torch.tensor(1 + 0.5 * 2 + 0.25 * 3 + 0.125 * 4 + 0.0625 * 5 + 0.0625 * 0.5 * 50))
    # n beyond T adds only padding (reward 0, discount 1): bit for bit n = T, and a huge n costs T passes
    T = r_t.shape[0]
    at_t = returns.n_step_bootstrapped_returns(r_t, discount_t, v_t, T, mask)
    assert torch.equal(returns.n_step_bootstrapped_returns(r_t, discount_t, v_t, T + 3, mask), at_t)
    assert torch.equal(returns.n_step_bootstrapped_returns(r_t, discount_t, v_t, 10**12, mask), at_t)


def test_transformed_double_q_target_equals_a_hand_computation():
    r_t, discount_t, v_t, mask = _hand_sequence()
    T, B = r_t.shape
    q_t_value = torch.stack([v_t - 1.0, v_t, v_t + 5.0], dim=-1)  # [T, B, 3]
    q_t_selector = torch.zeros(T, B, 3)
    q_t_selector[..., 1] = 1.0  # the online net picks action 1, whose target value is v_t
    q_t_value.requires_grad_(True)
    eps = 1e-3
    target = returns.transformed_n_step_targets(r_t, discount_t, q_t_value, q_t_selector, 3, mask=mask)
    assert not target.requires_grad
    h, hi = returns.h, returns.h_inv
    expected0 = h(torch.tensor(1 + 0.5 * 2 + 0.25 * 3) + 0.125 * hi(torch.tensor(30.0), eps), eps)
    expected_trunc = h(torch.tensor(2.0) + 0.5 * hi(torch.tensor(20.0), eps), eps)
    torch.testing.assert_close(target[0, 0], expected0)
    torch.testing.assert_close(target[1, 2], expected_trunc)
    torch.testing.assert_close(target[2, 1], h(torch.tensor(3.0), eps))  # terminal step: just h(r)
    plain = returns.transformed_n_step_targets(r_t, discount_t, q_t_value, q_t_selector, 3, mask=mask, rescale_eps=None)
    torch.testing.assert_close(plain[mask], returns.n_step_bootstrapped_returns(r_t, discount_t, v_t, 3, mask)[mask])
    # TD error: target - q_tm1[a_tm1], gradient into q_tm1 only
    q_tm1 = torch.randn(T, B, 3, requires_grad=True)
    a_tm1 = torch.randint(3, (T, B))
    td = returns.transformed_n_step_q_learning(q_tm1, a_tm1, q_t_value, q_t_selector, r_t, discount_t, 3, mask=mask)
    torch.testing.assert_close(td, target - q_tm1.gather(-1, a_tm1.unsqueeze(-1)).squeeze(-1))
    td[mask].sum().backward()
    assert q_t_value.grad is None and q_tm1.grad is not None


def test_sequence_priorities_on_a_known_td_matrix():
    td = torch.tensor([[1.0, -4.0, 0.0], [-3.0, 2.0, 5.0], [2.0, 100.0, -1.0]])  # [T=3, B=3]
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    p = returns.sequence_priorities(td, mask, eta=0.9)
    expected = torch.tensor([0.9 * 3 + 0.1 * 2.0, 0.9 * 4 + 0.1 * 3.0, 0.0])  # col 2: no valid step
    torch.testing.assert_close(p, expected)
    torch.testing.assert_close(returns.sequence_priorities(td), 0.9 * td.abs().amax(0) + 0.1 * td.abs().mean(0))


def test_shape_checks_are_clear():
    with pytest.raises(ValueError, match="discount_t must have the shape of r_t"):
        returns.n_step_bootstrapped_returns(torch.zeros(3, 2), torch.zeros(3), torch.zeros(3, 2), 2)
    with pytest.raises(ValueError, match="positive integer"):
        returns.n_step_bootstrapped_returns(torch.zeros(3), torch.zeros(3), torch.zeros(3), 0)
    with pytest.raises(ValueError, match="q_t_selector must have shape"):
        returns.transformed_n_step_targets(torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(3, 2, 4), torch.zeros(3, 4), 2)
    with pytest.raises(ValueError, match="time-major"):
        returns.sequence_priorities(torch.tensor(1.0))


@pytest.mark.compile
def test_compiles_fullgraph():
    """Dynamo traces the n-step pieces without graph breaks (eager backend: about a second)."""

    def fn(q_tm1, a, q_v, q_s, r, d, m):
        td = returns.transformed_n_step_q_learning(q_tm1, a, q_v, q_s, r, d, 5, mask=m)
        return td, returns.sequence_priorities(td, m)

    args = (torch.randn(8, 3, 2), torch.randint(2, (8, 3)), torch.randn(8, 3, 2), torch.randn(8, 3, 2))
    r, d = torch.randn(8, 3), torch.rand(8, 3)
    m = torch.arange(8).unsqueeze(1) < torch.tensor([8, 5, 2])
    compiled = torch.compile(fn, fullgraph=True, backend="eager")
    for a, b in zip(compiled(*args, r, d, m), fn(*args, r, d, m)):
        torch.testing.assert_close(a, b)
