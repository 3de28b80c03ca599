#!/usr/bin/env bash
# Runs the integration suite (one test binary: etcd, kube-apiserver, both
# schedulers and the controller in-process). The in-process control plane logs a
# great deal, so the full output goes to a file and only test results are shown;
# on failure the test's own lines (file:line messages) are shown too.
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p bin
log=${INTEGRATION_LOG:-bin/integration.log}
go test -count=1 -timeout "${INTEGRATION_TIMEOUT:-20m}" -v ./test/integration/ "$@" >"$log" 2>&1
rc=$?
grep -E '^\s*(=== RUN|--- (PASS|FAIL|SKIP)|PASS$|FAIL|ok |panic:)|_test\.go:[0-9]+:' "$log"
if [ $rc -ne 0 ]; then
	echo "integration tests failed (exit $rc); full log: $log" >&2
	tail -n 40 "$log" >&2
fi
exit $rc
