"""Inventory from the cluster's own records: Slurm, Kubernetes, Ansible-style hosts files → a policy
skeleton (zones, nodes, addresses, workloads) that ``ringfence discover`` completes."""

from ringfence.inventory.interface import Host, InventoryError, Skeleton, Workload, build_skeleton, parse_etc_hosts

__all__ = ["Host", "InventoryError", "Skeleton", "Workload", "build_skeleton", "parse_etc_hosts"]
