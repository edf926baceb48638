import pytest
import torch
from tensordict import TensorDict

from rlfunc.core.optim import Adam, clip_by_global_norm, global_norm, linear_schedule


def _params(gen):
    return TensorDict(
        {
            "a": {"weight": torch.randn(4, 3, generator=gen), "bias": torch.randn(4, generator=gen)},
            "stack": torch.randn(3, 5, 2, generator=gen),
        },
        batch_size=[],
    )


@pytest.mark.parametrize(
    "kwargs, torch_cls",
    [
        (dict(lr=1e-2), torch.optim.Adam),
        (dict(lr=3e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1), torch.optim.Adam),
        (dict(lr=3e-3, weight_decay=0.1, decoupled=True), torch.optim.AdamW),
    ],
)
def test_adam_matches_torch_optim(kwargs, torch_cls):
    gen = torch.Generator().manual_seed(0)
    params = _params(gen)
    opt = Adam(**kwargs)
    state = opt.init(params)
    ref = [p.clone().requires_grad_(True) for p in params.values(True, True)]
    torch_kwargs = {k: v for k, v in kwargs.items() if k != "decoupled"}
    if torch_cls is torch.optim.AdamW and "weight_decay" not in torch_kwargs:
        torch_kwargs["weight_decay"] = 0.0
    ref_opt = torch_cls(ref, **torch_kwargs)
    for _ in range(5):
        grads = params.apply(lambda p: torch.randn(p.shape, generator=gen))
        params, state = opt.step(grads, state, params)
        for r, g in zip(ref, grads.values(True, True)):
            r.grad = g.clone()
        ref_opt.step()
    for r, p in zip(ref, params.values(True, True)):
        torch.testing.assert_close(p, r.detach(), rtol=1e-5, atol=1e-6)
    assert int(state["step"]) == 5


def test_adam_is_pure_and_accepts_tensor_lr():
    params = TensorDict({"w": torch.ones(3)}, [])
    opt = Adam(lr=0.1)
    st = opt.init(params)
    grads = TensorDict({"w": torch.ones(3)}, [])
    new_params, new_st = opt.step(grads, st, params, lr=torch.tensor(0.1))
    assert torch.equal(params["w"], torch.ones(3)), "input params must not be mutated"
    assert int(st["step"]) == 0 and float(st["exp_avg", "w"].abs().sum()) == 0.0
    torch.testing.assert_close(new_params["w"], torch.full((3,), 0.9))  # first Adam step moves by lr


def test_adam_handles_non_contiguous_grads():
    params = TensorDict({"w": torch.arange(6.0).reshape(2, 3)}, [])
    grads_t = torch.tensor([[1.0, -2.0], [3.0, 4.0], [-5.0, 6.0]]).T  # transposed view
    opt = Adam(lr=0.1)
    p1, _ = opt.step(TensorDict({"w": grads_t}, []), opt.init(params), params)
    p2, _ = opt.step(TensorDict({"w": grads_t.contiguous()}, []), opt.init(params), params)
    torch.testing.assert_close(p1["w"], p2["w"])


def test_clip_by_global_norm():
    grads = TensorDict({"a": torch.tensor([3.0, 0.0]), "b": torch.tensor([4.0])}, [])
    assert float(global_norm(grads)) == pytest.approx(5.0)
    clipped, norm = clip_by_global_norm(grads, 1.0)
    assert float(norm) == pytest.approx(5.0)
    assert float(global_norm(clipped)) == pytest.approx(1.0, rel=1e-5)
    same, _ = clip_by_global_norm(grads, 10.0)
    torch.testing.assert_close(same["a"], grads["a"])


def test_linear_schedule():
    f = linear_schedule(1.0, 0.1, 100)
    assert float(f(torch.tensor(0))) == pytest.approx(1.0)
    assert float(f(torch.tensor(50))) == pytest.approx(0.55)
    assert float(f(torch.tensor(500))) == pytest.approx(0.1)
