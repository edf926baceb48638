"""Security review (s33) of ``rlfunc sweep --resume SWEEP_DIR``: the stored ``sweep.json`` (and the sweep
directory around it) is a file the user loads, which may be damaged or someone else's. Each check here
happens before Ray starts (``connect`` is replaced by a function that fails the test if called), so no
test starts Ray:

1. a run ``name`` that is not one plain path component (absolute, ``..``, a separator, NUL), two runs of
   one name, and other fields the tasks are built from were used as they were: ``--resume`` trained in (and
   cleared the contents of) any directory; they are refused by ``load_plan`` in one sentence naming
   sweep.json and the entry, as is a run directory that is a symlink;
2. ``attempts.jsonl``, the results JSON's temporary file and ``results.png`` were written through symlinks
   planted in the sweep directory; the log is opened as the run directory's logs are (O_NOFOLLOW, refused),
   the JSON and PNG go to new files renamed into place (a link there is replaced, not written through);
3. ``--resume`` imported the modules the stored config names (``module:Env-v0``, ``module:Class`` wrappers),
   which ``rlfunc resume`` refuses unless ``--allow-import`` names them; ``sweep --resume`` now does the same.
"""

import importlib
import json
import os
import sys
from pathlib import Path

import pytest

from rlfunc.runtime.cli import build_parser, main
from rlfunc.runtime.config import ConfigError
from rlfunc.scale.sweep import ATTEMPTS_FILE, PLAN_FILE, _log_attempt, load_plan, sweep, train_or_continue
from test_review_sweep_faults import TINY, finished_sweep, planned  # noqa: F401 (finished_sweep: a fixture)

sweep_module = importlib.import_module("rlfunc.scale.sweep")  # the module (rlfunc.scale.sweep is also its function)


@pytest.fixture
def no_ray(monkeypatch):
    """Ray must never be started or joined: every check of these tests comes before it."""

    def connect(*args, **kwargs):
        raise AssertionError("Ray was started")

    monkeypatch.setattr(sweep_module, "connect", connect)
    monkeypatch.setattr(sweep_module, "_import_ray", lambda: None)  # Ray need not be installed to reach connect


def edit_plan(sweep_dir: Path, change) -> None:
    path = sweep_dir / PLAN_FILE
    plan = json.loads(path.read_text())
    change(plan)
    path.write_text(json.dumps(plan))


