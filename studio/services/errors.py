"""Errors a user can cause, each with the HTTP status the API answers it with.

Messages name the field, row or line and say what to do; the routers turn
them into `{"detail": message}` without adding anything.
"""

from __future__ import annotations


class UserError(ValueError):
    status_code = 400


class InvalidInput(UserError):
    status_code = 422


class NotFound(UserError):
    status_code = 404


class Conflict(UserError):
    status_code = 409


class TooLarge(UserError):
    status_code = 413
