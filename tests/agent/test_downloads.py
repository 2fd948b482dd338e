"""Hugging Face downloads against the fake hub: checksums, resume, cancel, tokens, hostile names
(scenarios 8, 9, 10 and 12), and "will it fit" from a header read by ranges."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from agent.api.client import AgentClient, AgentError
from agent.api.sources import (
    DownloadRequest,
    FitRequest,
    HfFileRef,
    TransferInfo,
    TransferState,
)
from agent.sources.fetch import Expected, FetchSettings, fetch_file, partial_path
from agent.sources.url_guard import UrlPolicy
from tests.agent._sources_support import SourcesAgent, listener, sources_agent  # noqa: F401
from tests.fakes.fake_hf_hub import FakeHub
from tests.fakes.gguf_files import gguf_bytes

REPO = "acme/tiny-GGUF"
MODEL = gguf_bytes() + bytes(300_000)  # trailing bytes after the tensors are allowed, and make it longer


@pytest.fixture
async def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> AsyncIterator[FakeHub]:
    fake = await FakeHub().start()
    monkeypatch.setenv("HF_ENDPOINT", fake.hub_url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no token of the developer's
    monkeypatch.delenv("HF_TOKEN", raising=False)
    yield fake
    await fake.close()


@pytest.fixture
async def agent(tmp_path: Path, fake_runtime: Callable[..., Path], port_base: int) -> AsyncIterator[SourcesAgent]:
    async with sources_agent(tmp_path, fake_runtime(), port_base) as running:
        yield running


async def finished(client: AgentClient, transfer_id: str, timeout: float = 30) -> TransferInfo:
    page = await client.transfers()
    for _ in range(200):
        info = next(t for t in page.transfers if t.id == transfer_id)
        if info.state in (TransferState.DONE, TransferState.FAILED, TransferState.CANCELLED):
            return info
        page = await client.transfers(since=page.version, timeout=timeout)
    raise AssertionError(f"transfer {transfer_id} did not finish")


def leftovers(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if ".partial" in p.name)


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


async def download(agent: SourcesAgent, **ref: object) -> TransferInfo:
    started = await agent.client.download(DownloadRequest(hf=HfFileRef(repo=REPO, **ref)))  # type: ignore[arg-type]
    return await finished(agent.client, started.id)


async def test_a_file_is_fetched_verified_and_renamed_into_place(hub: FakeHub, agent: SourcesAgent) -> None:
    item = hub.add(REPO, "tiny-Q4_K_M.gguf", MODEL)
    info = await download(agent, file="tiny-Q4_K_M.gguf")
    assert info.state is TransferState.DONE, info.error
    model = info.result[0]
    assert Path(model.model_path) == agent.models_dir / "acme--tiny-GGUF" / "tiny-Q4_K_M.gguf"
    assert Path(model.model_path).read_bytes() == MODEL and model.sha256 == item.sha256
    assert (model.hf_repo, model.hf_file, model.name) == (REPO, "tiny-Q4_K_M.gguf", "tiny-q4-k-m")
    assert info.bytes_done == info.bytes_total == len(MODEL) and leftovers(agent.models_dir) == []
    assert hub.requests("hub", "HEAD") and len(hub.requests("cdn", "GET")) == 1


async def test_a_quant_picks_every_shard_and_the_projector(hub: FakeHub, agent: SourcesAgent) -> None:
    shards = [gguf_bytes(extra={"split.count": 2}), gguf_bytes(layers=1, extra={"split.count": 2})]
    hub.add(REPO, "m-Q4_K_M-00001-of-00002.gguf", shards[0])
    hub.add(REPO, "m-Q4_K_M-00002-of-00002.gguf", shards[1])
    hub.add(REPO, "m-Q8_0.gguf", MODEL)
    hub.add(REPO, "mmproj-m-f16.gguf", gguf_bytes(arch="clip"))
    hub.add(REPO, "README.md", b"# tiny\n", lfs=False)
    info = await download(agent, quant="Q4_K_M")
    assert info.state is TransferState.DONE, info.error
    assert info.files == ["m-Q4_K_M-00001-of-00002.gguf", "m-Q4_K_M-00002-of-00002.gguf", "mmproj-m-f16.gguf"]
    model = info.result[0]
    assert model.model_path.endswith("00001-of-00002.gguf") and model.projector_path.endswith("mmproj-m-f16.gguf")
    assert "m-Q8_0.gguf" not in files_under(agent.models_dir)


async def test_a_small_git_file_is_checked_by_its_git_sha1(hub: FakeHub, agent: SourcesAgent) -> None:
    hub.add(REPO, "small.gguf", gguf_bytes(), lfs=False)
    info = await download(agent, file="small.gguf")
    assert info.state is TransferState.DONE, info.error


async def test_an_interrupted_download_resumes_and_is_still_verified(hub: FakeHub, agent: SourcesAgent) -> None:
    hub.add(REPO, "m.gguf", MODEL, cut_at=len(MODEL) // 2, cut_times=1, chunk_delay=0.01)
    info = await download(agent, file="m.gguf")
    assert info.state is TransferState.DONE, info.error
    gets = hub.requests("cdn", "GET")
    assert len(gets) == 2 and gets[1].headers.get("Range", "").startswith("bytes=")
    assert int(gets[1].headers["Range"][6:-1]) > 0 and Path(info.result[0].model_path).read_bytes() == MODEL
    assert leftovers(agent.models_dir) == []


async def test_a_connection_that_keeps_dropping_leaves_nothing(hub: FakeHub, agent: SourcesAgent) -> None:
    hub.add(REPO, "m.gguf", MODEL, cut_at=len(MODEL) // 2, cut_times=99)
    info = await download(agent, file="m.gguf")
    assert info.state is TransferState.FAILED and "connection failed" in (info.error or "")
    assert files_under(agent.models_dir) == []


async def test_bytes_that_do_not_match_the_hub_checksum_are_deleted(hub: FakeHub, agent: SourcesAgent) -> None:
    hub.add(REPO, "m.gguf", MODEL, serve=bytes(len(MODEL)))
    info = await download(agent, file="m.gguf")
    assert info.state is TransferState.FAILED and "does not match its checksum" in (info.error or "")
    assert files_under(agent.models_dir) == []


@pytest.mark.parametrize("etag", ["sha256:abc", "a" * 65, "sha256:../../x", "W/bogus"])
async def test_a_malformed_etag_is_refused_before_any_byte_is_fetched(
        hub: FakeHub, agent: SourcesAgent, etag: str) -> None:
    hub.add(REPO, "m.gguf", MODEL, etag=etag)
    info = await download(agent, file="m.gguf")
    assert info.state is TransferState.FAILED and "no usable checksum" in (info.error or "")
    assert hub.requests("cdn") == [] and files_under(agent.models_dir) == []


async def test_a_file_that_is_not_a_model_is_deleted_after_download(hub: FakeHub, agent: SourcesAgent) -> None:
    hub.add(REPO, "m.gguf", b"not a model at all" * 100)
    info = await download(agent, file="m.gguf")
    assert info.state is TransferState.FAILED and "not a usable GGUF" in (info.error or "")
    assert files_under(agent.models_dir) == []


async def test_the_token_goes_to_the_hub_only(hub: FakeHub, agent: SourcesAgent) -> None:
    hub.token = "hf_secret"
    hub.add(REPO, "m.gguf", MODEL)
    started = await agent.client.download(DownloadRequest(hf=HfFileRef(repo=REPO, file="m.gguf"), token="hf_secret"))
    info = await finished(agent.client, started.id)
    assert info.state is TransferState.DONE, info.error
    assert all(r.headers.get("Authorization") == "Bearer hf_secret" for r in hub.requests("hub"))
    assert hub.requests("cdn") and all("Authorization" not in r.headers for r in hub.requests("cdn"))
    assert "hf_secret" not in info.model_dump_json()


async def test_an_auth_realm_on_another_host_is_not_followed(
        hub: FakeHub, agent: SourcesAgent, listener: Callable[[], object]) -> None:  # noqa: F811
    counter = await listener()  # type: ignore[misc]
    hub.token, hub.auth_realm = "hf_secret", f"http://127.0.0.1:{counter.port}/token"
    hub.add(REPO, "m.gguf", MODEL)
    info = await download(agent, file="m.gguf")
    assert info.state is TransferState.FAILED and counter.connections == 0


async def test_cancel_stops_the_download_and_leaves_nothing(hub: FakeHub, agent: SourcesAgent) -> None:
    hub.add(REPO, "m.gguf", MODEL + bytes(2_000_000), chunk_delay=0.05)
    started = await agent.client.download(DownloadRequest(hf=HfFileRef(repo=REPO, file="m.gguf")))
    page = await agent.client.transfers()
    while not next(t for t in page.transfers if t.id == started.id).bytes_done:
        page = await agent.client.transfers(since=page.version, timeout=10)
    cancelled = await agent.client.cancel_transfer(started.id)
    assert cancelled.state is TransferState.CANCELLED
    assert files_under(agent.models_dir) == []


@pytest.mark.parametrize("name", ["../x.gguf", "..\\x.gguf", "/etc/passwd", "C:\\x.gguf", "D:x.gguf",
                                  "\\\\host\\share\\x.gguf", "a/../../x.gguf", "x\0.gguf", "x" * 300 + ".gguf"])
async def test_hostile_file_and_folder_names_are_refused_before_anything_exists(
        hub: FakeHub, agent: SourcesAgent, tmp_path: Path, name: str) -> None:
    before = files_under(tmp_path)
    for body in ({"hf": {"repo": REPO, "file": name}}, {"hf": {"repo": REPO, "file": "m.gguf"}, "target": name}):
        with pytest.raises(AgentError) as caught:
            await agent.client._call("POST", "/downloads", body=body)
        assert caught.value.status == 422
    assert files_under(tmp_path) == before and hub.seen == []
    assert (await agent.client.transfers()).transfers == []


async def test_a_link_planted_in_the_models_folder_is_not_followed(
        hub: FakeHub, agent: SourcesAgent, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (agent.models_dir / "evil").symlink_to(outside)
    hub.add(REPO, "m.gguf", MODEL)
    with pytest.raises(AgentError) as caught:
        await agent.client.download(DownloadRequest(hf=HfFileRef(repo=REPO, file="m.gguf"), target="evil"))
    assert caught.value.code == "unsafe_name" and os.listdir(outside) == []


async def test_will_it_fit_reads_only_the_header_by_ranges(hub: FakeHub, agent: SourcesAgent) -> None:
    big = gguf_bytes(layers=4, embd=256) + bytes(3_000_000)
    hub.add(REPO, "big.gguf", big)
    report = await agent.client.fit(FitRequest(hf=HfFileRef(repo=REPO, file="big.gguf")))
    assert report.fits and report.summary.block_count == 4 and report.summary.file_size == len(big)
    assert report.source == f"hf:{REPO}/big.gguf"
    gets = hub.requests("cdn", "GET")
    assert gets and all(g.headers.get("Range", "").startswith("bytes=") for g in gets)
    fetched = sum(int(g.headers["Range"].split("-")[1]) + 1 - int(g.headers["Range"][6:].split("-")[0]) for g in gets)
    assert fetched < len(big) and files_under(agent.models_dir) == []


async def test_a_header_read_cut_short_says_so_and_the_next_one_works(hub: FakeHub, agent: SourcesAgent) -> None:
    hub.add(REPO, "cut.gguf", gguf_bytes() + bytes(1 << 20), cut_at=64, cut_times=1)
    with pytest.raises(AgentError) as caught:
        await agent.client.fit(FitRequest(hf=HfFileRef(repo=REPO, file="cut.gguf")))
    assert (caught.value.status, caught.value.code) == (502, "download_failed"), "not the agent's 'internal'"
    assert caught.value.message == "the hub sent a short answer for cut.gguf; try again"
    assert (await agent.client.fit(FitRequest(hf=HfFileRef(repo=REPO, file="cut.gguf")))).fits


async def test_a_partial_file_left_by_a_killed_agent_is_resumed_only_for_the_same_file(
        hub: FakeHub, tmp_path: Path) -> None:
    """Scenario 31: after a crash the download resumes (or restarts), and is verified either way."""
    item = hub.add(REPO, "m.gguf", MODEL)
    target = tmp_path / "m.gguf"
    part, sidecar = partial_path(target), partial_path(target).with_suffix(".partial.json")
    expected = Expected(size=len(MODEL), sha256=item.sha256, identity=f"hf:{REPO}:m.gguf:{item.sha256}")
    settings = FetchSettings(UrlPolicy(allow_private=True))
    url = f"{hub.cdn_url}/cdn/{REPO}/m.gguf"
    part.write_bytes(MODEL[:100_000])
    sidecar.write_text(json.dumps({"identity": expected.identity}))
    assert await fetch_file(url, target, expected, settings) == item.sha256
    assert hub.requests("cdn")[-1].headers["Range"] == "bytes=100000-" and target.read_bytes() == MODEL
    assert not part.exists() and not sidecar.exists()

    target.unlink()
    part.write_bytes(b"bytes of some other file")
    sidecar.write_text(json.dumps({"identity": "hf:acme/other:m.gguf:" + "0" * 64}))
    assert await fetch_file(url, target, expected, settings) == item.sha256
    assert "Range" not in hub.requests("cdn")[-1].headers and target.read_bytes() == MODEL


async def test_an_offline_machine_is_told_so_at_once_in_plain_words() -> None:
    """No DNS (offline): said before the hub client's minute of retries, without "[Errno -2]"."""
    from agent.sources.fetch import DownloadFailed
    from agent.sources.huggingface import file_info, list_files

    for ask in (lambda hub: file_info(REPO, "m.gguf", "main", None, hub), lambda hub: list_files(REPO, "main", None, hub)):
        with pytest.raises(DownloadFailed) as offline:
            await ask("https://hub.mirbadllm-test.invalid")
        assert offline.value.code == "hub_unreachable" and "looks offline" in offline.value.message
        assert "hub.mirbadllm-test.invalid" in offline.value.message and "Errno" not in offline.value.message
