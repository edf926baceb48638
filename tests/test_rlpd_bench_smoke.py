"""Smoke test of the RLPD benchmark entries: ``update --algo rlpd`` (tiny) and ``learn --algo rlpd`` options."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

torch.set_num_threads(1)


def _run_module():
    spec = importlib.util.spec_from_file_location("_bench_run_rlpd", ROOT / "benchmarks" / "run.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # the documented importlib recipe: run.py registers its plug-ins on itself
    sys.modules[spec.name] = mod  # run.py registers entries on sys.modules[__name__]
    spec.loader.exec_module(mod)
    return mod


def test_update_rlpd_quick(tmp_path):
    run = _run_module()
    out = tmp_path / "u.json"
    rc = run.main(["update", "--algo", "rlpd", "--quick", "--no-compile", "--threads", "1", "--utd", "2",
                   "--critics", "3", "--hidden", "16", "16", "--batch", "8", "--out", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    assert res["algo"] == "rlpd"
    names = {v["variant"] for v in res["variants"]}
    assert {"imperative", "functional-eager-loop", "functional-eager-bmm"} <= names
    assert "rlpd.py" in next(v for v in res["variants"] if v["variant"] == "imperative")["impl"]


def test_learn_rlpd_is_registered_with_its_options():
    run = _run_module()
    args = run.build_parser().parse_args(["learn", "--algo", "rlpd", "--seeds", "3", "--preset", "paper", "--data-noise", "0.1"])
    assert args.algo == "rlpd" and args.preset == "paper" and args.data_noise == 0.1
    assert "rlpd" in run.LEARN_ALGOS
