"""Data: synthetic click logs with a known generating model (:mod:`.synthetic`), daily partitions
(:mod:`.daily`), and prep from raw logs to hashed Parquet splits (:mod:`.prep`)."""

__all__: list[str] = []
