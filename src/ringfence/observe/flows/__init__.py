"""Flow sources: one module per format, all producing :data:`ringfence.observe.schema.FLOW_SCHEMA`."""
