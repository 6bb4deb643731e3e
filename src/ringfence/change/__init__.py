"""Change control: requests, approvals bound to the exact diff, the apply gate, rollback and drift.

Policy lives in a git repository. ``propose`` records a request (the policy diff against the last
approved version and the diff of the rendered rulesets, requester, ticket, hashes); ``approve``
signs the request's hash with the approver's Ed25519 key (never the requester's); ``apply`` with
change control required deploys only such a request; ``drift`` compares every node's live ruleset
with the one recorded when the approved version was deployed.
"""

from ringfence.change.interface import (
    REQUEST_FORMAT,
    Approval,
    ChangeError,
    ChangeRequest,
    RequestDoc,
)

__all__ = ["REQUEST_FORMAT", "Approval", "ChangeError", "ChangeRequest", "RequestDoc"]
