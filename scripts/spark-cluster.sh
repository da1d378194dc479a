#!/usr/bin/env bash
# A Spark standalone cluster (master + workers) or a Spark Connect server on loopback, from the
# installed pyspark; prints its URL and runs until Ctrl-C, then stops every process it started.
#   scripts/spark-cluster.sh standalone [--workers 2] [--cores 1] [--memory 1g]
#   scripts/spark-cluster.sh connect
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
exec "${here}/.venv/bin/python" -m horizon_broker.broker.spark.local_cluster "$@"
