"""Whether one TPC-H query's ratio says anything: its noise, from the rounds that measured it.

At scale factor 0.01 every query is a few hundred milliseconds of mostly fixed Spark costs, and
one query's A/A ratio (plain Spark timed again in the same rounds, over plain) ranged 0.61x to
1.63x from run to run: a single pair of medians cannot tell a 1.4x gap from noise. So each
ratio gets two measures of its noise, both from the run's own rounds (each round times the
three sides back to back, so rounds are paired samples):

- the range of the ratio itself: the 5th and 95th percentiles of the ratio of medians over
  rounds drawn again with replacement (a bootstrap; seeded, so a run's report is repeatable);
- the A/A spread: how far from 1 the same plain query, timed twice, lands in this run (its A/A
  ratio and that ratio's own bootstrap range, the farthest of them, as a factor >= 1).

A query *misses* its target only when the ratio is above it by more than the A/A spread and
its range lies wholly above it; otherwise a ratio above the target is *within noise*.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence

TARGETS = {"before": 1.3, "after": 1.15}
"""Each query's target, Horizon / plain Spark, before and after a compaction (issue 49)."""
TOTAL_TARGET = {"before": 1.05}
"""The total's target (before compaction only)."""
DRAWS = 1000
LEVEL = 0.9

MET = "met"
WITHIN_NOISE = "within noise"
MISSED = "missed"


def ratio_of_medians(numerators: Sequence[float], denominators: Sequence[float]) -> float:
    return statistics.median(numerators) / statistics.median(denominators)


def bootstrap_range(
    numerators: Sequence[float], denominators: Sequence[float], *, seed: int, draws: int = DRAWS
) -> tuple[float, float]:
    """The central ``LEVEL`` range of the ratio of medians over rounds drawn with replacement
    (each draw keeps a round's two samples together: they ran back to back)."""
    if len(numerators) != len(denominators) or not numerators:
        raise ValueError("paired samples of equal, non-zero length are needed")
    rounds = len(numerators)
    chooser = random.Random(seed)
    ratios = []
    for _ in range(draws):
        picks = [chooser.randrange(rounds) for _ in range(rounds)]
        ratios.append(
            ratio_of_medians([numerators[i] for i in picks], [denominators[i] for i in picks])
        )
    ratios.sort()
    tail = (1 - LEVEL) / 2
    return ratios[int(tail * (draws - 1))], ratios[math.ceil((1 - tail) * (draws - 1))]


def spread(*factors: float) -> float:
    """The farthest of ``factors`` from 1, as a factor >= 1 (0.8x and 1.25x are both 1.25)."""
    return math.exp(max(abs(math.log(factor)) for factor in factors))


def verdict(ratio: float, ratio_range: tuple[float, float], aa_spread: float, target: float) -> str:
    """``met`` at or below ``target``; ``missed`` when the ratio exceeds the target by more than
    the A/A spread and its whole range lies above it; otherwise ``within noise``."""
    if ratio <= target:
        return MET
    if ratio > target * aa_spread and ratio_range[0] > target:
        return MISSED
    return WITHIN_NOISE


def query_noise(samples: dict[str, list[float]], seed: int) -> dict[str, float | list[float]]:
    """One query's noise figures from its rounds' samples (``horizon``, ``plain``, ``again``)."""
    ratio_range = bootstrap_range(samples["horizon"], samples["plain"], seed=seed)
    aa_range = bootstrap_range(samples["again"], samples["plain"], seed=seed + 1)
    aa = ratio_of_medians(samples["again"], samples["plain"])
    return {
        "ratio_range": [round(value, 3) for value in ratio_range],
        "aa_range": [round(value, 3) for value in aa_range],
        "aa_spread": round(spread(aa, *aa_range), 3),
    }


def total_range(per_query: dict[str, dict[str, list[float]]], *, seed: int) -> list[float]:
    """The central ``LEVEL`` range of the total ratio (sum of Horizon's medians over the sum of
    plain's), each query's rounds drawn again on their own."""
    chooser = random.Random(seed)
    ratios = []
    for _ in range(DRAWS):
        ours = theirs = 0.0
        for samples in per_query.values():
            rounds = len(samples["plain"])
            picks = [chooser.randrange(rounds) for _ in range(rounds)]
            ours += statistics.median(samples["horizon"][i] for i in picks)
            theirs += statistics.median(samples["plain"][i] for i in picks)
        ratios.append(ours / theirs)
    ratios.sort()
    tail = (1 - LEVEL) / 2
    low, high = ratios[int(tail * (DRAWS - 1))], ratios[math.ceil((1 - tail) * (DRAWS - 1))]
    return [round(low, 3), round(high, 3)]
