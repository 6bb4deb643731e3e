"""What ``ringfence apply`` asks change control before it deploys, from its arguments.

Without ``--request``/``--emergency`` and where the policy does not require change control, nothing
changes (today's behaviour). With ``--request`` the request must be approved for exactly this
policy, whatever the policy says (a request given is a request checked). Where change control is
required, a bare ``--approved-by`` is a claim nobody signed and is refused.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from ringfence.errors import InputError

if TYPE_CHECKING:
    from ringfence.evidence import EvidenceStore
    from ringfence.policy import Policy


def change_gate(args: argparse.Namespace, policy: Policy, store: EvidenceStore) -> dict[str, Any] | None:
    """What the apply record carries of change control, None when it plays no part; raises ``Refused``."""
    from ringfence.change.decide import Refused, deploy_approval
    from ringfence.change.request import load_request

    if args.request and args.emergency:
        raise InputError("--emergency", "give either --request (approved) or --emergency, not both")
    if args.request:
        return deploy_approval(load_request(args.request), policy, store) | (
            {"deployed_by": args.by} if args.by else {})
    if args.emergency:
        if not args.by or not args.ticket:
            raise InputError("--emergency", "an emergency change needs --by (who deploys) and --ticket")
        return {"emergency": True, "deployed_by": args.by, "ticket": args.ticket}
    if policy.change_control.required:
        raise Refused("deploy refused: the policy requires change control and no approved request was given",
                      hint="ringfence change propose POLICY --by ID --ticket T -o REQ.json; ringfence change "
                      "approve REQ.json --by OTHER; ringfence apply POLICY --request REQ.json "
                      "(or --emergency --by ID --ticket T)")
    return None


__all__ = ["change_gate"]
