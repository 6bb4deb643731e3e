"""The scenarios ``ringfence drill`` plays: one explicit table, no registration on import."""

from __future__ import annotations

from collections.abc import Mapping

from ringfence.drill.interface import DrillError, Scenario

#: every scenario's CLI name, in the order ``drill list`` shows them (the CLI offers these without importing
#: the scenarios; a test checks they match :func:`scenarios`)
NAMES = ("credential-compromise", "malicious-job", "exfiltration", "management-plane-failure")


def scenarios() -> Mapping[str, Scenario]:
    """name → scenario, for every scenario in :data:`NAMES`."""
    from ringfence.drill import credential_compromise, mgmt_failure
    from ringfence.drill.exfiltration import Exfiltration
    from ringfence.drill.malicious_job import MaliciousJob

    table: dict[str, Scenario] = {
        credential_compromise.NAME: credential_compromise.SCENARIO,
        "malicious-job": MaliciousJob(),
        "exfiltration": Exfiltration(),
        mgmt_failure.NAME: mgmt_failure.SCENARIO,
    }
    return table


def scenario(name: str) -> Scenario:
    """The scenario ``name``; :class:`DrillError` naming the known ones otherwise."""
    table = scenarios()
    if name not in table:
        raise DrillError(f"unknown drill scenario {name!r}", hint=f"one of: {', '.join(NAMES)}")
    return table[name]


__all__ = ["NAMES", "scenario", "scenarios"]
