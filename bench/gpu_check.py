"""On a machine with an NVIDIA GPU: does the product really compute on it, and what does it buy?

    .venv/bin/python bench/gpu_check.py [--pack TAR | --build] [--tokens N] [--rounds N] [--skip-vllm]

1. The CUDA runtime: unpacks a CUDA runtime pack (the release's ``llamacpp-...-cuda13.tar.gz``) or
   builds one (``--build``: ``installers.llamacpp_runtime`` with ``cpu,cuda``, for this GPU's compute
   capability only, so it fits the time; the toolkit comes from PyPI's wheels).
2. The models: the real Gemma 3 270M, and a bigger GGUF made from it by repeating its blocks
   (``grow_gguf``: 4x the layers, same tokenizer; the answers are nonsense, the figures are real).
3. A daemon on a fresh home with that build; the node's backend is read back from ``/api/nodes``
   (backend, devices, NVML's driver, GPU memory and utilisation), then each model is started on
   the GPU (node choice ``auto``) and on the CPU (``cpu``), in turn.
4. Per model and backend: layers offloaded (``ModelStatus.offload``), and over ``--rounds``
   streamed chats, TTFT p50 and tokens/s p50, routed (``/v1`` of the daemon) and direct (the
   llama-server's own port with its key). Printed: GPU / CPU for tok/s and TTFT, routed / direct
   on the GPU.
5. vLLM: if Docker answers and an image is given (``--vllm-image``), one start of Gemma through it.

Target: finishes in under 8 minutes on a 16-core machine with one NVIDIA GPU (``--build`` included).
It prints what it saw; nothing here is asserted. Step 2 needs ``pip install -e '.[bench]'`` (ggml's ``gguf`` package).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))



def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def nvml_facts() -> dict[str, object]:
    from agent.gpu import NvmlProbe

    probe = NvmlProbe()
    gpus = probe.sample()
    if not gpus:
        raise SystemExit("no NVIDIA GPU answers NVML here: this bench is for a machine with one")
    return {"driver": probe.driver_version(), "gpus": [g.model_dump(include={"index", "name", "memory_total",
                                                                              "compute_capability"}) for g in gpus]}


def cuda_runtime(args: argparse.Namespace, work: Path, capability: str | None) -> Path:
    """The folder of a llama.cpp build with the CUDA backend: unpacked from a pack, or built."""
    runtimes = work / "runtimes"
    runtimes.mkdir(parents=True, exist_ok=True)
    if args.pack:
        with tarfile.open(args.pack) as tar:
            tar.extractall(runtimes, filter="data")
        (folder,) = [p for p in runtimes.iterdir() if (p / "runtime.json").is_file()]
        return folder
    arch = f"-DCMAKE_CUDA_ARCHITECTURES={capability.replace('.', '')}-real" if capability else None
    command = [sys.executable, "-m", "installers.llamacpp_runtime", "build", "--root", str(runtimes),
               "--backends", "cpu,cuda", *(["--cmake-arg", arch] if arch else [])]
    started = time.monotonic()
    subprocess.run(command, check=True, cwd=ROOT)
    log(f"built the CUDA runtime in {time.monotonic() - started:.0f} s")
    path = subprocess.run([*command[:3], "path", *command[4:]], check=True, cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()
    return Path(path)


def grow_gguf(source: Path, target: Path, times: int = 4) -> Path:
    """A GGUF with ``times`` x the blocks of ``source`` (each block's tensors repeated, the block count
    raised): the same architecture and tokenizer, ``times`` x the compute per token."""
    import gguf  # pip install gguf (ggml's own reader and writer)

    reader = gguf.GGUFReader(source)
    arch = str(bytes(reader.fields["general.architecture"].parts[-1]), "utf-8")
    blocks = int(reader.fields[f"{arch}.block_count"].parts[-1][0])
    writer = gguf.GGUFWriter(target, arch)
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name in ("general.architecture", f"{arch}.block_count"):
            continue
        value_type = field.types[0]
        if value_type == gguf.GGUFValueType.ARRAY:
            values = [field.parts[i].tolist() if field.types[-1] != gguf.GGUFValueType.STRING
                      else str(bytes(field.parts[i]), "utf-8") for i in field.data]
            values = [v[0] if isinstance(v, list) and len(v) == 1 else v for v in values]
            writer.add_key_value(field.name, values, value_type, sub_type=field.types[-1])
        elif value_type == gguf.GGUFValueType.STRING:
            writer.add_key_value(field.name, str(bytes(field.parts[-1]), "utf-8"), value_type)
        else:
            writer.add_key_value(field.name, field.parts[-1][0].item(), value_type)
    writer.add_uint32(f"{arch}.block_count", blocks * times)
    for copy in range(times):
        for tensor in reader.tensors:
            name = tensor.name
            if name.startswith("blk."):
                index, rest = name[4:].split(".", 1)
                name = f"blk.{int(index) + copy * blocks}.{rest}"
            elif copy:
                continue
            writer.add_tensor(name, tensor.data, raw_dtype=tensor.tensor_type)  # data: its byte shape
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return target


async def measure(rd: object, model_id: str, rounds: int, tokens: int, direct: bool) -> dict[str, float]:
    """TTFT p50 (ms) and tokens/s p50 of streamed chats, routed or straight to the llama-server."""
    import openai

    daemon = rd.daemon  # type: ignore[attr-defined]
    if direct:
        inst = daemon.orchestrator.instance(daemon.registry.require(model_id))
        client = openai.AsyncOpenAI(base_url=f"{inst.endpoint}/v1", api_key=inst.api_key, max_retries=0)
    else:
        client = openai.AsyncOpenAI(base_url=rd.v1, api_key="unused", max_retries=0)  # type: ignore[attr-defined]
    ttft, rates = [], []
    for n in range(rounds):
        started = time.perf_counter()
        first = None
        count = 0
        stream = await client.chat.completions.create(
            model=model_id, messages=[{"role": "user", "content": f"Tell a long story about the number {n}."}],
            max_tokens=tokens, temperature=0, stream=True)
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                count += 1
                first = first or time.perf_counter()
        end = time.perf_counter()
        if first is not None and count > 1:
            ttft.append((first - started) * 1000)
            rates.append((count - 1) / (end - first))
    await client.close()
    return {"ttft_ms": statistics.median(ttft) if ttft else float("nan"),
            "tok_s": statistics.median(rates) if rates else float("nan")}


async def run(args: argparse.Namespace) -> None:
    from daemon.api.models import ModelState
    from tests.daemon.harness import model, running_daemon

    started = time.monotonic()
    facts = nvml_facts()
    log(f"NVML: driver {facts['driver']}, GPUs {facts['gpus']}")
    work = Path(tempfile.mkdtemp(prefix="mirbadllm-gpu-"))
    capability = next((g.get("compute_capability") for g in facts["gpus"]), None)  # type: ignore[union-attr]
    build = cuda_runtime(args, work, capability)
    from daemon.models.registry import assemble_demo_gguf

    gemma = assemble_demo_gguf(work / "models")
    if gemma is None:
        raise SystemExit("the demo model package is not installed: make .venv/.run-installed")
    models = {"gemma": gemma}
    try:
        models["gemma-x4"] = grow_gguf(gemma, work / "gemma-x4.gguf")
    except ImportError:
        log("no `gguf` package: the bigger model is skipped (pip install -e '.[bench]')")
    results: dict[tuple[str, str], dict[str, float]] = {}
    async with running_daemon(work / "home", build / "bin" / "llama-server") as rd:
        node = await rd.client.get_node("local")
        log(f"node: backend {node.backend} (choice {node.backend_choice}; {node.backend_why or 'nothing better failed'})")
        for offer in node.runtimes:
            for state in offer.backends:
                log(f"  {state.backend.label}: {'ok' if state.available else state.reason} "
                    f"{[d.model_dump() for d in state.devices]} driver {state.driver}")
        log(f"  GPUs in /api/nodes: {[g.model_dump(include={'name', 'memory_used', 'memory_total', 'utilization_percent'}) for g in node.gpus]}")
        for model_id, path in models.items():
            await rd.client.create_model(model(model_id, str(path), settings={"ctx_size": 4096, "parallel": 1}))
            for choice in ("auto", "cpu"):
                await rd.client.set_node_backend("local", choice)
                load = time.monotonic()
                await rd.client.start_model(model_id)
                status = await rd.wait_state(model_id, ModelState.READY, ModelState.FAILED, timeout=300)
                if status.state != ModelState.READY:
                    log(f"{model_id} on {choice}: {status.error}")
                    continue
                status = (await rd.client.get_model(model_id)).status
                offload = status.offload
                log(f"{model_id} on {status.backend}: loaded in {time.monotonic() - load:.1f} s, layers "
                    f"{offload.layers_on_gpu if offload else '?'}/{offload.layers_total if offload else '?'} on "
                    f"{offload.devices if offload else '?'}")
                results[(model_id, f"{choice}-routed")] = await measure(rd, model_id, args.rounds, args.tokens, False)
                if choice == "auto":
                    results[(model_id, "auto-direct")] = await measure(rd, model_id, args.rounds, args.tokens, True)
                    gpu = next(iter((await rd.client.get_node("local")).gpus), None)
                    if gpu is not None:
                        log(f"  NVML while loaded: {gpu.memory_used / 2**30:.2f} GiB used of "
                            f"{gpu.memory_total / 2**30:.1f}, {gpu.utilization_percent}% busy")
                await rd.client.stop_model(model_id)
                await rd.wait_state(model_id, ModelState.STOPPED)
        await rd.client.set_node_backend("local", "auto")
    print(json.dumps({f"{m}/{k}": v for (m, k), v in results.items()}, indent=2))
    for model_id in models:
        gpu, cpu = results.get((model_id, "auto-routed")), results.get((model_id, "cpu-routed"))
        direct = results.get((model_id, "auto-direct"))
        if gpu and cpu:
            print(f"{model_id}: GPU / CPU tok/s {gpu['tok_s'] / cpu['tok_s']:.2f}x, "
                  f"TTFT GPU / CPU {gpu['ttft_ms'] / cpu['ttft_ms']:.2f}")
        if gpu and direct:
            print(f"{model_id}: routed / direct on the GPU: tok/s {gpu['tok_s'] / direct['tok_s']:.3f}, "
                  f"TTFT {gpu['ttft_ms'] / direct['ttft_ms']:.3f}")
    if args.vllm_image and shutil.which("docker"):
        log(f"vLLM: `mirbadllm ctl models add --runtime vllm --image {args.vllm_image}` is the path; "
            "start it by hand here (not automated in this bench)")
    log(f"done in {time.monotonic() - started:.0f} s")
    shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pack", type=Path, help="a CUDA runtime pack (.tar.gz) to unpack instead of building")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--vllm-image", default=os.environ.get("MIRBADLLM_VLLM_IMAGE"))
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
