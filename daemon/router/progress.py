"""A llama.cpp runtime's prompt progress, read from its own ``/slots`` (the relay's ``Silence.progress``).

llama-server answers ``/slots`` between two batches of a prompt it reads, each slot with
``n_prompt_tokens_processed`` (the prompt's tokens read so far) and ``next_token[].n_decoded`` (the
tokens generated). Their sum over all slots changes while any slot works and stands still while the
runtime is wedged (a stopped process does not answer at all). It is reached the way the answer is:
the runtime's endpoint on this machine, the agent's ``/proxy/{id}`` on another node.
"""

from __future__ import annotations

import aiohttp

from core.relay import Upstream

_POLL_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=10, sock_connect=10)  # the relay bounds the poll


async def slot_progress(upstream: Upstream) -> int | None:
    """Tokens read and generated, summed over the runtime's slots; None when it does not say."""
    try:
        async with upstream.session.get(f"{upstream.base}/slots", headers=upstream.headers,
                                        timeout=_POLL_TIMEOUT, allow_redirects=False) as resp:
            if resp.status != 200:
                return None
            slots = await resp.json(content_type=None)
    except (aiohttp.ClientError, ValueError):
        return None
    if not isinstance(slots, list):
        return None
    done = 0
    for slot in slots:
        if not isinstance(slot, dict):
            continue
        read = slot.get("n_prompt_tokens_processed")
        done += read if isinstance(read, int) else 0
        for step in slot.get("next_token") or ():
            decoded = step.get("n_decoded") if isinstance(step, dict) else None
            done += decoded if isinstance(decoded, int) else 0
    return done
