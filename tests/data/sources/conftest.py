"""Small benchmark snapshots written by the tests in each benchmark's real schema."""

import pytest


@pytest.fixture
def write_parquet():
    """``write_parquet(path, rows)``: the rows (dicts) as one parquet file, with image columns as
    ``struct<bytes, path>`` as the hub stores them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def write(path, rows, schema=None):
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
        return path

    return write
