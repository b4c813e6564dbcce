#!/usr/bin/env bash
# A no-op stand-in for the terraform/tofu binary, used as a stack's `engine_binary` by
# bench/runs.sh. It does what the Bosun runner needs from an engine and nothing else, so a
# run costs Bosun's own work (lease, clone, workspace, reports, logs) without Terraform's:
#
#   init                    records when the engine first started for this run, exits 0
#   plan … -out=FILE …      writes a small FILE, exits 0 (no changes under -detailed-exitcode)
#   show -json FILE         prints an empty plan document
#   apply …                 exits 0
#
# The record is one line appended to $BOSUN_BENCH_ENGINE_LOG, or to engine-starts.log
# next to this script: "<unix time in µs> TAB <working directory> TAB <arguments>". The
# working directory is the runner's workspace (<work dir>/<run id>-plan-<fencing>/src),
# which names the run. Lines are shorter than PIPE_BUF and appended with O_APPEND, so
# concurrent runs do not interleave.
#
# The timestamp comes from bash's $EPOCHREALTIME (no fork) when present, else
# `date +%s%N`. Either is taken after bash has started (about 1 ms after exec).
if [ -n "${EPOCHREALTIME:-}" ]; then
    now_us=${EPOCHREALTIME/[.,]/}
else
    now_ns=$(date +%s%N)
    now_us=${now_ns%???}
fi
case "${1:-}" in
init)
    log=${BOSUN_BENCH_ENGINE_LOG:-${BASH_SOURCE[0]%/*}/engine-starts.log}
    printf '%s\t%s\t%s\n' "$now_us" "$PWD" "$*" >>"$log"
    echo "no-op engine: initialized"
    ;;
plan)
    out=
    for arg in "$@"; do
        case $arg in -out=*) out=${arg#-out=} ;; esac
    done
    if [ -n "$out" ]; then
        printf 'bosun bench no-op plan\n' >"$out"
    fi
    echo "no-op engine: no changes"
    ;;
show)
    printf '%s\n' '{"format_version":"0.2","resource_changes":[],"output_changes":{}}'
    ;;
apply)
    echo "no-op engine: applied (nothing to do)"
    ;;
version | -version | --version | -v)
    echo "no-op engine (bosun bench)"
    ;;
*)
    echo "no-op engine: unsupported command: $*" >&2
    exit 1
    ;;
esac
exit 0
