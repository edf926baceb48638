"""Slim copies of the official Ray and dm-control wheels, small enough for the device machine's carry.

The GPU machine (benchmarks/gpu_checks.sh) has no package index: what its image lacks travels as wheels in
``.whl/`` (benchmarks/gpu_wheels.sh), and a call carries 64 MiB in all, checkout (~6.7 MB) included.
Two official wheels do not fit: ray 2.60.0 cp312 (79.3 MB) and dm-control 1.0.50 (56.5 MB). This script
downloads the official wheel (``pip download``, into --cache), copies it without the parts rlfunc does not
use, and writes ``NAME-VERSION-0slim-TAGS.whl`` (build tag ``0slim``) into --dest:

* **ray** -> 40.1 MB (cp312; cp311 the same): without ``ray/jars`` (32.2 MB compressed: Java workers), ``ray/dashboard/client``
  (2.5 MB: the web UI's JavaScript build; the dashboard's Python modules stay, Ray starts them even with
  ``include_dashboard=False``), and the libraries ``ray/rllib``, ``ray/data``, ``ray/train``,
  ``ray/tune``, ``ray/llm``, ``ray/air``, ``ray/workflow`` (4.1 MB). Kept: the core (``_raylet.so``,
  ``gcs_server``, ``raylet``: 33.7 MB of the 40.1), ``_private`` (with the runtime-env agent's bundled
  aiohttp, which the agent imports, and pynvml for GPU detection), the autoscaler (``ray start``), the
  client (``ray://``), ``serve`` (the dashboard imports part of it), ``dag``, ``experimental``, ``util``.
* **dm-control** -> 1.2 MB: without ``dm_control/locomotion`` (39 MB: soccer and walker meshes),
  ``dm_control/suite/dog_assets`` (9.8 MB: only the ``dog`` domain loads them, so ``suite.load("dog", ...)``
  fails: StopIteration), ``dm_control/mujoco/testing``, ``dm_control/mjcf/test_assets``,
  ``dm_control/blender`` and every ``*_test.py``. ``dm_control.suite`` (all its other domains) and
  ``dm_control.mujoco`` (rendering) stay whole.

How the removed parts were chosen (empirically): the Ray tests (tests/test_distributed_r2d2.py,
test_sweep.py, test_sweep_cluster.py, test_learn_stop.py, test_learn_population.py) and the DMC tests ran
with the full wheels under a ``sitecustomize`` audit hook (``sys.addaudithook``: every file opened and every
process started, in every Python process Ray spawns: workers, the dashboard head and agent, the
runtime-env agent, the log monitor, the autoscaler monitor, the client server) and no file under a removed
path was opened. Then the same tests passed with the slim wheels alone on the path (docs/benchmarks.md,
"Wheels for the GPU machine").

The copy keeps every other entry as it is (same content, so RECORD's hashes hold; same names, dates and
permissions, so ``gcs_server`` and ``raylet`` stay executable), recompressed with zlib; RECORD loses the removed files' lines, WHEEL gains
``Build: 0slim`` and ``*.dist-info/SLIM`` says what was removed from which official wheel (its SHA-256).
The same inputs give the same bytes (the output's SHA-256 is printed). Only the standard library's
zipfile is used (no ``wheel`` package needed).

Usage:
  python benchmarks/slim_wheels.py ray [--version 2.60.0] [--python-version 3.12] [--dest .whl]
  python benchmarks/slim_wheels.py dm-control [--version 1.0.50] [--dest .whl]
  python benchmarks/slim_wheels.py trace-hook DIR    # writes DIR/sitecustomize.py (the audit hook above);
      PYTHONPATH=DIR python -m pytest ... logs into DIR/logs, one file per process
  python benchmarks/slim_wheels.py check-trace DIR   # the traced files under a removed path (exit 1 if any)
--version defaults to the version installed in this Python; --python-version 3.11 builds the wheel for
this CPU machine's Python to validate the slimming here (pip install --no-deps --target DIR, then run the
tests with DIR first on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import importlib.metadata
import io
import subprocess
import sys
import zipfile
from pathlib import Path

PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64"]

# Paths (prefixes inside the wheel) removed, with the reason printed and written to dist-info/SLIM.
REMOVE = {
    "ray": {
        "ray/jars/": "Java workers and the cross-language jar",
        "ray/dashboard/client/": "the dashboard web UI's JavaScript build (the dashboard's Python stays)",
        "ray/rllib/": "RLlib",
        "ray/data/": "Ray Data",
        "ray/train/": "Ray Train",
        "ray/tune/": "Ray Tune",
        "ray/llm/": "Ray LLM",
        "ray/air/": "Ray AIR (Train/Tune's shared layer)",
        "ray/workflow/": "Ray Workflows (a stub)",
    },
    "dm-control": {
        "dm_control/locomotion/": "the locomotion library (soccer and CMU walker meshes)",
        "dm_control/suite/dog_assets/": "the dog domain's meshes and textures (suite.load('dog', ...) fails)",
        "dm_control/mujoco/testing/": "test assets",
        "dm_control/mjcf/test_assets/": "test assets",
        "dm_control/blender/": "the Blender exporter",
        "*_test.py": "unit tests",
    },
}
DIST = {"ray": "ray", "dm-control": "dm_control"}  # the distribution's name in wheel file names


def removed(name: str, path: str) -> str | None:
    for prefix, why in REMOVE[name].items():
        if (prefix.startswith("*") and path.endswith(prefix[1:])) or path.startswith(prefix):
            return prefix
    return None


def download(name: str, version: str, python_version: str, cache: Path) -> Path:
    dist = DIST[name]
    cache.mkdir(parents=True, exist_ok=True)
    pyv = python_version.replace(".", "")
    found = [p for p in cache.glob(f"{dist}-{version}-*.whl") if f"cp{pyv}" in p.name or "py3-none-any" in p.name]
    if not found:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
               "--python-version", python_version, "--implementation", "cp", "-d", str(cache)]
        for p in PLATFORMS:
            cmd += ["--platform", p]
        subprocess.run(cmd + [f"{name}=={version}"], check=True)
        found = [p for p in cache.glob(f"{dist}-{version}-*.whl") if f"cp{pyv}" in p.name or "py3-none-any" in p.name]
    if len(found) != 1:
        raise SystemExit(f"expected one {dist} {version} wheel for Python {python_version} in {cache}, found {found}")
    return found[0]


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def slim(name: str, src: Path, dest: Path) -> Path:
    parts = src.name[:-4].split("-")  # name-version[-build]-py-abi-plat
    if len(parts) != 5:
        raise SystemExit(f"{src.name}: expected an official wheel without a build tag")
    dist, version, py, abi, plat = parts
    out = dest / f"{dist}-{version}-0slim-{py}-{abi}-{plat}.whl"
    info_dir = f"{dist}-{version}.dist-info"
    src_sha = hashlib.sha256(src.read_bytes()).hexdigest()
    gone: dict[str, list[int]] = {}
    with zipfile.ZipFile(src) as zin:
        infos = zin.infolist()
        keep = []
        for zi in infos:
            prefix = removed(name, zi.filename)
            if prefix is None:
                keep.append(zi)
            else:
                n = gone.setdefault(prefix, [0, 0])
                n[0] += 1
                n[1] += zi.compress_size
        kept_names = {zi.filename for zi in keep}
        slim_text = (f"A slimmed copy of {src.name} (sha256 {src_sha}) made by rlfunc's benchmarks/slim_wheels.py "
                     "for a machine that can only carry 64 MiB of wheels; removed:\n"
                     + "".join(f"  {p}  ({gone[p][0]} files, {gone[p][1] / 1e6:.2f} MB compressed): {why}\n"
                               for p, why in REMOVE[name].items() if p in gone))
        dest.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        with zipfile.ZipFile(tmp, "w") as zout:
            new: dict[str, bytes] = {}
            wheel_meta = zin.read(f"{info_dir}/WHEEL").decode()
            if "\nBuild:" not in wheel_meta:
                wheel_meta = wheel_meta.rstrip("\n") + "\nBuild: 0slim\n"
            new[f"{info_dir}/WHEEL"] = wheel_meta.encode()
            new[f"{info_dir}/SLIM"] = slim_text.encode()
            rows = []
            for row in csv.reader(io.StringIO(zin.read(f"{info_dir}/RECORD").decode())):
                if not row or row[0] not in kept_names or row[0] in new:
                    continue
                rows.append(row)
            for path, data in new.items():
                rows.append([path, record_hash(data), str(len(data))])
            rows.append([f"{info_dir}/RECORD", "", ""])
            buf = io.StringIO()
            csv.writer(buf, lineterminator="\n").writerows(sorted(rows[:-1]) + rows[-1:])
            new[f"{info_dir}/RECORD"] = buf.getvalue().encode()
            template = zin.getinfo(f"{info_dir}/RECORD")
            for zi in keep:
                if zi.filename in new:
                    continue
                with zin.open(zi) as f:
                    data = f.read()
                zout.writestr(zi, data, compress_type=zi.compress_type)
            for path in sorted(new):  # dist-info files last (RECORD last of all), as wheels are written
                if path.endswith("/RECORD"):
                    continue
                zi = zipfile.ZipInfo(path, date_time=template.date_time)
                zi.external_attr = template.external_attr
                zout.writestr(zi, new[path], compress_type=zipfile.ZIP_DEFLATED)
            zi = zipfile.ZipInfo(f"{info_dir}/RECORD", date_time=template.date_time)
            zi.external_attr = template.external_attr
            zout.writestr(zi, new[f"{info_dir}/RECORD"], compress_type=zipfile.ZIP_DEFLATED)
        tmp.replace(out)
    for stale in dest.glob(f"{dist}-*.whl"):  # one version of each in dest: two would stop the install
        if stale != out:
            stale.unlink()
    size = out.stat().st_size
    print(f"{out}: {size / 1e6:.1f} MB (official {src.stat().st_size / 1e6:.1f} MB), "
          f"sha256 {hashlib.sha256(out.read_bytes()).hexdigest()}")
    print(slim_text, end="")
    return out


HOOK = r"""# Written by benchmarks/slim_wheels.py trace-hook: logs every file this process (and every Python process
# started with this folder on PYTHONPATH) opens or executes under site-packages/{ray,dm_control}, one log per pid.
import os, sys
_LOGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "logs")
_seen, _busy, _fd = set(), [False], [None, None]
def _log(kind, path):
    try:
        path = os.fsdecode(path)
    except Exception:
        return
    i = path.find("site-packages/")
    rel = path[i + 14:] if i >= 0 else ""
    if not rel.startswith(("ray/", "dm_control/")) or (kind, rel) in _seen or _busy[0]:
        return
    _seen.add((kind, rel))
    _busy[0] = True
    try:
        if _fd[1] != os.getpid():
            os.makedirs(_LOGS, exist_ok=True)
            _fd[0], _fd[1] = os.open(f"{_LOGS}/{os.getpid()}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644), os.getpid()
            os.write(_fd[0], (" ".join(sys.argv)[:300] + "\n").encode())
        os.write(_fd[0], f"{kind} {rel}\n".encode())
    except Exception:
        pass
    finally:
        _busy[0] = False
def _hook(event, args):
    if _busy[0] or not args:
        return
    if event == "open" and isinstance(args[0], (str, bytes)):
        _log("open", args[0])
    elif event in ("subprocess.Popen", "os.exec", "os.posix_spawn"):
        for a in [args[0]] + list(args[1] or []):
            if isinstance(a, (str, bytes)):
                _log("exec", a)
sys.addaudithook(_hook)
"""


def check_trace(folder: Path) -> int:
    """The files the traced processes opened (or executed) under a path this script removes."""
    opened: set[str] = set()
    logs = sorted((folder / "logs").glob("*.log"))
    for log in logs:
        for line in log.read_text().splitlines():
            if not line.startswith(("open ", "exec ")):
                continue  # a process's command line
            path = line.split(" ", 1)[1].replace("/__pycache__", "")
            if path.endswith(".pyc"):
                path = path.split(".cpython")[0] + ".py"
            opened.add(path)
    bad = sorted(p for p in opened for name in REMOVE if removed(name, p))
    tops = sorted({"/".join(p.split("/")[:2]) for p in opened})
    print(f"{len(logs)} processes, {len(opened)} files under ray/ and dm_control/ ({', '.join(tops)})")
    for p in bad:
        print(f"  opened but removed: {p}")
    print("none of them under a removed path" if not bad else f"{len(bad)} under a removed path")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("name", choices=sorted(REMOVE) + ["trace-hook", "check-trace"])
    parser.add_argument("dir", nargs="?", type=Path, help="trace-hook, check-trace: the trace folder")
    parser.add_argument("--version", help="default: the version installed in this Python")
    parser.add_argument("--python-version", default="3.12", help="the target Python (default 3.12, the device's)")
    parser.add_argument("--dest", type=Path, default=Path(".whl"))
    parser.add_argument("--cache", type=Path, default=Path("/tmp/rlfunc_official_wheels"),
                        help="where the official wheels are downloaded (kept, not carried)")
    args = parser.parse_args(argv)
    if args.name in ("trace-hook", "check-trace"):
        if args.dir is None:
            parser.error(f"{args.name} needs DIR")
        if args.name == "check-trace":
            return check_trace(args.dir)
        args.dir.mkdir(parents=True, exist_ok=True)
        (args.dir / "sitecustomize.py").write_text(HOOK)
        print(f"wrote {args.dir / 'sitecustomize.py'}: run with PYTHONPATH={args.dir} (first), logs in {args.dir / 'logs'}")
        return 0
    version = args.version or importlib.metadata.version(args.name)
    src = download(args.name, version, args.python_version, args.cache / args.python_version)
    slim(args.name, src, args.dest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
