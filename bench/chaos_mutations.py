"""``python -m bench.chaos --mutation NAME`` / ``--mutations all``: planted bugs that prove the
checker (:mod:`chaos.mutations`).

Each mutation gets a short seeded run of its own (the same seed, duration and faults for all;
when one of them needs it, one compaction pass run to its end in every run), and
``none`` the same run unmutated, under every fault any of them asks for, which must find
nothing (else a caught mutation proves nothing). A mutation is caught when the checker finds an anomaly of one of the kinds it is
expected to cause. ``A+B`` plants two in one run (a test's way to pay for one run), each caught
by its own kinds, which must not overlap.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.report import print_table

CONTROL = "none"
"""The unmutated run of the same seed, under every fault a planted bug asks for
(:func:`control_faults`): a check that fires on the real system under them fires here."""


def control_faults() -> tuple[str, ...]:
    """The faults of every mutation, in the order of :data:`chaos.mutations.MUTATIONS`."""
    from chaos.mutations import MUTATIONS

    return tuple(kind for m in MUTATIONS.values() for kind in m.faults)


def names(requested: str) -> list[str]:
    """``all`` (the control first, then every mutation), or one name, or a comma list (each
    ``A`` or ``A+B``)."""
    from chaos.mutations import MUTATIONS, mutations

    if requested == "all":
        return [CONTROL, *MUTATIONS]
    chosen = [name.strip() for name in requested.split(",") if name.strip()]
    for name in chosen:
        if name == CONTROL:
            continue
        planted = mutations(name)  # ValueError naming the known ones
        kinds = [kind for m in planted for kind in m.expected]
        if len(kinds) != len(set(kinds)):
            raise ValueError(f"{name}: their expected anomaly kinds overlap, run them apart")
    return chosen


def needs_compaction(chosen: list[str]) -> bool:
    from chaos.mutations import mutations

    return any(m.compaction for name in chosen if name != CONTROL for m in mutations(name))


def run_mutation(
    run: Callable[..., dict[str, Any]],
    name: str,
    duration: float,
    seed: int,
    *,
    servers: int,
    inject_faults: bool,
    brokers: int = 2,
    compaction_pass: bool,
    keep: bool = False,
) -> dict[str, Any]:
    """One mutated run (``none``: unmutated) and its verdict."""
    from chaos.mutations import mutations

    work = Path(tempfile.mkdtemp(prefix=f"horizon-mutant-{name}-"))
    try:
        results = run(
            duration, seed, work, servers=servers, inject_faults=inject_faults, brokers=brokers,
            mutation=None if name == CONTROL else name, compaction_pass=compaction_pass,
            faults_first=control_faults() if name == CONTROL else None,
        )  # fmt: skip
    finally:
        if keep:
            print(f"work directory kept: {work}", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)
    found = results["anomalies"]
    results["caught_by"] = {}
    results["caught"] = None
    if name != CONTROL:
        each = {
            m.name: {k: n for k, n in found.items() if k in m.expected} for m in mutations(name)
        }
        results["caught_by"] = each
        results["caught"] = all(each.values())
    return results


def verdict_rows(outcomes: dict[str, dict[str, Any]]) -> list[tuple[Any, ...]]:
    """One table row per run: mutation, caught, by which kinds, how many, first anomaly, and
    how long the run took (start to stop)."""
    rows = []
    for name, results in outcomes.items():
        found = results["anomalies"]
        if name == CONTROL:
            caught = "control: " + ("clean" if not found else "ANOMALIES")
        else:
            caught = "yes" if results["caught"] else "NO"
        kinds = ", ".join(f"{k} ({n})" for k, n in found.items()) or "-"
        first = results.get("first_anomaly_s")
        run_s = results.get("run_s")
        rows.append(
            (
                name, caught, kinds, sum(found.values()),
                "-" if first is None else f"{first:.1f} s",
                "-" if run_s is None else f"{run_s:.0f} s",
            )
        )  # fmt: skip
    return rows


def print_verdicts(outcomes: dict[str, dict[str, Any]]) -> None:
    print_table(
        "planted bugs",
        ["mutation", "caught", "anomaly kinds (count)", "anomalies", "first anomaly after", "run"],
        verdict_rows(outcomes),
    )


def all_caught(outcomes: dict[str, dict[str, Any]]) -> bool:
    """Every mutation caught, and the control clean."""
    return all(
        not results["anomalies"] if name == CONTROL else results["caught"]
        for name, results in outcomes.items()
    )
