"""Private recognisers behind :func:`ringfence.observe.payload.classify_flows`.

Three stages, each vectorised over the sampled payload heads:

- :mod:`.framing` gives every sampled packet a :class:`~.labels.Label` from its protocol framing
  (TLS record layer, SSH banner, QUIC long header, WireGuard message type, SecTAG, …);
- :mod:`.content` looks at the bytes of unframed packets and of protocol bodies (zeros, text,
  float tensors, byte entropy);
- :mod:`.verdict` turns per-flow label and content counts into protection, protocol and reason.

Nothing here is public API; ``docs/verdicts.md`` describes each rule and its limits.
"""

__all__: list[str] = []
