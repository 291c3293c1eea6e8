#!/usr/bin/env bash
# on_nats.sh TEST.sh - run an integration test with every `parley serve` it
# starts (through parley_client.Server) keeping its conversations on the
# NATS cluster that `nats_cluster.py run` started for it (PARLEY_NATS_URLS):
# the REST and WebSocket contract suites against the JetStream store.
set -euo pipefail
: "${PARLEY_NATS_URLS:?run me through tests/integration/nats_cluster.py run --}"
export PARLEY_STORE="$PARLEY_NATS_URLS"
exec bash "$1"
