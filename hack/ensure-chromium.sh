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
"$(dirname "$0")/apt-install.sh" chromium fonts-dejavu-core
echo /usr/bin/chromium
