"""A model's preset reaches its runtime for what a request does not set; what it sets wins; a value
out of range is refused naming the field; `ctl models preset` shows and changes it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest
from pydantic import ValidationError

from daemon.api.models import ModelState, Preset
from mirbadllm import ctl
from tests.daemon.harness import model, running_daemon
from tests.daemon.test_lora_adapters import _body_lines
from tests.fakes import write_fake_runtime


async def test_the_runtime_gets_the_preset_for_what_the_request_does_not_set(tmp_path: Path,
                                                                             model_file: Path) -> None:
    runtime = write_fake_runtime(tmp_path / "bin", tokens=2, log_bodies=True)
    preset = {"system_prompt": "Answer in French.", "temperature": 0.2, "top_k": 20, "repeat_penalty": 1.1,
              "max_tokens": 2}
    async with running_daemon(tmp_path / "home", runtime) as d, aiohttp.ClientSession() as http:
        await d.client.create_model(model("m", str(model_file), preset=preset))
        assert (await d.client.start_model("m", wait=True)).state == ModelState.READY
        lines = d.client.logs("m", tail=1, follow=True)
        await asyncio.wait_for(anext(lines), 20)  # the stream is open
        plain = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        own = {"model": "m", "messages": [{"role": "system", "content": "Mine."}, {"role": "user", "content": "hi"}],
               "temperature": 0.9}
        for body in (plain, own):
            async with http.post(f"{d.v1}/chat/completions", json=body) as resp:
                assert resp.status == 200, await resp.text()
        first, second = await asyncio.wait_for(_body_lines(lines, 2), 20)
        await lines.aclose()
        assert first["messages"][0] == {"role": "system", "content": "Answer in French."}
        assert (first["temperature"], first["top_k"], first["repeat_penalty"], first["max_tokens"]) == (0.2, 20, 1.1, 2)
        assert [m["content"] for m in second["messages"]] == ["Mine.", "hi"]  # type: ignore[index]
        assert second["temperature"] == 0.9 and second["top_k"] == 20  # the request's own value wins


async def test_a_preset_out_of_range_is_refused_and_ctl_changes_one(tmp_path: Path, model_file: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    async with running_daemon(tmp_path / "home", None, local_agent=False) as d:
        await d.client.create_model(model("m", str(model_file), node="auto"))
        bad = (await d.client.get_model("m")).definition.model_dump(mode="json")
        bad["preset"] = {"temperature": 7}
        async with aiohttp.ClientSession() as http, http.put(
                f"{d.url}/api/models/m", json=bad, headers={"Authorization": f"Bearer {d.daemon.admin_token}"}) as r:
            answer = await r.json()
        assert r.status == 422 and "temperature" in json.dumps(answer)
        assert (await d.client.get_model("m")).definition.preset == Preset()  # nothing changed

        args = ["models", "preset", "m", "--system", "Be brief.", "--top-p", "0.9"]
        assert await ctl.run(ctl.parse_args(args), d.client) == 0
        assert (await d.client.get_model("m")).definition.preset == Preset(system_prompt="Be brief.", top_p=0.9)
        assert "Be brief." in capsys.readouterr().out
        assert await ctl.run(ctl.parse_args(["models", "preset", "m", "--clear", "top_p"]), d.client) == 0
        assert (await d.client.get_model("m")).definition.preset == Preset(system_prompt="Be brief.")
        with pytest.raises(ValidationError) as refused:  # `ctl` says it in plain words, exit 2
            await ctl.run(ctl.parse_args(["models", "preset", "m", "--top-k", "-1"]), d.client)
        assert ctl.plain_errors(refused.value) == "top_k: Input should be greater than or equal to 0"
        assert (await d.client.get_model("m")).definition.preset == Preset(system_prompt="Be brief.")
