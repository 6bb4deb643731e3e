"""The SSH hosts inventory: strict at the edge, errors naming file:line and field, strict host keys always."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringfence.errors import InputError
from ringfence.targets.hosts import dump_hosts, load_hosts, parse_hosts, ssh_site
from ringfence.targets.ssh import SshExecutor

GOOD = """\
site: rf1
fanout: 4
hosts:
  worker-0:
    address: 10.77.1.10
    user: root
    key: /keys/admin
    known_hosts: /keys/known_hosts
    client_prefix: [ip, netns, exec, rf1-jump]
    interface: eth0
  storage:
    address: 10.77.2.10
    ssh: 192.0.2.20
    port: 2222
    user: ops
    key: /keys/ops
    known_hosts: /keys/kh
    python: [/opt/venv/bin/python]
    env: {PYTHONPATH: /opt/src}
"""


def test_a_good_inventory_becomes_a_site_of_strict_ssh_executors() -> None:
    inv = parse_hosts(GOOD, "hosts.yaml")
    site = ssh_site(inv)
    assert site.name == "rf1" and site.kind == "ssh" and sorted(site.hosts) == ["storage", "worker-0"]
    assert site.address("storage") == "10.77.2.10"
    ex = site.executor("storage")
    assert isinstance(ex, SshExecutor) and ex.host == "192.0.2.20" and ex.port == 2222
    argv = ex._ssh("true")
    assert "StrictHostKeyChecking=yes" in argv and "UserKnownHostsFile=/keys/kh" in argv
    assert not any("accept-new" in a or a == "StrictHostKeyChecking=no" for a in argv)
    assert site.host("storage").python == ("/opt/venv/bin/python",)
    assert dict(site.host("storage").env) == {"PYTHONPATH": "/opt/src"}
    assert site.host("worker-0").interface == "eth0"
    assert site.executor("worker-0")._local.prefix == ("ip", "netns", "exec", "rf1-jump")


@pytest.mark.parametrize(
    ("text", "line", "field"),
    [
        (GOOD.replace("    user: ops\n", ""), 11, "hosts.storage.user"),  # missing field: the host's line
        (GOOD.replace("port: 2222", "port: '2222'"), 14, "hosts.storage.port"),  # strict: no str for int
        (GOOD.replace("interface: eth0", "interfaces: eth0"), 10, "hosts.worker-0.interfaces"),  # unknown key
        (GOOD.replace("fanout: 4", "fanout: 0"), 2, "fanout"),
        (GOOD.replace("    known_hosts: /keys/kh\n", ""), 11, "hosts.storage.known_hosts"),
    ],
)
def test_bad_inventories_name_line_and_field(text: str, line: int, field: str) -> None:
    with pytest.raises(InputError) as err:
        parse_hosts(text, "hosts.yaml")
    assert err.value.where == f"hosts.yaml:{line}"
    assert err.value.message.startswith(f"hosts.yaml:{line}: {field}:")


def test_not_yaml_empty_and_unreadable(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"h.yaml:3: not valid YAML"):
        parse_hosts("hosts:\n  a: [\n", "h.yaml")
    with pytest.raises(InputError, match="must be a mapping"):
        parse_hosts("", "h.yaml")
    with pytest.raises(InputError, match="cannot read"):
        load_hosts(tmp_path / "absent.yaml")
    bad = tmp_path / "bin.yaml"
    bad.write_bytes(b"hosts: \xff\xfe")
    with pytest.raises(InputError, match=r"bin.yaml@\d+: .*not UTF-8"):
        load_hosts(bad)


def test_the_site_name_defaults_to_the_file_stem(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(GOOD.replace("site: rf1\n", ""))
    assert load_hosts(path).site == "cluster"


def test_a_written_inventory_reads_back() -> None:
    inv = parse_hosts(GOOD)
    again = parse_hosts(dump_hosts(inv.model_dump(exclude={"source"})))
    assert again.model_dump(exclude={"source"}) == inv.model_dump(exclude={"source"})


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_an_inventory_or_an_input_error(text: str) -> None:
    try:
        parse_hosts(text, "fuzz.yaml")
    except InputError as exc:
        assert exc.where.startswith("fuzz.yaml")


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=len(GOOD)), st.binary(max_size=8))
def test_a_corrupted_inventory_is_an_input_error_or_still_valid(at: int, junk: bytes) -> None:
    text = (GOOD.encode()[:at] + junk + GOOD.encode()[at:]).decode(errors="replace")
    try:
        parse_hosts(text, "c.yaml")
    except InputError as exc:
        assert exc.where.startswith("c.yaml:")
