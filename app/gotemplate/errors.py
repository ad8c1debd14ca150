"""The engine's errors: TemplateError is what callers see; GoError is what a template function
raises to return a Go error (``error calling NAME: ...``)."""

from __future__ import annotations


class TemplateError(Exception):
    """A parse or execution error, worded as Go's text/template words it
    (``template: NAME:LINE:COL: executing "NAME" at <.X>: reason``)."""


class GoError(Exception):
    """Raised by a template function for the error result Go's function would return; the
    executor reports it as ``error calling NAME: MESSAGE``."""
