"""A small TPC-H data generator of our own: the eight tables at a scale factor, deterministic.

DuckDB's ``tpch`` extension is a download this machine cannot make, so ``bench.tpch`` generates
the data itself: the specification's schemas (keys, ``decimal(15,2)`` money, dates, the fixed
regions and nations) and value domains close enough that the 22 queries all have answers (the
dates, segments, priorities, ship modes, brands, types, containers, colour words in part names,
"special requests" in order comments, "Customer Complaints" in supplier comments, phone country
codes, customers without orders, partsupp's supplier formula so every lineitem's part and
supplier pair exists). Not the official ``dbgen`` text or distributions: answers are checked
against DuckDB on the same data, not against the specification's published answers.

:func:`generate` returns the final state as Arrow tables; :func:`batches` turns one table into
the upsert changelog ``bench.tpch`` ingests (corrections, deletes, re-inserts, late rows).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

START = np.datetime64("1992-01-01")
END = np.datetime64("1998-12-31")
CURRENT = np.datetime64("1995-06-17")
"""The specification's CURRENTDATE: return flags and line status depend on it."""
REGIONS = ("AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST")
NATIONS = (
    ("ALGERIA", 0), ("ARGENTINA", 1), ("BRAZIL", 1), ("CANADA", 1), ("EGYPT", 4),
    ("ETHIOPIA", 0), ("FRANCE", 3), ("GERMANY", 3), ("INDIA", 2), ("INDONESIA", 2),
    ("IRAN", 4), ("IRAQ", 4), ("JAPAN", 2), ("JORDAN", 4), ("KENYA", 0),
    ("MOROCCO", 0), ("MOZAMBIQUE", 0), ("PERU", 1), ("CHINA", 2), ("ROMANIA", 3),
    ("SAUDI ARABIA", 4), ("VIETNAM", 2), ("RUSSIA", 3), ("UNITED KINGDOM", 3),
    ("UNITED STATES", 1),
)  # fmt: skip
SEGMENTS = ("AUTOMOBILE", "BUILDING", "FURNITURE", "MACHINERY", "HOUSEHOLD")
PRIORITIES = ("1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW")
INSTRUCTIONS = ("DELIVER IN PERSON", "COLLECT COD", "NONE", "TAKE BACK RETURN")
MODES = ("REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB")
TYPE_WORDS = (
    ("STANDARD", "SMALL", "MEDIUM", "LARGE", "ECONOMY", "PROMO"),
    ("ANODIZED", "BURNISHED", "PLATED", "POLISHED", "BRUSHED"),
    ("TIN", "NICKEL", "BRASS", "STEEL", "COPPER"),
)
CONTAINER_WORDS = (
    ("SM", "LG", "MED", "JUMBO", "WRAP"),
    ("CASE", "BOX", "BAG", "JAR", "PKG", "PACK", "CAN", "DRUM"),
)
COLOURS = (
    "almond", "antique", "aquamarine", "azure", "beige", "bisque", "black", "blanched", "blue",
    "blush", "brown", "burlywood", "burnished", "chartreuse", "chiffon", "chocolate", "coral",
    "cornflower", "cornsilk", "cream", "cyan", "dark", "deep", "dim", "dodger", "drab",
    "firebrick", "floral", "forest", "frosted", "gainsboro", "ghost", "goldenrod", "green",
    "grey", "honeydew", "hot", "indian", "ivory", "khaki", "lace", "lavender", "lawn", "lemon",
    "light", "lime", "linen", "magenta", "maroon", "medium", "metallic", "midnight", "mint",
    "misty", "moccasin", "navajo", "navy", "olive", "orange", "orchid", "pale", "papaya",
    "peach", "peru", "pink", "plum", "powder", "puff", "purple", "red", "rose", "rosy", "royal",
    "saddle", "salmon", "sandy", "seashell", "sienna", "sky", "slate", "smoke", "snow",
    "spring", "steel", "tan", "thistle", "tomato", "turquoise", "violet", "wheat", "white",
    "yellow",
)  # fmt: skip
WORDS = (
    "furiously", "quickly", "carefully", "blithely", "slyly", "fluffily", "final", "ironic",
    "pending", "regular", "express", "bold", "even", "silent", "unusual", "deposits",
    "packages", "accounts", "instructions", "theodolites", "foxes", "ideas", "pinto", "beans",
    "dependencies", "platelets", "asymptotes", "courts", "dolphins", "multipliers", "sauternes",
    "warthogs", "frets", "dinos", "attainments", "somas", "sheaves", "excuses", "about", "above",
    "according", "across", "after", "along", "among", "around", "at", "before", "beside",
)  # fmt: skip
MONEY = pa.decimal128(15, 2)
KEYS: dict[str, tuple[str, ...]] = {
    "region": ("r_regionkey",),
    "nation": ("n_nationkey",),
    "supplier": ("s_suppkey",),
    "customer": ("c_custkey",),
    "part": ("p_partkey",),
    "partsupp": ("ps_partkey", "ps_suppkey"),
    "orders": ("o_orderkey",),
    "lineitem": ("l_orderkey", "l_linenumber"),
}
"""Each table's primary key, the order :func:`generate` returns and ``bench.tpch`` ingests."""


