"""What two Spark physical plans of one TPC-H query do differently: Horizon's and plain Spark's.

A plan is Spark's ``executedPlan`` text. Each is summarized by what decides its cost (the joins
in the order Spark runs them, with their strategy and build side; broadcasts, shuffles and
unions; per table the scans, the files they list and the filters pushed into Parquet), the two
summaries are compared, and :func:`side_by_side` writes them with both plans in full for
``bench/results/tpch_plans_<phase>.md``. Tables are told apart by their columns' TPC-H prefixes
(``l_`` is lineitem), so a scan of a segment view and a scan of a plain table name the same table.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

PREFIXES = {
    "l": "lineitem", "o": "orders", "c": "customer", "p": "part", "ps": "partsupp",
    "s": "supplier", "n": "nation", "r": "region",
}  # fmt: skip
JOINS = (
    "BroadcastHashJoin",
    "SortMergeJoin",
    "ShuffledHashJoin",
    "BroadcastNestedLoopJoin",
    "CartesianProduct",
)
_SCAN = re.compile(r"(?:FileScan|Scan) parquet\s*(?:\S+\s*)?\[(?P<columns>[^\]]*)\]")
_PATHS = re.compile(r"InMemoryFileIndex\((?P<count>\d+) paths?\)")
_PUSHED = re.compile(r"PushedFilters: \[(?P<filters>[^\]]*)\]")
_IDS = re.compile(r"#\d+L?")


@dataclass
class PlanSummary:
    """What one physical plan does, in the terms that decide a query's cost."""

    joins: list[str] = field(default_factory=list)
    scans: Counter[str] = field(default_factory=Counter)
    files: Counter[str] = field(default_factory=Counter)
    pushed: dict[str, set[str]] = field(default_factory=dict)
    operators: Counter[str] = field(default_factory=Counter)

    def rows(self) -> dict[str, str]:
        """The summary as ``aspect -> text``, the aspects :func:`differences` compares."""
        tables = sorted(self.scans)
        return {
            "joins (strategy, keys, build side)": "; ".join(self.joins) or "none",
            "broadcasts / shuffles / unions": " / ".join(
                str(self.operators[name]) for name in ("BroadcastExchange", "Exchange", "Union")
            ),
            "scans per table": ", ".join(f"{t} {self.scans[t]}" for t in tables),
            "files listed per table": ", ".join(f"{t} {self.files[t]}" for t in tables),
            "filters pushed to Parquet": "; ".join(
                f"{t}: {', '.join(sorted(self.pushed.get(t, ()))) or '-'}" for t in tables
            ),
        }


def table_of(columns: str) -> str:
    """The TPC-H table a scan reads, from the first of its columns with a table's prefix."""
    for column in columns.split(","):
        prefix = column.strip().split("_", 1)[0]
        if "_" in column and prefix in PREFIXES:
            return PREFIXES[prefix]
    return "?"


def summarize(plan: str) -> PlanSummary:
    """Parse one ``executedPlan`` text."""
    summary = PlanSummary()
    for line in plan.splitlines():
        text = line.lstrip(" :+-")
        operator = text.split(" ", 1)[0].split("(", 1)[0]
        if operator in ("BroadcastExchange", "Exchange", "Union", "ReusedExchange"):
            summary.operators[operator] += 1
        if operator in JOINS:
            summary.joins.append(_join(text, operator))
        scan = _SCAN.search(text)
        if scan is None:
            continue
        table = table_of(scan.group("columns"))
        summary.scans[table] += 1
        paths = _PATHS.search(text)
        summary.files[table] += int(paths.group("count")) if paths else 0
        pushed = _PUSHED.search(text)
        filters = {
            _IDS.sub("", f.strip()) for f in (pushed.group("filters") if pushed else "").split(", ")
        }
        summary.pushed.setdefault(table, set()).update(
            f for f in filters if f and "valid" not in f.lower()
        )
        summary.pushed[table].update(
            f"(validity) {f}" for f in filters if f and "valid" in f.lower()
        )
    return summary


def _join(text: str, operator: str) -> str:
    """``BroadcastHashJoin [l_orderkey], [o_orderkey], Inner, BuildRight`` shortened."""
    body = _IDS.sub("", text[len(operator) :]).strip()
    parts = [part.strip() for part in re.split(r",(?![^\[]*\])", body)]
    # A comma join comes back from the rewriter as CROSS JOIN; with its condition Spark runs it
    # as the inner join it is (same strategy, same reordering), so it does not count as a difference.
    kept = ["Inner" if p == "Cross" else p for p in parts[:4] if p and p not in ("false", "true")]
    return f"{operator.replace('Join', '')} " + " ".join(kept)


def differences(horizon: PlanSummary, plain: PlanSummary) -> list[str]:
    """The aspects in which the two plans differ."""
    ours, theirs = horizon.rows(), plain.rows()
    return [aspect for aspect in ours if ours[aspect] != theirs[aspect]]


def side_by_side(number: int, figures: dict[str, float], horizon: str, plain: str) -> str:
    """One query's section of the plans file: its figures, the two summaries aspect by aspect
    (differences marked) and both plans in full."""
    ours, theirs = summarize(horizon), summarize(plain)
    different = set(differences(ours, theirs))
    lines = [
        f"## Q{number:02d}: {figures['ratio']:.2f}x "
        f"(Horizon {figures['horizon_ms']:.0f} ms, plain Spark {figures['plain_ms']:.0f} ms)",
        "",
        "| aspect | Horizon | plain Spark |",
        "| --- | --- | --- |",
    ]
    for aspect, value in ours.rows().items():
        mark = "**" if aspect in different else ""
        lines.append(f"| {mark}{aspect}{mark} | {_cell(value)} | {_cell(theirs.rows()[aspect])} |")
    for title, plan in (("Horizon", horizon), ("plain Spark", plain)):
        lines += ["", f"<details><summary>{title} plan</summary>", "", "```", plan.rstrip()]
        lines += ["```", "", "</details>"]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")
