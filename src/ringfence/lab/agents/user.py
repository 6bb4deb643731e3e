"""User node: a person submitting training jobs to the management API."""

from __future__ import annotations

import itertools
import json

from ringfence.lab.agents.common import HttpClient, Status, base_parser, run_forever, stop_event


def main(argv: list[str] | None = None) -> int:
    """Submit a job every ``--interval`` seconds until SIGTERM."""
    p = base_parser(__doc__ or "")
    p.add_argument("--mgmt", required=True, help="host:port of the job API")
    p.add_argument("--owner", default="alice")
    p.add_argument("--interval", type=float, default=2.0)
    args = p.parse_args(argv)
    stop = stop_event()
    status = Status(args.status_file, "user")
    client = HttpClient(args)
    url = f"{client.scheme()}://{args.mgmt}/jobs"
    counter = itertools.count(1)
    status.set("ready", True)

    def step() -> None:
        n = next(counter)
        spec = {"name": f"finetune-{n}", "owner": args.owner, "gpus": 8, "image": "registry.lab/train:1.4"}
        try:
            code, _ = client.request("POST", url, json.dumps(spec).encode(), {"Content-Type": "application/json"})
            status.count("jobs_submitted" if code < 300 else "submit_rejected")
        except OSError as exc:
            status.error("submit", exc)

    run_forever(stop, args.interval, step)
    status.set("ready", False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
