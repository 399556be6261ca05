"""Small helpers every capability uses (output directories checked at the boundary)."""

__all__: list[str] = []
