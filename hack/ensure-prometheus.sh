#!/usr/bin/env bash
# Makes sure Prometheus is installed for `make bench-informer`, which runs it
# beside the vLLM metrics informer: Debian's prometheus package (2.42),
# installed with apt-get when it is missing, without its recommended node
# exporter. The benchmark runs it as a plain process with a config and a TSDB
# of its own; the package's service is not used. Prints its path.
set -euo pipefail
for bin in "${PROMETHEUS:-}" /usr/bin/prometheus; do
	if [ -n "$bin" ] && [ -x "$bin" ]; then
		echo "$bin"
		exit 0
	fi
done
echo "ensure-prometheus: prometheus is missing; installing Debian's prometheus package with apt-get (once)" >&2
if [ "$(id -u)" -ne 0 ]; then
	SUDO=sudo
else
	SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >&2
$SUDO apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=300 prometheus >&2
echo /usr/bin/prometheus
