"""The pserver role: serve the tables until trainer 0 stops it, and fail on any other stop.

Paddle's server exits 0 when it cannot listen (a port taken, a name that does not resolve), so the
role checks both first; pserver 0 also serves the trainers' Gloo rendezvous
(:mod:`ctr_model.rendezvous`). With the outputs in a store, the pserver fetches the checkpoint to
resume from before serving (trainer 0 loads it by path) and uploads its tables when trainer 0 asks
(:class:`ctr_model.workspace.PublishResponder`).
"""
from __future__ import annotations

import os
import shutil
import time
import uuid

from ctr_model import workspace as wsp
from ctr_model.config import TrainConfig
from ctr_model.contract import RoleSpec
from ctr_model.errors import BadInput, JobFailed
from ctr_model.rendezvous import serve_rendezvous
from ctr_model.tablegzip import use_fast_gzip
from ctr_model.train import say
from ctr_model.train.checkpoints import sync_checkpoints
from ctr_model.train.peers import port_is_free, resolved_address
from ctr_model.train.program import build, data_features, with_features
from ctr_model.train.scratch import cache_dir

__all__ = ["run_pserver"]


def run_pserver(spec: RoleSpec, config: TrainConfig, ws: wsp.Workspace) -> None:
    """Serve until trainer 0 stops this pserver.

    Raises:
        BadInput: its host name does not resolve, or its port (or pserver 0's rendezvous port) is taken.
        JobFailed: the server returned without trainer 0 stopping it.
    """
    host, port = spec.ps_endpoints()[spec.index].rsplit(":", 1)
    if not port_is_free(resolved_address(spec, host), int(port)):
        raise BadInput("CTR_PS_PORT", int(port), f"already in use on {host}: stop the process holding it "
                                                 f"or choose another port")
    stop_rendezvous = None
    if spec.index == 0:
        try:
            stop_rendezvous = serve_rendezvous(spec.gloo_port)
        except OSError as exc:
            raise BadInput("CTR_GLOO_PORT", spec.gloo_port,
                           f"cannot serve the trainers' rendezvous there ({exc.strerror or exc}): stop the "
                           f"process holding it or choose another port") from None
    bin_dir = cache_dir(spec) + "-bin"
    use_fast_gzip(bin_dir)
    try:
        _serve(spec, config, ws, f"{host}:{port}")
    finally:
        if stop_rendezvous is not None:
            stop_rendezvous()
        shutil.rmtree(bin_dir, ignore_errors=True)


def _serve(spec: RoleSpec, config: TrainConfig, ws: wsp.Workspace, endpoint: str) -> None:
    nonce = uuid.uuid4().hex
    ws.write_text(f"{wsp.GANG_DIR}/{spec.name}.nonce", nonce)
    responder = None
    if isinstance(ws, wsp.StoreWorkspace):
        # trainer 0 loads the checkpoint by path: it must be on this pserver's disk before serving
        resume = sync_checkpoints(ws)
        if resume is not None:
            t = time.time()
            ws.fetch(os.path.relpath(resume.path, ws.root))
            say(spec, f"fetched {ws.uri(os.path.relpath(resume.path, ws.root))} in {time.time() - t:.1f}s")
        responder = wsp.PublishResponder(ws, spec.name)
        responder.start()
    features = data_features(spec)
    fleet, _net = build(with_features(config, features), features=features)
    say(spec, f"serving on {endpoint}")
    try:
        fleet.init_server()
        fleet.run_server()
    finally:
        if responder is not None:
            responder.stop()
    if not wsp.stopped_by_trainer0(ws, nonce):
        raise JobFailed(spec.job_id, "Failed", "the parameter server returned without being stopped by "
                                               "trainer 0 (look for 'Fail to listen' above: port taken or "
                                               "host name not resolvable)", role=spec.name)
    say(spec, "stopped by trainer 0")
