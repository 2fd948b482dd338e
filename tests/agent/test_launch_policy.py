"""The shared rules for hostile input: names and paths (scenario 8), digests (9), runtime
arguments (13) and environment variables (14), as the daemon and the agent both apply them."""

from __future__ import annotations

import pytest

from agent.api.launch_policy import PolicyViolation, check_env, check_extra_args
from core.safe_names import (
    UnsafeName,
    check_digest,
    check_hf_repo,
    check_node_path,
    check_relative_name,
    lexically_inside,
)

MODEL = "/models/llama/model.gguf"
HOSTILE_NAMES = ["../x", "..\\x", "/etc/passwd", "C:\\x", "C:/x", "D:x", "\\\\host\\share\\x", "//host/share/x",
                 "a/../../x", "a/./b", "a//b", "x\0y", "x" * 300, "CON", "nul.gguf", "x.gguf.", "x.gguf ",
                 "file:stream", "", "a\nb"]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_names_that_could_leave_their_folder_are_refused(name: str) -> None:
    with pytest.raises(UnsafeName):
        check_relative_name(name)


@pytest.mark.parametrize("name", ["model.gguf", "Q4_K_M/model-00001-of-00002.gguf", "a.b-c_d.gguf"])
def test_plain_names_pass(name: str) -> None:
    assert check_relative_name(name) == name


def test_a_folder_name_may_not_hold_a_separator() -> None:
    with pytest.raises(UnsafeName, match="may not contain"):
        check_relative_name("a/b", allow_subdirs=False)


@pytest.mark.parametrize("path", ["relative/model.gguf", "/models/../etc/passwd", "\\\\host\\share\\m.gguf",
                                  "//host/share/m.gguf", "D:model.gguf", "C:\\models\\m.gguf:stream",
                                  "/models/m\0.gguf", "C:\\models\\..\\x.gguf"])
def test_node_paths_are_absolute_local_and_plain(path: str) -> None:
    with pytest.raises(UnsafeName):
        check_node_path(path)


@pytest.mark.parametrize("path", ["/models/m.gguf", "C:\\Models\\m.gguf", "D:/models/m.gguf"])
def test_posix_and_windows_absolute_paths_pass(path: str) -> None:
    assert check_node_path(path) == path


def test_inside_a_folder_by_text_under_both_rules() -> None:
    assert lexically_inside("/models/llama", "/models/llama/lora.gguf")
    assert not lexically_inside("/models/llama", "/models/llama-evil/lora.gguf")
    assert not lexically_inside("/models/llama", "/models/llama/../../etc/passwd")
    assert lexically_inside("C:\\Models\\Llama", "c:/models/llama/t.jinja")  # Windows: any case, either slash
    assert not lexically_inside("/models/llama", "C:\\models\\llama\\t.jinja")


@pytest.mark.parametrize("digest", ["sha256:abc", "sha256:" + "a" * 65, "sha256:../../x", "sha256:" + "A" * 64,
                                    "sha256:" + "a" * 64 + "\n", "md5:" + "a" * 64, "sha256/" + "a" * 64])
def test_digests_are_exactly_sha256_and_64_lowercase_hex(digest: str) -> None:
    with pytest.raises(UnsafeName):
        check_digest(digest)
    assert check_digest("sha256:" + "0a" * 32) and check_digest("sha256-" + "0a" * 32)


@pytest.mark.parametrize("repo", ["../x", "owner/../x", "owner", "owner/name/extra", "-owner/name", "own--er/x"])
def test_hugging_face_repos_are_owner_slash_name(repo: str) -> None:
    with pytest.raises(UnsafeName):
        check_hf_repo(repo)


