#!/usr/bin/env bash
# The Python packages the stages of benchmarks/gpu_checks.sh need and the device machine's image lacks
# (its python3 3.12 has torch, numpy, scipy, lxml, pyparsing, protobuf, requests, attrs, click, filelock,
# msgpack, grpcio, aiohttp, pyyaml, typer, matplotlib, absl-py, etils: KINDS.md's list), downloaded here as
# cp312 wheels into .whl/ (ignored through .git/info/exclude; emptied first). Name .whl in the device
# tool's carry and gpu_checks.sh installs them into /tmp/site first. One call carries 64 MiB (67.1 MB) in
# all, the checkout (6.7 MB: `git ls-files`) included, so the wheels come in sets (sizes of the cp312 files):
#   default (no SET named: drqv2 + mujoco)   all stages but r2d2_actors, r2d2_atari  33.1 MB, 26 MiB left
#   drqv2   card update peers tests drqv2 extra: tensordict, gymnasium, mujoco (26.7 MB of it), and
#           dm-control 1.0.50 slimmed by benchmarks/slim_wheels.py (56.5 -> 1.2 MB: no locomotion and dog
#           meshes, no test assets), dm-tree, dm-env (labmaze only serves the removed locomotion)  33.1 MB
#   mujoco  redq_hopper redq_population rlpd_data rlpd_hopper: tensordict, gymnasium, mujoco, minari  31.7 MB
#   ray     r2d2_actors: tensordict, gymnasium, ray 2.60.0 slimmed by benchmarks/slim_wheels.py (79.3 ->
#           40.1 MB: no ray/jars, dashboard web build, rllib, data, train, tune, llm, air), jsonschema,
#           jsonschema-specifications, referencing, rpds-py (Ray's needs the image lacks)
#                                                                                    42.0 MB, 17 MiB left
#   atari   with ray for r2d2_atari (`ray atari`): ale-py 0.12.1 (its wheel ships the ROMs; cv2 is in the
#           image)                                              `ray atari`: 45.1 MB, 14 MiB left
# ("left": of the 64 MiB after the checkout and the wheels, for a carried run: gpu_checks.sh's CARRY and
# PACK_MB). Several names make their union; the script refuses a union over the carry (ray + mujoco is).
# Usage: bash benchmarks/gpu_wheels.sh [--python-version 3.11] [SET ...]   (SET: drqv2 mujoco ray atari)
#   The versions are the ones this project's CPU machine runs. --python-version 3.11 builds the same sets
#   for this CPU machine's Python, to check them here (docs/benchmarks.md, "Wheels for the GPU machine").
set -eu
cd "$(dirname "$0")/.."
PYV=3.12
if [ "${1:-}" = --python-version ]; then PYV=${2:?--python-version needs a value}; shift 2; fi
SETS=("$@")
[ ${#SETS[@]} -eq 0 ] && SETS=(drqv2 mujoco)
BASE=(tensordict==0.15.3 pyvers==0.2.3 gymnasium==1.4.0 farama-notifications==0.0.6)
MUJOCO=(mujoco==3.17.0 glfw==2.11.0 pyopengl==3.1.10 websockets==17.4)
PKGS=()
SLIM=()
for s in "${SETS[@]}"; do
    case $s in
        drqv2) PKGS+=("${BASE[@]}" "${MUJOCO[@]}" dm-tree==0.1.10 dm-env==1.6); SLIM+=(dm-control==1.0.50) ;;
        mujoco) PKGS+=("${BASE[@]}" "${MUJOCO[@]}" minari==0.5.4) ;;
        ray) PKGS+=("${BASE[@]}" jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==0.30.0)
             SLIM+=(ray==2.60.0) ;;
        atari) PKGS+=("${BASE[@]}" ale-py==0.12.1) ;;
        *) echo "unknown wheel set '$s': use drqv2, mujoco, ray or atari" >&2; exit 2 ;;
    esac
done
mapfile -t PKGS < <(printf '%s\n' "${PKGS[@]}" | sort -u)
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo /.whl/ >> .git/info/exclude; }
rm -rf .whl
mkdir .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYV" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${PKGS[@]}"
for spec in $(printf '%s\n' ${SLIM[@]+"${SLIM[@]}"} | sort -u); do
    python3 benchmarks/slim_wheels.py "${spec%%==*}" --version "${spec##*==}" --python-version "$PYV" --dest .whl
done
ls -la .whl
WHEELS=$(cat .whl/*.whl | wc -c)
CHECKOUT=$(git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s}')
LEFT=$((64 * 1048576 - WHEELS - CHECKOUT))
echo "sets: ${SETS[*]} (python $PYV): wheels $((WHEELS / 1000)) kB + checkout $((CHECKOUT / 1000)) kB;" \
    "$((LEFT / 1048576)) MiB of the 64 MiB carry left for CARRY"
if [ "$LEFT" -lt 0 ]; then
    echo "over the device tool's 64 MiB carry: build fewer sets at once" >&2
    exit 1
fi
