"""DeepMind Control Suite from pixels, as DrQ-v2 uses it, behind a gymnasium API.

``gym.make("dmc/cartpole_balance-v0")`` (registered on ``import rlfunc.envs``
for the suite's benchmarking tasks) gives :class:`DMCPixels`: the official
DrQ-v2 environment stack (facebookresearch/drqv2 ``dmc.py``):

* ``suite.load(domain, task)``; actions rescaled to ``[-1, 1]`` (DMC's
  bounds already are for these tasks; rescaled anyway);
* action repeat 2: the action is applied ``action_repeat`` times, rewards
  summed, stopping at the episode end (one agent step = ``action_repeat``
  frames; the 1000-frame episodes are 500 agent steps);
* after each agent step one ``84 x 84`` RGB render from camera 0 (2 for
  quadruped), channels first;
* 3-frame stacking on the channel axis, oldest first; the reset frame is
  repeated to fill the stack (``FrameStackWrapper``): uint8 ``[9, 84, 84]``;
* DMC's time limit is a truncation (``discount`` 1 at the last step);
  a last step with ``discount`` 0 is a termination.

Rendering is headless on the CPU through MuJoCo's EGL (Mesa llvmpipe) or
OSMesa backend. ``MUJOCO_GL`` is respected when set; otherwise
:func:`select_gl_backend` picks ``egl`` if libEGL is installed, else
``osmesa``, else stops with an error that names the packages to install.
Rendering options that trade fidelity for speed are explicit and off by
default (the paper's renders): ``no_shadows`` (``light_castshadow = 0``),
``no_reflections`` (``mat_reflectance = 0``), ``no_multisampling``
(``vis.quality.offsamples = 0``), or ``fast_render=True`` for all three
(MACHINE-FACTS.md: 25-75 fps -> 250-1,150 fps at 84x84, frames still correct
but not the paper's).

Seeding: ``reset(seed=s)`` seeds the env's ``np_random``; every reset draws
the physics' random state from it, so restoring ``np_random`` (as a resumed
run does) reproduces the following episodes.
"""

from __future__ import annotations

import ctypes.util
import os

import gymnasium as gym
import numpy as np

from rlfunc.envs.pixels import FrameStack, check_frame

__all__ = ["DMCPixels", "select_gl_backend", "register", "TASKS", "DMC_INSTALL_HINT", "GL_INSTALL_HINT"]

DMC_INSTALL_HINT = 'pip install -e ".[dmc]"  (dm-control and mujoco==3.17.0)'
GL_INSTALL_HINT = (
    "install a headless OpenGL backend: `apt-get install -y libegl1 libgl1-mesa-dri` and set MUJOCO_GL=egl, "
    "or `apt-get install -y libosmesa6` and set MUJOCO_GL=osmesa"
)

TASKS: tuple[tuple[str, str], ...] = (
    ("acrobot", "swingup"),
    ("ball_in_cup", "catch"),
    ("cartpole", "balance"),
    ("cartpole", "balance_sparse"),
    ("cartpole", "swingup"),
    ("cartpole", "swingup_sparse"),
    ("cheetah", "run"),
    ("finger", "spin"),
    ("finger", "turn_easy"),
    ("finger", "turn_hard"),
    ("hopper", "hop"),
    ("hopper", "stand"),
    ("humanoid", "run"),
    ("humanoid", "stand"),
    ("humanoid", "walk"),
    ("pendulum", "swingup"),
    ("point_mass", "easy"),
    ("quadruped", "run"),
    ("quadruped", "walk"),
    ("reacher", "easy"),
    ("reacher", "hard"),
    ("walker", "run"),
    ("walker", "stand"),
    ("walker", "walk"),
)
"""DMC tasks registered as ``dmc/<domain>_<task>-v0`` (the DrQ-v2 paper's set)."""


def select_gl_backend() -> str:
    """The MuJoCo GL backend to use, set in ``MUJOCO_GL`` (call before importing dm_control)."""
    chosen = os.environ.get("MUJOCO_GL")
    if chosen:
        return chosen
    if ctypes.util.find_library("EGL"):
        chosen = "egl"
    elif ctypes.util.find_library("OSMesa"):
        chosen = "osmesa"
    else:
        raise RuntimeError(f"MuJoCo cannot render headless here: neither libEGL nor libOSMesa was found; {GL_INSTALL_HINT}.")
    os.environ["MUJOCO_GL"] = chosen
    os.environ.setdefault("PYOPENGL_PLATFORM", chosen)
    return chosen


def load_suite():
    """``dm_control.suite``, imported after :func:`select_gl_backend` (dm_control fixes its GL backend at import)."""
    select_gl_backend()
    try:
        from dm_control import suite
    except ImportError as exc:
        raise RuntimeError(f"DeepMind Control Suite envs need dm-control ({exc}): {DMC_INSTALL_HINT}.") from exc
    return suite


