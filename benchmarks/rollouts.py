"""Rollouts per second: our library vs the original ``verifiers==0.3.0`` (classic API) and
``verifiers==0.4.0`` (v1 API), same server, same run.

    .venv/bin/python benchmarks/rollouts.py [--rollouts 5000] [--peer-rollouts 2000] [--repeats 3]

A fast scripted OpenAI-compatible server (``verifiers.testing.fast_server``, its own process) answers
every chat request immediately, so the figures measure the client library: a single-turn
environment (one request per rollout) and a tool-using one (a tool call, the tool runs, then the
answer: two requests per rollout), both at 256 rollouts in flight. Each library runs the same driver
(``benchmarks/_rollout_driver.py``) in its own subprocess; the original is installed from PyPI into
``.venv-bench-verifiers-0.3.0`` on first use. The raw row is a bare aiohttp loop against the same
server (the ceiling the issue names; a tool rollout costs two requests so its ceiling is half). It is
the cost of the requests alone through aiohttp, not a bound on ours: our client reaches an
``http://`` server through its own lean HTTP/1.1 transport (``verifiers/clients/http11.py``), which
costs less per request than aiohttp, so ``ours/raw`` may pass 1.0.
Every run is checked: all rollouts rewarded 1.0 and the server saw the expected number of requests.
The figures are medians over ``--repeats`` rounds; each round runs every measurement once.

The v1 rows (``--kinds`` ``v1`` and ``v1-mcp``) run one v1 taskset written for the benchmark
(``benchmarks/_v1_tasks/vbench_tasks.py``) through each library's own v1 eval path, the ``null``
harness on the subprocess runtime (``benchmarks/_v1_driver.py``): ours against the original
``verifiers==0.4.0`` (installed from PyPI into ``.venv-bench-verifiers-0.4.0`` on first use). ``v1``
is single-turn; ``v1-mcp`` serves an MCP toolset (``Toolset`` + ``SharedToolsetConfig``: one tool
server for the run) whose ``calc_add`` each rollout calls once between two model calls. Its raw
ceiling is the same work done bare (``_rollout_driver.py --kind raw-mcp``): the bare loop's two
model requests around one JSON-RPC ``tools/call`` line written straight to the same tool server,
served over stdio as ours serves it, with that server's CPU counted as the v1 rows count theirs;
the model requests alone, which would leave the tool call out, are printed beside it. A library
without MCP toolsets prints a 'not available' line for that row instead of figures. The original
runs every rollout's harness as a program (``uv run``) in the runtime, so its rate is a few
rollouts per second: ``--v1-peer-rollouts`` keeps its share of the run short. The v1 CPU figures
count the driver's finished child processes too (the original's harness programs and tool server,
our MCP tool server). Both v1 sides write each episode to ``traces.jsonl`` as their ``vf eval``
does (the original's record shape on ours); the classic rows and the bare loop write nothing, so
the v1 rows' ``ours/raw`` includes building and writing that record (about 60 us a rollout here).

The ``v1-floor`` row (ours only) is what bounds the ``v1`` row: the same rollout on the same engine,
client, server and taskset with no v1 API layer at all (``benchmarks/_v1_floor.py``): its play
builds, straight-line, only the original 0.4.0's pydantic records a v1 rollout leaves behind (the
task record and hash, the trace, its three message nodes, the model call, usage, the reward, the
episode) and the engine writes the episode line. A v1 layer that hands user code those records and
writes them cannot pass that row's ``ours/raw``; the gap between the two rows is what our env,
agent, harness, hook and scoring code costs.

A second table divides by the CPU time of the driver process instead of wall time. Against an
instant server every client is CPU-bound, so this rate is what the library costs, and it stays
meaningful when other work on a shared machine steals cycles (wall-clock figures then drop for all
three alike, but by varying amounts from run to run).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    BENCH_DIR,
    OUR_PYTHON,
    PEER_VENV,
    REPO,
    V1_PEER_VERSION,
    add_priority_argument,
    ensure_peer_venv,
    fast_server,
    log,
    machine,
    median,
    peer_venv,
    run_json,
    set_priority,
    table,
)

DRIVER = str(BENCH_DIR / "_rollout_driver.py")
V1_DRIVER = str(BENCH_DIR / "_v1_driver.py")
V1_FLOOR_DRIVER = str(BENCH_DIR / "_v1_floor.py")
REQUESTS_PER_ROLLOUT = {"single": 1, "tool": 2, "v1": 1, "v1-mcp": 2, "v1-floor": 1}
V1_KINDS = {"v1": "single", "v1-mcp": "mcp", "v1-floor": "floor"}
V1_LABELS = {"v1": "v1 single-turn", "v1-mcp": "v1 MCP toolset (2 turns)", "v1-floor": "v1 records only (floor)"}
FLOOR_NO_PEER = "the floor is our engine building the v1 records with no API layer; the original has no counterpart"
MCP_TOOL = "calc_add"  # the toolset's tool as the model sees it (TOOL_PREFIX "calc" + "add")


def measure_v1(python: str, kind: str, srv, rollouts: int, concurrency: int) -> dict:
    """One v1 run; ``{"unavailable": why}`` when the library lacks what the kind needs."""
    before = srv.requests()
    driver = [V1_FLOOR_DRIVER] if kind == "v1-floor" else [V1_DRIVER, "--kind", V1_KINDS[kind]]
    result = run_json(
        [python, *driver, "--base-url", srv.base_url, "--rollouts", str(rollouts), "--concurrency", str(concurrency)]
    )  # fmt: skip
    if "unavailable" in result:
        return result
    sent = srv.requests() - before
    module = Path(result["module"]).resolve()
    expected_root = peer_venv(V1_PEER_VERSION) if result["library"] == "original" else REPO / "verifiers"
    if expected_root.resolve() not in module.parents or (python == str(OUR_PYTHON)) != (
        result["library"] == "ours"
    ):
        raise RuntimeError(f"{python} ran {result['library']} from {module}")
    expected = rollouts * REQUESTS_PER_ROLLOUT[kind]
    if result["rollouts"] != rollouts or sent != expected or result["avg_reward"] != 1.0:
        raise RuntimeError(
            f"{result['library']} {kind}: {result['rollouts']} rollouts, server saw {sent} requests "
            f"(expected {expected}), avg reward {result['avg_reward']}, errors {result['errors']} "
            f"(first: {result.get('first_error')})"
        )
    return result


def measure(python: str, kind: str, srv, rollouts: int, concurrency: int) -> dict:
    before = srv.requests()
    result = run_json(
        [
            python,
            DRIVER,
            "--kind",
            kind,
            "--base-url",
            srv.base_url,
            "--rollouts",
            str(rollouts),
            "--concurrency",
            str(concurrency),
        ]
    )
    sent = srv.requests() - before
    if kind == "raw-mcp":
        if result["rollouts"] != rollouts or sent != 2 * rollouts:
            raise RuntimeError(
                f"raw MCP loop: expected {rollouts} rollouts and {2 * rollouts} requests, "
                f"got {result['rollouts']} / server {sent}"
            )
        return result
    if kind == "raw":
        if result["requests"] != rollouts or sent != rollouts:
            raise RuntimeError(
                f"raw loop: expected {rollouts} requests, got {result['requests']} / server {sent}"
            )
        return result
    # each side must really have run its own library: the peer from its venv, ours from this repo
    module = Path(result["module"]).resolve()
    expected_root = PEER_VENV if result["library"] == "original" else REPO / "verifiers"
    if expected_root.resolve() not in module.parents or (python == str(OUR_PYTHON)) != (
        result["library"] == "ours"
    ):
        raise RuntimeError(f"{python} ran {result['library']} from {module}")
    expected = rollouts * REQUESTS_PER_ROLLOUT[kind]
    if result["rollouts"] != rollouts or sent != expected or result["avg_reward"] != 1.0:
        raise RuntimeError(
            f"{result['library']} {kind}: {result['rollouts']} rollouts, server saw {sent} requests "
            f"(expected {expected}), avg reward {result['avg_reward']}, errors {result['errors']}"
        )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=5000, help="rollouts per measurement of our library")
    parser.add_argument(
        "--peer-rollouts",
        type=int,
        default=2000,
        help="rollouts per measurement of the original (it runs ~70/s; 2,000 is a stable rate)",
    )
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument(
        "--raw-requests", type=int, default=20000, help="requests of the bare aiohttp loop per round"
    )
    parser.add_argument(
        "--v1-peer-rollouts",
        type=int,
        default=24,
        help="rollouts per v1 measurement of the original 0.4.0 (it runs each harness as a uv program)",
    )
    parser.add_argument(
        "--raw-mcp-rollouts",
        type=int,
        default=2000,
        help="rollouts of the bare MCP loop (the v1 MCP row's ceiling) per round",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--kinds", default="single,tool,v1,v1-floor,v1-mcp", help="of single, tool, v1, v1-floor, v1-mcp"
    )
    parser.add_argument("--libraries", default="ours,original", help="which of ours,original to run")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    add_priority_argument(parser)
    args = parser.parse_args()
    set_priority(args.nice)
    all_kinds = [k for k in args.kinds.split(",") if k]
    unknown = set(all_kinds) - set(REQUESTS_PER_ROLLOUT)
    if unknown:
        parser.error(f"unknown --kinds {sorted(unknown)}; choose from {', '.join(REQUESTS_PER_ROLLOUT)}")
    kinds = [k for k in all_kinds if k not in V1_KINDS]
    v1_kinds = [k for k in all_kinds if k in V1_KINDS]

    libraries = {x for x in args.libraries.split(",") if x}
    peer_python = str(ensure_peer_venv()) if "original" in libraries and kinds else None
    v1_peer_python = (
        str(ensure_peer_venv(V1_PEER_VERSION)) if "original" in libraries and set(v1_kinds) - {"v1-floor"} else None
    )
    ours_python = str(OUR_PYTHON) if "ours" in libraries else None
    runs: dict[str, list[dict]] = {}
    unavailable: dict[str, str] = {}
    log(f"machine: {machine()}")
    with fast_server() as srv, contextlib.ExitStack() as stack:
        mcp_srv = stack.enter_context(fast_server("--tool-name", MCP_TOOL)) if "v1-mcp" in v1_kinds else None
        for rep in range(args.repeats):
            for kind in v1_kinds:
                server = mcp_srv if kind == "v1-mcp" else srv
                for lib, python, n in (
                    ("ours", ours_python, args.rollouts),
                    ("original", v1_peer_python, args.v1_peer_rollouts),
                ):
                    if python is None or f"{lib}/{kind}" in unavailable:
                        continue
                    if kind == "v1-floor" and lib == "original":
                        unavailable[f"{lib}/{kind}"] = FLOOR_NO_PEER
                        continue
                    r = measure_v1(python, kind, server, n, args.concurrency)
                    if "unavailable" in r:
                        unavailable[f"{lib}/{kind}"] = r["unavailable"]
                        log(f"{lib} {kind}: not available: {r['unavailable']}")
                        continue
                    runs.setdefault(f"{lib}/{kind}", []).append(r)
                    log(
                        f"round {rep + 1} {lib} {kind}: {r['rollouts_per_s']:.1f} rollouts/s, {r['rollouts_per_cpu_s']:.1f} per CPU-s"
                    )
            for kind in kinds:
                if ours_python:
                    r = measure(ours_python, kind, srv, args.rollouts, args.concurrency)
                    runs.setdefault(f"ours/{kind}", []).append(r)
                    log(f"round {rep + 1} ours {kind}: {r['rollouts_per_s']:.0f} rollouts/s")
                if peer_python:
                    r = measure(peer_python, kind, srv, args.peer_rollouts, args.concurrency)
                    runs.setdefault(f"original/{kind}", []).append(r)
                    log(f"round {rep + 1} original {kind}: {r['rollouts_per_s']:.1f} rollouts/s")
            r = measure(str(OUR_PYTHON), "raw", srv, args.raw_requests, args.concurrency)
            runs.setdefault("raw", []).append(r)
            log(f"round {rep + 1} raw aiohttp: {r['requests_per_s']:.0f} requests/s")
            if mcp_srv is not None:
                r = measure(str(OUR_PYTHON), "raw-mcp", mcp_srv, args.raw_mcp_rollouts, args.concurrency)
                runs.setdefault("raw-mcp", []).append(r)
                log(
                    f"round {rep + 1} raw MCP loop: {r['rollouts_per_s']:.0f} rollouts/s, "
                    f"{r['rollouts_per_cpu_s']:.0f} per CPU-s"
                )

    raw = median([r["requests_per_s"] for r in runs["raw"]])
    raw_cpu = median([r["requests_per_cpu_s"] for r in runs["raw"]])
    rows = []
    cpu_rows = []
    summary: dict[str, dict] = {
        "raw_requests_per_s": raw,
        "machine": machine(),
        "concurrency": args.concurrency,
    }
    for kind in kinds:
        ours_runs = [r["rollouts_per_s"] for r in runs.get(f"ours/{kind}", [])]
        orig_runs = [r["rollouts_per_s"] for r in runs.get(f"original/{kind}", [])]
        ours = median(ours_runs) if ours_runs else None
        orig = median(orig_runs) if orig_runs else None
        # ratio of medians, and the median of per-round ratios (each pair ran back to back, so load
        # from other work on a shared machine affects both sides of a pair alike)
        ratio = ours / orig if ours and orig else None
        paired = [a / b for a, b in zip(ours_runs, orig_runs, strict=False) if b]
        paired_ratio = median(paired) if paired else None
        ceiling = raw / REQUESTS_PER_ROLLOUT[kind]
        over_raw = ours / ceiling if ours else None
        label = {"single": "single-turn", "tool": "tool (2 turns)"}[kind]
        rows.append([label, ours, orig, ratio, paired_ratio, ceiling, over_raw])
        ours_cpu_runs = [r["rollouts_per_cpu_s"] for r in runs.get(f"ours/{kind}", [])]
        orig_cpu_runs = [r["rollouts_per_cpu_s"] for r in runs.get(f"original/{kind}", [])]
        ours_cpu = median(ours_cpu_runs) if ours_cpu_runs else None
        orig_cpu = median(orig_cpu_runs) if orig_cpu_runs else None
        ceiling_cpu = raw_cpu / REQUESTS_PER_ROLLOUT[kind]
        cpu_rows.append(
            [
                label,
                ours_cpu,
                orig_cpu,
                ours_cpu / orig_cpu if ours_cpu and orig_cpu else None,
                ceiling_cpu,
                ours_cpu / ceiling_cpu if ours_cpu else None,
            ]
        )
        summary[kind] = {
            "ours": ours,
            "original": orig,
            "ratio": ratio,
            "paired_ratio": paired_ratio,
            "raw_ceiling": ceiling,
            "ours_over_raw": over_raw,
            "ours_runs": ours_runs,
            "original_runs": orig_runs,
            "per_cpu_second": {
                "ours": ours_cpu,
                "original": orig_cpu,
                "ratio": ours_cpu / orig_cpu if ours_cpu and orig_cpu else None,
                "raw_ceiling": ceiling_cpu,
                "ours_over_raw": ours_cpu / ceiling_cpu if ours_cpu else None,
            },
        }
    if kinds:
        print(f"\nRollouts/s at {args.concurrency} concurrent, median of {args.repeats} ({machine()})")
        print(
            f"ours: {args.rollouts} rollouts per run; original verifiers==0.3.0: {args.peer_rollouts}; "
            f"raw: bare aiohttp loop, {raw:,.0f} requests/s\n"
        )
        headers = ["environment", "ours", "original", "ours/original", "raw ceiling", "ours/raw"]
        print(table([*headers[:4], "same, per round", *headers[4:]], rows))
        print(
            f"\nThe same runs per CPU-second of the driver process (raw: {raw_cpu:,.0f} requests per CPU-s)\n"
        )
        print(table(headers, cpu_rows))
    if v1_kinds:
        print_v1(v1_kinds, runs, unavailable, raw, raw_cpu, args, summary)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=2))


def print_v1(
    kinds: list[str], runs: dict, unavailable: dict[str, str], raw: float, raw_cpu: float, args, summary: dict
) -> None:
    """The v1 rows: ours vs the original 0.4.0 per CPU-second (the headline) and per wall second."""
    rows, wall_rows, notes = [], [], []
    for kind in kinds:
        per = REQUESTS_PER_ROLLOUT[kind]
        fig: dict = {
            "unavailable": {
                lib: unavailable[f"{lib}/{kind}"]
                for lib in ("ours", "original")
                if f"{lib}/{kind}" in unavailable
            }
        }
        ceilings = {"per_cpu_second": raw_cpu / per, "per_s": raw / per}
        if kind == "v1-mcp" and runs.get("raw-mcp"):
            # the same work done bare: two model requests and one tools/call to the same tool server
            ceilings = {unit: median([r[key] for r in runs["raw-mcp"]])
                        for unit, key in (("per_cpu_second", "rollouts_per_cpu_s"), ("per_s", "rollouts_per_s"))}  # fmt: skip
            notes.append(
                f"{V1_LABELS[kind]}: raw ceiling = the bare MCP loop (two model requests around one JSON-RPC "
                f"tools/call to the same tool server, whose CPU it counts): {ceilings['per_cpu_second']:,.0f} "
                f"rollouts per CPU-s, {ceilings['per_s']:,.0f} per s; the model requests alone would allow "
                f"{raw_cpu / per:,.0f} per CPU-s (ours/that: "
                f"{_fmt_ratio(runs, kind, 'rollouts_per_cpu_s', raw_cpu / per)})"
            )
        for unit, key, ceiling, out in (
            ("per_cpu_second", "rollouts_per_cpu_s", ceilings["per_cpu_second"], rows),
            ("per_s", "rollouts_per_s", ceilings["per_s"], wall_rows),
        ):
            ours_runs = [r[key] for r in runs.get(f"ours/{kind}", [])]
            orig_runs = [r[key] for r in runs.get(f"original/{kind}", [])]
            ours = median(ours_runs) if ours_runs else None
            orig = median(orig_runs) if orig_runs else None
            ratio = ours / orig if ours and orig else None
            over_raw = ours / ceiling if ours else None
            out.append([V1_LABELS[kind], ours, orig, ratio, ceiling, over_raw])
            fig[unit] = {"ours": ours, "original": orig, "ratio": ratio, "raw_ceiling": ceiling, "ours_over_raw": over_raw,
                         "ours_runs": ours_runs, "original_runs": orig_runs}  # fmt: skip
        summary[kind] = fig
        for lib, why in fig["unavailable"].items():
            notes.append(
                f"{V1_LABELS[kind]}, {'ours' if lib == 'ours' else 'original ' + V1_PEER_VERSION}: not available: {why}"
            )
    print(
        f"\nv1 rollouts per CPU-second (driver + its child processes), median of {args.repeats} ({machine()})\n"
        f"ours: {args.rollouts} rollouts per run; original verifiers=={V1_PEER_VERSION}: {args.v1_peer_rollouts}; "
        f"raw ceiling: the bare aiohttp loop, {raw_cpu:,.0f} requests per CPU-s\n"
    )
    headers = [
        "environment",
        "ours",
        f"original {V1_PEER_VERSION}",
        "ours/original",
        "raw ceiling",
        "ours/raw",
    ]
    print(table(headers, rows))
    print("\nthe same v1 runs per wall second\n")
    print(table(headers, wall_rows))
    for note in notes:
        print(note)


def _fmt_ratio(runs: dict, kind: str, key: str, ceiling: float) -> str:
    ours = [r[key] for r in runs.get(f"ours/{kind}", [])]
    return f"{median(ours) / ceiling:.2f}" if ours and ceiling else "n/a"


if __name__ == "__main__":
    main()
