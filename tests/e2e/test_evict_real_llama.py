"""Loading on demand by memory with the real llama-server: a request for a second Gemma whose budget
does not fit beside the first unloads the first and is answered."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from daemon.api.models import ModelState
from tests.daemon.harness import model, running_daemon
from tests.daemon.test_load_on_demand import GiB, budgets_that_do_not_both_fit

pytestmark = [pytest.mark.e2e]


async def test_a_request_for_a_second_gemma_evicts_the_first_and_is_answered(
        tmp_path: Path, real_llama_server: Path, gemma_gguf: Path) -> None:
    async with running_daemon(tmp_path / "home", None) as d:
        figures = await d.daemon.links["local"].client.status()
        budget = budgets_that_do_not_both_fit(figures.memory_total, figures.memory_available)
        for model_id in ("gemma-one", "gemma-two"):
            await d.client.create_model(model(model_id, str(gemma_gguf), start_on_request=True,
                                              memory_budget_gib=budget, settings={"ctx_size": 2048}))
        client = openai.AsyncOpenAI(base_url=d.v1, api_key="unused", max_retries=0)
        try:
            for model_id in ("gemma-one", "gemma-two"):
                chat = await client.chat.completions.create(
                    model=model_id, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
                assert chat.choices[0].message.content is not None
        finally:
            await client.close()
        one, two = (await d.client.get_model("gemma-one")).status, (await d.client.get_model("gemma-two")).status
        assert (one.state, two.state) == (ModelState.STOPPED, ModelState.READY), (one.error, two.error)
        assert one.evicted is not None and "make room for 'gemma-two'" in one.evicted
        page = await d.client.events(0, timeout=0)
        [evicted] = [e for e in page.events if e.type == "model.evicted"]
        assert (evicted.model, evicted.data["for_model"]) == ("gemma-one", "gemma-two")
        assert evicted.data["freed_bytes"] == int(budget * GiB)
        records = [r for r in await d.client.requests() if r.model == "gemma-two"]
        assert [r.status for r in records] == [200]
