#!/usr/bin/env bash
# The Python packages the MuJoCo stages of benchmarks/gpu_checks.sh need and the device machine's image
# lacks (its python3 3.12 has torch, numpy, h5py, pyarrow, pyyaml, typer, matplotlib, absl-py, etils),
# downloaded here as wheels into .whl/ (ignored through .git/info/exclude); name .whl in the device
# tool's carry and gpu_checks.sh installs them into /tmp/site first. ~31 MB, mujoco's wheel 26 MB of it,
# which leaves ~25 MB of the 64 MiB carry for the checkout (~6 MB) and a carried run (CARRY).
# Usage: bash benchmarks/gpu_wheels.sh   (the versions are the ones this project's CPU machine runs)
set -eu
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \
    tensordict==0.15.3 pyvers==0.2.3 gymnasium==1.4.0 farama-notifications==0.0.6 mujoco==3.17.0 glfw==2.11.0 \
    pyopengl==3.1.10 websockets==17.4 minari==0.5.4
ls -la .whl && du -sh .whl
