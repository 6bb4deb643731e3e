"""Everything that gathers facts: flow sources, payload verdicts, probes, captures."""
