"""Masked sequence TD helpers (rlfunc.core.returns) used by DRQN."""

import pytest
import torch

from rlfunc.core import returns

torch.set_num_threads(1)


def test_q_learning_matches_hand_computation():
    q_tm1 = torch.tensor([[[1.0, 2.0], [0.5, -1.0]], [[3.0, 0.0], [2.0, 2.5]]])  # [T=2, B=2, A=2]
    a_tm1 = torch.tensor([[1, 0], [0, 1]])
    r_t = torch.tensor([[1.0, -1.0], [0.0, 2.0]])
    discount_t = torch.tensor([[0.9, 0.9], [0.0, 0.5]])
    q_t = torch.tensor([[[4.0, 5.0], [1.0, 0.0]], [[7.0, 8.0], [-2.0, -3.0]]])
    td = returns.q_learning(q_tm1, a_tm1, r_t, discount_t, q_t)
    expected = torch.tensor(
        [[1 + 0.9 * 5 - 2.0, -1 + 0.9 * 1 - 0.5], [0 + 0.0 * 8 - 3.0, 2 + 0.5 * -2 - 2.5]]
    )
    torch.testing.assert_close(td, expected)


def test_double_q_learning_selects_with_online_evaluates_with_target():
    q_tm1 = torch.zeros(1, 2, 3)
    a_tm1 = torch.tensor([[0, 2]])
    r_t = torch.tensor([[1.0, 0.0]])
    discount_t = torch.tensor([[0.5, 1.0]])
    q_t_value = torch.tensor([[[10.0, 20.0, 30.0], [1.0, 2.0, 3.0]]])
    q_t_selector = torch.tensor([[[0.0, 1.0, 0.0], [5.0, 0.0, 0.0]]])  # argmax 1, then 0
    td = returns.double_q_learning(q_tm1, a_tm1, r_t, discount_t, q_t_value, q_t_selector)
    torch.testing.assert_close(td, torch.tensor([[1 + 0.5 * 20.0, 0 + 1.0 * 1.0]]))


def test_targets_carry_no_gradient():
    q_tm1 = torch.randn(3, 2, 4, requires_grad=True)
    q_t = torch.randn(3, 2, 4, requires_grad=True)
    td = returns.q_learning(q_tm1, torch.zeros(3, 2, dtype=torch.long), torch.ones(3, 2), torch.ones(3, 2), q_t)
    td.sum().backward()
    assert q_t.grad is None
    assert q_tm1.grad is not None


def test_masked_loss_ignores_padded_steps_even_nan():
    td = torch.tensor([[1.0, 3.0], [2.0, float("nan")]], requires_grad=True)
    mask = torch.tensor([[True, True], [True, False]])
    loss = returns.sequence_td_loss(td, mask, huber_delta=None)
    torch.testing.assert_close(loss, torch.tensor((0.5 * 1 + 0.5 * 9 + 0.5 * 4) / 3))
    loss.backward()
    assert td.grad[1, 1] == 0 and torch.isfinite(td.grad).all()
    # Huber: quadratic inside delta, linear outside (gradient = clipped TD error)
    x = torch.tensor([[0.5, -3.0]], requires_grad=True)
    h = returns.sequence_td_loss(x, torch.ones(1, 2, dtype=torch.bool), huber_delta=1.0)
    torch.testing.assert_close(h, torch.tensor((0.125 + 2.5) / 2))
    h.backward()
    torch.testing.assert_close(x.grad, torch.tensor([[0.25, -0.5]]))


def test_all_padded_gives_zero_not_nan():
    assert float(returns.masked_mean(torch.ones(2, 3), torch.zeros(2, 3, dtype=torch.bool))) == 0.0


def test_shape_checks_are_clear():
    with pytest.raises(ValueError, match="q_tm1 must have shape"):
        returns.q_learning(torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(3, 2, 4))
    with pytest.raises(ValueError, match="discount_t must have the shape of r_t"):
        returns.q_learning(torch.zeros(3, 2, 4), torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(3), torch.zeros(3, 2, 4))
    with pytest.raises(ValueError, match="mask must have the shape"):
        returns.sequence_td_loss(torch.zeros(3, 2), torch.zeros(2, 3, dtype=torch.bool))


@pytest.mark.compile
def test_compiles_fullgraph():
    """Dynamo traces the helpers without graph breaks (eager backend: about a second)."""
    fn = torch.compile(
        lambda q_tm1, a, r, d, q_t, m: returns.sequence_td_loss(returns.q_learning(q_tm1, a, r, d, q_t), m),
        fullgraph=True,
        backend="eager",
    )
    args = (torch.randn(4, 3, 2), torch.randint(2, (4, 3)), torch.randn(4, 3), torch.rand(4, 3), torch.randn(4, 3, 2))
    mask = torch.rand(4, 3) > 0.3
    torch.testing.assert_close(
        fn(*args, mask), returns.sequence_td_loss(returns.q_learning(*args), mask)
    )
