"""Scale-out on Ray, above the runtime: ``rlfunc sweep`` (:mod:`rlfunc.scale.sweep`) and distributed
R2D2 on Ray actors (:mod:`rlfunc.scale.distributed`, for configs with a ``distributed`` section).

Ray is imported lazily, inside the functions that need it; importing this package does not
import Ray, and nothing in ``core``, ``algos``, ``replay``, ``envs`` or ``runtime`` imports
it. Install Ray with ``pip install -e ".[ray]"``.
"""

from rlfunc.scale.results import collected_run, run_finished, summary
from rlfunc.runtime.specs import parse_grid, parse_seeds
from rlfunc.scale.sweep import sweep

__all__ = ["sweep", "parse_seeds", "parse_grid", "collected_run", "run_finished", "summary"]
