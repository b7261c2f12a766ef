"""docs/configuration.md is what the settings' own descriptions say."""

from __future__ import annotations

from voice_gateway import config_docs
from voice_gateway.settings import Settings


def test_configuration_page_is_current() -> None:
    current = config_docs.PAGE.read_text(encoding="utf-8")
    assert current == config_docs.render(), (
        f"docs/configuration.md is stale: run `{config_docs.REGENERATE}`"
    )


def test_every_setting_has_an_entry() -> None:
    text = config_docs.render()
    for name, field in Settings.model_fields.items():
        assert f"`{config_docs.env_names(name, field)[0]}`" in text, name


def test_an_entry_gives_names_type_default_and_bounds() -> None:
    fields = Settings.model_fields
    drain = config_docs.entry("drain_timeout_s", fields["drain_timeout_s"], "float")
    assert drain.startswith("- `VG_DRAIN_TIMEOUT_S` / `VG_SHUTDOWN_GRACE_S` (`float`; ")
    assert "default `10.0`; >= 0)" in drain
    assert "SIGTERM" in drain
    assert config_docs.type_name(fields["log_format"]) == "text | json"
    assert config_docs.type_name(fields["redis_url"]) == "str | None"
    assert config_docs.type_name(fields["port"]) == "int"
    key = config_docs.entry("openai_api_key", fields["openai_api_key"], "str | None")
    assert key.startswith("- `OPENAI_API_KEY` / `VG_OPENAI_API_KEY` (`str | None`; default unset)")


def test_check_mode_reports_a_stale_page(tmp_path, monkeypatch, capsys) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text("# Configuration\n", encoding="utf-8")
    monkeypatch.setattr(config_docs, "PAGE", stale)
    assert config_docs.main(["--check"]) == 1
    assert config_docs.REGENERATE in capsys.readouterr().err
    assert config_docs.main(["--write"]) == 0
    assert config_docs.main(["--check"]) == 0