class DMCPixels(gym.Env):
    """One DMC task from pixels (see module doc). Observation uint8 ``[3 S, size, size]``."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        domain: str,
        task: str,
        action_repeat: int = 2,
        size: int = 84,
        frame_stack: int = 3,
        camera_id: int | None = None,
        no_shadows: bool = False,
        no_reflections: bool = False,
        no_multisampling: bool = False,
        fast_render: bool = False,
        render_mode: str | None = None,
    ) -> None:
        if action_repeat < 1:
            raise ValueError(f"action_repeat must be at least 1, got {action_repeat}.")
        if size < 8:
            raise ValueError(f"size must be at least 8, got {size}.")
        try:
            suite = load_suite()
        except RuntimeError as exc:  # dm-control or a headless GL library missing: make_env's one sentence
            raise gym.error.DependencyNotInstalled(str(exc)) from None
        try:
            self._env = suite.load(domain, task, task_kwargs={"random": 0})
        except ValueError as exc:
            raise ValueError(f"Unknown DeepMind Control task {domain}/{task}: {exc}") from exc
        self.domain, self.task = domain, task
        self.action_repeat = int(action_repeat)
        self.size = int(size)
        self.camera_id = int(camera_id) if camera_id is not None else (2 if domain == "quadruped" else 0)
        self.render_mode = render_mode
        self.render_options = {
            "no_shadows": bool(no_shadows or fast_render),
            "no_reflections": bool(no_reflections or fast_render),
            "no_multisampling": bool(no_multisampling or fast_render),
        }
        model = self._env.physics.model
        if self.render_options["no_multisampling"]:
            model.vis.quality.offsamples = 0
        if self.render_options["no_shadows"]:
            model.light_castshadow[:] = 0
        if self.render_options["no_reflections"]:
            model.mat_reflectance[:] = 0
        spec = self._env.action_spec()
        self._act_low = np.asarray(spec.minimum, dtype=np.float64) * np.ones(spec.shape)
        self._act_high = np.asarray(spec.maximum, dtype=np.float64) * np.ones(spec.shape)
        self.action_space = gym.spaces.Box(-1.0, 1.0, spec.shape, np.float32)
        self.stack = FrameStack(frame_stack)
        self.observation_space = gym.spaces.Box(0, 255, (3 * self.stack.k, self.size, self.size), np.uint8)
        self._last_frame: np.ndarray | None = None
        self._camera = None  # built at the first render (it needs the GL context)

    # -- rendering ------------------------------------------------------------------
    def _render_frame(self) -> np.ndarray:
        """One ``[3, size, size]`` uint8 frame from the task's camera.

        The same image as ``physics.render(size, size, camera_id)`` (what the
        official drqv2 ``dmc.py`` calls), from one ``dm_control`` ``Camera``
        kept for the env's life instead of one built per call: building it
        allocates a whole MuJoCo scene, ~1.7 ms of a ~4.7 ms render on an
        H100 machine's EGL (README, "On a GPU").
        """
        try:
            if self._camera is None:
                from dm_control.mujoco.engine import Camera

                self._camera = Camera(self._env.physics, height=self.size, width=self.size, camera_id=self.camera_id)
            frame = self._camera.render()
        except Exception as exc:  # noqa: BLE001 -- the GL backend's own errors are cryptic
            raise RuntimeError(
                f"MuJoCo could not render {self.domain}/{self.task} headless with MUJOCO_GL="
                f"{os.environ.get('MUJOCO_GL')!r} ({type(exc).__name__}: {exc}); {GL_INSTALL_HINT}."
            ) from exc
        # A copy: the camera returns a (flipped) view of its own buffer, rewritten by the next render.
        frame = np.array(np.asarray(frame, dtype=np.uint8).transpose(2, 0, 1), order="C", copy=True)
        self._last_frame = frame
        return check_frame(frame, f"dmc/{self.domain}_{self.task}")

    def render(self):
        """The last rendered frame ``[size, size, 3]`` (gymnasium's rgb_array layout)."""
        frame = self._last_frame if self._last_frame is not None else self._render_frame()
        return frame.transpose(1, 2, 0).copy()

    # -- gymnasium API ----------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._env.task._random = np.random.RandomState(int(self.np_random.integers(2**31 - 1)))
        self._env.reset()
        return self.stack.reset(self._render_frame()), {}

    def step(self, action):
        a = np.clip(np.asarray(action, dtype=np.float64).reshape(self.action_space.shape), -1.0, 1.0)
        a = self._act_low + (a + 1.0) * 0.5 * (self._act_high - self._act_low)
        reward, discount = 0.0, 1.0
        terminated = truncated = False
        for _ in range(self.action_repeat):
            ts = self._env.step(a)
            reward += (ts.reward or 0.0) * discount
            discount *= ts.discount
            if ts.last():
                terminated = ts.discount == 0.0
                truncated = not terminated
                break
        obs = self.stack.push(self._render_frame())
        return obs, float(reward), bool(terminated), bool(truncated), {}

    def close(self) -> None:
        camera, self._camera = getattr(self, "_camera", None), None
        if camera is not None:
            camera._scene.free()  # as physics.render does after each call (Camera has no public free)
        env, self._env = getattr(self, "_env", None), None
        if env is not None:
            env.close()


def register() -> None:
    """Register ``dmc/<domain>_<task>-v0`` for :data:`TASKS` (idempotent; imports nothing)."""
    for domain, task in TASKS:
        env_id = f"dmc/{domain}_{task}-v0"
        if env_id not in gym.registry:
            gym.register(
                id=env_id,
                entry_point="rlfunc.envs.dmc:DMCPixels",
                kwargs={"domain": domain, "task": task},
                disable_env_checker=True,
            )


register()
