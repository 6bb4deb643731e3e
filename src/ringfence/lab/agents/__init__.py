"""The lab's agents: small programs run inside node namespaces (``python -m ringfence.lab.agents.NAME``).

Servers: ``storage`` (object store, tcp 8080), ``mgmt`` (job API, tcp 8000), ``replica`` (off-site
sink, tcp 9000). Clients: ``worker`` (gloo all-reduce + storage + reports), ``user`` (job
submission), ``jump`` (OpenSSH to mgmt), ``aux`` (telemetry + lateral attempts). Each takes
``--status-file`` and optional ``--tls-cert --tls-key --tls-ca``.
"""

#: Agent module names, by role.
SERVERS = ("storage", "mgmt", "replica")
CLIENTS = ("worker", "user", "jump", "aux")

__all__ = ["CLIENTS", "SERVERS"]
