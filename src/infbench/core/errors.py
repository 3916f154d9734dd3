"""The one exception type every stage raises for a problem the user can fix."""


class UserError(RuntimeError):
    """A failure the user can fix; its message names the problem and the fix. Subclassed by each stage."""
