"""The local backend: a supervised pserver/trainer gang of local processes (:mod:`.gang`) behind the
training interface (:mod:`.backend`)."""

__all__: list[str] = []
