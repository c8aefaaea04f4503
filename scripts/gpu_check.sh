#!/usr/bin/env bash
# The reference results of a CUDA machine: `course selftest` (full), then `course report` in
# full mode on the notebooks that fit the time budget (or the prefixes given), writing
# docs/results/<device-class>-<device-name>{,-selftest}.{md,json,png}.
#
#   bash scripts/gpu_check.sh                          # registry: install as the README says
#   bash scripts/gpu_check.sh --only 04,05,11          # some notebooks
#   bash scripts/gpu_check.sh --wheelhouse ~/wheels    # offline: wheels made beforehand
#   bash scripts/gpu_check.sh --budget 540             # seconds for selftest + report
#
# Offline (air-gapped clusters): where a registry is reachable, with the cluster's Python,
#   pip download -d wheels nbformat nbclient papermill nbval ipykernel tqdm psutil matplotlib
# and copy `wheels` over. The machine's own CUDA torch (and torchvision, numpy) is used: the
# venv sees the system site packages, the project is built without build isolation, and
# nothing is downloaded. A failed report never replaces a committed reference (docs/results
# is restored as it was); `course selftest --reference` writes only a run where all passed.
set -euo pipefail
cd "$(dirname "$0")/.."

wheelhouse="" only="" budget=540
while [ $# -gt 0 ]; do
  case "$1" in
    --wheelhouse) wheelhouse="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --budget) budget="$2"; shift 2 ;;
    [0-9]*) only="$1"; shift ;;  # the old form: bash scripts/gpu_check.sh 04,05
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

if [ -n "$wheelhouse" ]; then
  python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA torch here')"
  python3 -m venv --system-site-packages .venv-gpu
  . .venv-gpu/bin/activate
  pip install --no-index --find-links "$wheelhouse" --no-build-isolation -e ".[tools]"
else
  python3 -m venv .venv-gpu
  . .venv-gpu/bin/activate
  python -m pip install --upgrade pip >/dev/null
  pip install -e ".[dev,airbench]"
fi

python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device')"
course env

snapshot=$(mktemp -d)
cp -a docs/results/. "$snapshot"/
restore() { rm -rf docs/results && mkdir -p docs/results && cp -a "$snapshot"/. docs/results/; }

start=$(date +%s)
status=0
selftest_budget=$(( budget / 3 ))
course selftest --out selftest-gpu --budget "$selftest_budget" --reference ||
  echo "selftest: not every item ok or done in ${selftest_budget} s: see selftest-gpu/selftest.md" >&2
if [ -z "$only" ]; then
  left=$(( budget - ($(date +%s) - start) ))
  only=$(python -m course_utils.selftest.plan selftest-gpu/selftest.json "$left")
  echo "notebooks whose estimated full-mode time fits the ${left} s left: ${only:-none}"
fi
if [ -n "$only" ]; then
  time course report --out report-gpu --reference --timeout 900 --only "$only" || status=$?
fi
if [ "$status" -ne 0 ]; then
  restore
  echo "course report failed (exit $status): docs/results left as committed" >&2
fi
rm -rf "$snapshot"
ls docs/results/
exit "$status"
