"""rlfunc: functional, JAX-style reinforcement learning on PyTorch.

Pure pieces live in :mod:`rlfunc.core` and :mod:`rlfunc.algos`; the training
runtime (collector, loop, checkpoints, CLI) in :mod:`rlfunc.runtime`.
"""

from rlfunc.runtime.api import evaluate, export, load
from rlfunc.runtime.callbacks import Callback
from rlfunc.runtime.trainer import resume, train

__version__ = "0.1.0"
__all__ = ["train", "resume", "load", "evaluate", "export", "Callback", "__version__"]
