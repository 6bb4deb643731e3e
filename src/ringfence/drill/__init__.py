"""Incident drills (``ringfence drill``): credential compromise, malicious job, exfiltration, management-plane
failure — each played for real on a cluster, detected, contained and proven (see :mod:`.interface`)."""