def one_sentence(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and text.endswith("."), text
    return text


@pytest.fixture
def victim(tmp_path):
    """A directory outside the sweep that a hostile plan points to, with a file that must survive."""
    d = tmp_path / "victim"
    d.mkdir()
    (d / "precious.txt").write_text("keep me")
    return d


# ----------------------------------------------------------------------------- 1. names and fields of sweep.json


@pytest.mark.parametrize("bad", ["ABSOLUTE", "../victim", "sub/run", ".", "..", "a\x00b", "back\\slash", "sweep.json"])
def test_a_run_name_that_is_not_one_plain_path_component_is_refused_before_anything(tmp_path, victim, no_ray, bad):
    plan, sweep_dir = planned(tmp_path, TINY)
    name = str(victim) if bad == "ABSOLUTE" else bad
    edit_plan(sweep_dir, lambda p: p["runs"][0].update(name=name))
    with pytest.raises(ConfigError) as refused:
        load_plan(sweep_dir)
    text = one_sentence(refused.value)
    assert repr(str(sweep_dir / PLAN_FILE)) in text and repr(name) in text, text
    assert "not one plain directory name" in text
    with pytest.raises(ConfigError, match="not one plain directory name"):
        sweep(resume=sweep_dir, echo=lambda line: None)
    assert (victim / "precious.txt").read_text() == "keep me" and os.listdir(victim) == ["precious.txt"]
    assert not (sweep_dir / ATTEMPTS_FILE).exists()


def test_two_runs_of_one_name_are_refused(tmp_path, no_ray):
    plan, sweep_dir = planned(tmp_path, TINY, seeds="0-1")
    edit_plan(sweep_dir, lambda p: p["runs"][1].update(name=p["runs"][0]["name"]))
    with pytest.raises(ConfigError) as refused:
        load_plan(sweep_dir)
    text = one_sentence(refused.value)
    assert PLAN_FILE in text and f"two run entries named {plan['runs'][0]['name']!r}" in text, text


@pytest.mark.parametrize("field, change", [
    ("members", lambda p: p["runs"][0].update(members="3")),
    ("members", lambda p: p["runs"][0].update(members=10**9, seeds=[0])),
    ("threads", lambda p: p["runs"][0].update(threads="1; rm -rf /")),
    ("raw_config", lambda p: p.update(raw_config="configs/sac/pendulum.yaml")),
    ("overrides", lambda p: p["runs"][0].update(overrides=["train.run_dir=/"])),
    ("config", lambda p: p.update(config={"path": "/etc/passwd"})),
    ("grid", lambda p: p.update(grid={f"k{i}": list(range(100)) for i in range(10)})),
    ("gpus", lambda p: p.update(gpus=-1)),
    ("label", lambda p: p["runs"][0].update(label=None)),
    ("run entry 0", lambda p: p["runs"].__setitem__(0, "g0-s0")),
])
def test_other_fields_the_tasks_are_built_from_are_checked(tmp_path, no_ray, field, change):
    plan, sweep_dir = planned(tmp_path, TINY)
    edit_plan(sweep_dir, change)
    with pytest.raises(ConfigError) as refused:
        load_plan(sweep_dir)
    text = one_sentence(refused.value)
    assert repr(str(sweep_dir / PLAN_FILE)) in text and field in text, text


def test_the_stored_sweep_dir_is_not_used_and_a_good_plan_loads(tmp_path, victim):
    plan, sweep_dir = planned(tmp_path, TINY, seeds="0-1")
    edit_plan(sweep_dir, lambda p: p.update(sweep_dir=str(victim)))
    loaded = load_plan(sweep_dir)
    assert loaded["sweep_dir"] == str(sweep_dir.resolve())
    assert [e["name"] for e in loaded["runs"]] == [e["name"] for e in plan["runs"]]


def test_a_run_directory_that_is_a_symlink_is_refused_and_nothing_is_cleared(tmp_path, victim, no_ray):
    """The run's directory a link to the victim: --resume locked, then cleared (deleted every file of) the
    victim directory, as a run without a checkpoint, and trained there."""
    plan, sweep_dir = planned(tmp_path, TINY)
    entry = plan["runs"][0]
    (sweep_dir / entry["name"]).symlink_to(victim, target_is_directory=True)
    with pytest.raises(ConfigError) as refused:
        load_plan(sweep_dir)
    text = one_sentence(refused.value)
    assert repr(str(sweep_dir.resolve() / entry["name"])) in text and "symbolic link" in text, text
    with pytest.raises(ConfigError, match="symbolic link"):  # the task itself too (a link planted later)
        train_or_continue(plan, entry)
    assert os.listdir(victim) == ["precious.txt"] and (victim / "precious.txt").read_text() == "keep me"


def test_the_task_refuses_a_name_that_is_not_one_path_component(tmp_path, victim):
    plan, sweep_dir = planned(tmp_path, TINY)
    entry = {**plan["runs"][0], "name": "../victim"}
    with pytest.raises(ConfigError, match="not one plain directory name"):
        train_or_continue(plan, entry)
    assert os.listdir(victim) == ["precious.txt"]


# ----------------------------------------------------------------------------- 2. no write through a symlink


def test_attempts_log_is_never_written_through_a_symlink(tmp_path, no_ray):
    plan, sweep_dir = planned(tmp_path, TINY)
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me\n")
    (sweep_dir / ATTEMPTS_FILE).symlink_to(outside)
    with pytest.raises(ConfigError) as refused:
        _log_attempt(sweep_dir, run=plan["runs"][0]["name"], start="fresh")
    assert "symbolic link" in one_sentence(refused.value)
    with pytest.raises(ConfigError, match="symbolic link"):  # refused when the plan is loaded, before any task
        load_plan(sweep_dir)
    assert outside.read_text() == "keep me\n"
    (sweep_dir / ATTEMPTS_FILE).unlink()
    _log_attempt(sweep_dir, run="x", start="fresh")  # a regular file: appended as before
    assert json.loads((sweep_dir / ATTEMPTS_FILE).read_text())["run"] == "x"


def test_the_results_json_and_png_replace_symlinks_instead_of_writing_through_them(finished_sweep, tmp_path, no_ray):
    pytest.importorskip("matplotlib")
    earlier = {"runs": [], "summary": {}, "settings": {}, "machine": {}}  # an earlier sweep's results JSON
    outside_json = tmp_path / "outside.json"
    outside_json.write_text(json.dumps(earlier))
    outside_tmp = tmp_path / "outside-tmp.txt"
    outside_tmp.write_text("keep me")
    outside_png = tmp_path / "outside.png"
    outside_png.write_bytes(b"keep me")
    (finished_sweep / "results.json").symlink_to(outside_json)
    (finished_sweep / f".results.json.tmp-{os.getpid()}").symlink_to(outside_tmp)  # the JSON's temporary name
    (finished_sweep / "results.png").symlink_to(outside_png)
    result = sweep(resume=finished_sweep, echo=lambda line: None)
    assert json.loads(outside_json.read_text()) == earlier
    assert outside_tmp.read_text() == "keep me" and outside_png.read_bytes() == b"keep me"
    for name in ("results.json", "results.png"):
        path = finished_sweep / name
        assert not path.is_symlink() and path.is_file(), name
    assert json.loads((finished_sweep / "results.json").read_text())["failed"] == {}
    assert result["png"] == str(finished_sweep / "results.png")
    assert (finished_sweep / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    leftovers = [p.name for p in finished_sweep.iterdir() if p.name.startswith(".")]
    assert leftovers == [], leftovers


# ----------------------------------------------------------------------------- 3. imports a stored config names


HOSTILE = """
from pathlib import Path
Path({marker!r}).write_text("imported")
import gymnasium as gym


class Same(gym.Wrapper):
    pass
"""


@pytest.fixture
def hostile(tmp_path, monkeypatch):
    """A module on the path whose import leaves a marker file (what a hostile sweep.json would run)."""
    mods = tmp_path / "mods"
    mods.mkdir()
    marker = tmp_path / "imported.txt"
    (mods / "s33_hostile_sweep_mod.py").write_text(HOSTILE.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(mods))
    monkeypatch.delitem(sys.modules, "s33_hostile_sweep_mod", raising=False)
    return marker


@pytest.mark.parametrize("env", [
    {"id": "s33_hostile_sweep_mod:Pendulum-v1"},
    {"id": "Pendulum-v1", "wrappers": ["s33_hostile_sweep_mod:Same"]},
])
def test_a_stored_config_naming_a_module_is_refused_unless_allow_import_names_it(tmp_path, hostile, no_ray, capsys,
                                                                                  env):
    plan, sweep_dir = planned(tmp_path, TINY)
    edit_plan(sweep_dir, lambda p: p["raw_config"].update(env=env))
    with pytest.raises(ConfigError) as refused:
        sweep(resume=sweep_dir, echo=lambda line: None)
    text = one_sentence(refused.value)
    assert text.startswith(f"{PLAN_FILE} run {plan['runs'][0]['name']}: ") and "--allow-import s33_hostile_sweep_mod" in text
    assert main(["sweep", "--resume", str(sweep_dir)]) == 2
    assert "--allow-import s33_hostile_sweep_mod" in capsys.readouterr().err
    assert not hostile.exists(), "the module the stored config names was imported"
    assert not (sweep_dir / ATTEMPTS_FILE).exists()
    # named by the user: the check passes and the sweep goes on to start Ray
    with pytest.raises(AssertionError, match="Ray was started"):
        sweep(resume=sweep_dir, echo=lambda line: None, allow_import=["s33_hostile_sweep_mod"])
    args = build_parser().parse_args(["sweep", "--resume", str(sweep_dir), "--allow-import", "s33_hostile_sweep_mod"])
    assert args.allow_import == ["s33_hostile_sweep_mod"]


def test_a_stored_gymnasium_wrapper_that_writes_files_is_refused(tmp_path, no_ray):
    plan, sweep_dir = planned(tmp_path, TINY)
    edit_plan(sweep_dir, lambda p: p["raw_config"]["env"].update(wrappers=[{"gymnasium.wrappers.RecordVideo": {"video_folder": str(tmp_path / "v")}}]))
    with pytest.raises(ConfigError) as refused:
        sweep(resume=sweep_dir, echo=lambda line: None)
    assert "--allow-import gymnasium.wrappers.RecordVideo" in one_sentence(refused.value)


def test_the_task_of_a_loaded_plan_trains_under_the_users_allow_import(tmp_path, hostile):
    """The task (a Ray worker) of a resumed sweep: the run's fresh training makes its env as from a loaded file."""
    plan, sweep_dir = planned(tmp_path, TINY)
    plan["raw_config"] = {**TINY, "env": {"id": "s33_hostile_sweep_mod:Pendulum-v1"}}
    with pytest.raises(ValueError, match="--allow-import s33_hostile_sweep_mod"):
        train_or_continue(plan, plan["runs"][0], [])
    assert not hostile.exists()


def test_a_new_sweep_of_the_users_own_config_imports_what_it_names(tmp_path, no_ray):
    config = {**TINY, "env": {"id": "pkg_envs_example:PkgReachBox-v0", "wrappers": [{"time_limit": {"max_episode_steps": 40}}]}}
    with pytest.raises(AssertionError, match="Ray was started"):  # planned and checked here, as before
        sweep(config, "0", sweep_dir=tmp_path / "sw", echo=lambda line: None)
    with pytest.raises(ConfigError) as refused:
        sweep(config, "0", sweep_dir=tmp_path / "sw", echo=lambda line: None, allow_import=["pkg_envs_example"])
    assert "--allow-import is for --resume" in one_sentence(refused.value)
    assert not (tmp_path / "sw").exists()


def test_stored_wandb_settings_that_redirect_wandb_are_refused_on_resume(tmp_path, no_ray):
    """As ``rlfunc resume`` refuses them from a checkpoint (``train.wandb.dir``, ``settings`` with a ``base_url``):
    a stored plan's would reach ``wandb.init`` of every run it trains or resumes."""
    pytest.importorskip("wandb")  # without it, any train.wandb is refused first ("wandb is not installed")
    plan, sweep_dir = planned(tmp_path, TINY)
    edit_plan(sweep_dir, lambda p: p["raw_config"].setdefault("train", {}).update(
        wandb={"project": "p", "settings": {"base_url": "http://127.0.0.1:9"}}))
    with pytest.raises(ConfigError) as refused:
        sweep(resume=sweep_dir, echo=lambda line: None)
    text = one_sentence(refused.value)
    assert "its config sets train.wandb.settings" in text and "pass --trust-wandb-settings" in text, text
    with pytest.raises(AssertionError, match="Ray was started"):  # trusted: the sweep goes on to start Ray
        sweep(resume=sweep_dir, echo=lambda line: None, trust_wandb_settings=True)
    args = build_parser().parse_args(["sweep", "--resume", str(sweep_dir), "--trust-wandb-settings"])
    assert args.trust_wandb_settings is True
    edit_plan(sweep_dir, lambda p: p["raw_config"]["train"].update(wandb={"project": "p", "mode": "offline"}))
    with pytest.raises(AssertionError, match="Ray was started"):  # harmless keys: the sweep goes on to start Ray
        sweep(resume=sweep_dir, echo=lambda line: None)
    with pytest.raises(ConfigError, match="--trust-wandb-settings is for --resume"):
        sweep(TINY, echo=lambda line: None, trust_wandb_settings=True)


def test_a_plan_with_torchs_default_threads_resumes(tmp_path):
    """``train.threads: 0`` (torch's default; the MuJoCo configs leave it so) is what the plan holds for them."""
    plan, sweep_dir = planned(tmp_path, {**TINY, "train": {**TINY.get("train", {}), "threads": 0}})
    assert {e["threads"] for e in plan["runs"]} == {0}
    assert load_plan(sweep_dir)["runs"][0]["threads"] == 0


def test_the_results_png_is_readable_by_others_as_plot_writes_it(finished_sweep, tmp_path):
    old = os.umask(0o022)
    try:
        result = sweep(resume=finished_sweep, echo=lambda line: None)
    finally:
        os.umask(old)
    assert result.get("png"), result
    assert Path(result["png"]).stat().st_mode & 0o777 == 0o644
