"""Developer tools: build scripts and servers of the test tier (``minicluster/``, ``s3server/``,
``kfpserver/``), the docs generators (``docs/``), and the helpers both the tests and the benchmarks
import (``planted_prep``, ``model_server``, ``v2_client``). None of it ships in the package.

A package so those helpers are imported as ``tools.<module>`` from the repository root; the servers'
scripts keep putting their own directory on ``sys.path``.
"""
