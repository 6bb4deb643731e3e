"""The one base error every ringfence failure the user can act on derives from.

The CLI catches only :class:`RingfenceError`, prints :meth:`RingfenceError.diagnostics` without a
traceback and exits 2. Foreign exceptions (OS, subprocess, DuckDB, netlink) are translated into a
subclass of it in one boundary module per family, always ``raise OurError(...) from exc``.
"""

from __future__ import annotations


class RingfenceError(Exception):
    """Base error: a message that says what is wrong, and a hint that says what to do next."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def diagnostics(self) -> str:
        """Text for the user: what went wrong and, where known, what to do about it."""
        if self.hint:
            return f"error: {self.message}\nhint: {self.hint}"
        return f"error: {self.message}"


class InputError(RingfenceError):
    """Bad input from the user: a malformed file, a corrupt capture, a hostile log line.

    ``where`` names the place (``file:line``, ``file@offset``) so the user can find it.
    """

    def __init__(self, where: str, message: str, *, hint: str | None = None) -> None:
        super().__init__(f"{where}: {message}", hint=hint)
        self.where = where


class EnvironmentProblem(RingfenceError):
    """The machine lacks something ringfence needs (root, a binary, a kernel feature)."""


__all__ = ["EnvironmentProblem", "InputError", "RingfenceError"]