def money(cents: np.ndarray) -> pa.Array:
    """``decimal(15,2)`` from whole cents, without a Python object per value (a decimal128 is
    a little-endian 128-bit integer: the cents and their sign extension)."""
    cents = np.ascontiguousarray(cents, dtype=np.int64)
    words = np.empty((len(cents), 2), dtype=np.int64)
    words[:, 0] = cents
    words[:, 1] = cents >> 63
    return pa.Array.from_buffers(MONEY, len(cents), [None, pa.py_buffer(words.tobytes())])


def _pick(rng: np.random.Generator, values: tuple[str, ...], size: int) -> np.ndarray:
    return np.asarray(values, dtype=object)[rng.integers(0, len(values), size)]


def _text(rng: np.random.Generator, size: int, words: int) -> np.ndarray:
    """``size`` comments of ``words`` random words each."""
    chosen = _pick(rng, WORDS, size * words).reshape(size, words)
    return np.asarray([" ".join(row) for row in chosen], dtype=object)


def _planted(rng: np.random.Generator, text: np.ndarray, share: float, phrase: str) -> np.ndarray:
    """``text`` with ``phrase`` inserted into about ``share`` of the values."""
    text = text.copy()
    for index in np.flatnonzero(rng.random(len(text)) < share):
        text[index] = f"{text[index]} {phrase} {WORDS[index % len(WORDS)]}"
    return text


def _phone(rng: np.random.Generator, nation: np.ndarray) -> np.ndarray:
    digits = rng.integers(100, 1000, (len(nation), 2))
    last = rng.integers(1000, 10000, len(nation))
    return np.asarray(
        [f"{n + 10}-{a}-{b}-{c}" for n, (a, b), c in zip(nation, digits, last, strict=True)],
        dtype=object,
    )


def _cents(rng: np.random.Generator, low: int, high: int, size: int) -> np.ndarray:
    return rng.integers(low, high + 1, size)


@dataclass(frozen=True)
class Sizes:
    """Row counts at a scale factor (the specification's multipliers)."""

    suppliers: int
    customers: int
    parts: int
    orders: int

    @staticmethod
    def at(scale: float) -> Sizes:
        return Sizes(
            # At least 100: with fewer, partsupp's supplier formula repeats pairs.
            suppliers=max(100, round(10_000 * scale)),
            customers=max(30, round(150_000 * scale)),
            parts=max(40, round(200_000 * scale)),
            orders=max(150, round(1_500_000 * scale)),
        )


