"""The ten control points of DESIGN.md, one module each (see :mod:`ringfence.controls.registry`)."""
