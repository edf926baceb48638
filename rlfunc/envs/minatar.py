"""MinAtar (Young & Tian 2019) behind gymnasium, registered on ``import rlfunc.envs``.

``gym.make("MinAtar/Breakout-v0")`` gives :class:`MinAtarEnv`: one of the five
10x10 games (Asterix, Breakout, Freeway, Seaquest, SpaceInvaders) of the
``minatar`` package (``pip install -e ".[minatar]"``; imported only when an env
is made). Observations are MinAtar's own ``[10, 10, C]`` boolean channels
(channels last); the paper's settings are the package's defaults: sticky
actions with probability 0.1 (Machado et al. 2018) and difficulty ramping.
The ids are ``-v0`` with the paper's full set of 6 actions (as
``minatar.gym.register_envs``'s ``-v0``); ``env.kwargs: {use_minimal_action_set:
true}`` gives each game's minimal set (its ``-v1``, not registered here, so that
gymnasium does not call ``-v0`` out of date).

Why not ``minatar.gym.BaseEnv`` itself: its ``reset`` does not seed gymnasium's
``np_random``, so a wrapper drawing from it (the flicker wrapper,
:class:`rlfunc.envs.wrappers.FlickerObservation`) would flicker differently for
the same seed, and a resumed run could not restore the game's random state.
Here ``reset(seed=s)`` seeds ``np_random`` and every reset reseeds the game
(sticky actions included) from it, so the same seed plays the same episodes and
restoring ``np_random`` reproduces the following ones (as :mod:`rlfunc.envs.dmc`). A seeded reset
also clears the action a sticky first step repeats (MinAtar keeps the previous episode's last one),
as a fresh env starts; an unseeded one keeps it, as MinAtar does, so the first episode after a resume
(a fresh env) can differ from the uninterrupted run's in that one step (with p = 0.1).
MinAtar episodes have no time limit (the paper's); add ``time_limit`` to cap them.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

__all__ = ["MinAtarEnv", "GAMES", "register", "MINATAR_INSTALL_HINT"]


GAMES = {"Asterix": "asterix", "Breakout": "breakout", "Freeway": "freeway", "Seaquest": "seaquest",
         "SpaceInvaders": "space_invaders"}
"""Registered name -> the ``minatar`` package's game module."""

MINATAR_INSTALL_HINT = 'pip install -e ".[minatar]" (the minatar package)'


class MinAtarEnv(gym.Env):
    """One MinAtar game (module doc): ``Box(0, 1, [10, 10, C], bool)`` observations, ``Discrete`` actions."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        game: str,
        use_minimal_action_set: bool = False,
        sticky_action_prob: float = 0.1,
        difficulty_ramping: bool = True,
    ) -> None:
        try:
            from minatar import Environment
        except ImportError:
            raise gym.error.DependencyNotInstalled(f"MinAtar is not installed; {MINATAR_INSTALL_HINT}") from None
        if game not in GAMES.values():
            raise ValueError(f"Unknown MinAtar game {game!r}; use one of {sorted(GAMES.values())}.")
        if not 0.0 <= float(sticky_action_prob) <= 1.0:
            raise ValueError(f"MinAtar sticky_action_prob must be a probability in [0, 1], got {sticky_action_prob!r}.")
        self.game = Environment(game, sticky_action_prob=float(sticky_action_prob), difficulty_ramping=bool(difficulty_ramping))
        self.action_set = list(self.game.minimal_action_set()) if use_minimal_action_set else list(range(self.game.num_actions()))
        self.action_space = gym.spaces.Discrete(len(self.action_set))
        self.observation_space = gym.spaces.Box(0, 1, shape=tuple(self.game.state_shape()), dtype=bool)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.game.seed(int(self.np_random.integers(2**31 - 1)))
        if seed is not None:
            # minatar.Environment keeps last_action across resets, so an episode's first (sticky) step could
            # repeat the previous episode's last action; a seeded reset plays what a fresh env plays. Unseeded
            # resets (training's autoreset) keep MinAtar's own behaviour.
            self.game.last_action = 0
        self.game.reset()
        return self.game.state().astype(bool, copy=False), {}

    def step(self, action):
        reward, done = self.game.act(self.action_set[int(action)])
        return self.game.state().astype(bool, copy=False), float(reward), bool(done), False, {}


def register() -> None:
    """Register ``MinAtar/<Game>-v0`` (6 actions) for the five games (idempotent; imports nothing)."""
    for name, game in GAMES.items():
        env_id = f"MinAtar/{name}-v0"
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point="rlfunc.envs.minatar:MinAtarEnv", kwargs={"game": game})


register()
