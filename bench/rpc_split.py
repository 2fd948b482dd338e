"""What a model across nodes costs, and how much of that is our tunnel: the same streamed chat
requests to Gemma 3 270M on the real llama-server, three ways, in interleaved rounds.

  (a) whole   the model on the main node alone;
  (b) tunnel  the product path: the last N layers on a helper agent's ggml-rpc-server, reached
              through the agents' mutual-TLS tunnel (main agent's forward on 127.0.0.1 ->
              WebSocket over TLS -> helper agent -> the rpc-server on the helper's loopback);
  (c) direct  the same split with llama-server's ``--rpc`` pointed straight at a ggml-rpc-server
              listening on the helper's veth address: no tunnel, no TLS. This is the insecure
              setup llama.cpp warns about; the bench starts it only on its own private veth, for
              the baseline, and stops it at the end. The product never does this.

A daemon (subprocess) pairs a main agent here and a helper agent in a network namespace (its own
address, like a machine on the LAN), and starts (a) and (b) through its admin API. (c) copies the
command lines (and environments) of (b)'s llama-server and the helper's rpc-server, changing only
``--rpc``, ``--port`` and ``-H``/``-p``, so (b) and (c) differ by the path alone. Each round sends
one request to each, in a rotating order; the client talks to each llama-server on the main's
loopback (the daemon's own routing cost is bench/remote_overhead.py's). Printed: TTFT p50/p90 and
tokens/s p50 (per request, after the first token) of each; the ratios (b)/(a) (what the split
costs) and (b)/(c) (what the tunnel costs); and the load time of (b) vs (c), the llama-server's
start to its being ready ((b): the daemon's start returned; (c): /health answers, polled every
50 ms); the helper's layers' weights go over RPC then.
Target: the tunnel costs at most 10 % of tokens/s against (c) (ratio >= 0.90) and TTFT within
1.15x; the split itself is the network's and llama.cpp's cost, reported, not targeted.

    .venv/bin/python bench/rpc_split.py [--rounds N] [--tokens N] [--helper-layers N]

Needs root for the namespace; without it the helper runs on loopback (and says so): then (c)'s
rpc-server listens on 127.0.0.1 and the figures are a loopback's, not a wire's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import psutil
from _harness import ROOT, free_port, median, percentile, start_daemon, stream_chat

sys.path.insert(0, str(ROOT))
os.environ["MIRBADLLM_NO_MDNS"] = "1"  # nothing on the real network; we pair by address
from daemon.api.models import ModelDefinition, ModelState
from tests.fleet.agents import AgentProcess, kill_runtimes, spawn_agent
from tests.fleet.netns import Namespace, NamespaceUnavailable, create_namespace

PROMPT = "Tell a short story about a lighthouse keeper."
WAYS = ("whole", "tunnel", "direct")
GEMMA_LAYERS = 18


def tokens_per_s(tokens: int, ttft_s: float, total_s: float) -> float:
    return tokens / max(total_s - ttft_s, 1e-9)


def replace_flag(argv: list[str], flag: str, value: str) -> list[str]:
    """``argv`` with the value after ``flag`` replaced (the flag must be there)."""
    out = list(argv)
    index = out.index(flag)
    out[index + 1] = value
    return out


async def wait_port(host: str, port: int, timeout: float, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the process on {host}:{port} exited ({process.returncode})")
        try:
            _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 2)
        except (OSError, TimeoutError):
            await asyncio.sleep(0.05)
            continue
        writer.close()
        return
    raise SystemExit(f"nothing listened on {host}:{port} within {timeout} s")


async def wait_health(session: aiohttp.ClientSession, base: str, headers: dict[str, str], timeout: float,
                      process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the direct-RPC llama-server exited ({process.returncode})")
        try:
            async with session.get(f"{base}/health", headers=headers,
                                   timeout=aiohttp.ClientTimeout(total=2)) as resp:
                if resp.status == 200:
                    return
        except (aiohttp.ClientError, TimeoutError):
            pass
        await asyncio.sleep(0.05)
    raise SystemExit(f"the direct-RPC llama-server was not healthy within {timeout} s")


def process_age(pid: int) -> float:
    """Seconds since ``pid`` started, from /proc to the clock tick (psutil's create_time rounds the
    boot time to the second, which would skew a load of a few seconds)."""
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime, in ticks


def _spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)


def _stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


def _record(agent: AgentProcess, instance: str) -> dict[str, object]:
    data = json.loads((agent.home / "processes.json").read_text())
    return dict(next(r for r in data["processes"] if r["instance_id"] == instance))


def _helper_rpc_pid(helper: AgentProcess) -> int:
    (entry,) = json.loads((helper.home / "rpc-servers.json").read_text())  # the one grant's server
    return int(entry["pid"])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=12, help="timed rounds (one request to each way)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--helper-layers", type=int, default=GEMMA_LAYERS // 2,
                        help=f"layers of Gemma's {GEMMA_LAYERS} on the helper (llama.cpp offloads the last ones)")
    parser.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) - 1),
                        help="llama-server threads (default: all cores but one; main and helper share "
                             "this machine's cores, which two real machines do not)")
    args = parser.parse_args()

    from agent.runtimes.catalog import RuntimeCatalog
    from daemon.models.registry import assemble_demo_gguf

    exe = RuntimeCatalog().llama_server()
    if exe is None or exe.rpc_server is None:
        raise SystemExit("no llama.cpp build with ggml-rpc-server: run `make runtime`")
    work = Path(tempfile.mkdtemp(prefix="mirbadllm-rpc-bench-"))
    model_path = await asyncio.get_running_loop().run_in_executor(None, assemble_demo_gguf, work / "models")
    if model_path is None:
        raise SystemExit("the Gemma demo package is not installed")
    ns: Namespace | None
    try:
        ns = create_namespace()
        helper_host, prefix = ns.ns_ip, ns.exec_prefix()
        where = f"helper in network namespace {ns.name} at {ns.ns_ip}, over a veth"
    except NamespaceUnavailable as exc:
        ns, helper_host, prefix = None, "127.0.0.1", []
        where = f"helper on loopback (no namespace: {exc}): a loopback's figures, not a wire's"
    daemon = await start_daemon("--no-local-agent", seed_demo=False)
    main_agent = helper = None
    direct_rpc = direct_server = None
    try:
        main_agent = await spawn_agent(work / "main", name="main", llama_server=exe.path, extra=["--no-mdns"])
        helper = await spawn_agent(work / "helper", name="helper", llama_server=exe.path, host=helper_host,
                                   port=9443 if ns else 0, netns=ns.name if ns else None, extra=["--no-mdns"])
        ids = {}
        for name, agent in (("main", main_agent), ("helper", helper)):
            pairing = await agent.wait_event("pairing")
            ids[name] = (await daemon.client.pair_node(agent.address, pairing["code"], pairing["fingerprint"])).id
        deadline = time.monotonic() + 60
        while (await daemon.client.get_node(ids["helper"])).state not in ("online", "degraded"):
            if time.monotonic() > deadline:
                raise SystemExit("the helper node did not come online")
            await asyncio.sleep(0.2)

        settings = {"ctx_size": 1024, "parallel": 1, "threads": args.threads}
        for model_id, extra in (("whole", {}), ("split", {"rpc_nodes": [ids["helper"]]})):
            layers = {"n_gpu_layers": args.helper_layers} if extra else {}
            await daemon.client.create_model(ModelDefinition.model_validate({
                "id": model_id, "served_name": model_id, "model_path": str(model_path), "node": ids["main"],
                "settings": {**settings, **layers}, "startup_timeout_s": 300, **extra}))
        status = await daemon.client.start_model("whole", wait=True)
        if status.state != ModelState.READY:
            raise SystemExit(f"the whole model did not start: {status.error}")
        started = time.time()
        status = await daemon.client.start_model("split", wait=True)
        start_tunnel = time.time() - started
        split = _record(main_agent, "split")
        load_tunnel = process_age(int(split["pid"]))  # type: ignore[call-overload]
        if status.state != ModelState.READY:
            raise SystemExit(f"the split model did not start: {status.error} {status.last_log_lines}")
        split_proc = psutil.Process(int(split["pid"]))  # type: ignore[call-overload]

        # (c): the same two processes, wired straight across the veth.
        rpc_proc = psutil.Process(_helper_rpc_pid(helper))
        rpc_port = free_port()
        rpc_argv = replace_flag(replace_flag(rpc_proc.cmdline(), "-H", helper_host), "-p", str(rpc_port))
        direct_rpc = _spawn([*prefix, *rpc_argv], rpc_proc.environ(), work / "direct-rpc-server.log")
        await wait_port(helper_host, rpc_port, 60, direct_rpc)
        server_port = free_port()
        server_argv = replace_flag(replace_flag(split_proc.cmdline(), "--rpc", f"{helper_host}:{rpc_port}"),
                                   "--port", str(server_port))
        headers = {"Authorization": f"Bearer {split['api_key']}"}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
            direct_server = _spawn(server_argv, split_proc.environ(), work / "direct-llama-server.log")
            await wait_health(session, f"http://127.0.0.1:{server_port}", headers, 300, direct_server)
            load_direct = process_age(direct_server.pid)

            whole = _record(main_agent, "whole")
            targets = {
                "whole": (f"http://127.0.0.1:{whole['port']}", {"Authorization": f"Bearer {whole['api_key']}"}, "whole"),
                "tunnel": (f"http://127.0.0.1:{split['port']}", headers, "split"),
                "direct": (f"http://127.0.0.1:{server_port}", headers, "split"),
            }
            print(f"rpc_split: {where}; llama-server ({args.threads} threads) + Gemma 3 270M, "
                  f"{args.helper_layers} of {GEMMA_LAYERS} layers on the helper, {args.tokens} tokens, "
                  f"{args.rounds} interleaved rounds after {args.warmup} warm-up rounds")
            samples: dict[str, list[tuple[float, float, int]]] = {w: [] for w in WAYS}
            for i in range(args.warmup + args.rounds):
                order = WAYS[i % 3:] + WAYS[:i % 3]
                for way in order:
                    base, hdrs, served = targets[way]
                    r = await stream_chat(session, base, hdrs, served, f"{PROMPT} (round {i})", args.tokens)
                    if i >= args.warmup:
                        samples[way].append((r.ttft_s, r.total_s, r.tokens))
        report(samples, load_tunnel, start_tunnel, load_direct)
    finally:
        _stop(direct_server)
        _stop(direct_rpc)
        pids = main_agent.runtime_pids() if main_agent is not None else []
        with contextlib.suppress(Exception):
            await daemon.stop()
        for agent in (main_agent, helper):
            if agent is not None:
                await agent.stop()
        kill_runtimes(pids)
        if ns is not None:
            ns.destroy()
        shutil.rmtree(work, ignore_errors=True)  # the model is a 250 MB copy


def report(samples: dict[str, list[tuple[float, float, int]]], load_tunnel: float, start_tunnel: float,
           load_direct: float) -> None:
    ttft = {w: [s[0] * 1000 for s in v] for w, v in samples.items()}
    tps = {w: [tokens_per_s(s[2], s[0], s[1]) for s in v] for w, v in samples.items()}
    for way, label in zip(WAYS, ("(a) whole, one node", "(b) split, mTLS tunnel", "(c) split, direct RPC"),
                          strict=True):
        print(f"  {label:24} TTFT p50 {median(ttft[way]):7.1f} ms (p90 {percentile(ttft[way], 90):7.1f})   "
              f"tokens/s p50 {median(tps[way]):6.1f}")
    print(f"  (b)/(a) the split:   TTFT x{median(ttft['tunnel']) / median(ttft['whole']):.2f}, "
          f"tokens/s x{median(tps['tunnel']) / median(tps['whole']):.3f}")
    tunnel_ttft = median(ttft["tunnel"]) / median(ttft["direct"])
    tunnel_tps = median(tps["tunnel"]) / median(tps["direct"])
    print(f"  (b)/(c) the tunnel:  TTFT x{tunnel_ttft:.2f} (target <= 1.15), "
          f"tokens/s x{tunnel_tps:.3f} (target >= 0.90)")
    print(f"  load (llama-server start -> ready; the helper's weights over RPC): (b) {load_tunnel:.1f} s, "
          f"(c) {load_direct:.1f} s -> x{load_tunnel / max(load_direct, 1e-9):.2f}; "
          f"(b)'s whole start through the daemon, helper's rpc-server included: {start_tunnel:.1f} s")


if __name__ == "__main__":
    began = time.monotonic()
    asyncio.run(main())
    print(f"  ({time.monotonic() - began:.0f} s)")
