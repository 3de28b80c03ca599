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
if [ "$(id -u)" -ne 0 ]; then
	SUDO=sudo
else
	SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
# Wait for another apt-get (the browser's, another checkout's) instead of failing.
lock=(-o DPkg::Lock::Timeout=600)
$SUDO apt-get "${lock[@]}" update -qq >&2
$SUDO apt-get "${lock[@]}" install -y -qq --no-install-recommends python3-torch >&2
if ! /usr/bin/python3 -c 'import torch' >&2; then
	echo "ensure-torch: python3-torch is installed but /usr/bin/python3 cannot import torch" >&2
	exit 1
fi
echo /usr/bin/python3
