"""Pixel observations for any gymnasium env that renders ``rgb_array`` frames.

:class:`PixelObservation` turns e.g. ``Pendulum-v1`` (made with
``render_mode="rgb_array"``) into DrQ-v2's observation: ``size x size`` RGB
frames, channels first, the last ``frame_stack`` frames stacked on the
channel axis (uint8 ``[3 * frame_stack, size, size]``), each agent step
repeating the action ``action_repeat`` times (rewards summed, stopping at an
episode end). The stack of the first step repeats the reset frame, as the
official DrQ-v2 ``FrameStackWrapper`` does. It is registered as the
``pixels`` wrapper of :func:`rlfunc.envs.make_env`::

    env: {id: Pendulum-v1, kwargs: {render_mode: rgb_array},
          wrappers: [{pixels: {size: 84, frame_stack: 3, action_repeat: 2}}]}

Frames are rendered at ``size`` directly where the env allows it (classic
control's ``screen_dim``; MACHINE-FACTS.md: ~1,000 fps instead of ~290 fps
for a 500x500 render plus resize), otherwise resized with area averaging.
An all-black frame raises an error (a MuJoCo env whose GL context was lost
returns those silently).

Why not gymnasium's own wrappers (``AddRenderObservation`` +
``ResizeObservation`` + ``FrameStackObservation``), checked against gymnasium
1.x:

* ``AddRenderObservation`` renders at the env's full size (classic control:
  500x500) and ``ResizeObservation`` then resizes with OpenCV, an extra
  dependency; rendering at ``size`` directly is ~3.5x faster here (above).
* ``FrameStackObservation`` stacks on a new leading axis (``[k, H, W, C]``,
  channels last); DrQ-v2's encoder takes the official ``FrameStackWrapper``'s
  layout, ``k`` frames concatenated on the channel axis, channels first
  (``[3k, H, W]``), so a further reshaping wrapper would be needed anyway (its
  ``padding_type="reset"`` does match the official first stack).
* gymnasium has no generic action repeat: ``MaxAndSkipObservation`` is Atari's
  (it max-pools the last two frames, which DrQ-v2 does not do).
* neither checks for the silent all-black frames of a lost MuJoCo context.

The DeepMind Control path (:mod:`rlfunc.envs.dmc`) shares :class:`FrameStack`.
"""

from __future__ import annotations

from collections import deque

import gymnasium as gym
import numpy as np

__all__ = ["PixelObservation", "FrameStack", "check_frame", "resize_frame", "MAX_SIZE"]


def check_frame(frame: np.ndarray, where: str) -> np.ndarray:
    """Raise if ``frame`` is entirely black (a lost render context), else return it."""
    if not frame.any():
        raise RuntimeError(
            f"{where} rendered an all-black frame. MuJoCo returns those silently when its GL context "
            "was lost (e.g. another rendering env was garbage-collected); create one env per process "
            "or keep every rendering env alive until the end."
        )
    return frame


def resize_frame(frame: np.ndarray, size: int) -> np.ndarray:
    """``[H, W, 3]`` uint8 -> ``[size, size, 3]`` uint8 by area averaging (no-op at size)."""
    if frame.shape[0] == size and frame.shape[1] == size:
        return frame
    import torch
    import torch.nn.functional as F

    t = torch.from_numpy(np.ascontiguousarray(frame)).permute(2, 0, 1).unsqueeze(0).float()
    out = F.interpolate(t, size=(size, size), mode="area")
    return out[0].permute(1, 2, 0).round().clamp(0, 255).to(torch.uint8).numpy()


class FrameStack:
    """The last ``k`` frames ``[C, H, W]``, concatenated oldest first on the channel axis."""

    def __init__(self, k: int) -> None:
        if k < 1:
            raise ValueError(f"frame_stack must be at least 1, got {k}.")
        self.k = int(k)
        self._frames: deque = deque(maxlen=self.k)

    def reset(self, frame: np.ndarray) -> np.ndarray:
        self._frames.clear()
        for _ in range(self.k):
            self._frames.append(frame)
        return self.observation()

    def push(self, frame: np.ndarray) -> np.ndarray:
        self._frames.append(frame)
        return self.observation()

    def observation(self) -> np.ndarray:
        return np.concatenate(list(self._frames), axis=0)


MAX_SIZE = 1024
"""The largest ``size`` of the pixels wrapper: frames are rendered and stored at it (DrQ-v2 uses 84)."""


class PixelObservation(gym.Wrapper):
    """Rendered, stacked, action-repeated observations (see module doc)."""

    @staticmethod
    def check_arguments(size: int = 84, frame_stack: int = 3, action_repeat: int = 1) -> None:
        """The checks that need no env (run by :func:`rlfunc.envs.build_wrappers` at config time)."""
        bounds = {"size": (size, 8, MAX_SIZE), "frame_stack": (frame_stack, 1, None),
                  "action_repeat": (action_repeat, 1, None)}
        for name, (value, low, high) in bounds.items():
            is_int = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
            if not is_int or value < low or (high is not None and value > high):
                what = f"in [{low}, {high}]" if high is not None else f">= {low}"
                raise ValueError(f"The pixels wrapper's {name} must be an integer {what}, got {value!r}.")

    def __init__(self, env: gym.Env, size: int = 84, frame_stack: int = 3, action_repeat: int = 1) -> None:
        self.check_arguments(size, frame_stack, action_repeat)
        super().__init__(env)
        if env.render_mode != "rgb_array":
            raise ValueError(
                f"The pixels wrapper needs an env made with render_mode='rgb_array', got render_mode={env.render_mode!r}; "
                "add `kwargs: {render_mode: rgb_array}` to the env section."
            )
        self.size = int(size)
        self.action_repeat = int(action_repeat)
        self.stack = FrameStack(frame_stack)
        base = env.unwrapped
        if hasattr(base, "screen_dim") and getattr(base, "screen", None) is None:
            base.screen_dim = self.size  # classic control draws at this size directly
        self.observation_space = gym.spaces.Box(0, 255, (3 * self.stack.k, self.size, self.size), np.uint8)

    def _frame(self) -> np.ndarray:
        frame = self.env.render()
        if frame is None or np.asarray(frame).ndim != 3:
            raise RuntimeError("The pixels wrapper got no rgb_array frame from env.render().")
        frame = resize_frame(np.asarray(frame, dtype=np.uint8), self.size)
        return check_frame(np.ascontiguousarray(frame.transpose(2, 0, 1)), "The pixels wrapper")

    def reset(self, *, seed=None, options=None):
        _, info = self.env.reset(seed=seed, options=options)
        return self.stack.reset(self._frame()), info

    def step(self, action):
        total = 0.0
        terminated = truncated = False
        info: dict = {}
        for _ in range(self.action_repeat):
            _, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        return self.stack.push(self._frame()), total, terminated, truncated, info
