"""From a short name to the first token, the model's file already here: what `mirbadllm run gemma3:1b`
costs before the person sees the answer begin, once the download is behind them.

The daemon runs in this process (the tests' harness) with its real local agent and the fake
llama-server (no load time, no token delay: what is measured is ours, not a model's); the fake hub
serves the catalog's ``gemma3:1b`` file. It is pulled once (``ctl models pull gemma3:1b``), so the
model is registered and stopped with its file local. Then each round, from a stopped model:

- **in process**: ``find_or_pull`` (the short name resolved), ``ensure_running`` (start, wait for
  ready), ``uses_chat``, and the streamed answer to "hi" up to its first printed piece, the same
  calls ``mirbadllm run`` makes (``mirbadllm.chat.chat``);
- **the command**: ``python -m mirbadllm run --home HOME gemma3:1b --no-save`` as a subprocess with
  "hi" on stdin, from its spawn to the first byte of the answer on stdout (interpreter start and
  imports included: what a person typing it waits).

    .venv/bin/python bench/short_name_first_token.py [--rounds N]

It prints each figure's median and range over the rounds, and the in-process split (resolve, start,
first token).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from daemon.api.client import DaemonClient
from daemon.api.models import ModelState
from mirbadllm import chat as run_chat
from mirbadllm import ctl_sources
from tests.daemon.harness import running_daemon
from tests.fakes import write_fake_runtime
from tests.fakes.fake_hf_hub import FakeHub
from tests.fakes.gguf_files import write_gguf

SHORT_NAME = "gemma3:1b"
FILE = ("ggml-org/gemma-3-1b-it-GGUF", "gemma-3-1b-it-Q4_K_M.gguf")  # the catalog's gemma3:1b
TEMPLATE = {"tokenizer.chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"}


class FirstPiece(io.StringIO):
    """The answer's output: when its first piece was written."""

    def __init__(self) -> None:
        super().__init__()
        self.at: float | None = None

    def write(self, text: str) -> int:
        if self.at is None and text:
            self.at = time.perf_counter()
        return super().write(text)


async def stopped(client: DaemonClient, model_id: str) -> None:
    await client.stop_model(model_id)
    since = (await client.status()).last_event_id
    while (await client.get_model(model_id)).status.state != ModelState.STOPPED:
        since = (await client.events(since, timeout=1)).last_id


async def in_process(client: DaemonClient) -> tuple[float, float, float]:
    """(resolved, ready, first token) in seconds from the call."""
    err, out = io.StringIO(), FirstPiece()
    start = time.perf_counter()
    view = await run_chat.find_or_pull(client, SHORT_NAME, True, err)
    resolved = time.perf_counter()
    view = await run_chat.ensure_running(client, view, err)
    ready = time.perf_counter()
    conversation = run_chat.Conversation(view.definition.served_name, chat=await run_chat.uses_chat(client, view))
    session = run_chat.Chat(client.base_url + "/v1", conversation, None, out)
    async with aiohttp.ClientSession() as http:
        await session.answer(http, "hi")
    assert out.at is not None, "no answer"
    return resolved - start, ready - start, out.at - start


async def command(home: Path) -> float:
    """Seconds from spawning `mirbadllm run` to the first byte of its answer."""
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mirbadllm", "run", "--home", str(home), SHORT_NAME, "--no-save", cwd=ROOT,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"hi\n")
    await proc.stdin.drain()
    first = await asyncio.wait_for(proc.stdout.read(1), 120)
    at = time.perf_counter()
    proc.stdin.close()
    _out, err = await asyncio.wait_for(proc.communicate(), 60)
    if not first:
        raise RuntimeError(f"`mirbadllm run` printed no answer: {err.decode()[-2000:]}")
    return at - start


def line(label: str, values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return f"{label:<44} median {statistics.median(ms):7.0f} ms   (min {min(ms):.0f}, max {max(ms):.0f}, n={len(ms)})"


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="short-name-bench-") as tmp:
        work = Path(tmp)
        os.environ["HF_HOME"] = str(work / "hf-home")
        os.environ.pop("HF_TOKEN", None)
        hub = await FakeHub().start()
        os.environ["HF_ENDPOINT"] = hub.hub_url  # the agent child inherits it
        try:
            hub.add(*FILE, write_gguf(work / "src" / "chat.gguf", extra=TEMPLATE).read_bytes())
            runtime = write_fake_runtime(work / "runtime")  # ready at once, tokens without delay
            async with running_daemon(work / "home", runtime) as rd:
                client = rd.client
                if await ctl_sources.pull_catalog_model(client, SHORT_NAME, {"node": "local"}) != 0:
                    raise RuntimeError(f"could not pull {SHORT_NAME} from the fake hub")
                model_id = (await run_chat.find_model(client, SHORT_NAME)).definition.id
                assert (await client.get_model(model_id)).status.state == ModelState.STOPPED
                split: list[tuple[float, float, float]] = []
                cli: list[float] = []
                await in_process(client)  # warm-up: first imports, first connections
                await stopped(client, model_id)
                for _ in range(rounds):
                    split.append(await in_process(client))
                    await stopped(client, model_id)
                    cli.append(await command(rd.daemon.paths.home))
                    await stopped(client, model_id)
        finally:
            await hub.close()
    print(f"short name '{SHORT_NAME}' -> first token, file local, model registered and stopped "
          "(fake llama-server: no load time)")
    print(line("in process: short name resolved", [s[0] for s in split]))
    print(line("in process: model ready", [s[1] for s in split]))
    print(line("in process: first token (the figure)", [s[2] for s in split]))
    print(line("`mirbadllm run` command: first answer byte", cli))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    asyncio.run(main(parser.parse_args().rounds))
