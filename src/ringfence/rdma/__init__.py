"""RDMA key hygiene from captures (ReDMArk): predictable rkeys, QPNs and PSNs, adjacent regions, no encryption."""

from ringfence.rdma.analysis import analyse, rkey_entropy
from ringfence.rdma.interface import REMEDIATION, VULN_NAMES, RdmaError, RdmaFinding, RdmaSummary, Vuln
from ringfence.rdma.read import check_captures, read_flows_and_rdma, summarise

__all__ = [
    "REMEDIATION",
    "VULN_NAMES",
    "RdmaError",
    "RdmaFinding",
    "RdmaSummary",
    "Vuln",
    "analyse",
    "check_captures",
    "read_flows_and_rdma",
    "rkey_entropy",
    "summarise",
]
