"""Review of the pure functional API from a researcher's script: bad inputs to ``init``,
``update``, ``loss`` and ``act`` stop at the top of the public function with one
``ValueError`` sentence (not a matrix-product error deep inside, not a silent broadcast),
and the checks stay out of the compiled path (shapes, dtypes and keys only)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rlfunc.algos import drqn, drqv2, r2d2, redq, rlpd
from rlfunc.core import population

G, B = 2, 4
BOX3, BOX1 = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (1,))


def _redq():
    config = redq.Config(hidden_sizes=(8, 8), num_critics=3, updates_per_step=G, batch_size=B)
    return config, redq.init(config, BOX3, BOX1, seed=0)


def _redq_batch(g=G, b=B, o=3, a=1, **over):
    gen = torch.Generator().manual_seed(1)
    d = {
        "obs": torch.randn(g, b, o, generator=gen),
        "action": torch.rand(g, b, a, generator=gen) * 2 - 1,
        "reward": torch.randn(g, b, generator=gen),
        "next_obs": torch.randn(g, b, o, generator=gen),
        "terminated": torch.zeros(g, b),
    }
    d.update(over)
    return TensorDict({k: v for k, v in d.items() if v is not None}, batch_size=[g, b])


def _noise(config, g=G, b=B, a=1):
    return redq.draw_noise(config, g, b, a, generator=torch.Generator().manual_seed(0))


def _one_sentence(exc: pytest.ExceptionInfo, *fragments: str) -> None:
    msg = str(exc.value)
    assert msg.count("\n") == 0 and msg.endswith("."), msg
    for f in fragments:
        assert f in msg, msg


@pytest.mark.parametrize(
    "over, fragments",
    [
        ({"obs": torch.randn(G, B, 3, dtype=torch.float64)}, ("batch['obs']", "float64")),
        ({"action": torch.zeros(G, B, 1, dtype=torch.int32)}, ("batch['action']", "int32")),
        ({"reward": torch.zeros(G, B, 1)}, ("batch['reward']", "[G, B] = [2, 4]")),
        ({"terminated": torch.zeros(G, B, 1)}, ("batch['terminated']", "[2, 4, 1]")),
        ({"terminated": None}, ("missing 'terminated'",)),
        ({"obs": torch.randn(G, B, 5)}, ("batch['obs']", "[G, B, O] = [2, 4, 3]")),
        ({"action": torch.rand(G, B, 2)}, ("batch['action']", "[G, B, A] = [2, 4, 1]")),
    ],
)
def test_redq_update_refuses_bad_batches_in_one_sentence(over, fragments):
    config, state = _redq()
    with pytest.raises(ValueError) as exc:
        redq.update(state, _redq_batch(**over), _noise(config))
    _one_sentence(exc, "redq.update", *fragments)


def test_redq_update_accepts_bool_terminated_and_extra_keys():
    config, state = _redq()
    batch = _redq_batch(terminated=torch.zeros(G, B, dtype=torch.bool), truncated=torch.zeros(G, B))
    ref, _ = redq.update(state, _redq_batch(), _noise(config))
    new, _ = redq.update(state, batch, _noise(config))
    assert torch.equal(new["params", "critic", "0", "weight"], ref["params", "critic", "0", "weight"])


@pytest.mark.parametrize("g, b, a, n", [(3, B, 1, 3), (G, 5, 1, 3), (G, B, 2, 3), (G, B, 1, 5)])
def test_redq_update_refuses_noise_drawn_for_another_batch_or_ensemble(g, b, a, n):
    # Noise for a larger G was silently sliced, and subset draws for another N silently
    # restricted the target subset to the first critics.
    config, state = _redq()
    other = redq.Config(hidden_sizes=(8, 8), num_critics=n, updates_per_step=G, batch_size=B)
    with pytest.raises(ValueError) as exc:
        redq.update(state, _redq_batch(), _noise(other, g, b, a))
    _one_sentence(exc, "redq.update", "noise[", "draw_noise")


def test_redq_update_refuses_empty_batches():
    config, state = _redq()
    with pytest.raises(ValueError) as exc:  # was an UnboundLocalError (G = 0) or a NaN loss (B = 0)
        redq.update(state, _redq_batch(g=0), _noise(config, g=0))
    _one_sentence(exc, "is empty")
    with pytest.raises(ValueError) as exc:
        redq.update(state, _redq_batch(b=0), _noise(config, b=0))
    _one_sentence(exc, "is empty")


def test_redq_update_refuses_a_state_without_config_or_of_another_algorithm():
    config, state = _redq()
    with pytest.raises(ValueError) as exc:  # what load_checkpoint returns: tensors only
        redq.update(state.exclude("config"), _redq_batch(), _noise(config))
    _one_sentence(exc, "no 'config' entry", "set_non_tensor")
    other = drqn.init(drqn.Config(encoder_sizes=(8,), lstm_size=8), BOX3, gym.spaces.Discrete(2))
    with pytest.raises(ValueError) as exc:
        redq.update(other, _redq_batch(), _noise(config))
    _one_sentence(exc, "drqn.Config", "redq.init")
    with pytest.raises(ValueError) as exc:
        rlpd.update(other, _redq_batch(), _noise(config))
    _one_sentence(exc, "drqn.Config")


def test_redq_update_refuses_batch_and_noise_on_another_device():
    config, state = _redq()
    with pytest.raises(ValueError) as exc:
        redq.update(state, _redq_batch(), _noise(config).to("meta"))
    _one_sentence(exc, "is on meta", "state is on cpu")


def test_checkpointed_state_continues_after_putting_the_config_back(tmp_path):
    from rlfunc.runtime.checkpoint import checkpoint_name, load_checkpoint, save_checkpoint

    config, state = _redq()
    s1, _ = redq.update(state, _redq_batch(), _noise(config))
    loaded, _ = load_checkpoint(save_checkpoint(tmp_path, checkpoint_name(1), s1, {}))
    with pytest.raises(ValueError, match="no 'config' entry"):
        redq.update(loaded, _redq_batch(), _noise(config))
    loaded.set_non_tensor("config", config)
    a, _ = redq.update(loaded, _redq_batch(), _noise(config))
    b, _ = redq.update(s1, _redq_batch(), _noise(config))
    for key in b.keys(include_nested=True, leaves_only=True):
        assert torch.equal(a[key], b[key]), key


def test_redq_update_is_pure_and_deterministic():
    config, state = _redq()
    before = {k: (v.clone(), v.data_ptr()) for k, v in state.items(True, True)}
    batch, noise = _redq_batch(), _noise(config)
    s1, _ = redq.update(state, batch, noise)
    s2, _ = redq.update(state, batch, noise)
    for key, (value, ptr) in before.items():
        assert torch.equal(state[key], value) and state[key].data_ptr() == ptr, key
    for key in s1.keys(True, True):
        assert torch.equal(s1[key], s2[key]), key


def test_vmapped_update_without_noise_says_to_pass_each_members_noise():
    config, _ = _redq()
    pop = population.stack([redq.init(config, BOX3, BOX1, seed=s) for s in (0, 1)])
    batch = torch.stack([_redq_batch(), _redq_batch()])
    for fn in (population.vmap_update(redq.update), torch.vmap(redq.update, randomness="error")):
        with pytest.raises(ValueError) as exc:
            fn(pop, batch)
        _one_sentence(exc, "torch.vmap", "draw_per_member")
    noise = population.draw_per_member(lambda g: redq.draw_noise(config, G, B, 1, generator=g),
                                       [torch.Generator().manual_seed(k) for k in range(2)])
    new, metrics = population.vmap_update(redq.update)(pop, batch, noise)  # the checks vmap
    assert metrics["critic_loss"].shape == (2,)
    looped, _ = redq.make_population_update()(pop, batch, noise)  # members=True checks the [P] shapes
    assert torch.equal(looped["params", "log_alpha"], new["params", "log_alpha"])


def test_redq_act_refuses_bad_observations_and_a_whole_state():
    _, state = _redq()
    for obs in (torch.zeros(2, 5), torch.zeros(2, 3, dtype=torch.float64)):
        with pytest.raises(ValueError) as exc:
            redq.act(state["params"], obs, deterministic=True)
        _one_sentence(exc, "redq.act", "[..., 3]")
    with pytest.raises(ValueError) as exc:
        redq.act(state, torch.zeros(2, 3))
    _one_sentence(exc, "state['params']")


@pytest.mark.parametrize("module, config", [
    (redq, redq.Config(hidden_sizes=(8,))),
    (drqn, drqn.Config(encoder_sizes=(8,), lstm_size=8)),
])
def test_init_refuses_unavailable_cuda_bad_device_strings_and_fractional_seeds(module, config):
    act_space = BOX1 if module is redq else gym.spaces.Discrete(2)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError) as exc:  # was torch's AssertionError "not compiled with CUDA"
            module.init(config, BOX3, act_space, device="cuda")
        _one_sentence(exc, "CUDA", "'cpu'")
    with pytest.raises(ValueError) as exc:
        module.init(config, BOX3, act_space, device="gpu")
    _one_sentence(exc, "device must be")
    with pytest.raises(ValueError) as exc:  # 1.5 was silently the seed 1
        module.init(config, BOX3, act_space, seed=1.5)
    _one_sentence(exc, "seed must be an integer")
    a = module.init(config, BOX3, act_space, seed=np.int64(3))
    b = module.init(config, BOX3, act_space, seed=3)
    assert all(torch.equal(a[k], b[k]) for k in b.keys(True, True))
    assert module.init(config, BOX3, act_space, device="meta")["step"].device.type == "meta"


def _window(T, Bn=4, O=4, **over):
    d = {"obs": torch.randn(T, Bn, O), "action": torch.randint(2, (T, Bn)), "reward": torch.randn(T, Bn),
         "next_obs": torch.randn(T, Bn, O), "terminated": torch.zeros(T, Bn, dtype=torch.bool),
         "mask": torch.ones(T, Bn, dtype=torch.bool)}
    d.update(over)
    return TensorDict({k: v for k, v in d.items() if v is not None}, batch_size=[T, Bn])


RECURRENT = [
    (drqn, drqn.Config(encoder_sizes=(8,), lstm_size=8, sequence_length=3), 3),
    (r2d2, r2d2.Config(encoder_sizes=(8,), lstm_size=8, sequence_length=3, burn_in=1, sequence_period=2,
                       initial_state="zeros"), 4),
]


@pytest.mark.parametrize("module, config, T", RECURRENT)
def test_recurrent_updates_refuse_bad_windows_in_one_sentence(module, config, T):
    state = module.init(config, gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), seed=0)
    module.update(state, _window(T, action=torch.randint(2, (T, 4), dtype=torch.int32)))  # any integer dtype
    cases = [
        ({"obs": torch.randn(T, 4, 4, dtype=torch.float64)}, "float64"),
        ({"obs": torch.randn(T, 4, 5), "next_obs": torch.randn(T, 4, 5)}, "[T, B, O]"),
        ({"action": torch.rand(T, 4)}, "integer"),  # float indices were silently truncated by .long()
        ({"mask": torch.ones(T, 4, 1, dtype=torch.bool)}, "batch['mask']"),
    ]
    for over, fragment in cases:
        with pytest.raises(ValueError) as exc:
            module.update(state, _window(T, **over))
        _one_sentence(exc, f"{module.__name__.rsplit('.', 1)[-1]}.loss", fragment)
    with pytest.raises(ValueError) as exc:
        module.update(state, _window(T, Bn=0))
    _one_sentence(exc, "is empty")
    with pytest.raises(ValueError) as exc:
        module.update(state.exclude("config"), _window(T))
    _one_sentence(exc, "no 'config' entry")
    with pytest.raises(ValueError) as exc:
        module.update(redq.init(redq.Config(hidden_sizes=(8,)), BOX3, BOX1), _window(T))
    _one_sentence(exc, "redq.Config")


def test_drqn_act_refuses_bad_observations():
    config = drqn.Config(encoder_sizes=(8,), lstm_size=8)
    state = drqn.init(config, gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))
    carry = drqn.initial_carry(config, 3)
    for obs, fragment in ((torch.zeros(3, 5), "[B, O] = [3, 4]"), (torch.zeros(3, 4, dtype=torch.float64), "float64")):
        with pytest.raises(ValueError) as exc:
            drqn.act(state["params"], obs, carry, 0.1, torch.rand(2, 3))
        _one_sentence(exc, "q_step", fragment)
    with pytest.raises(ValueError) as exc:
        drqn.act(state, torch.zeros(3, 4), carry, 0.1, torch.rand(2, 3))
    _one_sentence(exc, "state['params']")


def _drqv2():
    config = drqv2.Config(feature_dim=8, hidden_dim=8, encoder_channels=(4, 4), encoder_strides=(2, 1),
                          batch_size=B, frame_stack=1, pad=2)
    space = gym.spaces.Box(0, 255, (3, 16, 16), dtype=np.uint8)
    return config, drqv2.init(config, space, gym.spaces.Box(-1, 1, (2,)), seed=0)


def _pixels(b=B, c=3, h=16, a=2, **over):
    d = {"obs": torch.randint(0, 255, (b, c, h, h), dtype=torch.uint8), "action": torch.rand(b, a) * 2 - 1,
         "reward": torch.randn(b), "discount": torch.full((b,), 0.99),
         "next_obs": torch.randint(0, 255, (b, c, h, h), dtype=torch.uint8)}
    d.update(over)
    return TensorDict(d, batch_size=[b])


@pytest.mark.parametrize("over, noise_b, fragment", [
    ({"obs": torch.zeros(B, 16, 16, 3, dtype=torch.uint8)}, B, "channels first"),
    ({"obs": torch.zeros(B, 3, 20, 20, dtype=torch.uint8)}, B, "[4, 3, 20, 20]"),
    ({"action": torch.rand(B, 3)}, B, "[B, A] = [4, 2]"),
    ({"reward": torch.randn(B, 1)}, B, "batch['reward']"),
    ({}, 5, "noise['shift_obs']"),
])
def test_drqv2_update_refuses_bad_batches_in_one_sentence(over, noise_b, fragment):
    config, state = _drqv2()
    noise = drqv2.draw_noise(config, noise_b, 2, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError) as exc:
        drqv2.update(state, _pixels(**over), noise)
    _one_sentence(exc, "drqv2.update", fragment)


def test_drqv2_act_without_config_on_a_custom_encoder_says_to_pass_it():
    config, state = _drqv2()
    obs = torch.zeros(2, 3, 16, 16, dtype=torch.uint8)
    with pytest.raises(ValueError) as exc:  # was "conv_encoder_apply: 2 conv layers but 4 strides"
        drqv2.act(state["params"], obs, deterministic=True)
    _one_sentence(exc, "config=state['config']")
    assert drqv2.act(state["params"], obs, deterministic=True, config=config).shape == (2, 2)


@pytest.mark.parametrize("module, field, value", [
    (redq, "log_std_min", "x"), (redq, "log_std_max", None), (rlpd, "log_std_min", (1,)),
    (redq, "tanh_epsilon", True),
    (drqn, "lr_decay_updates", "x"), (drqn, "lr_end", None), (r2d2, "lr_decay_updates", 1.5), (r2d2, "lr_end", "x"),
])
def test_configs_refuse_bad_types_in_one_sentence_naming_the_field(module, field, value):
    with pytest.raises(ValueError) as exc:  # were TypeErrors from a comparison
        module.Config(**{field: value})
    _one_sentence(exc)
    assert str(exc.value).startswith(field), str(exc.value)


def test_checks_compile_fullgraph_without_graph_breaks():
    # The input checks read shapes, dtypes, keys and devices only: the compiled update keeps one graph.
    config, state = _redq()
    batch, noise = _redq_batch(), _noise(config)
    compiled = torch.compile(redq.update, fullgraph=True)
    new, _ = compiled(state, batch, noise)
    ref, _ = redq.update(state, batch, noise)
    torch.testing.assert_close(new["params", "actor", "mean", "weight"], ref["params", "actor", "mean", "weight"])
    # Compiled, the checks are skipped (traced under dynamic shapes they added guards or failed spuriously):
    # a bad input fails in torch; eagerly it is the sentence.
    with pytest.raises(Exception):
        compiled(state, _redq_batch(obs=torch.randn(G, B, 5)), noise)
    with pytest.raises(ValueError, match="batch\\['obs'\\]"):
        redq.update(state, _redq_batch(obs=torch.randn(G, B, 5)), noise)
