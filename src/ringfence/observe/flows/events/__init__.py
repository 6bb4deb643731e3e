"""Telemetry event sources: firewall decisions, connection events, DNS answers (flow-event sources).

Each reader turns one daemon's log into an Arrow table of events; :mod:`.registry` lists them.
"""
