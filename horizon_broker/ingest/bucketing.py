"""Co-locating each key partition in one Spark task, so a batch shuffles its rows only once.

Key resolution must bring a key's records together (a shuffle by key). If that one shuffle also
puts every row of a key partition into the same task, everything after it is local: the key index
join reads its side already split the same way, each segment (one per time chunk and key partition)
is written by a single task as a single file, and so is each key partition's key index. Hashing by
the key partition itself would not do: ``pmod(murmur3(kp), n)`` sends several key partitions to
one task and none to another. So every key partition gets a *bucket* value chosen so that Spark's
hash partitioning sends it to the task we want (task ``i mod n`` for the ``i``-th partition), and
the batch is repartitioned by that value. The choice needs Spark's Murmur3 of an int, reproduced
here in pure Python (and checked against Spark's ``hash`` in the tests).

Example::

    >>> layout = bucket_layout([0, 1, 2, 3], tasks=4)
    >>> sorted(task_of(value, 4) for value in layout.values.values())
    [0, 1, 2, 3]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

SPARK_HASH_SEED = 42
_MASK = 0xFFFFFFFF
BUCKET_COLUMN = "_bucket"


def _rotate_left(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK


def murmur3_int(value: int, seed: int = SPARK_HASH_SEED) -> int:
    """Spark's ``Murmur3_x86_32.hashInt`` as a signed 32-bit int (``hash(CAST(value AS INT))``)."""
    k1 = (value & _MASK) * 0xCC9E2D51 & _MASK
    k1 = _rotate_left(k1, 15) * 0x1B873593 & _MASK
    h1 = (seed & _MASK) ^ k1
    h1 = (_rotate_left(h1, 13) * 5 + 0xE6546B64) & _MASK
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _MASK
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


def task_of(value: int, tasks: int) -> int:
    """The task ``HashPartitioning([int column], tasks)`` sends ``value`` to."""
    return murmur3_int(value) % tasks  # Python's % is Spark's pmod for a positive divisor


@dataclass(frozen=True, slots=True)
class BucketLayout:
    tasks: int
    values: dict[Any, int]
    """group (a key partition, or a segment to rewrite) -> bucket value (an int Spark hashes to
    the group's task)."""


def bucket_layout(partitions: Sequence[Any], tasks: int) -> BucketLayout:
    """One bucket value per group (sortable, e.g. key partitions); the ``i``-th group in sorted
    order goes to task ``i mod tasks``."""
    if tasks < 1:
        raise ValueError(f"tasks must be >= 1, got {tasks}")
    ordered = sorted(set(partitions))
    wanted = set(range(min(tasks, len(ordered))))
    first_value: dict[int, int] = {}
    candidate = 0
    while not wanted <= first_value.keys():
        first_value.setdefault(task_of(candidate, tasks), candidate)
        candidate += 1
    return BucketLayout(tasks, {kp: first_value[i % tasks] for i, kp in enumerate(ordered)})


def bucket_column(layout: BucketLayout, key_partition: str = "_kp") -> Any:
    """A Spark int column: the bucket value of each row's key partition (null for a partition
    the layout does not hold).

    One array literal indexed by the key partition: a single expression to send to the JVM and
    constant work per row, however many key partitions the batch touches.
    """
    from pyspark.sql import functions as F

    size = max(layout.values, default=-1) + 1
    slots = ["CAST(NULL AS INT)"] * size
    for kp, value in layout.values.items():
        slots[kp] = str(value)
    if not slots:
        return F.lit(None).cast("int")
    kp = f"`{key_partition}`"
    return F.expr(f"IF({kp} >= 0, try_element_at(array({', '.join(slots)}), {kp} + 1), NULL)")


def allow_partial_cluster_keys(*sessions: Any) -> None:
    """Let a join reuse a split by a bucket column that is a function of its other keys.

    Both sides of the key index join (and of the updater's join) are split by a bucket of the key
    partition; by default Spark shuffles them again by every join key. Other plans are unaffected
    by the setting.
    """
    for session in sessions:
        session.conf.set("spark.sql.requireAllClusterKeysForCoPartition", "false")
