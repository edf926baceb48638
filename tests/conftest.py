"""Test-suite settings.

Threads are pinned to 1: the CI machines have 2 cores, and with a second
process running, 2-thread matmuls slow down 3-20x (MACHINE-FACTS.md).
"""

import os
import warnings

import torch

torch.set_num_threads(1)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
warnings.filterwarnings("ignore", message=".*precision lowered by casting.*")
