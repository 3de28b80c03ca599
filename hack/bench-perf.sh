#!/usr/bin/env bash
# Runs Kubernetes' scheduler benchmark with Gleaner's plugins (test/perf) for
# `make bench-perf`, then prints the report. Every workload runs in a process
# of its own (its own etcd and apiserver, nothing left over from the workloads
# before it), next to the workloads it is compared with: X_gleaner/W beside
# X_default/W, gangs beside the same pods without groups. PERF_COUNT rounds;
# every other round runs each group in reverse, so neither side of a
# comparison is always the first or the last of it while the machine drifts.
#
# PERF_LABELS: the workloads' labels (comma-separated; "performance", or
# "short" for a quick check). PERF_BENCH: a regular expression the workloads'
# full names must match (e.g. 'BenchmarkPerfScheduling/Reclaim_').
# PERF_OUT: where the data items, run.log and report.txt go.
set -uo pipefail
cd "$(dirname "$0")/.."
labels=${PERF_LABELS:-performance}
count=${PERF_COUNT:-1}
filter=${PERF_BENCH:-BenchmarkPerfScheduling}
out=$(realpath -m "${PERF_OUT:-bench/perf}")
go=${GO:-go}
mkdir -p "$out" bin/perf-logs
perftest=$(realpath bin/perf.test) tools=$(realpath bin/tools) logs=$(realpath bin/perf-logs)
rm -f "$out"/BenchmarkPerfScheduling_*.json "$out/run.log"

groups=$($go run ./hack/perfreport -workloads test/perf/config/performance-config.yaml -labels "$labels") || exit 1
rc=0
for round in $(seq "$count"); do
	while read -r -a group; do
		if ((round % 2 == 0)); then
			for ((i = 0, j = ${#group[@]} - 1; i < j; i++, j--)); do
				t=${group[i]} group[i]=${group[j]} group[j]=$t
			done
		fi
		for w in "${group[@]}"; do
			grep -qE -- "$filter" <<<"BenchmarkPerfScheduling/$w" || continue
			echo "# round $round: $w" >>"$out/run.log"
			(cd test/perf && PATH="$tools:$PATH" ARTIFACTS="$logs" KUBE_CACHE_MUTATION_DETECTOR=false \
				"$perftest" -test.run='^$' -test.bench="^BenchmarkPerfScheduling\$/^${w%%/*}\$/^${w#*/}\$" -test.benchtime=1x -test.timeout=120m \
				-perf-scheduling-label-filter="$labels" -data-items-dir="$out") >>"$out/run.log" 2>&1 || rc=$?
			# Data items are named by the second they were written.
			sleep 1
		done
	done <<<"$groups"
done
grep -E '^(--- FAIL|FAIL|panic)' "$out/run.log"
{
	echo "# make bench-perf PERF_LABELS=$labels PERF_COUNT=$count PERF_BENCH='$filter' on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $(free -g | awk '/^Mem/{print $2}') GiB, $($go env GOVERSION), $(date -u +%F)"
	$go run ./hack/perfreport "$out"/BenchmarkPerfScheduling_*.json
} | tee "$out/report.txt"
exit $rc
