"""A real LoRA adapter on the real llama-server and Gemma 3 270M, chosen per request by its name.

The adapter is made here: random low-rank weights for the attention queries and FFN up
projections, written by the ``gguf`` package as llama.cpp's converter would (``general.type``
adapter, ``adapter.type`` lora, the base's architecture). It means nothing, but it loads and it
changes what the model says, which is what is under test.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import numpy as np
import openai
import pytest
from gguf import GGUFWriter

from agent.gguf_reader import read_header
from daemon.api.models import ModelState
from tests.daemon.harness import model, running_daemon

pytestmark = pytest.mark.e2e
PROMPT = [{"role": "user", "content": "Say hello."}]


def write_lora(base: Path, out: Path, rank: int = 4, strength: float = 0.5, seed: int = 7) -> Path:
    """A LoRA GGUF for ``base`` (lora_a: ne [in, rank], lora_b: ne [rank, out], numpy's order reversed)."""
    header = read_header(base)
    writer = GGUFWriter(str(out), str(header.metadata["general.architecture"]))
    writer.add_string("general.type", "adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", float(rank))
    rng = np.random.default_rng(seed)
    for tensor in header.tensors:
        if tensor.name.endswith(("attn_q.weight", "ffn_up.weight")) and len(tensor.dims) == 2:
            ne_in, ne_out = tensor.dims
            writer.add_tensor(f"{tensor.name}.lora_a", rng.standard_normal((rank, ne_in)).astype(np.float32) * strength)
            writer.add_tensor(f"{tensor.name}.lora_b", rng.standard_normal((ne_out, rank)).astype(np.float32) * strength)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


# Four tokens tell the adapter's answer from the base's (they differ from the first token on).
TOKENS = 4


async def _say(client: openai.AsyncOpenAI, name: str) -> str:
    chat = await client.chat.completions.create(model=name, messages=PROMPT, max_tokens=TOKENS, temperature=0)  # type: ignore[arg-type]
    return chat.choices[0].message.content or ""


async def test_a_real_lora_is_loaded_unapplied_and_applied_only_when_its_name_is_asked_for(
        tmp_path: Path, real_llama_server: Path, gemma_gguf: Path) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    base = folder / "gemma.gguf"
    base.symlink_to(gemma_gguf)
    lora = write_lora(gemma_gguf, folder / "noise-lora.gguf")
    async with running_daemon(tmp_path / "home", real_llama_server) as d:
        adapters = [{"name": "gemma-noise", "file": str(lora)}]
        await d.client.create_model(model("gemma", str(base), settings={"ctx_size": 1024}, adapters=adapters))
        status = await d.client.start_model("gemma", wait=True)
        assert status.state == ModelState.READY, status.error
        instance = d.daemon.orchestrator.instance(d.daemon.registry.require("gemma"))
        assert instance is not None and instance.endpoint is not None
        argv = instance.argv
        at = argv.index("--lora")
        assert argv[at:at + 3] == ["--lora", str(lora), "--lora-init-without-apply"]

        client = openai.AsyncOpenAI(base_url=d.v1, api_key="unused", max_retries=0)
        listed = {m.id: m.owned_by for m in (await client.models.list()).data}
        assert listed == {"gemma": "mirbadllm", "gemma-noise": "gemma"}
        plain, noisy = await _say(client, "gemma"), await _say(client, "gemma-noise")
        assert plain != noisy
        assert await _say(client, "gemma") == plain  # the adapter does not stay applied

        # Straight to the runtime: this build applies a loaded adapter to a request that names no
        # scales, --lora-init-without-apply or not; the router's explicit zeros are what keep the
        # base plain.
        auth = {"Authorization": f"Bearer {instance.api_key}"}
        async with aiohttp.ClientSession(headers=auth) as http:
            async def direct(**extra: object) -> str:
                body = {"model": "gemma", "messages": PROMPT, "max_tokens": TOKENS, "temperature": 0, **extra}
                async with http.post(f"{instance.endpoint}/v1/chat/completions", json=body) as resp:
                    assert resp.status == 200, await resp.text()
                    return str((await resp.json())["choices"][0]["message"]["content"])

            assert await direct(lora=[{"id": 0, "scale": 0.0}]) == plain
            # Applied, the noise adapter's answer is not the base's (its exact text may differ by a
            # near-tie token between slots, so it is compared with the base's, not with itself).
            assert await direct(lora=[{"id": 0, "scale": 1.0}]) != plain
            assert await direct() != plain
        await client.close()
