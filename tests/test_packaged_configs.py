"""Packaged configs and the discoverable CLI: ``rlfunc configs``, ``rlfunc train NAME``, ``rlfunc algos``,
``--version``, help on every positional, and a wheel built from this tree, installed into a fresh venv
outside it, that lists and trains a packaged config."""

import argparse
import os
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

from rlfunc.runtime.cli import build_parser, main
from rlfunc.runtime.packaged import list_configs, resolve_config
from rlfunc.runtime.registry import ALGOS

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(p.relative_to(ROOT / "configs").with_suffix("").as_posix() for p in (ROOT / "configs").rglob("*.yaml"))

TINY_REDQ = [
    "agent.hidden_sizes=[16,16]", "agent.num_critics=2", "agent.updates_per_step=1", "agent.batch_size=16",
    "train.total_steps=200", "train.learning_starts=100", "train.eval_every=200", "train.eval_episodes=1",
    "train.checkpoint_every=200", "train.progress=false",
]


def _sets(items: list[str]) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def test_pyproject_ships_every_package_and_every_config_folder():
    """The package list in pyproject.toml is explicit (configs/ maps to rlfunc.configs): it must name every
    code package and every configs/ folder, or the wheel silently lacks them."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    code = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "rlfunc").rglob("__init__.py")}
    folders = {
        ".".join(("rlfunc", "configs", *p.parent.relative_to(ROOT / "configs").parts))
        for p in (ROOT / "configs").rglob("*.yaml")
    }
    assert code <= listed, f"add {sorted(code - listed)} to [tool.setuptools] packages in pyproject.toml"
    assert folders <= listed, f"add {sorted(folders - listed)} to [tool.setuptools] packages in pyproject.toml"
    assert setuptools["package-dir"] == {"rlfunc.configs": "configs"}
    assert setuptools["package-data"]["*"] == ["*.yaml"]


def test_configs_lists_every_shipped_config_one_line_each(capsys):
    assert [c.name for c in list_configs()] == SHIPPED and len(SHIPPED) >= 19
    assert main(["configs"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == len(SHIPPED) + 1 and f"({len(SHIPPED)} configs in" in lines[-1]
    for name, line in zip(SHIPPED, lines):
        assert line.startswith(name + " ") and len(line.split(None, 1)[1]) > 10, line


def test_summary_is_the_first_sentence_of_the_leading_comment_or_algo_and_env(tmp_path):
    from rlfunc.runtime.packaged import summary

    commented = tmp_path / "c.yaml"
    commented.write_text(
        "# REDQ on MuJoCo Hopper-v5 with the paper's settings (Chen et al. 2021, Table/\n"
        "# official code defaults): N=10, M=2. Needs the mujoco extra.\nalgo: redq\n# later comment\n"
    )
    assert summary(commented) == "REDQ on MuJoCo Hopper-v5 with the paper's settings"
    long = tmp_path / "l.yaml"
    long.write_text("# " + "word " * 40 + "\nalgo: sac\n")
    assert len(summary(long)) == 96 and summary(long).endswith("...")
    bare = tmp_path / "bare.yaml"
    bare.write_text("algo: sac\nenv: {id: Pendulum-v1}\n")
    assert summary(bare) == "sac on Pendulum-v1"


def test_names_resolve_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    expected = ROOT / "configs" / "redq" / "hopper.yaml"
    for name in ("redq/hopper", "redq/hopper.yaml", "configs/redq/hopper.yaml"):
        assert resolve_config(name).resolve() == expected
    local = tmp_path / "mine.yaml"
    local.write_text("algo: sac\n")
    assert resolve_config("mine.yaml") == Path("mine.yaml"), "a path that exists is used as it is"


def test_train_by_name_and_unknown_names(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "sac/pendulum", "--run-dir", "run", *_sets(TINY_REDQ)]) == 0
    captured = capsys.readouterr()
    assert "config sac/pendulum: " in captured.out and "env steps: 200" in captured.out
    stored = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert stored["algo"] == "sac" and stored["env"]["id"] == "Pendulum-v1"
    assert main(["train", "redq/hoper", "--run-dir", "x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no packaged config of that name (closest: redq/hopper)" in err[0]
    assert "rlfunc configs" in err[0] and not (tmp_path / "x").exists()
    assert main(["train", "sac/pendulum", "--run-dir", "y", "--set", "agent.num_critic=3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "did you mean 'num_critics'" in err[0], "a packaged config's errors are one line too"


def test_python_train_takes_a_packaged_name_as_the_cli_does(tmp_path, monkeypatch):
    """``rlfunc.train("sac/pendulum")`` from a directory without configs/ (docs/running.md: "the same from
    Python"): it read only paths before, and its error suggested configs/..., which failed there too."""
    import rlfunc

    monkeypatch.chdir(tmp_path)
    tiny = [s for s in TINY_REDQ if not s.startswith("train.total_steps")] + ["train.total_steps=150"]
    for i, name in enumerate(("sac/pendulum", "sac/pendulum.yaml", "configs/sac/pendulum.yaml")):
        res = rlfunc.train(name, overrides=tiny, run_dir=tmp_path / f"run{i}")
        assert res.env_steps == 150
        assert yaml.safe_load((tmp_path / f"run{i}" / "config.yaml").read_text())["algo"] == "sac"
    with pytest.raises(rlfunc.runtime.config.ConfigError, match=r"no packaged config of that name \(closest: sac/pendulum\)"):
        rlfunc.train("sac/pendulun", run_dir=tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_algos_lists_the_registry_and_each_default_config(capsys):
    assert main(["algos"]) == 0
    out = capsys.readouterr().out
    for name, entry in ALGOS.items():
        assert f"{name}  " in out and entry.description in out
    assert "configs: redq/ant, redq/hopper, redq/humanoid, redq/pendulum, redq/walker2d" in out
    assert "configs: sac/ant, sac/hopper, sac/humanoid, sac/pendulum, sac/walker2d" in out
    for name in ALGOS:
        assert main(["algos", name]) == 0
        shown = yaml.safe_load(capsys.readouterr().out)
        entry = ALGOS[name]
        defaults = entry.config_cls(**entry.config_defaults)
        assert shown["algo"] == name
        for key, value in shown["agent"].items():
            want = getattr(defaults, key)
            assert (list(want) if isinstance(want, tuple) else want) == value, (name, key)
        assert shown["train"] == entry.train_defaults, name  # the warm-up and replay size it gets when unset
    assert main(["algos", "ppo"]) == 2
    assert "Unknown algo 'ppo'" in capsys.readouterr().err


def test_version_matches_the_installed_distribution(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"rlfunc {version('rlfunc')}"


def test_every_positional_argument_has_help():
    def walk(parser: argparse.ArgumentParser, where: str):
        for action in parser._actions:
            if not action.option_strings and not isinstance(action, argparse._HelpAction):
                assert action.help, f"{where}: positional {action.dest!r} has no help"
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{where} {name}")

    walk(build_parser(), "rlfunc")


@pytest.mark.slow
def test_a_built_wheel_installed_outside_the_tree_lists_and_trains_packaged_configs(tmp_path):
    """Build a wheel from a copy of this tree, install it into a fresh venv (torch and the other
    dependencies come from the system site), and from an unrelated directory list the packaged
    configs and train one by name."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "rlfunc", src / "rlfunc", ignore=ignore)
    shutil.copytree(ROOT / "configs", src / "configs", ignore=ignore)
    dist = tmp_path / "dist"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"

    def run(*cmd, cwd=tmp_path, timeout=120):
        out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        assert out.returncode == 0, f"{cmd}\n{out.stdout}\n{out.stderr}"
        return out

    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(dist), str(src))
    (wheel,) = dist.glob("rlfunc-*.whl")
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv))
    python, rlfunc_cmd = venv / "bin" / "python", venv / "bin" / "rlfunc"
    if sys.prefix != sys.base_prefix:  # run from a venv: the "system site" above is its base Python's, not this one's
        import site

        purelib = run(str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
        (Path(purelib) / "parent_site.pth").write_text("".join(f"{d}\n" for d in site.getsitepackages()))
    # pip itself comes from the system site; --ignore-installed: this checkout's editable install is visible there
    run(str(python), "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", str(wheel))
    shutil.rmtree(src)  # nothing may come from the source tree any more

    work = tmp_path / "elsewhere"
    work.mkdir()
    where = run(str(python), "-c", "import rlfunc, rlfunc.runtime.packaged as p; print(rlfunc.__file__); print(p.configs_dir())", cwd=work)
    module, configs = where.stdout.split()
    assert module.startswith(str(venv)) and configs.startswith(str(venv)), where.stdout
    assert sorted(p.relative_to(configs).with_suffix("").as_posix() for p in Path(configs).rglob("*.yaml")) == SHIPPED

    listed = run(str(rlfunc_cmd), "configs", cwd=work).stdout.strip().splitlines()
    assert [line.split()[0] for line in listed[:-1]] == SHIPPED
    assert run(str(rlfunc_cmd), "--version", cwd=work).stdout.strip() == f"rlfunc {version('rlfunc')}"

    trained = run(str(rlfunc_cmd), "train", "redq/pendulum", "--run-dir", "run", *_sets(TINY_REDQ), cwd=work, timeout=180)
    assert "env steps: 200" in trained.stdout, trained.stdout
    assert (work / "run" / "checkpoints" / "step_000000200" / "meta.json").is_file()
    assert yaml.safe_load((work / "run" / "config.yaml").read_text())["algo"] == "redq"