def generate(scale: float, seed: int = 49) -> dict[str, pa.Table]:
    """The eight tables at ``scale``: the same tables for the same arguments."""
    rng = np.random.default_rng(seed)
    sizes = Sizes.at(scale)
    tables = {"region": _region(rng), "nation": _nation(rng)}
    tables["supplier"] = _supplier(rng, sizes)
    tables["customer"] = _customer(rng, sizes)
    part = _part(rng, sizes)
    tables["part"] = part
    tables["partsupp"] = _partsupp(rng, sizes)
    orders, lineitem = _orders_and_lineitem(rng, sizes)
    tables["orders"] = orders
    tables["lineitem"] = lineitem
    return tables


def _region(rng: np.random.Generator) -> pa.Table:
    return pa.table(
        {
            "r_regionkey": pa.array(range(len(REGIONS)), pa.int64()),
            "r_name": list(REGIONS),
            "r_comment": list(_text(rng, len(REGIONS), 6)),
        }
    )


def _nation(rng: np.random.Generator) -> pa.Table:
    return pa.table(
        {
            "n_nationkey": pa.array(range(len(NATIONS)), pa.int64()),
            "n_name": [name for name, _ in NATIONS],
            "n_regionkey": pa.array([region for _, region in NATIONS], pa.int64()),
            "n_comment": list(_text(rng, len(NATIONS), 6)),
        }
    )


def _supplier(rng: np.random.Generator, sizes: Sizes) -> pa.Table:
    count = sizes.suppliers
    nation = rng.integers(0, len(NATIONS), count)
    comment = _planted(rng, _text(rng, count, 6), 0.005, "Customer slyly Complaints")
    comment = _planted(rng, comment, 0.005, "Customer carefully Recommends")
    keys = np.arange(1, count + 1)
    return pa.table(
        {
            "s_suppkey": pa.array(keys, pa.int64()),
            "s_name": [f"Supplier#{key:09d}" for key in keys],
            "s_address": list(_text(rng, count, 2)),
            "s_nationkey": pa.array(nation, pa.int64()),
            "s_phone": list(_phone(rng, nation)),
            "s_acctbal": money(_cents(rng, -99_999, 999_999, count)),
            "s_comment": list(comment),
        }
    )


def _customer(rng: np.random.Generator, sizes: Sizes) -> pa.Table:
    count = sizes.customers
    nation = rng.integers(0, len(NATIONS), count)
    keys = np.arange(1, count + 1)
    return pa.table(
        {
            "c_custkey": pa.array(keys, pa.int64()),
            "c_name": [f"Customer#{key:09d}" for key in keys],
            "c_address": list(_text(rng, count, 2)),
            "c_nationkey": pa.array(nation, pa.int64()),
            "c_phone": list(_phone(rng, nation)),
            "c_acctbal": money(_cents(rng, -99_999, 999_999, count)),
            "c_mktsegment": list(_pick(rng, SEGMENTS, count)),
            "c_comment": list(_text(rng, count, 6)),
        }
    )


