"""How the telemetry daemons run on a host: ulogd2 (NFLOG → JSON), ``conntrack -E``, dnsmasq.

The lab starts them in its namespaces; on a real cluster the same command lines run under any
supervisor. One ulogd per network namespace (2.0.8 cannot read another namespace), its ``device``
set to the enforcement point's name so every record says where it was logged, and one stack per
NFLOG group with that verdict's ``numeric_label`` (:mod:`.conventions`). Each host keeps its logs in
one directory under the names :data:`FILES`, where ``ringfence trace`` collects them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from ringfence.observe.flows.events.conventions import GROUPS, LABELS

#: The object server's access log (one JSON line per request: time, 5-tuple, identity, method, path, job,
#: result, bytes), beside the others on a host that serves datasets.
OBJECT_LOG: Final = "objects.json"
#: reader name → the file each host writes under its telemetry directory (a host without one has none).
FILES: Final = {"ulogd": "ulogd.json", "conntrack": "conntrack.log", "dnsmasq": "dnsmasq.log", "objects": OBJECT_LOG}
#: Where a host keeps its telemetry when nothing else is configured.
DEFAULT_DIR: Final = "/var/log/ringfence/telemetry"
ULOGD_PLUGINS: Final = Path("/usr/lib/x86_64-linux-gnu/ulogd")
_PLUGINS: Final = ("inppkt_NFLOG", "raw2packet_BASE", "filter_IFINDEX", "filter_IP2STR", "output_JSON")


def ulogd_config(device: str, directory: str, plugins: Path = ULOGD_PLUGINS) -> str:
    """ulogd.conf: one NFLOG stack per verdict group, all into ``directory``/ulogd.json."""
    lines = ["[global]", f'logfile="{directory}/ulogd.log"', "loglevel=3"]
    lines += [f'plugin="{plugins}/ulogd_{p}.so"' for p in _PLUGINS]
    for verdict in GROUPS:
        lines.append(f"stack=in_{verdict}:NFLOG,base_{verdict}:BASE,ifi_{verdict}:IFINDEX,ip_{verdict}:IP2STR,"
                     "out:JSON")
    for verdict, group in GROUPS.items():
        lines += ["", f"[in_{verdict}]", f"group={group}", f"numeric_label={LABELS[verdict]}"]
    # sync: every record is on disk when written, so a trace right after the traffic sees it
    lines += ["", "[out]", "sync=1", f'file="{directory}/{FILES["ulogd"]}"', f'device="{device}"']
    return "\n".join(lines) + "\n"


def ulogd_argv(config: str, pidfile: str) -> list[str]:
    """ulogd in the foreground (the caller supervises it), with its own pid file."""
    return ["ulogd", "-c", config, "-p", pidfile]


def conntrack_argv(directory: str) -> list[str]:
    """``conntrack -E`` NEW/DESTROY with times and ids into ``directory``/conntrack.log.

    Run through ``sh`` so the command line names the file (and so the directory): whoever stops it
    checks that a pid is still theirs by that name; the shell and conntrack share one process group.
    """
    script = 'conntrack -E -o timestamp,id -e NEW,DESTROY -b 8388608 >> "$0" 2>&1'
    return ["sh", "-c", script, f"{directory}/{FILES['conntrack']}"]


def dnsmasq_argv(directory: str, listen: str, hosts_file: str, domain: str) -> list[str]:
    """dnsmasq answering ``domain`` from ``hosts_file`` only, logging every query to ``directory``."""
    return ["dnsmasq", "--keep-in-foreground", "--no-resolv", "--no-hosts", f"--addn-hosts={hosts_file}",
            "--log-queries=extra", f"--log-facility={directory}/{FILES['dnsmasq']}", f"--listen-address={listen}",
            "--bind-interfaces", f"--pid-file={directory}/dnsmasq.pid", "--user=root", "--group=root",
            f"--local=/{domain}/", "--domain-needed", "--cache-size=0"]


__all__ = ["DEFAULT_DIR", "FILES", "OBJECT_LOG", "ULOGD_PLUGINS", "conntrack_argv", "dnsmasq_argv", "ulogd_argv",
           "ulogd_config"]
