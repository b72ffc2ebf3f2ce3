"""Errors the CLI maps to exit codes: 2 for bad input, 3 for a refused budget."""


class FdptmError(Exception):
    """Base class: a failure with a message that says what is wrong and what to do."""

    exit_code = 1


class BadInputError(FdptmError):
    """The input (a file, a parameter, a dataset name) is invalid; nothing was spent."""

    exit_code = 2


class BudgetRefusedError(FdptmError):
    """The privacy ledger refused the run: it would exceed the dataset's lifetime cap."""

    exit_code = 3


class WorkspaceError(BadInputError):
    """The workspace cannot be used as it is; nothing stored in it was changed or lost.

    The subclasses say why (damaged catalog, read-only workspace, full disk, catalog held
    open by another program); each message names the path and the way out.
    """


class CatalogDamagedError(WorkspaceError):
    """``catalog.duckdb`` is unreadable, or missing from a workspace that holds data."""


class WorkspaceNotWritableError(WorkspaceError):
    """The command must write, but the workspace (or one file in it) is read-only to us."""


class DiskFullError(WorkspaceError):
    """A write hit ENOSPC or a quota; the previous version of the file is intact."""


class CatalogBusyError(WorkspaceError):
    """Another program (not fdptm, which waits for ``catalog.lock``) holds the catalog open."""


class CatalogUnavailableError(WorkspaceError):
    """The PostgreSQL catalog cannot be reached (server down, credentials, no database)."""
