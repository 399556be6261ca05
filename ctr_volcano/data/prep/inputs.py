"""Prep's input: files, globs and directories resolved in order, cut at line ends into blocks and pieces.

Plain files are cut by byte range (the lanes read their pieces themselves); gzip files are
decompressed here, in order, and their text is handed out. Neither ever holds more than a block.
"""
from __future__ import annotations

import glob
import os
from typing import Any, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from ctr_model.feature_spec import FeatureSpec, input_description
from ctr_volcano.errors import BadInput

__all__ = ["resolve_inputs", "Job", "jobs", "piece_bytes", "long_line_error"]

_INPUT_SUFFIXES = (".tsv", ".txt", ".csv", ".gz", ".tsv.gz", ".txt.gz", ".parquet")


def resolve_inputs(inputs: Sequence[str], spec: Optional[FeatureSpec] = None) -> List[str]:
    """Expand files, globs and directories into an ordered list of input files.

    A directory contributes its regular files named ``*.tsv``, ``*.txt``, ``*.csv``, ``*.gz``,
    ``*.parquet`` (a feature spec's format) or with no extension (like Criteo's ``day_0``), sorted by
    name, not recursing (:func:`_directory_inputs`); neither a directory nor a glob contributes a
    marker or hidden file (:func:`_marker`).

    Raises:
        BadInput: for no inputs, a missing path, a glob or directory matching no file (the fix
            speaks of ``spec``'s layout; ``None``: Criteo TSV).
    """
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [os.fspath(inputs)]
    if not inputs:
        raise BadInput("input", list(inputs), "give at least one file, glob or directory")
    files: List[str] = []
    for item in inputs:
        item = os.fspath(item)
        if any(ch in item for ch in "*?["):
            matches = sorted(p for p in glob.glob(item) if os.path.isfile(p) and not _marker(os.path.basename(p)))
            if not matches:
                raise BadInput("input", item, "the glob matches no file; check the pattern")
            files.extend(matches)
        elif os.path.isdir(item):
            files.extend(_directory_inputs(item))
        elif os.path.isfile(item):
            files.append(item)
        else:
            kind = input_description(spec).split(" (")[0]
            gz = "" if spec is not None and spec.format == "parquet" else " (plain or .gz)"
            raise BadInput("input", item, f"no such file or directory; give {kind}{gz}, a glob or a directory")
    return files


def _marker(name: str) -> bool:
    """A name Hadoop and Spark give their markers and metadata, or a hidden file: never an input of a
    directory or a glob (a file named on its own is read)."""
    return name.startswith((".", "_"))


def _directory_inputs(directory: str) -> List[str]:
    """A directory's input files, sorted by name. Skipped: other extensions (``oracle.json``,
    ``README.md``), and names that start with ``.`` or ``_``, which Hadoop and Spark give their markers
    and metadata (``_SUCCESS``, ``_committed_*``, ``_metadata``, ``.part-0.crc``), as Arrow's
    datasets skip them.

    Raises:
        BadInput: no input file there (with subdirectories, such as partitions: the glob to give).
    """
    entries = sorted(os.listdir(directory))
    names = [n for n in entries if not _marker(n) and os.path.isfile(os.path.join(directory, n))
             and (n.endswith(_INPUT_SUFFIXES) or "." not in n)]
    if names:
        return [os.path.join(directory, n) for n in names]
    subdirs = [n for n in entries if os.path.isdir(os.path.join(directory, n))]
    hint = (f" (subdirectories such as {subdirs[0]!r} are not read: give a glob such as "
            f"{os.path.join(directory, '*', '*')!r}, or the subdirectories themselves)" if subdirs else "")
    raise BadInput("input", directory, f"the directory holds no .tsv/.txt/.csv/.gz/.parquet file{hint}")


def _open(path: str):
    import pyarrow as pa

    try:
        with open(path, "rb") as fh:
            magic = fh.read(2)
        return pa.input_stream(path, compression="gzip" if magic == b"\x1f\x8b" else None)
    except OSError as exc:
        raise BadInput("input", path, f"cannot open the file ({exc}); check the path and its "
                       f"permissions") from None


def _blocks(path: str, block_bytes: int) -> Iterator[Tuple[int, bytes, int]]:
    """Yield ``(first_line_number, text, lines)`` with whole lines; line numbers are 1-based."""
    line_no = 1
    pending = b""
    stream = _open(path)
    try:
        while True:
            try:
                chunk = stream.read(block_bytes)
            except (OSError, ValueError) as exc:  # pyarrow raises ArrowInvalid/OSError
                raise BadInput("input", path, f"cannot read the data ({exc}); if it is gzip, "
                               f"check it is complete (gzip -t) or re-download it") from None
            if not chunk:
                break
            data = pending + chunk if pending else chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                pending = data
                if len(pending) > block_bytes:
                    raise BadInput("input", f"{path}:{line_no}",
                                   f"line longer than the block size ({block_bytes >> 20} MiB): raise "
                                   f"--block-mb above the longest line, or check this is a Criteo TSV "
                                   f"file (40 tab-separated fields per line)")
                continue
            block, pending = data[:cut + 1], data[cut + 1:]
            n_lines = block.count(b"\n")
            yield line_no, block, n_lines
            line_no += n_lines
        if pending:
            yield line_no, pending, 1
    finally:
        stream.close()