@pytest.mark.parametrize(("args", "names"), [
    (["--trust-remote-code"], "--trust-remote-code"),
    (["--tools", "all"], "--tools"),
    (["-ag"], "-ag"),
    (["--agent"], "--agent"),
    (["--rpc", "1.2.3.4:50052"], "--rpc"),
    (["--host", "0.0.0.0"], "--host"),
    (["--slot-save-path", "/"], "--slot-save-path"),
    (["--log-file", "/tmp/x"], "--log-file"),
    (["--api-key", "k"], "--api-key"),
    (["--api-key-file=/etc/shadow"], "--api-key-file"),
    (["--model=-oProxyCommand=x"], "--model"),
    (["-m", "/etc/passwd"], "-m"),
    (["--mcp-servers-json", "{}"], "--mcp-servers-json"),
    (["-hf", "evil/model"], "-hf"),
    (["--gpt-oss-20b-default"], "--gpt-oss-20b-default"),
    (["--media-path", "/"], "--media-path"),
    (["--chat-template-file", "/etc/passwd"], "--chat-template-file"),
    (["--chat-template-file", "/models/llama/../../etc/passwd"], "--chat-template-file"),
    (["--lora", "/models/llama/a.gguf,/home/x/b.gguf"], "--lora"),
    (["--lora-scaled", "/models/other/a.gguf:0.5"], "--lora-scaled"),
    (["--mmproj", "-oProxyCommand=x"], "--mmproj"),
    (["--mmproj"], "--mmproj"),
    (["--alias", "--tools"], "--alias"),
    (["--grammar-file", "relative.gbnf"], "--grammar-file"),
])
def test_runtime_arguments_that_reach_beyond_the_model_are_refused(args: list[str], names: str) -> None:
    with pytest.raises(PolicyViolation, match=names.replace("-", r"\-")):
        check_extra_args(args, MODEL)


# What the agent's driver kept a denylist of its own for (its key, its log, downloads, the web UI):
# one list now, ``DENIED_FLAGS``, refused by the daemon and by the agent alike.
AGENT_OWNED = ["--api-key", "--api-key-file", "--ssl-key-file", "--ssl-cert-file", "--path", "--log-file",
               "-mu", "--model-url", "-hf", "-hfr", "--hf-repo", "-hff", "--hf-file", "-hft", "--hf-token",
               "-hfv", "--hf-repo-v", "-hffv", "--hf-file-v", "-dr", "--docker-repo", "--webui"]


@pytest.mark.parametrize("flag", AGENT_OWNED)
def test_one_denylist_refuses_for_the_daemon_and_the_agent(flag: str) -> None:
    from agent.runtimes.llamacpp import SpecRejected
    from agent.runtimes.llamacpp import check_extra_args as agent_check_extra_args

    for args in ([flag, "x"], [f"{flag}=x"] if flag.startswith("--") else [flag, "y"]):
        with pytest.raises(PolicyViolation, match=f"{flag} is not allowed"):
            check_extra_args(args, MODEL)
        with pytest.raises(SpecRejected, match=f"{flag} is not allowed"):
            agent_check_extra_args(args, MODEL)


def test_ordinary_arguments_and_files_of_the_model_pass() -> None:
    check_extra_args(["--temp", "0.7", "--top-k", "40", "-ngl", "-1", "--seed", "-1", "--no-webui",
                      "--mmproj", "/models/llama/mmproj.gguf", "--chat-template-file=/models/llama/t.jinja",
                      "--lora-scaled", "/models/llama/a.gguf:0.5,/models/llama/b.gguf:-1.0"], MODEL)


@pytest.mark.parametrize("name", ["LD_PRELOAD", "PYTHONOPTIMIZE", "LLAMA_ARG_TOOLS", "VLLM_SERVER_DEV_MODE",
                                  "HF_ENDPOINT", "HTTPS_PROXY", "http_proxy", "DYLD_INSERT_LIBRARIES",
                                  "PYTHONPATH", "LD_LIBRARY_PATH", "LLAMA_API_KEY", "GGML BAD", "cuda_visible_devices"])
def test_environment_only_from_the_allowlist(name: str) -> None:
    with pytest.raises(PolicyViolation, match="not allowed"):
        check_env({name: "1"})


def test_allowed_environment_passes_but_not_a_nul() -> None:
    check_env({"CUDA_VISIBLE_DEVICES": "0", "GGML_CUDA_NO_PINNED": "1", "OMP_NUM_THREADS": "4"})
    with pytest.raises(PolicyViolation, match="NUL"):
        check_env({"OMP_NUM_THREADS": "4\0"})
