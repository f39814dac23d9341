"""Run by test_nccl_sync.py under torchrun (2 ranks, gloo) with vLLM's Python: the NCCL weight path of
:class:`verifiers.train.inference.NCCLWeightSync` with vLLM's real trainer-side engine, FSDP2-sharded
weights, and the parts a CPU machine cannot have faked: the NCCL communicator (a recorder of what
rank 0 broadcasts) and the vLLM servers (two HTTP servers that answer the RLHF routes and record
every call).

    python -m torch.distributed.run --nproc_per_node 2 nccl_worker.py MODEL_DIR OUT_DIR
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import torch

WORLD_SIZES = (2, 1)  # what the two fake servers report on GET /get_world_size


def fake_server(world_size: int, log: list) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self, body):
            raw = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self):
            u = urlparse(self.path)
            log.append({"path": u.path, "query": parse_qs(u.query), "body": None})
            self._answer({"world_size": world_size} if u.path == "/get_world_size" else {})

        def do_POST(self):
            u = urlparse(self.path)
            n = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(n)) if n else None
            log.append({"path": u.path, "query": parse_qs(u.query), "body": body})
            self._answer({"success": True} if u.path == "/reset_prefix_cache" else {})

        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


class FakeComm:
    """Stands in for vLLM's PyNcclCommunicator on the sender: keeps what is broadcast."""

    def __init__(self, info):
        self.info = info
        self.sent = []

    def broadcast(self, tensor, src=0, stream=None):
        assert src == 0
        self.sent.append(tensor.detach().clone())

    def destroy(self):
        pass


def main(model_dir: str, out_dir: str) -> None:
    import vllm.distributed.weight_transfer.nccl_engine as eng

    from tests.train.fsdp_worker import fixed_samples
    from verifiers.train.fsdp import destroy, init_distributed
    from verifiers.train.inference import NCCLWeightSync
    from verifiers.train.trainer import OptimConfig, Trainer, TrainerConfig

    comms = []

    def open_endpoint(info):
        comms.append(FakeComm(info))
        return comms[-1]

    def producer(iterator, group, src, post_iter_func, **_kw):
        # The packed producer needs CUDA streams; the wire is faked anyway: one broadcast per tensor.
        for item in iterator:
            group.broadcast(post_iter_func(item), src=src)

    eng.open_trainer_endpoint = open_endpoint
    eng.packed_nccl_broadcast_producer = producer

    info = init_distributed()
    torch.manual_seed(0)
    tr = Trainer(model_dir, TrainerConfig(seq_len=32, micro_batch_rows=2, optim=OptimConfig(lr=1e-2)),
                 dist_info=info)
    logs, servers = [[], []], []
    if info.is_main:
        servers = [fake_server(w, log) for w, log in zip(WORLD_SIZES, logs, strict=True)]
    urls = [f"http://127.0.0.1:{s.server_address[1]}" for s in servers]
    sync = NCCLWeightSync(tr.model, rank=info.rank, root_urls=urls, master_address="10.0.0.7", master_port=31337,
                          dtype=torch.bfloat16)
    rounds = []
    for version in (7, 8):
        sync.push(version)
        full = tr.full_state_dict()  # a collective too: every rank
        if info.is_main:
            rounds.append({"sent": list(comms[0].sent), "full": full})
            comms[0].sent.clear()
        tr.step(fixed_samples())  # the next round must carry the changed weights
    out = Path(out_dir)
    names = [n for n, _ in tr.model.named_parameters()]
    result = {"rank": info.rank, "client_calls": len(sync.client.calls), "endpoints": len(comms),
              "world_size": sync.world_size, "names": names}
    if info.is_main:
        result["logs"] = logs
        result["nccl_init"] = {"world_size": comms[0].info.world_size, "master_address": comms[0].info.master_address,
                               "master_port": comms[0].info.master_port}
        torch.save(rounds, out / "rounds.pt")
    (out / f"rank{info.rank}.json").write_text(json.dumps(result))
    sync.close()
    # Tear down in step, while the interpreter is whole: no rank shuts its gloo pairs while its peer
    # still works (rank 0 has more to write), and nothing holding the process group (the FSDP
    # model's mesh) is left for interpreter finalization, where gloo's threads freeing tensors
    # abort the process ("terminate called without an active exception", seen once in CI).
    torch.distributed.barrier()
    del tr, sync, rounds
    destroy(info)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
