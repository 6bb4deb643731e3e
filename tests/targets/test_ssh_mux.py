"""The shared SSH connections' bookkeeping, without a host: what :func:`close_masters` ends."""

from __future__ import annotations

from ringfence.targets import ssh as ssh_mod


def test_closing_one_labs_connections_leaves_the_others() -> None:
    ssh_mod.close_masters()
    with ssh_mod._mux_lock:
        ssh_mod._masters["/nonexistent/a"] = (("ip", "netns", "exec", "rfaaaa-jump"), (), "root@10.0.0.1")
        ssh_mod._masters["/nonexistent/b"] = (("ip", "netns", "exec", "rfbbbb-jump"), (), "root@10.0.0.1")
    ssh_mod.close_masters(through="rfaaaa-")
    assert list(ssh_mod._masters) == ["/nonexistent/b"]
    ssh_mod.close_masters()
    assert ssh_mod._masters == {}
