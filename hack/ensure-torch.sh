#!/usr/bin/env bash
# Makes sure a Python with PyTorch is installed for the Python trainer's test
# (test/integration TestPythonTrainerKeepsTheContract runs
# examples/python/train.py): Debian's python3-torch (CPU), installed with
# apt-get for /usr/bin/python3 when it is missing. Prints that Python's path.
set -euo pipefail
for py in "${PYTHON:-}" /usr/bin/python3; do
	if [ -n "$py" ] && [ -x "$py" ] && "$py" -c 'import torch' >/dev/null 2>&1; then
		echo "$py"
		exit 0
	fi
done
echo "ensure-torch: PyTorch is missing; installing Debian's python3-torch package with apt-get (once)" >&2
"$(dirname "$0")/apt-install.sh" python3-torch
if ! /usr/bin/python3 -c 'import torch' >&2; then
	echo "ensure-torch: python3-torch is installed but /usr/bin/python3 cannot import torch" >&2
	exit 1
fi
echo /usr/bin/python3