def retail_cents(partkey: np.ndarray) -> np.ndarray:
    """The specification's retail price of a part, in cents."""
    return 90_000 + (partkey // 10) % 20_001 + 100 * (partkey % 1_000)


def _part(rng: np.random.Generator, sizes: Sizes) -> pa.Table:
    count = sizes.parts
    keys = np.arange(1, count + 1)
    colours = _pick(rng, COLOURS, count * 5).reshape(count, 5)
    manufacturer = rng.integers(1, 6, count)
    types = [_pick(rng, words, count) for words in TYPE_WORDS]
    containers = [_pick(rng, words, count) for words in CONTAINER_WORDS]
    return pa.table(
        {
            "p_partkey": pa.array(keys, pa.int64()),
            "p_name": [" ".join(row) for row in colours],
            "p_mfgr": [f"Manufacturer#{m}" for m in manufacturer],
            "p_brand": [
                f"Brand#{m}{b}"
                for m, b in zip(manufacturer, rng.integers(1, 6, count), strict=True)
            ],
            "p_type": [" ".join(words) for words in zip(*types, strict=True)],
            "p_size": pa.array(rng.integers(1, 51, count), pa.int32()),
            "p_container": [" ".join(words) for words in zip(*containers, strict=True)],
            "p_retailprice": money(retail_cents(keys)),
            "p_comment": list(_text(rng, count, 3)),
        }
    )


def part_supplier(partkey: np.ndarray, index: np.ndarray, suppliers: int) -> np.ndarray:
    """The specification's ``index``-th (0..3) supplier of a part."""
    return (partkey + index * (suppliers // 4 + (partkey - 1) // suppliers)) % suppliers + 1


def _partsupp(rng: np.random.Generator, sizes: Sizes) -> pa.Table:
    partkey = np.repeat(np.arange(1, sizes.parts + 1), 4)
    index = np.tile(np.arange(4), sizes.parts)
    count = len(partkey)
    return pa.table(
        {
            "ps_partkey": pa.array(partkey, pa.int64()),
            "ps_suppkey": pa.array(part_supplier(partkey, index, sizes.suppliers), pa.int64()),
            "ps_availqty": pa.array(rng.integers(1, 10_000, count), pa.int32()),
            "ps_supplycost": money(_cents(rng, 100, 100_000, count)),
            "ps_comment": list(_text(rng, count, 5)),
        }
    )


def _orders_and_lineitem(rng: np.random.Generator, sizes: Sizes) -> tuple[pa.Table, pa.Table]:
    count = sizes.orders
    index = np.arange(count)
    orderkey = (index // 8) * 32 + index % 8 + 1  # sparse, as the specification's
    with_orders = np.flatnonzero(np.arange(1, sizes.customers + 1) % 3 != 0) + 1
    custkey = with_orders[rng.integers(0, len(with_orders), count)]
    last_day = (END - np.timedelta64(151, "D") - START).astype(int)
    orderdate = START + rng.integers(0, last_day + 1, count).astype("timedelta64[D]")
    lines = rng.integers(1, 8, count)
    total = int(lines.sum())
    owner = np.repeat(index, lines)
    linenumber = np.arange(total) - np.repeat(np.cumsum(lines) - lines, lines) + 1
    partkey = rng.integers(1, sizes.parts + 1, total)
    suppkey = part_supplier(partkey, rng.integers(0, 4, total), sizes.suppliers)
    quantity = rng.integers(1, 51, total)
    extended = quantity * retail_cents(partkey)
    discount = rng.integers(0, 11, total)
    tax = rng.integers(0, 9, total)
    shipdate = orderdate[owner] + rng.integers(1, 122, total).astype("timedelta64[D]")
    commitdate = orderdate[owner] + rng.integers(30, 91, total).astype("timedelta64[D]")
    receiptdate = shipdate + rng.integers(1, 31, total).astype("timedelta64[D]")
    returned = np.where(rng.random(total) < 0.5, "R", "A")
    returnflag = np.where(receiptdate <= CURRENT, returned, "N")
    shipped = shipdate <= CURRENT
    linestatus = np.where(shipped, "F", "O")
    line_total = extended * (100 - discount) * (100 + tax) // 10_000
    order_total = np.bincount(owner, weights=line_total, minlength=count).astype(np.int64)
    shipped_lines = np.bincount(owner, weights=shipped, minlength=count)
    status = np.where(shipped_lines == lines, "F", np.where(shipped_lines == 0, "O", "P"))
    comment = _planted(rng, _text(rng, count, 5), 0.02, "special packages requests")
    orders = pa.table(
        {
            "o_orderkey": pa.array(orderkey, pa.int64()),
            "o_custkey": pa.array(custkey, pa.int64()),
            "o_orderstatus": list(status),
            "o_totalprice": money(order_total),
            "o_orderdate": pa.array(orderdate),
            "o_orderpriority": list(_pick(rng, PRIORITIES, count)),
            "o_clerk": [
                f"Clerk#{c:09d}" for c in rng.integers(1, max(2, count // 1_000) + 1, count)
            ],
            "o_shippriority": pa.array(np.zeros(count, dtype=np.int32)),
            "o_comment": list(comment),
        }
    )
    lineitem = pa.table(
        {
            "l_orderkey": pa.array(orderkey[owner], pa.int64()),
            "l_partkey": pa.array(partkey, pa.int64()),
            "l_suppkey": pa.array(suppkey, pa.int64()),
            "l_linenumber": pa.array(linenumber, pa.int32()),
            "l_quantity": money(quantity * 100),
            "l_extendedprice": money(extended),
            "l_discount": money(discount),
            "l_tax": money(tax),
            "l_returnflag": list(returnflag),
            "l_linestatus": list(linestatus),
            "l_shipdate": pa.array(shipdate),
            "l_commitdate": pa.array(commitdate),
            "l_receiptdate": pa.array(receiptdate),
            "l_shipinstruct": list(_pick(rng, INSTRUCTIONS, total)),
            "l_shipmode": list(_pick(rng, MODES, total)),
            "l_comment": list(_text(rng, total, 3)),
        }
    )
    return orders, lineitem


SEQUENCE = "hz_seq"
"""The comparison column ``bench.tpch`` adds to every table: the batch that wrote the version."""
DELETED = "hz_deleted"
"""The delete column ``bench.tpch`` adds to every table."""
GHOST_OFFSET = 10_000_000
"""Added to the last key column of a ghost row: a key the final state does not have."""


def batches(name: str, final: pa.Table, seed: int = 49) -> list[pa.Table]:
    """Three upsert batches whose result is ``final``, with history on the way: batch 1 inserts
    most rows, a tenth of them with wrong values, plus ghost rows (keys the final state lacks);
    batch 2 corrects the wrong rows, deletes the ghosts and a twentieth of the real rows; batch 3
    re-inserts those and brings the late tenth never seen before. Each row carries
    :data:`SEQUENCE` (its batch) and :data:`DELETED`."""
    rows = final.num_rows
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    order = rng.permutation(rows)
    tenth, twentieth = rows // 10, rows // 20
    late, corrected = order[:tenth], order[tenth : 2 * tenth]
    reinserted = order[2 * tenth : 2 * tenth + twentieth]
    rest = order[2 * tenth + twentieth :]
    keys = KEYS[name]
    wrong = _with_keys(
        final.take(rng.integers(0, rows, len(corrected))), final.take(corrected), keys
    )
    # Distinct source rows: two ghosts of one row would share a key within batch 1.
    ghost_source = final.take(rng.choice(rows, max(1, rows // 50), replace=False))
    last = keys[-1]
    ghosts = ghost_source.set_column(
        ghost_source.schema.get_field_index(last),
        last,
        pc.add(ghost_source[last], pa.scalar(GHOST_OFFSET, ghost_source.schema.field(last).type)),
    )
    return [
        _stamped([(final.take(rest), False), (final.take(reinserted), False), (wrong, False), (ghosts, False)], 1),
        _stamped([(final.take(corrected), False), (ghosts, True), (final.take(reinserted), True)], 2),
        _stamped([(final.take(reinserted), False), (final.take(late), False)], 3),
    ]  # fmt: skip


def _with_keys(values: pa.Table, keyed: pa.Table, keys: tuple[str, ...]) -> pa.Table:
    """``values`` with the key columns of ``keyed`` (same length): wrong values under real keys."""
    for key in keys:
        values = values.set_column(values.schema.get_field_index(key), key, keyed[key])
    return values


def _stamped(parts: list[tuple[pa.Table, bool]], sequence: int) -> pa.Table:
    stamped = [
        table.append_column(
            SEQUENCE, pa.array(np.full(table.num_rows, sequence, np.int64))
        ).append_column(DELETED, pa.array(np.full(table.num_rows, deleted)))
        for table, deleted in parts
    ]
    return pa.concat_tables(stamped)
