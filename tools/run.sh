#!/usr/bin/env bash
# run.sh - quick start (1): install what is missing, build, and run
# `parley serve` on the embedded default (./parley-data), hosting the bundled
# demo agent (`parley demo-agent`, a scripted ACP agent: no LLM) as the
# default agent of new conversations. Extra arguments go to `parley serve`,
# e.g. tools/run.sh --workers 2; give your own --default-agent (with
# --agent NAME=COMMAND) to host another agent by default.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/bootstrap.sh
tools/build.sh build # Release, the command optimized from a profile of itself
args=(--agent "demo='$PWD/build/parley' demo-agent")
case " $* " in
    *" --default-agent"*) ;; # the caller chose the default
    *) args+=(--default-agent demo) ;;
esac
exec build/parley serve "${args[@]}" "$@"
