"""Engine results keyed by integers (area ranks, bucket numbers) turned back into area ids and bucket starts:
shared by the counting step and the writers of its outputs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa


@dataclass
class DecodedKeys:
    """Turns engine results keyed by integers into (area_id, bucket_start, n) with Arrow's vectorised take."""

    ids: np.ndarray  # area ids in rank order (id order)
    buckets: pd.Series  # bucket number -> bucket start
    ranks: np.ndarray | None = None  # the rank the engine uses for each id, ascending; None: 0, 1, 2, ...

    def __post_init__(self) -> None:
        self.id_array = pa.array(self.ids.astype(str), pa.string())
        self.bucket_array = pa.array(self.buckets.to_numpy(), pa.timestamp("us", tz="UTC"))
        if self.ranks is None:
            self.ranks = np.arange(len(self.ids), dtype=np.int64)
        self._dense = bool(len(self.ranks) == 0 or self.ranks[-1] == len(self.ranks) - 1)
        self._table: np.ndarray | None = None

    def positions(self, ranks: np.ndarray) -> np.ndarray:
        """Index into `ids` of each rank the engine returned."""
        ranks = np.asarray(ranks, np.int64)
        if self._dense:
            return ranks
        assert self.ranks is not None  # set by __post_init__
        if self._table is None and len(self.ranks) and 0 <= self.ranks[0] and self.ranks[-1] < 2**24:
            # ranks are small (compact grid cells, zones): a lookup table instead of a binary search per row
            # (filled before it is published: the membership writer's thread may call this at the same time)
            table = np.zeros(int(self.ranks[-1]) + 1, np.int64)
            table[self.ranks] = np.arange(len(self.ranks))
            self._table = table
        if self._table is not None:
            return self._table[ranks]
        return np.searchsorted(self.ranks, ranks)

    def coded_table(self, positions: np.ndarray, b: np.ndarray, n: np.ndarray) -> pa.Table:
        """(area_id, bucket_start, n) with the area ids as dictionary codes into `ids` (positions): no string
        per row; written to Parquet as dictionary pages and read back as a plain string column
        (`outputs.write_parquet`)."""
        codes = pa.array(np.asarray(positions).astype(np.int32))
        return pa.table(
            {
                "area_id": pa.DictionaryArray.from_arrays(codes, self.id_array),
                "bucket_start": self.bucket_array.take(pa.array(np.asarray(b, np.int64))),
                "n": pa.array(np.asarray(n, np.int64)),
            }
        )

    def table(
        self, counts: pd.DataFrame, level: str | None = None, area: str = "rank", names: np.ndarray | None = None
    ) -> pa.Table:
        """names: for area="parent", the parent ids its integer codes stand for."""
        b = pa.array(counts["b"].to_numpy(np.int64))
        if area == "rank":
            ids = self.id_array.take(pa.array(self.positions(counts["rank"].to_numpy(np.int64))))
        elif names is not None:
            ids = pa.array(names, pa.string()).take(pa.array(counts[area].to_numpy(np.int64)))
        else:
            ids = pa.array(counts[area].astype(str).to_numpy(object), pa.string())
        columns = {"area_id": ids, "bucket_start": self.bucket_array.take(b), "n": pa.array(counts["n"].to_numpy(np.int64))}
        if level is not None:
            columns = {"level": pa.repeat(pa.scalar(level, pa.string()), len(counts)), **columns}
        return pa.table(columns)
