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
"$(dirname "$0")/apt-install.sh" prometheus
echo /usr/bin/prometheus
