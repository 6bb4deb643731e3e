"""``ringfence trace``: one flow reconstructed end to end from the cluster's own telemetry."""
