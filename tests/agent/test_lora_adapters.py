"""LoRA adapters on llama-server: loaded unapplied (golden argv), each file checked at launch to be
a GGUF LoRA for the model's architecture, applied per request by the ``lora`` field."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.api.llamacpp import (
    Adapter,
    LlamaCppSettings,
    build_args,
    config_hash,
    lora_field,
)
from agent.api.models import LaunchSpec
from agent.runtimes.driver import SpecRejected
from agent.runtimes.llamacpp import build_command, check_spec
from tests.fakes.gguf_files import write_gguf

LORA = {"general.type": "adapter", "adapter.type": "lora", "adapter.lora.alpha": 16.0}


def test_adapters_are_loaded_unapplied_in_their_order() -> None:
    adapters = [Adapter(name="pirate", file="/m/pirate.gguf"), Adapter(name="poet", file="/m/poet.gguf", scale=0.5)]
    assert build_args(LlamaCppSettings(ctx_size=512), "/m/g.gguf", "gemma", 18080, ["--temp", "0.7"],
                      adapters=adapters) == [
        "--model", "/m/g.gguf", "--alias", "gemma", "--host", "127.0.0.1", "--port", "18080",
        "--ctx-size", "512", "--jinja", "--lora", "/m/pirate.gguf", "--lora", "/m/poet.gguf",
        "--lora-init-without-apply", "--metrics", "--slots", "--no-webui", "--temp", "0.7"]
    spec = LaunchSpec(instance_id="g", model_path="/m/g.gguf", served_name="gemma", adapters=adapters)
    assert build_command(spec, 18081) == [
        "--model", "/m/g.gguf", "--alias", "gemma", "--host", "127.0.0.1", "--port", "18081", "--jinja",
        "--lora", "/m/pirate.gguf", "--lora", "/m/poet.gguf", "--lora-init-without-apply",
        "--metrics", "--slots", "--no-webui"]


def test_without_adapters_the_argv_and_hash_are_as_before() -> None:
    settings = LlamaCppSettings()
    assert build_args(settings, "/m/g.gguf", "gemma", 1, adapters=[]) == build_args(settings, "/m/g.gguf", "gemma", 1)
    assert config_hash(settings, "/m/g.gguf", "gemma", [], []) == config_hash(settings, "/m/g.gguf", "gemma")


def test_the_files_decide_the_hash_names_and_scales_do_not() -> None:
    settings = LlamaCppSettings()
    one = config_hash(settings, "/m/g.gguf", "g", None, [Adapter(name="a", file="/m/a.gguf")])
    assert one != config_hash(settings, "/m/g.gguf", "g")
    assert one == config_hash(settings, "/m/g.gguf", "g", None, [Adapter(name="b", file="/m/a.gguf", scale=0.3)])
    assert one != config_hash(settings, "/m/g.gguf", "g", None, [Adapter(name="a", file="/m/other.gguf")])


def test_lora_field_applies_the_chosen_adapter_only() -> None:
    adapters = [Adapter(name="a", file="/m/a.gguf"), Adapter(name="b", file="/m/b.gguf", scale=0.5)]
    assert lora_field(adapters, 1) == [{"id": 0, "scale": 0.0}, {"id": 1, "scale": 0.5}]
    assert lora_field(adapters, None) == [{"id": 0, "scale": 0.0}, {"id": 1, "scale": 0.0}]


def test_an_adapter_scale_must_be_finite_and_bounded() -> None:
    for scale in (float("nan"), float("inf"), 100.0):
        with pytest.raises(ValueError):
            Adapter(name="a", file="/m/a.gguf", scale=scale)


def _spec(tmp_path: Path, *adapters: Adapter) -> LaunchSpec:
    model = write_gguf(tmp_path / "models" / "g.gguf", arch="gemma3")
    return LaunchSpec(instance_id="g", model_path=str(model), served_name="g", adapters=list(adapters))


def test_a_lora_for_the_models_architecture_is_accepted(tmp_path: Path) -> None:
    good = write_gguf(tmp_path / "models" / "pirate.gguf", arch="gemma3", extra=LORA)
    check_spec(_spec(tmp_path, Adapter(name="pirate", file=str(good))), tmp_path / "models")


@pytest.mark.parametrize(("shape", "reason"), [
    ({"arch": "llama", "extra": LORA}, "is an adapter for architecture 'llama', not for the model's 'gemma3'"),
    ({"arch": "gemma3"}, "is not an adapter (general.type is missing, not 'adapter')"),
    ({"arch": "gemma3", "extra": {"general.type": "model"}}, "is not an adapter (general.type is 'model'"),
    ({"arch": "gemma3", "extra": {**LORA, "adapter.type": "control_vector"}},
     "is not a LoRA adapter (adapter.type is 'control_vector', not 'lora')"),
])
def test_a_file_that_is_no_lora_for_the_model_is_refused_with_the_reason(
        tmp_path: Path, shape: dict[str, object], reason: str) -> None:
    bad = write_gguf(tmp_path / "models" / "bad.gguf", **shape)
    with pytest.raises(SpecRejected) as refused:
        check_spec(_spec(tmp_path, Adapter(name="bad", file=str(bad))), tmp_path / "models")
    assert f"adapter 'bad' ({bad}) " in str(refused.value) and reason in str(refused.value)


def test_an_adapter_outside_the_models_folder_missing_or_unreadable_is_refused(tmp_path: Path) -> None:
    outside = write_gguf(tmp_path / "elsewhere" / "a.gguf", arch="gemma3", extra=LORA)
    with pytest.raises(SpecRejected, match="may only read files in the model's folder"):
        check_spec(_spec(tmp_path, Adapter(name="a", file=str(outside))), tmp_path / "models")
    with pytest.raises(SpecRejected, match="file not found on this node"):
        check_spec(_spec(tmp_path, Adapter(name="a", file=str(tmp_path / "models" / "none.gguf"))))
    junk = tmp_path / "models" / "junk.gguf"
    junk.parent.mkdir(parents=True, exist_ok=True)
    junk.write_bytes(b"not a gguf at all")
    with pytest.raises(SpecRejected, match="is not a readable GGUF file"):
        check_spec(_spec(tmp_path, Adapter(name="a", file=str(junk))))
    comma = write_gguf(tmp_path / "models" / "a,b.gguf", arch="gemma3", extra=LORA)
    with pytest.raises(SpecRejected, match="splits --lora at commas"):
        check_spec(_spec(tmp_path, Adapter(name="a", file=str(comma))))


def test_only_llamacpp_takes_adapters(tmp_path: Path) -> None:
    good = write_gguf(tmp_path / "models" / "a.gguf", arch="gemma3", extra=LORA)
    spec = _spec(tmp_path, Adapter(name="a", file=str(good))).model_copy(update={"runtime": "mlx"})
    with pytest.raises(SpecRejected, match="only llama.cpp takes LoRA adapters"):
        check_spec(spec)
