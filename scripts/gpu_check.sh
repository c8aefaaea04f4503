#!/usr/bin/env bash
# The reference results of a CUDA machine: install as the README tells a newcomer, then run
# `course report` in full mode (every notebook, the capstone included, or the prefixes given)
# and write docs/results/<device-class>-<device-name>.{md,json,png}.
#
#   bash scripts/gpu_check.sh            # all notebooks
#   bash scripts/gpu_check.sh 04,05,11   # some of them
#
# Needs the package registry for the install, and CIFAR-10 under $COURSE_DATA (or a network
# to download it); without it the notebooks use the offline image set and say so. The
# capstone's airbench94 comparison runs when the optional extra is installed (done here).
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m venv .venv-gpu
. .venv-gpu/bin/activate
python -m pip install --upgrade pip >/dev/null
pip install -e ".[dev,airbench]"

python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device')"
course env
only=()
if [ $# -gt 0 ]; then only=(--only "$1"); fi
time course report --out report-gpu --reference --timeout 900 "${only[@]}"
ls docs/results/
