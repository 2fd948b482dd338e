"""``mirbadllm ctl nodes rotate-ca``: replace the daemon's CA on every node, through ``DaemonClient``.

It asks the daemon for a rotation (``daemon.nodes.ca_rotation``) and, while it runs, prints each
node's step as the daemon's events report it (``nodes.ca_rotation``); then the result: each node's
outcome, the offline nodes to pair again, and whether the old CA was retired. Exit 1 when it was
not (a node failed its switch: the old CA stays in use; rotating again resumes). A refusal (409
``pairing_in_progress``, ``ca_rotation_running``) is the daemon's error, printed by ``ctl``.
"""

from __future__ import annotations

import asyncio
import logging

from core.tasks import cancel_and_wait
from daemon.api.ca_rotation import CaRotationResult, NodeRotation
from daemon.api.client import DaemonClient

_LOGGER = logging.getLogger(__name__)

_OUTCOMES = {"rotated": "rotated", "offline": "OFFLINE", "failed": "FAILED"}


def fmt_node_rotation(node: NodeRotation) -> str:
    took = f"  {node.seconds:.2f} s" if node.outcome == "rotated" else ""
    message = f"  {node.message}" if node.message else ""
    return f"  {node.name:<20} {_OUTCOMES.get(node.outcome, node.outcome)}{took}{message}"


def fmt_rotation(result: CaRotationResult) -> str:
    lines = [fmt_node_rotation(n) for n in result.nodes] or ["  no nodes"]
    if result.retired:
        lines.append(f"the old CA {result.old_ca[:12]} is retired; the daemon's CA is {result.new_ca[:12]} "
                     f"({result.seconds:.2f} s)")
    else:
        lines.append(f"the old CA {result.old_ca[:12]} was NOT retired: {result.problem}")
    if result.offline:
        lines.append(f"offline, pair again: {', '.join(result.offline)} (`mirbadllm agent --unpair` there, "
                     "`mirbadllm ctl nodes remove NODE`, then pair it)")
    return "\n".join(lines)


async def rotate_ca(client: DaemonClient) -> int:
    since = (await client.events(0, timeout=0)).last_id
    print("rotating the daemon's CA: every online node gets a certificate from a new CA, then the old CA is retired")
    rotation = asyncio.ensure_future(client.rotate_ca())
    try:
        while not rotation.done():
            poll = asyncio.ensure_future(client.events(since, timeout=10))
            await asyncio.wait({rotation, poll}, return_when=asyncio.FIRST_COMPLETED)
            if not poll.done():
                await cancel_and_wait(poll)
                continue
            page = poll.result()
            since = page.last_id
            for event in page.events:
                if event.type == "nodes.ca_rotation" and event.data.get("name"):
                    print(f"  {event.data['name']:<20} {_OUTCOMES.get(str(event.data.get('outcome')), '?')}")
        result = rotation.result()
    finally:
        rotation.cancel()
    print(fmt_rotation(result))
    return 0 if result.retired else 1
