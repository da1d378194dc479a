"""pandas and polars read Horizon through the ADBC connection, and get ExecuteQuery's answer."""

from __future__ import annotations

import pandas as pd
import polars as pl

SQL = "SELECT id, owner, balance FROM accounts WHERE balance >= 100 ORDER BY id"


def test_pandas_read_sql_through_adbc_equals_the_native_answer(adbc, native):
    frame = pd.read_sql(SQL, adbc)
    assert frame.equals(native.query(SQL).to_pandas())


def test_polars_read_database_through_adbc_equals_the_native_answer(adbc, native):
    frame = pl.read_database(SQL, connection=adbc)
    assert frame.equals(pl.from_arrow(native.query(SQL)))
