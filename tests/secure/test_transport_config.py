"""Transport configuration from the environment and from configure()."""

from __future__ import annotations

from pathlib import Path

import pytest

from ringfence.errors import InputError
from ringfence.secure.transport import TransportConfig, config_from_env, configure, current_config


def test_dir_with_rank_placeholder_and_overrides(tmp_path: Path) -> None:
    env = {
        "RINGFENCE_TRANSPORT_DIR": str(tmp_path / "job-a-rank-{rank}"),
        "RINGFENCE_TRANSPORT_CA": "/etc/ca.pem",
        "RINGFENCE_TRANSPORT_REKEY_BYTES": "1048576",
        "RINGFENCE_TRANSPORT_REKEY_SECONDS": "2m",
        "RINGFENCE_TRANSPORT_JOB": "spiffe://lab/job/a",
        "RINGFENCE_TRANSPORT_ADDR": "10.77.1.10",
        "RINGFENCE_TRANSPORT_EVENTS": str(tmp_path / "ev.jsonl"),
    }
    cfg = config_from_env(env, rank=3)
    assert cfg.cert == tmp_path / "job-a-rank-3" / "cert.pem"
    assert cfg.key == tmp_path / "job-a-rank-3" / "key.pem"
    assert cfg.ca == Path("/etc/ca.pem")
    assert (cfg.rekey_bytes, cfg.rekey_seconds, cfg.job) == (1 << 20, 120.0, "spiffe://lab/job/a")
    assert cfg.bind_address() == "10.77.1.10"
    assert cfg.event_log == tmp_path / "ev.jsonl"


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({}, "RINGFENCE_TRANSPORT_CERT"),
        ({"RINGFENCE_TRANSPORT_DIR": "/d/{rank}"}, "the rank is not known"),
        ({"RINGFENCE_TRANSPORT_DIR": "/d", "RINGFENCE_TRANSPORT_REKEY_BYTES": "lots"}, "REKEY_BYTES"),
        ({"RINGFENCE_TRANSPORT_DIR": "/d", "RINGFENCE_TRANSPORT_REKEY_SECONDS": "soon"}, "REKEY_SECONDS"),
        ({"RINGFENCE_TRANSPORT_DIR": "/d", "RINGFENCE_TRANSPORT_CHUNK_BYTES": "16"}, "chunk_bytes"),
    ],
)
def test_bad_environment_is_a_clear_input_error(env: dict[str, str], needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        config_from_env(env)


def test_configure_overrides_environment_and_resets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RINGFENCE_TRANSPORT_DIR", "/from/env")
    explicit = TransportConfig(cert=Path("c"), key=Path("k"), ca=Path("a"))
    try:
        assert configure(explicit) is explicit
        assert current_config() is explicit
        changed = configure(rekey_bytes=4096)
        assert changed.rekey_bytes == 4096 and changed.cert == Path("c")
    finally:
        configure(None)
    assert current_config().cert == Path("/from/env/cert.pem")
