"""The tests' S3 server itself (``tools/s3server``): loopback only, signed requests only, and many
buckets (each a SeaweedFS collection) stay writable."""
from __future__ import annotations

import shutil
import subprocess
import urllib.error
import urllib.request

import pytest


def test_every_listener_is_on_loopback(s3_server):
    if shutil.which("ss") is None:
        pytest.skip("needs the ss tool")
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    mine = [line.split()[3] for line in out.splitlines() if f"pid={s3_server.proc.pid}," in line]
    assert mine, out
    assert all(addr.startswith("127.0.0.1:") for addr in mine), mine


def test_anonymous_requests_are_refused(s3_server, s3_bucket):
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{s3_server.endpoint}/{s3_bucket[len('s3://'):]}/", timeout=5)
    assert err.value.code == 403


def test_twenty_new_buckets_take_writes(s3_server):
    fs = s3_server.filesystem()
    for i in range(20):
        name = f"many-{i:02d}"
        s3_server.create_bucket(name)
        out = fs.open_output_stream(f"{name}/k")
        out.write(b"x" * 1000)
        out.close()                      # raises if the server refused the upload
        assert fs.open_input_stream(f"{name}/k").read() == b"x" * 1000
