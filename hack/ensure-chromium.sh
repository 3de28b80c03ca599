#!/usr/bin/env bash
# Makes sure a headless Chromium is installed for the console's browser test
# (test/integration TestConsole, driven with chromedp): Debian's chromium
# package, installed with apt-get when it is missing. Prints its path.
set -euo pipefail
for bin in "${CHROMIUM:-}" /usr/bin/chromium /usr/bin/chromium-browser; do
	if [ -n "$bin" ] && [ -x "$bin" ]; then
		echo "$bin"
		exit 0
	fi
done
echo "ensure-chromium: chromium is missing; installing Debian's chromium package with apt-get (once)" >&2
if [ "$(id -u)" -ne 0 ]; then
	SUDO=sudo
else
	SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >&2
$SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >&2
echo /usr/bin/chromium
