"""``mirbadllm ctl models plan REPO`` end to end: the real daemon and its agent against the fake hub.
A Hugging Face file is planned from its header alone (range reads, nothing downloaded); a repo, or a
quant, that names several GGUF models plans nothing and asks which, each file as the command that
plans it; a repo with one GGUF is planned at once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mirbadllm import ctl
from tests.daemon.harness import RunningDaemon, running_daemon
from tests.fakes.fake_hf_hub import FakeHub
from tests.fakes.gguf_files import gguf_bytes

BIG = 4 << 20  # padding past the header: a whole-file read would show


@pytest.fixture
async def hub(monkeypatch: pytest.MonkeyPatch, hf_env: None) -> AsyncIterator[FakeHub]:
    fake = await FakeHub().start()
    monkeypatch.setenv("HF_ENDPOINT", fake.hub_url)
    yield fake
    await fake.close()


async def plan(rd: RunningDaemon, *argv: str) -> int:
    return await ctl.run(ctl.parse_args(["models", "plan", *argv]), rd.client)


async def test_a_hugging_face_file_is_planned_from_its_header_alone(
        tmp_path: Path, fake_runtime: Path, hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    size = len(hub.add("acme/tiny-GGUF", "tiny-Q4_K_M.gguf", gguf_bytes(name="Tiny") + bytes(BIG)).data)
    hub.add("acme/tiny-GGUF", "tiny-Q8_0.gguf", gguf_bytes(name="Tiny") + bytes(BIG))
    async with running_daemon(tmp_path / "home", fake_runtime) as rd:
        assert await plan(rd, "acme/tiny-GGUF:q4_k_m", "--ctx", "1024") == 0
        out = capsys.readouterr().out.splitlines()
        assert out[0].startswith("Tiny: llama, 2 layers") and out[0].endswith("(hf:acme/tiny-GGUF/tiny-Q4_K_M.gguf)")
        assert out[1].startswith("NODE") and "free now" in out[2] and any("--ctx-size 1024" in line for line in out)
        reads = hub.requests("cdn", "GET")
        assert reads and all(r.headers.get("Range", "").startswith("bytes=0-") for r in reads)
        assert all(int(r.headers["Range"].rsplit("-", 1)[1]) < size - BIG // 2 for r in reads), \
            "only the header is read, never the weights"
        assert await rd.client.transfers() == [], "nothing is downloaded"
        assert await plan(rd, "acme/tiny-GGUF/tiny-Q8_0.gguf") == 0
        assert "(hf:acme/tiny-GGUF/tiny-Q8_0.gguf)" in capsys.readouterr().out


async def test_a_repo_with_several_models_asks_which_one(
        tmp_path: Path, fake_runtime: Path, hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("tiny-Q4_K_M.gguf", "tiny-Q4_0.gguf", "tiny-Q8_0.gguf"):
        hub.add("acme/tiny-GGUF", name, gguf_bytes())
    hub.add("acme/tiny-GGUF", "mmproj-tiny-f16.gguf", gguf_bytes(arch="clip"))
    hub.add("acme/one-GGUF", "one-f16.gguf", gguf_bytes(name="One"))
    async with running_daemon(tmp_path / "home", fake_runtime) as rd:
        assert await plan(rd, "acme/tiny-GGUF") == 1
        out = capsys.readouterr().out.splitlines()
        assert out == ["acme/tiny-GGUF holds several GGUF models; a plan is for one file. Plan one of them:",
                       "  mirbadllm ctl models plan acme/tiny-GGUF/tiny-Q4_0.gguf",
                       "  mirbadllm ctl models plan acme/tiny-GGUF/tiny-Q4_K_M.gguf",
                       "  mirbadllm ctl models plan acme/tiny-GGUF/tiny-Q8_0.gguf",
                       "(or by quant: acme/tiny-GGUF:QUANT, when one file has it)"], "the projector is no model"
        command = out[2].split("mirbadllm ctl ", 1)[1].split()
        assert await ctl.run(ctl.parse_args(command), rd.client) == 0, "each line listed is a command that works"
        assert "(hf:acme/tiny-GGUF/tiny-Q4_K_M.gguf)" in capsys.readouterr().out

        assert await plan(rd, "acme/tiny-GGUF:Q4", "--revision", "v2") == 1  # a quant that two files have
        out = capsys.readouterr().out.splitlines()
        assert out[1:3] == ["  mirbadllm ctl models plan acme/tiny-GGUF/tiny-Q4_0.gguf --revision v2",
                            "  mirbadllm ctl models plan acme/tiny-GGUF/tiny-Q4_K_M.gguf --revision v2"]

        assert await plan(rd, "acme/one-GGUF") == 0, "a repo with one GGUF model is planned at once"
        assert capsys.readouterr().out.startswith("One: llama")
