#!/usr/bin/env bash
# Installs Debian packages with apt-get, quietly and without recommended
# packages, as root or through sudo, waiting for another apt-get (a browser's,
# another checkout's) instead of failing. The ensure-*.sh scripts call it for
# what `make test` and the benchmarks need. Output goes to stderr.
set -euo pipefail
if [ "$(id -u)" -ne 0 ]; then
	SUDO=sudo
else
	SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
lock=(-o DPkg::Lock::Timeout=600)
$SUDO apt-get "${lock[@]}" update -qq >&2
$SUDO apt-get "${lock[@]}" install -y -qq --no-install-recommends "$@" >&2