def _last_newline(fd: int, lo: int, hi: int) -> int:
    """Offset of the last ``\n`` in bytes ``[lo, hi)`` of ``fd``, or -1; reads backwards."""
    pos = hi
    while pos > lo:
        n = min(1 << 16, pos - lo)
        i = os.pread(fd, n, pos - n).rfind(b"\n")
        if i >= 0:
            return pos - n + i
        pos -= n
    return -1


def _plain_blocks(fd: int, block_bytes: int) -> Iterator[Tuple[int, int]]:
    """Byte ranges ``[start, end)`` of the blocks :func:`_blocks` yields for a plain file, found by
    reading only around each cut (so workers can read the blocks themselves). ``end`` is -1 for a
    line longer than ``block_bytes`` starting at ``start`` (the caller reports it in order)."""
    size = os.fstat(fd).st_size
    start = read_end = 0
    while read_end < size:
        chunk_start, read_end = read_end, min(read_end + block_bytes, size)
        cut = _last_newline(fd, max(start, chunk_start), read_end)
        if cut < 0:
            if read_end - start > block_bytes:
                yield start, -1
                return
            continue
        yield start, cut + 1
        start = cut + 1
    if start < size:
        yield start, size


def piece_bytes(block_bytes: int) -> int:
    """Size of the pieces a block is cut into for the workers (they never change the output)."""
    return min(4 << 20, max(16 << 10, block_bytes // 8))


def _plain_pieces(fd: int, start: int, end: int, piece_bytes: int) -> List[Tuple[int, int]]:
    """Cut the block ``[start, end)`` at line ends into ranges of about ``piece_bytes``."""
    pieces, lo = [], start
    for target in range(start + piece_bytes, end, piece_bytes):
        if target <= lo:
            continue
        cut = _last_newline(fd, lo, target)
        if cut >= 0:
            pieces.append((lo, cut + 1))
            lo = cut + 1
    pieces.append((lo, end))
    return pieces


def _text_pieces(text: bytes, piece_bytes: int) -> List[bytes]:
    """Cut an in-memory block (decompressed gzip) at line ends into pieces of about ``piece_bytes``."""
    pieces, lo = [], 0
    for target in range(piece_bytes, len(text), piece_bytes):
        cut = text.rfind(b"\n", lo, target)
        if cut >= 0:
            pieces.append(text[lo:cut + 1])
            lo = cut + 1
    pieces.append(text[lo:] if lo else text)
    return pieces


class Job(NamedTuple):
    """One unit of the input, in input order.

    Attributes:
        kind: ``piece`` (text to parse), ``end`` (the end of a file), ``long line`` (a line longer
            than a block, reported in order) or ``error`` (raised once the work before it is done).
        path: the input file.
        last: ``piece``: the last piece of its block.
        nbytes: ``piece``: its size in bytes (progress).
        work: ``piece``: ``(path, start, end, text)``: a byte range of a plain file, or the text of
            a decompressed one; ``error``: the :class:`BadInput` to raise.
    """

    kind: str
    path: str
    last: bool = False
    nbytes: int = 0
    work: Any = None


def jobs(files: Sequence[str], block_bytes: int) -> Iterator[Job]:
    """The :class:`Job` s of ``files``, cut at line ends into blocks of ``block_bytes`` and pieces."""
    size = piece_bytes(block_bytes)
    for path in files:
        try:
            with open(path, "rb") as fh:
                gzipped = fh.read(2) == b"\x1f\x8b"
            if gzipped:  # decompressed here, in order; the workers get the text
                for _, text, _ in _blocks(path, block_bytes):
                    pieces = _text_pieces(text, size)
                    for k, piece in enumerate(pieces):
                        yield Job("piece", path, k == len(pieces) - 1, len(piece), (path, 0, 0, piece))
            else:
                fd = os.open(path, os.O_RDONLY)
                try:
                    for start, end in _plain_blocks(fd, block_bytes):
                        if end < 0:
                            yield Job("long line", path)
                            break
                        ranges = _plain_pieces(fd, start, end, size)
                        for k, (lo, hi) in enumerate(ranges):
                            yield Job("piece", path, k == len(ranges) - 1, hi - lo, (path, lo, hi, None))
                finally:
                    os.close(fd)
        except BadInput as exc:
            yield Job("error", path, work=exc)
            return
        except OSError as exc:
            yield Job("error", path, work=BadInput("input", path, f"cannot open the file ({exc}); check "
                                                   f"the path and its permissions"))
            return
        yield Job("end", path)


def long_line_error(where: str, block_bytes: int) -> BadInput:
    """The error for a line longer than a block, at ``where`` (``path:line``)."""
    return BadInput("input", where, f"line longer than the block size ({block_bytes >> 20} MiB): raise "
                                    f"--block-mb above the longest line, or check this is a Criteo TSV "
                                    f"file (40 tab-separated fields per line)")
