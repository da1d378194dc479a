"""``bench.point_query_live`` with compaction writing row groups of another size (diagnosis
only, no product change): the compaction runs in this process, ingestion in a spawned one, so
setting ``horizon_broker.ingest.segments.ROW_GROUP_BYTES`` here changes compaction's output
alone. The results go beside this file, not to ``bench/results``.

Run: flock /tmp/horizon-spark.lock .venv/bin/python \
    bench/runs/2026-11-29-compaction-row-groups/probe_point_live.py MIB [point_query_live args]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from horizon_broker.ingest import segments

HERE = Path(__file__).parent
mib = int(sys.argv[1])
segments.ROW_GROUP_BYTES = mib * 1024 * 1024

from bench import point_query_live  # noqa: E402


def write_here(name: str, results: dict[str, Any]) -> Path:
    path = HERE / f"{name}-{mib}mib.json"
    path.write_text(json.dumps(results, indent=2, sort_keys=True, default=str) + "\n")
    return path


point_query_live.write_results = write_here  # type: ignore[assignment]
raise SystemExit(point_query_live.main(sys.argv[2:]))
